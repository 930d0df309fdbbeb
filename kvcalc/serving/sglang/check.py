"""An SGLang start-up log set beside kvcalc's count (`kvcalc check LOG` for SGLang): the
flags its server_args echo states are the truth about that start-up, the model and GPU
are the user's (or the log's), and each logged figure gets kvcalc's beside it, from the
settings alone and again from the memory the log measured at start (which isolates
the weights, the cell size and the fraction's arithmetic from the CUDA context)."""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.serving.failure import Diagnosis

__all__ = ["SglangCheck", "check_sglang", "flags_from_log", "with_one_request"]

GiB = 1 << 30
# server_args fields SglangFlags takes under the same name
_SAME = ("context_length", "max_running_requests", "max_total_tokens", "page_size",
         "chunked_prefill_size", "cuda_graph_max_bs", "max_mamba_cache_size",
         "disable_cuda_graph", "disable_hybrid_swa_memory")


@record
class SglangCheck:
    release: str
    rows: tuple[tuple[str, object, object], ...]  # (figure, logged, kvcalc)
    tokens_from_logged_start: int | None  # the pool from the logged free memory
    diagnosis: Diagnosis | None = None  # why it did not start, and the fix
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"engine": "sglang", "engine_release": self.release,
                "figures": [{"figure": f, "logged": a, "kvcalc": b} for f, a, b in self.rows],
                "tokens_from_logged_start": self.tokens_from_logged_start,
                "refused": self.diagnosis is not None,
                "failure": None if self.diagnosis is None else self.diagnosis.as_dict(),
                "notes": list(self.notes)}


def flags_from_log(log, ref, weights, **extra):
    """SglangFlags from what the log's server_args echo states."""
    from kvcalc.serving.layout import Layout
    from kvcalc.serving.sglang import SglangFlags

    a = log.server_args
    given = {k: a[k] for k in _SAME if a.get(k) not in (None, False, 0)}
    if a.get("mem_fraction_static") is not None:
        given["mem_fraction_static"] = repr(a["mem_fraction_static"])
    for name in ("swa_full_tokens_ratio", "mamba_full_memory_ratio"):
        if a.get(name) is not None:
            given[name] = repr(a[name])
    kv = a.get("kv_cache_dtype") or "auto"
    layout = Layout(tp=int(a.get("tp_size") or 1), pp=int(a.get("pp_size") or 1),
                    dp=int(a.get("dp_size") or 1),
                    dp_attention=bool(a.get("enable_dp_attention")))
    return SglangFlags(engine=ref, weights=weights, layout=layout, kv_cache_dtype=kv,
                       **{**given, **extra})


