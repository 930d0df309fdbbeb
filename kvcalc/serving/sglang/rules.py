"""SGLang's release rules, one table: every release comparison of the SGLang wing is here.

Each rule names the release it was read in (the PyPI wheels, `pip download --no-deps
sglang==X`; paths inside `sglang/srt/`) and the file and function it follows. A release
between two read ones follows the older one's rule.
"""

from __future__ import annotations

import functools

from kvcalc.errors import KvcalcError

__all__ = ["MiB", "GiB", "Rules", "parse_release", "rules_for"]

MiB = 1 << 20
GiB = 1 << 30

OLDEST = (0, 4, 0)
# --kv-cache-dtype values (`server_args.py` choices) and the dtype each stores; "auto":
# the model's.
KV_DTYPES = {"auto": None, "bf16": "bf16", "fp16": "fp16", "bfloat16": "bf16",
             "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
             "fp32": "fp32", "float32": "fp32"}  # the oldest release whose rules are encoded


@functools.lru_cache(maxsize=32)
def parse_release(text: str) -> tuple[int, int, int]:
    """'0.5.4' -> (0, 5, 4); '0.4.6.post5' -> (0, 4, 6); 'v0.5.1rc2' -> (0, 5, 1)."""
    parts: list[int] = []
    for p in str(text).strip().lstrip("v").split("."):
        digits = ""
        for ch in p:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(parts) == 3 or digits != p:
            break
    if len(parts) < 2:
        raise KvcalcError(f"an SGLang release looks like 0.MINOR[.PATCH], got {text!r}")
    while len(parts) < 3:
        parts.append(0)
    v = tuple(parts)
    if v < OLDEST:
        raise KvcalcError(f"kvcalc encodes SGLang's rules from 0.4.0 on; got {text!r}")
    return v  # type: ignore[return-value]


class Rules:
    """The rules of one SGLang release."""

    def __init__(self, release: tuple[int, int, int]):
        self.release = release

    # -- server_args.py: the defaults filled in at start-up ---------------------------
    def default_chunked_prefill_size(self, gpu_mib: int, tp: int) -> int:
        """`ServerArgs.__post_init__` (0.4.x-0.5.1: 2048 under 25 GB cards else 8192;
        0.5.4 `_handle_gpu_memory_settings`: by the card's nvidia-smi total)."""
        if self.release >= (0, 5, 4):
            if gpu_mib < 20 * 1024:
                return 2048
            if gpu_mib < 35 * 1024:
                return 2048
            if gpu_mib < 60 * 1024:
                return 4096 if tp < 4 else 8192
            if gpu_mib < 90 * 1024:
                return 8192
            if gpu_mib < 160 * 1024:
                return 8192
            return 16384
        return 2048 if gpu_mib < 25_000 else 8192

    def default_cuda_graph_max_bs(self, gpu_mib: int, tp: int) -> int:
        """`ServerArgs._handle_gpu_memory_settings` (0.5.4): by the card's total and tp."""
        if self.release >= (0, 5, 4):
            if gpu_mib < 20 * 1024:
                return 8
            if gpu_mib < 35 * 1024:
                return 24 if tp < 4 else 80
            if gpu_mib < 60 * 1024:
                return 32 if tp < 4 else 160
            if gpu_mib < 90 * 1024:
                return 256 if tp < 4 else 512
            if gpu_mib < 160 * 1024:
                return 256 if tp < 4 else 512
            return 512
        return 160 if gpu_mib < 25_000 else 160

    def default_mem_fraction_static(self, *, gpu_mib: int, tp: int, pp: int,
                                    chunked_prefill_size: int, cuda_graph_max_bs: int,
                                    dp_attention: bool, multimodal: bool,
                                    speculative: bool = False) -> tuple[int, int]:
        """SGLang's default --mem-fraction-static, as an exact (numerator, denominator)."""
        size = tp * pp
        if self.release >= (0, 5, 4):
            # reserved MiB: activations of a chunked-prefill step, CUDA graphs, and
            # communication buffers growing with the world size.
            reserved = (512 + max(chunked_prefill_size, 2048) * 3 // 2
                        + cuda_graph_max_bs * 2 + 1024 * size // 8)
            if dp_attention:
                reserved += 4 * 1024
            if speculative:
                reserved += 2 * 1024
            if gpu_mib > 60 * 1024:
                reserved = max(reserved, 10 * 1024)
            return _rounded_share(gpu_mib - reserved, gpu_mib, multimodal)
        if self.release >= (0, 4, 10):
            # reserved GiB by the card's class, in tenths
            if gpu_mib < 35 * 1024:
                tenths = 28 + size
            elif gpu_mib < 90 * 1024:
                tenths = 95 + 5 * size
            elif gpu_mib < 160 * 1024:
                tenths = 120 + 5 * size
            else:
                tenths = 320
            if speculative:
                tenths += 20
            if dp_attention:
                tenths += 40
            return _rounded_share(10 * gpu_mib - tenths * 1024, 10 * gpu_mib, multimodal)
        n = size if self.release >= (0, 4, 6) else tp
        if self.release >= (0, 4, 6) and gpu_mib > 96 * 1024:
            return (88, 100) if not multimodal else _rounded_share(88, 100, True)
        if n >= 16:
            share = 79
        elif n >= 8:
            share = 81
        elif n >= 4:
            share = 85
        elif n >= 2:
            share = 87
        else:
            share = 88
        return _rounded_share(share, 100, multimodal)

    # -- model_runner.py / scheduler.py: the pool and the requests it serves -----------
    def max_num_reqs(self, tokens: int, context_len: int) -> int:
        """The request-to-token pool's size when --max-running-requests is not given
        (`ModelRunner.init_memory_pool`): tokens / context x 512, clamped to 2048-4096."""
        return min(max(tokens * 512 // context_len, 2048), 4096)

    def req_pool_extra(self) -> int:
        """Slots the request pool keeps beyond max_num_reqs (a dummy slot up to 0.4.6)."""
        return 1 if self.release < (0, 4, 10) else 0


def _rounded_share(num: int, den: int, multimodal: bool) -> tuple[int, int]:
    """num / den rounded to three decimals (Python's round, half to even), times 0.95 for
    a multimodal model (rounded again), as an exact ratio over 1000."""
    thousandths = _round_half_even(1000 * num, den)
    if multimodal:
        thousandths = _round_half_even(thousandths * 95, 100)
    return thousandths, 1000


def _round_half_even(num: int, den: int) -> int:
    q, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and q % 2):
        q += 1
    return q


@functools.lru_cache(maxsize=32)
def rules_for(release: str) -> Rules:
    return Rules(parse_release(release))
