"""Why a start-up failed, for the engines whose logs `kvcalc check` reads beside vLLM's
(SGLang, TensorRT-LLM): the failure as the log states it (`Failure`), what kvcalc makes of
it (`Diagnosis`: the cause in a sentence, the fix in the engine's own flags, the figure that
would make it start where the log's numbers give one), and torch's out-of-memory message
read into figures. Pure text to records; each engine's wing reads its own wording
(kvcalc.serving.sglang.fail, kvcalc.serving.trtllm.fail). kvcalc.serving.startup's
`failed_startup(text)` is the library's `kvcalc check LOG` for a failed start-up of any of
the three engines.

The kinds are vLLM's (kvcalc.serving.vllm.fail.FAILURE_KINDS) where the meaning is the
same, so one label table serves every engine, plus the two steps TensorRT-LLM names that
vLLM has no word for: creating the KV cache, and the executor's warm-up after it.
"""

from __future__ import annotations

import re
from dataclasses import field

from kvcalc.ground.record import record

__all__ = ["KINDS", "Diagnosis", "Failure", "GiB", "clip_words", "gib_text", "last_step",
           "missing_model", "torch_oom"]

GiB = 1 << 30
KINDS = {
    "max_model_len_over_context": "a context length beyond the model's",
    "free_memory": "another process holds GPU memory",
    "oom_loading": "out of memory loading the weights",
    "oom_profile": "out of memory in the profile run",
    "oom_sampler": "out of memory in the sampler",
    "oom_cuda_graphs": "out of memory capturing CUDA graphs",
    "oom_kv_cache": "out of memory allocating the KV cache",
    "oom_warmup": "out of memory in the warm-up after the KV cache",
    "oom": "out of memory",
    "missing_model": "model files not found",
    "kv_cache_too_small": "a sequence longer than the KV cache holds",
    "no_kv_memory": "no memory left for the KV cache",
    "unknown": "cause not in the lines given",
}


@record
class Failure:
    """Why an engine did not start, as its log says it: `kind` (KINDS), the engine's own
    words (one line) and the figures they hold (bytes as ints, fractions as the text
    printed, lengths as ints)."""

    kind: str
    words: str
    figures: dict = field(default_factory=dict)


@record
class Diagnosis:
    """A failed start-up in a sentence and what to change, in the engine's own flags.
    `figures` are the log's; `counted` what kvcalc derived from them (the fraction, length
    or size that would let it start), each named."""

    engine: str  # "sglang", "tensorrt-llm"
    kind: str
    cause: str
    fix: str
    words: str
    figures: dict = field(default_factory=dict)
    counted: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return KINDS[self.kind]

    def as_dict(self) -> dict:
        return {"cause": self.kind, "label": self.label, "engine_says": self.words,
                "why": self.cause, "fix": self.fix, "figures": dict(self.figures),
                "counted": dict(self.counted)}


_UNIT = {"GiB": GiB, "MiB": 1 << 20, "KiB": 1 << 10, "bytes": 1}
_NUM = r"(\d[\d,]*(?:\.\d+)?)"
# torch's allocator message (CUDA or HIP), one or several lines:
# "CUDA out of memory. Tried to allocate 672.00 MiB. GPU 0 has a total capacity of 140.06 GiB
# of which 200.75 MiB is free."
_OOM = re.compile(r"(?:CUDA|HIP) out of memory|OutOfMemoryError|CUDA error: out of memory")
_TRIED = re.compile(r"Tried\s+to\s+allocate\s+" + _NUM + r"\s*(GiB|MiB|KiB|bytes)")
_TOTAL = re.compile(r"total\s+capacity\s+of\s+" + _NUM + r"\s*(GiB|MiB|KiB|bytes)\s+of\s+"
                    r"which\s+" + _NUM + r"\s*(GiB|MiB|KiB|bytes)\s+is\s+free\.?")


def _bytes(number: str, unit: str) -> int:
    return round(float(number.replace(",", "")) * _UNIT[unit])


def torch_oom(text: str) -> tuple[int, int, dict] | None:
    """torch's out-of-memory error in `text`: where it starts, where its figures end (the
    "... is free." of its capacity sentence, else the end of the error's first line) and
    the figures (`tried_bytes`, `total_bytes`, `free_bytes` where printed); None: none."""
    m = _OOM.search(text)
    if m is None:
        return None
    window = text[m.start():m.start() + 800]
    figures = {}
    end = text.find("\n", m.start())
    end = len(text) if end < 0 else end
    t = _TRIED.search(window)
    if t:
        figures["tried_bytes"] = _bytes(t.group(1), t.group(2))
    c = _TOTAL.search(window)
    if c:
        figures["total_bytes"] = _bytes(c.group(1), c.group(2))
        figures["free_bytes"] = _bytes(c.group(3), c.group(4))
        end = m.start() + c.end()
    return m.start(), end, figures


def clip_words(words: str, limit: int = 300) -> str:
    """One line of the engine's words: whitespace folded, at most `limit` characters."""
    words = " ".join(words.split())
    return words if len(words) <= limit else words[:limit - 3] + "..."


def gib_text(value: int | None) -> str:
    """Bytes as GiB (2^30), or as MiB below one GiB, to two decimals."""
    if value is None:
        return "?"
    return f"{value / GiB:.2f} GiB" if abs(value) >= GiB else f"{value / (1 << 20):.2f} MiB"


def last_step(before: str, steps) -> str:
    """The failure kind of an out-of-memory error after `before`: the step named last in it
    (`steps`: (kind, compiled pattern) pairs, an engine's start-up steps in its words);
    "oom" where none is named."""
    best, kind = -1, "oom"
    for name, rx in steps:
        for m in rx.finditer(before):
            if m.start() >= best:
                best, kind = m.start(), name
    return kind


def missing_model(m, names: tuple[str, ...]) -> Failure:
    """A missing-model failure from an engine's match `m`: the model its first named group
    of `names` holds, the file where the pattern has a "file" group."""
    name = next((g for g in (m.group(n) for n in names) if g), "")
    figures = {"model": name.strip("'\".,")} if name else {}
    if m.group("file"):
        figures["file"] = m.group("file").rstrip(".")
    return Failure("missing_model", clip_words(m.group(0)), figures)
