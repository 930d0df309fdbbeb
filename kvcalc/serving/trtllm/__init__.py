"""TensorRT-LLM's start-up arithmetic for both of its runtimes: how many tokens its paged
KV cache gets and how many requests it runs at once (kvcalc.serving.trtllm.rules holds
every release comparison, with the snapshot each was read in; kvcalc.serving.trtllm.pool
the bytes per token and the block rounding; kvcalc.serving.trtllm.log the start-up
log reader).

Facts (quoted in words, not copied code; NVIDIA/TensorRT-LLM at the snapshots named in
rules.py: 0.20.0, 1.1.0rc6, 1.3.0rc3 Python trees, the C++ kvCacheManager.cpp):

* PyTorch backend (trtllm-serve's default from 1.0, the LLM API, trtllm-bench
  --backend pytorch), `_torch/pyexecutor/_util.py`, `KvCacheCreator` (1.3.0rc3):
  `try_prepare_estimation` (l. 308) builds a small TEMPORARY KV pool for dummy context
  requests of max_num_tokens tokens in all; `configure_kv_cache_capacity` (l. 329)
  runs them through a real PyExecutor (CUDA graphs captured, NCCL included), reads
  torch's allocated peak, then after `empty_cache` the device's used memory:
  non-torch = used - torch's current, and peak = torch peak + non-torch (l. 372-389).
  `_cal_max_memory` (l. 129): available = (device total - peak + the temporary pool's
  bytes) x free_gpu_memory_fraction (the temporary pool is inside the peak, so it is
  given back); max tokens = available // the estimate's bytes per token (after a given
  `max_tokens` caps the memory at max_tokens x bytes per token, l. 425-446). 0.20.0's
  `cal_max_tokens` is the same in tokens; the ~0.19 copy had (total - peak) x fraction
  over one bare forward pass.
* then the real pool (`py_executor_creator.py::create_py_executor`, 1.3.0rc3 l. 706):
  the fraction of the memory free at that moment is computed again and the smaller
  of the two token counts kept ("Both free_gpu_memory_fraction and max_tokens are
  set ... The smaller value will be used."), the minimum over ranks, then blocks:
  rounded UP by the C++ `calculateMaxNumBlocks` up to 1.1 (the 0.20.0 and 1.1.0rc3
  logs), DOWN by 1.3.0rc3's Python `calculate_max_num_blocks` (rules `pool_rounding`).
* built engines (the C++ executor: Triton, trtllm-serve on an engine, run.py,
  trtllm-bench --backend tensorrt; `kvCacheManager.cpp::calculateMaxNumBlocks`, then
  `BaseKVCacheManager::calculateFreeMemBytes`): free_gpu_memory_fraction x what
  cudaMemGetInfo reports free (plus the memory pool's free bytes) after the engine,
  its execution context (activations fixed at build time by max_batch_size,
  max_num_tokens and max_seq_len), runtime buffers and decoder; ceilDiv to blocks of
  tokens_per_block (the engine's build option); max_tokens_in_paged_kv_cache: the
  smaller of both when a fraction is also given, else the cap alone.
* bytes per token (kvcalc.serving.trtllm.pool): the estimate floors head_dim x
  kv_heads / tp, the pool stores ceil(kv_heads / tp) whole heads (tp = 1 under
  attention DP); MLA one latent head of kv_lora_rank + qk_rope_head_dim, K only, whole
  on every rank; FP8 one byte; MTP / one-model speculative layers in the pool of the
  last pipeline rank; a two-model draft's size added to the estimate.
* max_seq_len when not given (`modeling_utils.py::infer_max_seq_len`, 1.3.0rc3 l. 588):
  max_position_embeddings (2048 when absent) x the rope scaling factor, except for rope
  types su, longrope, llama3 and yarn (whose factor is not applied).
* requests at once: at most max_batch_size (the KV manager's `max_num_sequences`,
  `resource_manager.py` l. 390), each holding at least one block.

What kvcalc models rather than reads: the profiling run's torch peak beyond the
weights (kvcalc.serving.weights' forward pass over max_num_tokens tokens, plus the
dummy requests' logits), and the memory outside torch (a torch process's CUDA context,
NCCL's buffers per peer and the CUDA graphs, kvcalc.serving.runtime's figures measured
on vLLM's logs; no TensorRT-LLM log in tests/data gives these terms, so they are
extrapolated). For a built engine the execution context, runtime buffers and decoder
are fixed at build time and not derivable from the settings: the activations are
modelled as the same forward pass, the buffers not at all (a note says so).
"""

