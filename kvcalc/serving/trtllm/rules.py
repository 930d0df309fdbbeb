"""TensorRT-LLM's release rules, one table: every release comparison of its wing is here,
each naming the tag it was read at (NVIDIA/TensorRT-LLM) and the file and function."""

from __future__ import annotations

import functools

from kvcalc.errors import KvcalcError

__all__ = ["GiB", "MiB", "Rules", "parse_release", "rules_for"]

MiB = 1 << 20
GiB = 1 << 30
OLDEST = (0, 12, 0)
CUDA_GRAPH_BYTES_PER_LAYER = 164 * 1024  # one captured batch size, per layer (vLLM's figure)


@functools.lru_cache(maxsize=32)
def parse_release(text: str) -> tuple[int, int, int]:
    """'1.0.0' -> (1, 0, 0); '0.21.0rc1' -> (0, 21, 0); '1.1' -> (1, 1, 0)."""
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
        raise KvcalcError(f"a TensorRT-LLM release looks like MAJOR.MINOR[.PATCH], got {text!r}")
    while len(parts) < 3:
        parts.append(0)
    v = tuple(parts)
    if v < OLDEST:
        raise KvcalcError(f"kvcalc encodes TensorRT-LLM's rules from 0.12 on; got {text!r}")
    return v  # type: ignore[return-value]


class Rules:
    def __init__(self, release: tuple[int, int, int]):
        self.release = release

    def default_free_gpu_memory_fraction(self) -> tuple[int, int]:
        """`KvCacheConfig.free_gpu_memory_fraction` (llmapi/llm_args.py): 0.9."""
        return 9, 10

    def default_max_batch_size(self, backend: str) -> int:
        """LLM API `BaseLlmArgs.max_batch_size` (2048); trtllm-build's default 2048 (from
        0.12's `--max_batch_size` help), which a built engine keeps."""
        return 2048

    def default_max_num_tokens(self, backend: str) -> int:
        """LLM API `max_num_tokens` 8192; trtllm-build's default 8192."""
        return 8192

    def default_tokens_per_block(self, backend: str) -> int:
        """KvCacheConfig `tokens_per_block` 32 (PyTorch backend); trtllm-build
        `--tokens_per_block` 64 before 0.15, 32 from it."""
        if backend == "tensorrt" and self.release < (0, 15, 0):
            return 64
        return 32

    def cuda_graph_bytes(self, spec, max_batch_size: int) -> int:
        """The PyTorch backend's CUDA graphs captured before the profiling peak: batch
        sizes 1, 2, 4, 8, then every 8 up to 128 (its default cuda_graph_config), at most
        max_batch_size."""
        sizes = [b for b in (1, 2, 4, *range(8, 129, 8)) if b <= max_batch_size]
        return len(sizes) * CUDA_GRAPH_BYTES_PER_LAYER * spec.layers

    def term_names(self, backend: str) -> dict[str, str]:
        """Each term under the name the runtime's log gives it."""
        if backend == "pytorch":
            return {"total": "total", "weights": "weights", "activation": "activation_peak",
                    "free": "free_after_peak", "kv_cache": "kv_cache"}
        return {"total": "total", "weights": "engine", "activation": "activations",
                "free": "available", "kv_cache": "kv_cache"}


@functools.lru_cache(maxsize=32)
def rules_for(release: str) -> Rules:
    return Rules(parse_release(release))
