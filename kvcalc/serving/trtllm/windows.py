"""TensorRT-LLM's pools per attention window (variable sliding-window attention, "VSWA"):
how the KV memory a rank may fill is split between the window sizes
kv_cache_config.max_attention_window names, and the blocks each window's pool gets.

Facts (quoted in words; NVIDIA/TensorRT-LLM `cpp/tensorrt_llm/batch_manager/
kvCacheManager.cpp`, the versions named in kvcalc.serving.trtllm.rules `window_share`):

* `BaseKVCacheManager::calculateMaxNumBlocks`: for each window size w, the bytes per
  token of its layers (`calculateCacheSizePerTokenForSingleWindowSize` x the element
  size); then max tokens_w = allotted bytes x share_w / bytes_w, computed as a float
  (the allotted uint64 times the float share is a float) divided by a double and
  truncated; blocks_w = ceilDiv(max tokens_w, tokens_per_block); every rank's blocks
  the minimum over ranks, window by window (ranks must have the same windows:
  "Asymmetrical pipeline parallelism detected").
* shares, "weighted" (`BlockManager::calculateWindowSizeToShare`): weight_w = float
  (bytes_w / the sum of the bytes) x w, share_w = weight_w / the sum of the weights
  (the sum in double, the share a float); "equal": 1.0f / the number of windows.
* each window is its own WindowBlockManager; the log's "[MemUsageChange] Allocated X
  GiB for max tokens in paged KV cache (N)" gives N = the primary blocks of all
  windows x tokens_per_block (`BlockManager::getNumPrimaryBlocks` sums the windows),
  and the INFO lines "Blocks per window size:" then "[windowSize=W]
  {.primaryBlocks=P, .secondayBlocks=S}" per window.
* a request of L tokens needs ceilDiv(min(L, w), tokens_per_block) blocks of window w
  (`KVCacheManager::calculateMaxBlockRequirementsPerBeam`, no sink tokens); the most
  requests at once is the smallest over windows of blocks_w / that
  (`KVCacheManager::getMaxCapacityBatchSize`).
"""

from __future__ import annotations

import struct

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError

__all__ = ["WindowPool", "f32", "window_blocks", "window_shares"]


def f32(x: float) -> float:
    """x rounded to the nearest float32, as C++ stores a float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@record
class WindowPool:
    """One window size's pool on the rank that sizes every rank."""

    window: int
    layers: int
    bytes_per_token: int
    share: float
    blocks: int


def window_shares(rule: str, window_bytes: dict[int, int]) -> dict[int, float]:
    """Each window's share of the memory (floats, as the C++ holds them)."""
    if len(window_bytes) == 1:
        return {w: 1.0 for w in window_bytes}
    if rule == "equal":
        return {w: f32(1.0 / len(window_bytes)) for w in window_bytes}
    if rule != "weighted":
        raise KvcalcError(f"unknown window share rule {rule!r}")
    total = sum(window_bytes.values())
    weights = {w: f32(f32(f32(b) / f32(total)) * w) for w, b in window_bytes.items()}
    whole = 0.0
    for v in weights.values():  # std::accumulate from 0.0: a double sum of floats
        whole += v
    return {w: f32(v / whole) for w, v in weights.items()}


def window_blocks(rule: str, allotted: int, window_bytes: dict[int, int],
                  tokens_per_block: int, max_tokens: int | None = None) -> dict[int, int]:
    """Primary blocks per window from `allotted` bytes: `calculateMaxNumBlocks`'s
    arithmetic; `max_tokens` caps each window's tokens where the rule lets it
    ("weighted" only: the "equal" code ignores max_tokens under VSWA)."""
    shares = window_shares(rule, window_bytes)
    out = {}
    for w, b in window_bytes.items():
        tokens = int(f32(f32(float(max(allotted, 0))) * shares[w]) / float(b))
        if max_tokens is not None and rule == "weighted":
            tokens = min(tokens, max_tokens)
        out[w] = -(-tokens // tokens_per_block)
    return out
