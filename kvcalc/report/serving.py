"""An engine's start-up count (kvcalc.serving's ServingCount) as a table and a clause: each
memory term in the words of that engine's log, then the pool, the requests it runs."""

from __future__ import annotations

from kvcalc.report.render import Tab
from kvcalc.ground.units import exact_bytes, human_bytes

# Each term, in the words a reader of that engine's log knows it by.
TERM_WORDS = {
    "total": "driver-visible memory",
    "avail_mem_at_start": "free at start (after CUDA context, NCCL)",
    "weights": "weights",
    "avail_mem_after_weights": "free after the weights",
    "headroom": "headroom: free at start x (1 - mem_fraction_static)",
    "kv_cache": "KV cache",
    "mamba_cache": "state cache (Mamba slots)",
    "req_to_token": "request-to-token table",
    "segment_rounding": "allocator rounding and pad page",
    "avail_mem_after_pool": "free after the pools",
    "lora_buffers": "LoRA buffers (before the pool's profile; no log line)",
    # SGLang's speculative draft worker, its second "Load weight" / "KV Cache" block
    "draft_weights": "draft worker's weights (loaded after the pools)",
    "draft_kv_cache": "draft worker's KV pool",
    "draft_avail_mem_after_pool": "free after the draft worker",
    "activation_peak": "activation peak (profiling run)",
    "activations": "activations (fixed at build time)",
    "engine": "engine (weights)",
    "cuda_graphs": "CUDA graphs",
    "non_torch": "non-torch (CUDA context, NCCL)",
    "free_after_peak": "free after the profiling peak",
    "available": "free after the engine and its buffers",
    "budget": "driver-visible memory x utilization",
    # TensorRT-LLM, as its log names them
    "device_total_memory": "device total memory",
    "model_weights_inside_torch": "weights (inside torch)",
    "dynamic_inside_torch": "activation peak (profiling run, inside torch)",
    "outside_torch": "outside torch (CUDA context, NCCL, graphs, the temporary KV cache)",
    "tmp_kv_mem": "temporary KV cache of the profiling run",
    "peak_memory": "peak memory during profiling",
    "available_kv_cache_memory": "available KV cache memory (x fraction)",
    "paged_kv_cache": "paged KV cache",
    "engine_size": "engine (weights)",
    "execution_context": "execution context (activations, fixed at build)",
}
POOL_WORDS = {"full_layer_tokens": "full-attention layers' tokens",
              "swa_layer_tokens": "sliding-window layers' tokens",
              "mamba_slots": "state slots (requests)", "blocks": "KV blocks",
              "estimated_max_tokens": "tokens the profiling estimate gives",
              "kv_size_per_token": "bytes per token (the estimate's)",
              "num_gpu_blocks": "KV blocks"}


def serving_words(c) -> str:
    """The count in a clause: 'SGLang 0.5.4 starts: 414,716 KV tokens, 2,048 requests at
    once (3.16 of 131,072 tokens)', or why it does not start."""
    if not c.starts:
        return f"{c.engine.title} does not start ({c.refusal})"
    if c.kv_cache_tokens is None:
        return f"{c.engine.title} starts (its KV tokens are not modelled)"
    return (f"{c.engine.title} starts: {c.kv_cache_tokens:,} KV tokens hold "
            f"{c.max_concurrency:,.2f} requests of {c.context_len:,} tokens at once (it runs "
            f"up to {c.max_running_requests:,})")


def serving_table(est, c, slo: int | None = None) -> Tab:
    """`kvcalc fit --engine E`: the engine's terms per device, its pool and requests, the
    floor beside them."""
    rows = []
    for name, value in c.terms:
        words = TERM_WORDS.get(name, name.replace("_", " "))
        rows.append([words if name in ("total", "budget") else "  " + words,
                     exact_bytes(value) if value >= 0 else f"none: {exact_bytes(-value)} short"])
    rows.append(["KV cache tokens", "not modelled" if c.kv_cache_tokens is None
                 else f"{c.kv_cache_tokens:,}"])
    for name, value in c.pools:
        rows.append(["  " + POOL_WORDS.get(name, name.replace("_", " ")), f"{value:,}"])
    rows.append([f"bytes per token (page of {c.page_size})", f"{c.bytes_per_token:,}"])
    if c.max_running_requests is not None:
        rows.append(["max running requests", f"{c.max_running_requests:,}"])
    if c.max_concurrency is not None:
        rows.append([f"requests of {c.context_len:,} tokens the pool holds",
                     f"{c.max_concurrency:,.2f}"])
    if c.layout.kv_pools > 1 and c.kv_cache_tokens is not None:
        d = c.deployment
        rows.append([f"deployment: {d['kv_pools']:,} pools on {d['gpus']:,} GPUs",
                     f"{d['kv_cache_tokens']:,} tokens, {d['max_concurrency']:,.2f} requests"])
    rows.append(["verdict", "starts" if c.starts else f"does not start: {c.refusal}"])
    if slo is not None:
        rows.append(["largest batch meeting the latency targets", f"{slo:,}"])
    f = est.fit
    rows += [["floor: weights + KV only", "fits" if f.fits else "does not fit"],
             ["floor: free for KV cache per device", exact_bytes(f.free_for_kv_bytes)]]
    flags = dict(c.flags)
    layout = c.layout
    where = f"{layout.gpus} x {c.hardware}"
    shape = f"tp {layout.tp}" + (f", pp {layout.pp}" if layout.pp > 1 else "") + (
        f", dp {layout.dp}" + (" (DP attention)" if layout.dp_attention else "")
        if layout.dp > 1 else "")
    knob = _knob(c.engine.name, flags)
    notes = list(c.notes)
    return Tab(f"{est.spec.name} on {where} ({shape}), as {c.engine.title} counts it ({knob}), "
               f"weights {est.weight_label}, KV {est.kv_dtype.name}", ["", ""], rows,
               caption="\n".join(f"note: {n}" for n in notes) or None)


def _knob(engine: str, flags: dict) -> str:
    if engine == "sglang":
        default = " (its default)" if flags.get("mem_fraction_static_default") else ""
        return f"mem_fraction_static {flags['mem_fraction_static']:g}{default}"
    if engine == "tensorrt-llm":
        return (f"{flags['backend']} backend, free_gpu_memory_fraction "
                f"{flags['free_gpu_memory_fraction']:g}")
    return f"gpu_memory_utilization {flags.get('gpu_memory_utilization')}"


__all__ = ["TERM_WORDS", "serving_table", "serving_words", "human_bytes"]
