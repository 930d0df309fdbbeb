"""Each request's lengths as a benchmark client draws them: vllm bench serve's and SGLang's
random dataset at a range ratio, and ShareGPT's spread (a published draw, scaled)."""

from __future__ import annotations

import functools
import math
import random

from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["random_lengths", "sharegpt_lengths"]


def random_lengths(input_len: int, output_len: int, n: int, range_ratio: float,
                   client: str = "vllm", seed: int = 0) -> tuple:
    """Each request's (prompt, output) tokens as the client's random dataset draws them
    at --random-range-ratio `range_ratio` (uniform whole numbers, seeded): vllm bench
    serve's RandomDataset between floor(len x (1 - r)) and ceil(len x (1 + r)); SGLang's
    bench_serving (`client` "sglang") between max(int(len x r), 1) and len."""
    if not 0 <= range_ratio <= 1:
        raise ParameterError("{random_range_ratio} must be in [0, 1], got "
                             + literal(repr(range_ratio)), "random_range_ratio")
    rng = random.Random(seed)

    def bounds(length: int) -> tuple[int, int]:
        if client == "sglang":
            return max(int(length * range_ratio), 1), length
        return max(math.floor(length * (1 - range_ratio)), 1), math.ceil(length * (1 + range_ratio))

    (i_lo, i_hi), (o_lo, o_hi) = bounds(input_len), bounds(output_len)
    return tuple((rng.randint(i_lo, i_hi), rng.randint(o_lo, o_hi)) for _ in range(n))


def sharegpt_lengths(input_mean: float, output_mean: float, n: int, seed: int = 0) -> tuple:
    """Each request's (prompt, output) tokens spread as ShareGPT's are when vllm bench
    serve draws them, at the given means: the published draw of presets/served/
    sharegpt.yaml (a seeded client sends the first n of its list, in order; seed s > 0
    a shuffle of it), repeated past its length, each request's prompt and output scaled
    so that the n requests have the means asked. An output the source records as 0 (a
    reply that streamed no text) is one token: the engine still generated one."""
    if not (input_mean >= 1 and output_mean >= 1):
        raise KvcalcError("ShareGPT's mean prompt and output lengths must be 1 token or more")
    if n < 1:
        raise KvcalcError(f"ShareGPT needs at least one request, got {n}")
    pairs = list(_sharegpt_draw())
    if seed:
        random.Random(seed).shuffle(pairs)
    drawn = [pairs[i % len(pairs)] for i in range(n)]
    scale_in = input_mean * n / sum(p for p, _ in drawn)
    scale_out = output_mean * n / sum(o for _, o in drawn)
    return tuple((max(round(p * scale_in), 1), max(round(o * scale_out), 1)) for p, o in drawn)


@functools.lru_cache(maxsize=1)  # the file never changes within a run
def _sharegpt_draw() -> tuple:
    """presets/served/sharegpt.yaml's (prompt, output) pairs, an empty reply as 1 token."""
    from kvcalc.presets import read_preset

    data = read_preset("served", "sharegpt")
    return tuple((int(p), max(int(o), 1))
                 for p, o in zip(data["input_lens"], data["output_lens"], strict=True))