from __future__ import annotations

from kvcalc.ground.num import exact_ratio
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError
from kvcalc.serving.layout import Layout
from kvcalc.serving.record import ServingCount
from kvcalc.serving.trtllm.pool import blocks_for, per_token, pp_split, tokens_for
from kvcalc.serving.trtllm.rules import GiB, parse_release, rules_for
from kvcalc.serving.weights import Weights, forward_activation, stage_weights

__all__ = ["TrtllmFlags", "check_release", "count", "default_max_seq_len"]

BACKENDS = ("pytorch", "tensorrt")
KV_DTYPES = {"auto": None, "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
# GPUs of compute capability 9.0 among kvcalc's presets (FlashMLA's condition).
SM90 = ("h100-sxm", "h100-pcie", "h200", "h200-nvl", "h20")
_NO_FACTOR = ("su", "longrope", "llama3", "yarn")


def check_release(text: str) -> None:
    parse_release(text)


@record
class TrtllmFlags:
    """The options that decide TensorRT-LLM's cache, under its own names (None: its
    default). `backend`: "pytorch" (trtllm-serve, the LLM API) or "tensorrt" (a built
    engine). `free_gpu_memory_fraction`: a decimal text or number, read exactly.
    `enable_attention_dp`: attention data parallel (K/V heads whole on each rank).
    `cuda_graph_batch_sizes`: the PyTorch flow's captured batch sizes (None: its
    default, or what `cuda_graph_config` captures, the LLM API options' mapping; () none). `spec_layers`: MTP / one-model Eagle layers the pool holds on
    the last pipeline rank. `draft`: a two-model draft's ModelSpec.
    `max_attention_window`: kv_cache_config.max_attention_window, window sizes cycled over
    the layers (None: one window of max_seq_len for every layer); several sizes give a
    pool per window (kvcalc.serving.trtllm.windows)."""

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
    enable_attention_dp: bool = False
    cuda_graph_batch_sizes: tuple | None = None
    cuda_graph_config: dict | None = None
    spec_layers: int = 0
    draft: object = None
    # The LLM API options' speculative_config (kvcalc.serving.speculative.trtllm_draft):
    # MTP and one-model Eagle3 layers join the pool (`spec_layers`) and their weights the
    # last rank's (`spec_weights`, bytes); a DraftTarget model is a `draft` of its own
    speculative_config: dict | None = None
    spec_weights: int = 0
    enable_chunked_prefill: bool = False  # the scheduler's, not the memory count's
    max_attention_window: tuple | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise KvcalcError(f"backend must be one of {', '.join(BACKENDS)}, got "
                              f"{self.backend!r}")
        if self.kv_cache_dtype not in KV_DTYPES:
            raise KvcalcError(f"kv_cache_dtype must be auto, bf16, fp16 or fp8 for "
                              f"TensorRT-LLM, got {self.kv_cache_dtype!r}")
        for name in ("max_batch_size", "max_num_tokens", "max_seq_len", "tokens_per_block",
                     "max_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise KvcalcError(f"{name} must be a positive whole number, got {v!r}")
        if isinstance(self.spec_layers, bool) or not isinstance(self.spec_layers, int) \
                or self.spec_layers < 0:
            raise KvcalcError(f"spec_layers must be a whole number >= 0, got "
                              f"{self.spec_layers!r}")
        if self.max_attention_window is not None and (not self.max_attention_window or any(
                isinstance(w, bool) or not isinstance(w, int) or w <= 0
                for w in self.max_attention_window)):
            raise KvcalcError("max_attention_window must be a non-empty list of positive "
                              f"whole numbers (tokens), got {self.max_attention_window!r}")
        for b in self.cuda_graph_batch_sizes or ():
            if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
                raise KvcalcError(f"cuda_graph_batch_sizes must be positive whole numbers, "
                                  f"got {b!r}")
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


def default_max_seq_len(max_position_embeddings: int | None, rope_scaling=None) -> int:
    """`infer_max_seq_len` (1.3.0rc3 `_torch/models/modeling_utils.py` l. 588-617; the same
    rule as trtllm-build's `_init_max_seq_len`): max_position_embeddings (2048 when
    absent), times the rope scaling `factor` rounded up, unless the rope type is su,
    longrope, llama3 or yarn."""
    n = max_position_embeddings or 2048
    if rope_scaling:
        kind = rope_scaling.get("type", rope_scaling.get("rope_type"))
        if kind not in _NO_FACTOR:
            num, den = exact_ratio(rope_scaling.get("factor", 1))
            if (num, den) != (1, 1):
                n = -(-n * num // den)
    return n


def _flash_mla(spec, hw) -> bool:
    """FlashMLA's condition (rules `default_tokens_per_block`): an MLA latent of 576 on
    a compute-capability 9.0 GPU."""
    from kvcalc.layers import Latent

    latent = any(isinstance(mx, Latent) and mx.kv_lora_rank + mx.rope_dim == 576
                 for layer, _ in spec.groups() for mx in layer.mixers)
    return latent and getattr(hw, "name", "") in SM90


@record
class _Stage:
    """One pipeline rank's terms (bytes per device) and its token counts."""

    stage: int
    total: int
    weights: int
    activation: int
    non_torch: int  # CUDA context, NCCL (and CUDA graphs on the PyTorch flow)
    tmp: int  # the temporary pool of the estimation run (PyTorch 0.20+)
    available: int
    estimate_tokens: int  # the PyTorch estimate (or the fraction's tokens on an engine)
    cap_tokens: int  # the fraction of the memory free when the real pool is built
    per_token: object  # kvcalc.serving.trtllm.pool.PerToken


def _non_torch(layout: Layout, graphs: int, layers: int) -> int:
    from kvcalc.serving.runtime import (CONTEXT_BYTES, COMM_BYTES_PER_RANK,
                                        CUDA_GRAPH_BYTES_PER_LAYER)

    comm = COMM_BYTES_PER_RANK * layout.tp if layout.tp * layout.pp > 1 else 0
    return CONTEXT_BYTES + comm + graphs * CUDA_GRAPH_BYTES_PER_LAYER * layers


def graph_sizes(flags: TrtllmFlags, rules, max_batch_size: int) -> tuple[int, ...]:
    """The batch sizes the PyTorch flow captures CUDA graphs for: as given, else as the
    options' cuda_graph_config generates them, else the release's default."""
    if flags.cuda_graph_batch_sizes is not None:
        return tuple(flags.cuda_graph_batch_sizes)
    return rules.cuda_graph_batch_sizes(max_batch_size, flags.cuda_graph_config)

def _stage(spec, hw, flags, rules, *, stage, attn_tp, batch, num_tokens, max_seq, block,
           f_est, f_cpp, kv_name) -> _Stage:
    layout = flags.layout
    pp, last = layout.pp, stage == layout.pp - 1
    est_layers = ("attention" if rules.estimate_counts_attention_layers_only() else
                  "hidden" if rules.estimate_splits_pipeline() else "all")
    pt = per_token(spec, kv_dtype=kv_name, tp=attn_tp, stage=stage, pp=pp,
                   estimate_layers=est_layers,
                   spec_layers=flags.spec_layers if flags.backend == "pytorch" else 0,
                   engine_heads=rules.engine_kv_heads if flags.backend == "tensorrt"
                   else None)
    est_bytes, pool_bytes = pt.estimate, pt.pool
    if flags.draft is not None:
        d = per_token(flags.draft, kv_dtype=kv_name, tp=attn_tp, estimate_layers=est_layers)
        est_bytes, pool_bytes = est_bytes + d.estimate, pool_bytes + d.pool
    total = hw.visible_memory_bytes or hw.memory_bytes
    weights = stage_weights(spec, flags.weights, tp=layout.tp, pp=pp, stage=stage)
    if last:
        weights += flags.spec_weights
    if flags.draft is not None:
        weights += stage_weights(flags.draft, flags.weights, tp=layout.tp)
    activation = forward_activation(spec, flags.weights, tokens=num_tokens, tp=layout.tp)
    if last:  # the dummy requests' logits: one row per request, in the model dtype
        prompt = max(min(num_tokens, max_seq - 1), 1)
        from kvcalc.ground.dtypes import dtype

        reqs = min(-(-num_tokens // prompt), batch)
        activation += dtype(flags.weights.model_dtype).nbytes(reqs * spec.vocab)
    if flags.backend == "tensorrt":
        non_torch = _non_torch(layout, 0, 0)
        available = max(total - weights - activation - non_torch, 0)
        tokens = tokens_for(available, f_cpp, pool_bytes) if pool_bytes else 0
        return _Stage(stage, total, weights, activation, non_torch, 0, available, tokens,
                      tokens, pt)
    sizes = graph_sizes(flags, rules, batch)
    graphs = len(sizes) if flags.cuda_graphs else 0
    non_torch = _non_torch(layout, graphs, pp_split(spec.layers, pp)[stage])
    if rules.estimate_shape() == "warmup":
        free_now = total - weights - non_torch
        cap = tokens_for(free_now, f_est, est_bytes) if est_bytes else 0
        tmp_tokens = rules.temporary_pool_tokens(
            max_batch_size=batch, max_num_tokens=num_tokens, max_seq_len=max_seq,
            tokens_per_block=block, cap_tokens=cap)
        tmp = tmp_tokens * pool_bytes
        peak = weights + activation + non_torch + tmp
        num, den = f_est
        available = max(total - peak + tmp, 0) * num // den
    else:
        tmp = 0
        num, den = f_est
        available = max(total - weights - activation - non_torch, 0) * num // den
    if flags.max_tokens is not None:
        available = min(available, flags.max_tokens * est_bytes)
    estimate = available // est_bytes if est_bytes else 0
    # The real pool: the fraction of what is free once the estimation run is gone.
    free_final = max(total - weights - non_torch, 0)
    cap_tokens = tokens_for(free_final, f_cpp, pool_bytes) if pool_bytes else 0
    return _Stage(stage, total, weights, activation, non_torch, tmp, available, estimate,
                  cap_tokens, pt)


def count(spec, hw, flags: TrtllmFlags) -> ServingCount:
    """TensorRT-LLM's start-up for `spec` on devices like `hw` with `flags`. Pure."""
    rules = rules_for(flags.engine.release)
    rules.check_backend(flags.backend)
    layout = flags.layout
    notes: list[str] = []
    if flags.speculative_config is not None:
        flags = _with_speculation(spec, flags, notes)
    attn_tp = 1 if flags.enable_attention_dp else layout.attention_tp
    rope = spec.extra.get("rope_scaling") if isinstance(spec.extra, dict) else None
    max_seq = flags.max_seq_len or default_max_seq_len(spec.max_context or None, rope)
    if flags.max_seq_len and spec.max_context and flags.max_seq_len > spec.max_context:
        notes.append(f"max_seq_len {flags.max_seq_len:,} is over the model's context of "
                     f"{spec.max_context:,} tokens")
    batch = flags.max_batch_size or rules.default_max_batch_size(flags.backend)
    num_tokens = flags.max_num_tokens or rules.default_max_num_tokens(flags.backend)
    flash_mla = flags.backend == "pytorch" and _flash_mla(spec, hw)
    block = rules.default_tokens_per_block(flags.backend, flash_mla) if (
        flags.tokens_per_block is None or flash_mla) else flags.tokens_per_block
    if flash_mla and flags.tokens_per_block not in (None, 64):
        notes.append("FlashMLA forces tokens_per_block 64 (MLA latent of 576 on a "
                     "compute-capability 9.0 GPU)")
    given = flags.free_gpu_memory_fraction is not None
    fnum, fden = (_fraction(flags.free_gpu_memory_fraction) if given
                  else rules.default_free_gpu_memory_fraction())
    f_est = rules.fraction_as_used(flags.backend, fnum, fden)
    f_cpp = rules.fraction_as_used("tensorrt", fnum, fden) if flags.backend == "tensorrt" \
        or rules.pool_rounding("pytorch") == "ceil" else (fnum, fden)
    kv_name = KV_DTYPES[flags.kv_cache_dtype] or flags.weights.model_dtype

    stages = [_stage(spec, hw, flags, rules, stage=s, attn_tp=attn_tp, batch=batch,
                     num_tokens=num_tokens, max_seq=max_seq, block=block, f_est=f_est,
                     f_cpp=f_cpp, kv_name=kv_name) for s in range(layout.pp)]
    # Every rank's max tokens, then the minimum over ranks (both paths all-reduce MIN).
    if flags.backend == "pytorch":
        per_rank = [min(s.estimate_tokens, s.cap_tokens) for s in stages]
    elif flags.max_tokens is not None:
        per_rank = [min(s.estimate_tokens, flags.max_tokens) if given else flags.max_tokens
                    for s in stages]
    else:
        per_rank = [s.estimate_tokens for s in stages]
    max_tokens = min(per_rank)
    st = stages[per_rank.index(max_tokens)]
    rounding = rules.pool_rounding(flags.backend)
    blocks = blocks_for(max_tokens, block, rounding)
    tokens = blocks * block
    pt = st.per_token
    unknown = sorted({u for s in stages for u in s.per_token.unknown})
    windows = None if flags.max_attention_window is None else tuple(
        min(max_seq, w) for w in flags.max_attention_window)  # clamped, l. 284-289
    vswa = windows is not None and len(set(windows)) > 1
    if pt.windowed and windows is None:
        notes.append("sliding-window layers keep max_seq_len tokens, as full ones: "
                     "TensorRT-LLM gives every layer one window, max_seq_len, unless "
                     "kv_cache_config.max_attention_window names several")
    elif windows is not None and not vswa and windows[0] < max_seq:
        notes.append(f"one attention window of {windows[0]:,} tokens for every layer: "
                     f"the pool is sized as without it")
    if unknown:
        notes.append(f"kvcalc does not model how TensorRT-LLM pages {', '.join(unknown)} "
                     f"layers: its KV tokens and requests are not counted")
    if flags.backend == "tensorrt":
        notes.append("a built engine's runtime buffers and decoder are fixed at build time "
                     "and not counted; its activations are modelled")
    if layout.pp > 1:
        notes.append(f"pipeline rank {st.stage} holds the fewest tokens and sizes every rank")

    refusal = ""
    held = st.weights + st.non_torch
    starts = True
    if held > st.total:
        refusal = (f"out of memory loading the weights: {st.weights / GiB:.2f} GiB per GPU of "
                   f"{st.total / GiB:.2f} GiB")
        starts = False
    elif blocks < 1:
        refusal = (f"no memory left for the KV cache after {(held + st.activation) / GiB:.2f} "
                   f"GiB of weights, activations and buffers")
        starts = False
    binding, window_pools = None, ()
    if vswa and not unknown and starts:
        window_pools = _window_pools(spec, flags, rules, stages, windows=windows,
                                     attn_tp=attn_tp, block=block, f_cpp=f_cpp,
                                     kv_name=kv_name)
        blocks = sum(p.blocks for p in window_pools)
        tokens = blocks * block
        if any(p.blocks < 1 for p in window_pools):
            starts = False
            refusal = "no memory left for one attention window's KV pool"
    context = max_seq
    if starts and window_pools:
        short = [p for p in window_pools if p.blocks * block < p.window]
        if short:  # resource_manager.py::adjust_window_sizes_for_vswa cuts them
            notes.append(f"the {short[-1].window:,}-token window's pool holds "
                         f"{short[-1].blocks * block:,} tokens: TensorRT-LLM cuts the "
                         f"windows (and max_seq_len) to what the memory holds, not modelled")
    elif starts and tokens < max_seq:
        notes.append(f"max_seq_len {max_seq:,} is over the {tokens:,} tokens the pool holds: "
                     f"TensorRT-LLM reduces the attention window and max_seq_len to {tokens:,}")
        context = tokens
    kv_tokens = tokens if not unknown and starts else (None if unknown else 0)
    running = concurrency = None
    if kv_tokens and window_pools:
        # a request takes ceilDiv(min(len, w), tokens_per_block) blocks of each window
        need = {p.window: -(-min(context, p.window) // block) for p in window_pools}
        tight = min(window_pools, key=lambda p: p.blocks / need[p.window])
        concurrency = tight.blocks / need[tight.window]
        running = min(batch, min(p.blocks for p in window_pools))
        binding = (tight.blocks, need[tight.window], block * tight.bytes_per_token)
        notes.append("a KV pool per attention window (" + ", ".join(
            f"{p.window:,}: {p.layers} layers, {p.blocks:,} blocks" for p in window_pools)
            + f"), the memory split {rules.window_share()} between them; the "
            f"{tight.window:,}-token window's pool limits requests")
    elif kv_tokens:
        per_request = -(-context // block)
        concurrency = blocks / per_request
        running = min(batch, blocks)  # a request holds at least one block
    pool_bytes = tokens * pt.pool if starts else 0
    if window_pools and starts:
        pool_bytes = sum(p.blocks * block * p.bytes_per_token for p in window_pools)
    names = rules.term_names(flags.backend)
    if flags.backend == "pytorch":
        outside = st.non_torch + st.tmp
        peak = st.weights + st.activation + outside
        values = (st.total, st.weights, st.activation, outside, st.tmp, peak, st.available,
                  pool_bytes)
    else:
        values = (st.total, st.weights, st.activation, st.non_torch, st.available,
                  pool_bytes)
    terms = tuple(zip(names, values))
    num, den = fnum, fden
    flag_values = (("backend", flags.backend),
                   ("free_gpu_memory_fraction", float(f"{num / den:g}")),  # a share, 0-1
                   ("max_batch_size", batch), ("max_num_tokens", num_tokens),
                   ("max_seq_len", max_seq), ("tokens_per_block", block),
                   ("kv_cache_dtype", flags.kv_cache_dtype),
                   ("tp_size", layout.tp), ("pp_size", layout.pp),
                   ("enable_attention_dp", flags.enable_attention_dp))
    pools = (("blocks", blocks), ("estimated_max_tokens", st.estimate_tokens),
             ("kv_size_per_token", pt.estimate)) + tuple(
        (f"window_{p.window}_blocks", p.blocks) for p in window_pools)
    if windows is not None:
        flag_values += (("max_attention_window", list(flags.max_attention_window)),)
    # the CUDA graphs an options file set, for the scheduler (kvcalc.serving.schedule_for)
    if flags.cuda_graph_config is not None:
        flag_values += (("cuda_graph_config", dict(flags.cuda_graph_config)),)
    if not flags.cuda_graphs:
        flag_values += (("cuda_graphs", False),)
    return ServingCount(
        engine=flags.engine, hardware=hw.name, layout=layout, context_len=context,
        page_size=block, bytes_per_token=pt.pool, kv_cache_tokens=kv_tokens,
        max_running_requests=running, max_concurrency=concurrency, terms=terms,
        flags=flag_values, starts=starts, refusal=refusal, pools=pools,
        notes=tuple(notes), binding=binding)


def _with_speculation(spec, flags: TrtllmFlags, notes: list) -> TrtllmFlags:
    """The speculative_config's draft in the count (`_torch/pyexecutor/_util.py`
    `KvCacheCreator`: the pool's layers are the rank's plus `get_num_spec_layers` on the
    last; the MTP / one-model Eagle3 weights load with the model, before the profiling
    run measures its peak): MTP layers are copies of the target's last layer sharing its
    embedding and lm_head; Eagle3 (one-model, `eagle3_one_model` true by default) the
    head's layer with its own lm_head; DraftTarget a second model with its own cache."""
    from dataclasses import replace

    from kvcalc.serving.speculative import trtllm_draft

    if flags.backend != "pytorch":
        raise KvcalcError("speculative_config: kvcalc counts it for the PyTorch backend "
                          "(trtllm-serve, the LLM API); a built engine's draft is not read")
    if flags.layout.pp > 1:
        raise ParameterError("speculative_config with {pp} over 1: the draft's place over "
                             "pipeline ranks is not counted; give {pp} 1", "pp")
    draft = trtllm_draft(spec, flags.speculative_config)
    if draft.method == "ngram":
        notes.append("speculative decoding (NGram): no draft weights or cache")
        return flags
    if draft.method == "draft_model":
        notes.append(f"speculative decoding (DraftTarget {draft.model}): its weights and "
                     f"cache beside the target's")
        return replace(flags, draft=draft.spec)
    weights = draft.weight_bytes(flags.weights, flags.layout.tp)
    notes.append(f"speculative decoding ({draft.method}, {draft.layers} layer(s) in the "
                 f"pool, {draft.num_speculative_tokens} draft tokens): {weights / GiB:.2f} GiB "
                 f"of draft weights with the model's")
    return replace(flags, spec_layers=draft.layers, spec_weights=weights)


def _window_pools(spec, flags, rules, stages, *, windows, attn_tp, block, f_cpp,
                  kv_name) -> tuple:
    """Each window's pool (kvcalc.serving.trtllm.windows.WindowPool) on the rank that
    sizes every rank: the memory a rank may fill (the PyTorch estimate's, which the
    manager takes as max_gpu_total_bytes; a built engine's fraction of its free memory)
    split between the windows by the release's rule, blocks the minimum over ranks,
    window by window."""
    from kvcalc.serving.trtllm.pool import window_layers
    from kvcalc.serving.trtllm.windows import WindowPool, window_blocks, window_shares

    rule = rules.window_share()
    if rule is None:
        raise KvcalcError(f"kvcalc counts TensorRT-LLM's pools per attention window "
                          f"(several max_attention_window sizes) from 1.0; got "
                          f"{flags.engine.release}")
    per_rank, layout = [], flags.layout
    for st in stages:
        wl = window_layers(spec, kv_dtype=kv_name, tp=attn_tp, windows=windows,
                           stage=st.stage, pp=layout.pp,
                           engine_heads=rules.engine_kv_heads if flags.backend == "tensorrt"
                           else None)
        if flags.backend == "pytorch":
            allotted, cap = st.available, None
        else:
            num, den = f_cpp
            allotted, cap = st.available * num // den, flags.max_tokens
        per_rank.append((wl, window_blocks(rule, allotted, {w: b for w, (_, b) in
                                                           wl.items()}, block, cap)))
    if len({tuple(wl) for wl, _ in per_rank}) > 1:
        raise KvcalcError("the pipeline ranks hold different window sizes: TensorRT-LLM "
                          "refuses it (\"Asymmetrical pipeline parallelism detected\")")
    wl = per_rank[0][0]
    shares = window_shares(rule, {w: b for w, (_, b) in wl.items()})
    return tuple(WindowPool(window=w, layers=n, bytes_per_token=b, share=shares[w],
                            blocks=min(blocks[w] for _, blocks in per_rank))
                 for w, (n, b) in wl.items())
