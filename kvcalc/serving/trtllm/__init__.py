"""TensorRT-LLM's start-up arithmetic for both of its runtimes: how many tokens its paged
KV cache gets and how many requests it runs at once (kvcalc.serving.trtllm.rules holds
every release comparison).

Facts (quoted, not copied code; NVIDIA/TensorRT-LLM at the release tags named):

* PyTorch backend (trtllm-serve, the LLM API, trtllm-bench since 1.0;
  `tensorrt_llm/_torch/pyexecutor/_util.py`, `KvCacheCreator`): a profiling run of
  max_num_tokens tokens (CUDA graphs captured) measures the peak memory, torch and
  non-torch; the cache gets free_gpu_memory_fraction (0.9) x (device total - peak)
  (the small cache built for the profiling run given back), divided by the bytes of one
  token, capped by max_tokens, in blocks of tokens_per_block (32).
* built engines (C++ executor, Triton backend; `cpp/tensorrt_llm/batch_manager/
  kvCacheManager.cpp`, `BaseKVCacheManager::calculateMaxNumBlocks` and
  `calculateFreeMemBytes`): free_gpu_memory_fraction x what cudaMemGetInfo reports free
  after the engine, its execution context (activations fixed at build time by
  max_batch_size, max_num_tokens and max_seq_len) and runtime buffers; blocks of
  tokens_per_block (a build option); max_tokens_in_paged_kv_cache caps it.
* one token (`KVCacheManager` / `kvCacheManager.cpp` `getCacheSizePerToken`): per layer
  on this pipeline rank, 2 (K and V) x K/V heads on this rank (kv_heads / tp, at least
  one) x head_dim x dtype bytes; MLA (DeepSeek) one latent head of
  kv_lora_rank + qk_rope_head_dim (kv factor 1), whole on every rank.
* requests at once: at most max_batch_size (2048 in the LLM API), and as many as the
  blocks hold at max_seq_len.
"""

from __future__ import annotations

from kvcalc._num import exact_ratio
from kvcalc._record import record
from kvcalc.dtypes import dtype
from kvcalc.errors import KvcalcError
from kvcalc.serving.layout import Layout
from kvcalc.serving.record import ServingCount
from kvcalc.serving.trtllm.rules import GiB, MiB, parse_release, rules_for
from kvcalc.serving.weights import Weights, forward_activation, stage_layers, stage_weights

__all__ = ["TrtllmFlags", "check_release", "count"]