def check_sglang(text: str, spec, hw, *, release: str | None = None) -> SglangCheck:
    """`text` (an SGLang start-up log) beside kvcalc's count of `spec` on `hw`."""
    from kvcalc.serving import DEFAULT_RELEASE, count, engine_ref
    from kvcalc.serving.sglang.log import read_sglang_log
    from kvcalc.serving.weights import Weights

    log = read_sglang_log(text)
    if not log.figures and not log.failure:
        raise KvcalcError("the log holds no SGLang memory line (Load weight, KV Cache is "
                          "allocated, max_total_num_tokens): paste it up to the scheduler's "
                          "max_total_num_tokens line or the error that stopped it")
    notes = []
    if release is None:
        release = DEFAULT_RELEASE["sglang"]
        notes.append(f"SGLang logs do not print their release: counted as {release} "
                     f"(give --engine sglang@VERSION)")
    ref = engine_ref(f"sglang@{release}")
    q = (log.server_args.get("quantization") or "").lower()
    weights = Weights(weight_dtype="fp8" if q in ("fp8", "w8a8_fp8") else None)
    counted = count(spec, hw, flags_from_log(log, ref, weights))
    f, m = log.figures, counted.memory

    def gib(name):
        return None if f.get(name) is None else round(f[name] * GiB)

    kv_logged = (round((f.get("k_size_gb", 0) + f.get("v_size_gb", 0)) * GiB)
                 if "k_size_gb" in f else gib("kv_size_gb"))
    weights_logged = gib("weights_mem_gb")
    if weights_logged is None and "avail_mem_start_gb" in f and "avail_mem_after_weights_gb" in f:
        weights_logged = round((f["avail_mem_start_gb"] - f["avail_mem_after_weights_gb"]) * GiB)
    rows = (("free at start, bytes", gib("avail_mem_start_gb"), m["avail_mem_at_start"]),
            ("weights, bytes", weights_logged, m["weights"]),
            ("free after the weights, bytes", gib("avail_mem_after_weights_gb"),
             m["avail_mem_after_weights"]),
            ("KV cache, bytes", kv_logged, m["kv_cache"]),
            ("KV tokens", log.tokens, counted.kv_cache_tokens),
            ("max running requests", f.get("max_running_requests"),
             counted.max_running_requests),
            ("context length", f.get("context_len"), counted.context_len))
    rows = tuple(r for r in rows if r[1] is not None) + _host_row(log, counted)
    from_start = None
    if gib("avail_mem_start_gb") is not None:
        measured = Weights(weight_dtype=weights.weight_dtype, weights_bytes=weights_logged)
        again = count(spec, hw, flags_from_log(log, ref, measured,
                                               start_free_bytes=gib("avail_mem_start_gb")))
        from_start = again.kv_cache_tokens
        notes.append("tokens_from_logged_start: the pool counted from the free memory and "
                     "the weights the log measured (its fraction, cell size and page "
                     "arithmetic alone)")
    from kvcalc.serving.sglang.fail import diagnose

    d = with_one_request(diagnose(log), counted)
    return SglangCheck(release=release, rows=rows, tokens_from_logged_start=from_start,
                       diagnosis=d, notes=tuple(notes) + counted.notes)


def _host_row(log, counted) -> tuple:
    """The hierarchical cache's host pool as logged beside kvcalc's from the log's own
    device pool (kvcalc.serving.offload: its ratio or size rule alone)."""
    from kvcalc.serving.offload import PoolFacts, host_tier

    logged = log.figures.get("host_memory_gb")
    if logged is None or not log.tokens:
        return ()
    a = log.server_args
    given = {"enable_hierarchical_cache": True, "hicache_size": a.get("hicache_size") or None,
             "hicache_ratio": a.get("hicache_ratio")}
    pool = PoolFacts(engine=counted.engine, tp=counted.layout.tp, pp=counted.layout.pp,
                     page_size=counted.page_size, bytes_per_token=counted.bytes_per_token,
                     kv_cache_tokens=log.tokens)
    try:
        tier = host_tier(pool, {k: v for k, v in given.items() if v is not None})
    except KvcalcError:
        return ()
    return (("host memory per rank, GB (from the logged pool)", logged,
             float(dict(tier.engine_says)["host_memory_gb"])),)


def with_one_request(d: Diagnosis | None, counted) -> Diagnosis | None:
    """A pool of no tokens (`no_kv_memory`) with the log's free memory before and after
    the weights, and kvcalc's count of the model (`counted`, a ServingCount: its bytes a
    token and context length): the --mem-fraction-static that holds one request of the
    full context, pool = after - before x (1 - F) >= context x bytes a token."""
    import dataclasses
    import math

    if d is None or d.kind != "no_kv_memory" or not counted.bytes_per_token:
        return d
    before = d.counted.get("free_before_weights_gb")
    after = d.counted.get("free_after_weights_gb")
    if not before or after is None:
        return d
    need = counted.context_len * counted.bytes_per_token / GiB
    one = 1 - (after - need) / before
    if one >= 1:
        return dataclasses.replace(d, fix=d.fix + (
            f"; one request of the full {counted.context_len:,}-token context needs "
            f"{need:.2f} GB of KV cache, more than the {after:.2f} GB the weights leave: "
            "lower --context-length or add GPUs"))
    frac = math.ceil(one * 100) / 100
    return dataclasses.replace(
        d, counted={**d.counted, "mem_fraction_static_one_request": frac,
                    "kv_bytes_per_token": counted.bytes_per_token,
                    "context_len": counted.context_len},
        fix=d.fix + (f"; one request of the full {counted.context_len:,}-token context "
                     f"({need:.2f} GB at {counted.bytes_per_token:,} B a token, kvcalc's "
                     f"count) needs --mem-fraction-static {frac:.2f}"))
