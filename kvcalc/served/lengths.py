"""Each request's lengths as a benchmark client draws them: vllm bench serve's and SGLang's
random dataset at a range ratio, and ShareGPT's spread (modelled)."""

from __future__ import annotations

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
    """Each request's (prompt, output) tokens spread as ShareGPT conversations are, at
    the given means: exponential (the replies are mostly short, "many answers are <20
    tokens, and very few are longer than 200", CentML flexible-inference-bench #103),
    kept as vllm bench serve's ShareGPT sampling keeps them (datasets.py
    is_valid_sequence: prompt and output at least 4 tokens, a prompt at most 1,024, the
    two at most 2,048). A model of the spread, not the dataset: kvcalc has no copy of it."""
    if not (input_mean >= 4 and output_mean >= 4):
        raise KvcalcError("ShareGPT's mean prompt and output lengths must be 4 tokens or more")
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        p = round(rng.expovariate(1 / input_mean))
        o = round(rng.expovariate(1 / output_mean))
        if 4 <= p <= 1024 and o >= 4 and p + o <= 2048:
            out.append((p, o))
    return tuple(out)