BACKENDS = ("pytorch", "tensorrt")
# What the process holds beyond torch's tensors at the profiling peak: the CUDA context
# and cuBLAS workspaces, and at tp > 1 NCCL's and the all-reduce workspaces.
CONTEXT_BYTES = 600 * MiB
COMM_BYTES = 600 * MiB
KV_DTYPES = {"auto": None, "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "nvfp4": None}


def check_release(text: str) -> None:
    parse_release(text)


@record
class TrtllmFlags:
    """The options that decide TensorRT-LLM's cache, under its own names (None: its
    default). `backend`: "pytorch" (trtllm-serve, the LLM API) or "tensorrt" (a built
    engine). `free_gpu_memory_fraction`: a decimal text or number, read exactly."""

    engine: object  # kvcalc.serving.EngineRef
    weights: Weights
    layout: Layout = Layout()
    backend: str = "pytorch"
    free_gpu_memory_fraction: float | str | None = None
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    max_seq_len: int | None = None
    tokens_per_block: int | None = None
    max_tokens: int | None = None  # max_tokens_in_paged_kv_cache
    kv_cache_dtype: str = "auto"
    cuda_graphs: bool = True  # the PyTorch backend's CUDA graphs (captured in profiling)
    kv_scale_bytes: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise KvcalcError(f"backend must be one of {', '.join(BACKENDS)}, got "
                              f"{self.backend!r}")
        if self.kv_cache_dtype not in KV_DTYPES or self.kv_cache_dtype == "nvfp4":
            raise KvcalcError(f"kv_cache_dtype must be auto, bf16, fp16 or fp8 for "
                              f"TensorRT-LLM, got {self.kv_cache_dtype!r}")
        for name in ("max_batch_size", "max_num_tokens", "max_seq_len", "tokens_per_block",
                     "max_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise KvcalcError(f"{name} must be a positive whole number, got {v!r}")
        if self.free_gpu_memory_fraction is not None:
            num, den = _fraction(self.free_gpu_memory_fraction)
            if not 0 < num < den:
                raise KvcalcError(f"free_gpu_memory_fraction must be in (0, 1), got "
                                  f"{self.free_gpu_memory_fraction}")


def _fraction(v) -> tuple[int, int]:
    try:
        return exact_ratio(v)
    except (ValueError, ZeroDivisionError):
        raise KvcalcError(f"free_gpu_memory_fraction must be a number, got {v!r}") from None


class _Paged:
    """Which layer kinds TensorRT-LLM's KV cache manager pages like full attention: full
    attention and MLA; sliding windows are sized as full layers here (its variable
    window sizing by bytes is not modelled, a note says)."""

    def full(self):
        return "full"

    def sliding(self, window: int):
        return "window"

    def chunked(self, chunk: int):
        return "window"

    def state(self, mixer):
        return None

    def cross(self):
        return None

    def unpaged(self, mixer):
        return None


def count(spec, hw, flags: TrtllmFlags) -> ServingCount:
    """TensorRT-LLM's start-up for `spec` on devices like `hw` with `flags`. Pure."""
    from kvcalc.capacity.blocks import groups_on_stage
    from kvcalc.formulas.cache import cache_groups

    rules = rules_for(flags.engine.release)
    layout = flags.layout
    notes: list[str] = []
    max_seq = flags.max_seq_len or spec.max_context
    if not max_seq:
        raise KvcalcError(f"{spec.name}'s config gives no context length: give --max-seq-len")
    if flags.max_seq_len and spec.max_context and flags.max_seq_len > spec.max_context:
        notes.append(f"max_seq_len {flags.max_seq_len:,} is over the model's context of "
                     f"{spec.max_context:,} tokens")
    batch = flags.max_batch_size or rules.default_max_batch_size(flags.backend)
    num_tokens = flags.max_num_tokens or rules.default_max_num_tokens(flags.backend)
    block = flags.tokens_per_block or rules.default_tokens_per_block(flags.backend)
    fnum, fden = (_fraction(flags.free_gpu_memory_fraction)
                  if flags.free_gpu_memory_fraction is not None
                  else rules.default_free_gpu_memory_fraction())

    kv_name = KV_DTYPES[flags.kv_cache_dtype] or flags.weights.model_dtype
    groups = cache_groups(spec, dtype(kv_name), layout.tp, flags.kv_scale_bytes)
    sizes = stage_layers(spec, layout.pp)
    total = hw.visible_memory_bytes or hw.memory_bytes
    comm = COMM_BYTES if layout.tp * layout.pp > 1 else 0
    best = None
    for stage in range(layout.pp):
        on_stage = groups_on_stage(groups, spec.layers, sizes[stage], stage, sizes)
        kinds = [(g, g.mixer.kv_cache_spec(_Paged())) for g in on_stage]
        unknown = sorted({g.label for g, k in kinds if k is None})
        per_token = sum(g.layers * g.token_bytes for g, k in kinds if k is not None)
        weights = stage_weights(spec, flags.weights, tp=layout.tp, pp=layout.pp, stage=stage)
        activation = forward_activation(spec, flags.weights, tokens=num_tokens, tp=layout.tp)
        graphs = rules.cuda_graph_bytes(spec, batch) if (
            flags.backend == "pytorch" and flags.cuda_graphs) else 0
        held = weights + activation + CONTEXT_BYTES + comm + graphs
        free = total - held
        available = max(free, 0) * fnum // fden
        tokens = available // per_token // block * block if per_token else 0
        if flags.max_tokens is not None:
            tokens = min(tokens, -(-flags.max_tokens // block) * block)
        if best is None or tokens < best[0]:
            best = (tokens, stage, weights, activation, graphs, held, free, available,
                    per_token, unknown, any(k == "window" for _, k in kinds))
    (tokens, stage, weights, activation, graphs, held, free, available, per_token, unknown,
     windowed) = best
    if windowed:
        notes.append("sliding-window layers sized as full attention (TensorRT-LLM's "
                     "per-window pools are not modelled)")
    starts = free > 0 and tokens >= block
    refusal = ""
    if weights + CONTEXT_BYTES + comm > total:
        refusal = (f"out of memory loading the weights: {weights / GiB:.2f} GiB per GPU of "
                   f"{total / GiB:.2f} GiB")
        starts = False
    elif not starts:
        refusal = (f"no memory left for the KV cache after {held / GiB:.2f} GiB of weights, "
                   f"activations and buffers")
    if unknown:
        notes.append(f"kvcalc does not model how TensorRT-LLM pages {', '.join(unknown)} "
                     f"layers: its KV tokens and requests are not counted")
    kv_tokens = tokens if not unknown else None
    running = concurrency = None
    if kv_tokens is not None and starts:
        per_request = -(-max_seq // block)
        concurrency = (tokens // block) / per_request
        running = min(batch, tokens // block)  # a request holds at least one block
    names = rules.term_names(flags.backend)
    terms = ((names["total"], total), (names["weights"], weights),
             (names["activation"], activation), ("cuda_graphs", graphs),
             ("non_torch", CONTEXT_BYTES + comm), (names["free"], free),
             (names["kv_cache"], (tokens if starts else 0) * per_token))
    flag_values = (("backend", flags.backend),
                   ("free_gpu_memory_fraction", f"{fnum / fden:g}"),
                   ("max_batch_size", batch), ("max_num_tokens", num_tokens),
                   ("max_seq_len", max_seq), ("tokens_per_block", block),
                   ("kv_cache_dtype", flags.kv_cache_dtype),
                   ("tp_size", layout.tp), ("pp_size", layout.pp))
    return ServingCount(
        engine=flags.engine, hardware=hw.name, layout=layout, context_len=max_seq,
        page_size=block, bytes_per_token=per_token, kv_cache_tokens=kv_tokens,
        max_running_requests=running, max_concurrency=concurrency, terms=terms,
        flags=flag_values, starts=starts, refusal=refusal,
        pools=(("blocks", tokens // block),), notes=tuple(notes))
