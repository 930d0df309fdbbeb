"""One configuration in, every analytical figure out: the engine behind `estimate`.

`workload_for()` turns the values a user gives into a checked Workload;
`estimate()` gathers the formulas (cache, parameters, decode step, Shazeer's ratio)
for it and, with a device's Memory, the roofline, the fit and the latency, each
figure computed once and kept in the Estimate. `as_dict()` is the public JSON of
`kvcalc estimate`; `as_row()` the flat CSV row `kvcalc sweep` reproduces column for
column.
"""

from __future__ import annotations

from dataclasses import field

from kvcalc.speed import roofline
from kvcalc.ground.record import record
from kvcalc.floor import Fit, fit as plain_fit
from kvcalc.serving.vllm.settings import settings_for
from kvcalc.serving.vllm.verdict import engine_verdict, smallest_tp
from kvcalc.ground.dtypes import DType, check_size, dtype as _dtype, weight_dtype as _weight_dtype
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.formulas.attention import ShazeerRatio, shazeer_ratio
from kvcalc.formulas.cache import KVCache, kv_cache
from kvcalc.formulas.params import ParamCounts, param_counts
from kvcalc.formulas.step import DecodeCost, StoredWeights, decode_step
from kvcalc.speed.latency import DEFAULT_BANDWIDTH_EFFICIENCY, DEFAULT_MFU, latency
# Weights as a folder or Hub checkpoint stores them (re-exported: kvcalc.estimate's API)
from kvcalc.quant.checkpoint import AsStored, stored_weights, weights_as
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.workload import Memory, Workload


@record
class Estimate:
    """Every figure for one configuration (model, workload, device), each computed once."""

    spec: ModelSpec
    workload: Workload
    cache: KVCache
    params: ParamCounts
    decode: DecodeCost
    shazeer: ShazeerRatio | None  # incremental decoding (this estimate's step)
    shazeer_batched: ShazeerRatio | None = None  # the whole prompt at once
    stored: StoredWeights | None = None  # quantized weights as stored
    memory: Memory | None = None  # the device and its share; None: no roofline, no fit
    roofline: roofline.Roofline | None = None
    fit: Fit | None = None  # the floor: weights + KV only, under --memory-fraction/--reserve
    # The verdict: vLLM's start-up count (kvcalc.serving.vllm.verdict) for `batch` requests
    # of seq_len tokens, with the single changes that make it serve when it does not.
    verdict: object = None
    # The smallest valid tp the engine serves the batch at; None: none does (or no
    # hardware): JSON null and an empty CSV cell, never a 0 that reads as a tp degree
    min_tp_that_fits: int | None = None
    latency: object = None  # latency.Latency with hardware: TTFT, TPOT, tokens/s
    allreduce: object = None  # comm.AllReduceCost: tp > 1 on hardware with interconnect figures
    # Another engine's start-up count (kvcalc.serving: SGLang, TensorRT-LLM) when the
    # memory engine is not vLLM: it answers "does it fit" in place of the verdict.
    serving: object = None
    # Where the attention layers' heads differ (Gemma 4's full and sliding layers): each
    # kind's own ratios, {label: (incremental, batched)}; {} when one shape serves all.
    shazeer_by_kind: dict = field(default_factory=dict)

    # The workload's and the device's settings, as the report and the CLI read them.
    @property
    def hardware(self) -> Hardware | None:
        return self.memory.hardware if self.memory is not None else None

    @property
    def seq_len(self) -> int:
        return self.workload.seq_len

    @property
    def batch(self) -> int:
        return self.workload.batch

    @property
    def kv_dtype(self) -> DType:
        return self.workload.kv_dtype

    @property
    def weight_dtype(self) -> DType:
        return self.workload.weight_dtype

    @property
    def tp(self) -> int:
        return self.workload.tp

    @property
    def scale_bytes(self) -> int:
        return self.workload.kv_scale_bytes

    @property
    def encoder_seq_len(self) -> int | None:
        return self.workload.encoder_seq_len

    @property
    def weight_label(self) -> str:
        return self.workload.weight_label

    @property
    def fits(self) -> bool | None:
        """The verdict: the engine serves the batch (None without a device)."""
        if self.serving is not None:
            return self.serving.serves(self.batch)
        return None if self.verdict is None else self.verdict.serves

    @property
    def weight_bytes(self) -> int:
        """The language model's weights in bytes, as stored when quantized."""
        if self.stored is not None:
            return self.stored.total
        return self.weight_dtype.nbytes(self.params.total)

    @property
    def weight_bytes_towers(self) -> int:
        """The vision towers' and projector's bytes (multimodal models; 0 otherwise)."""
        if self.stored is not None and self.stored.towers is not None:
            return self.stored.towers
        return self.weight_dtype.nbytes(sum(self.spec.extra.get("towers", {}).values()))

    def as_dict(self) -> dict:
        """The public JSON object (names are an interface: keep them)."""
        s, c, d = self.spec, self.cache, self.decode
        a = s.attention_shape
        out: dict = {
            "model": {
                "name": s.name,
                "attention": s.attention_kind,
                "layers": s.layers,
                "d_model": s.d_model,
                # the attention most layers have (null without attention); the layers'
                # own under "layers"
                "heads": a and a.heads,
                "kv_heads": a and a.kv_heads,
                "head_dim": a and a.head_dim,
                "v_head_dim": a and a.v_head_dim,
                "sliding_window": s.sliding_window,
                "sliding_layers": s.sliding_layers,
                "source": s.source,
                **approximate_fields(s),
            },
            "inputs": {
                "seq_len": self.seq_len,
                "batch": self.batch,
                "kv_dtype": self.kv_dtype.name,
                "weight_dtype": self.weight_label,
                "tp": self.tp,
                "gpu": self.hardware.name if self.hardware else None,
            },
            "kv_bytes_per_token": c.bytes_per_token,
            # null where the attention layers differ: then per kind, beside
            "kv_bytes_per_token_per_layer": c.bytes_per_token_per_layer,
            **({"kv_bytes_per_token_per_layer_by_kind": dict(c.bytes_per_token_per_layer_by_kind)}
               if c.bytes_per_token_per_layer is None else {}),
            "kv_cache_bytes": c.bytes,
            "kv_cache_bytes_full": c.bytes_full,
            "kv_cache_bytes_per_device": c.bytes_per_device,
            "kv_cache_bytes_all_devices": c.bytes_all_devices,
            "kv_heads_per_device": c.kv_heads_per_device,
            # Per layer kind (e.g. "sliding 1,024", "full", "linear attention"): the whole
            # batch's bytes, and the constant state one sequence holds in state layers.
            "kv_cache_bytes_by_kind": dict(c.bytes_by_kind),
            "state_bytes_per_sequence": c.state_bytes_per_sequence,
            "layers": layer_pattern(s),
            "params": {
                "total": self.params.total,
                "attention": self.params.attention,
                "active": self.params.active,
                "embedding": self.params.embedding,
                "breakdown": dict(self.params.breakdown),
                # Multimodal configs: vision tower and projector, apart from the text model.
                "towers": dict(s.extra.get("towers", {})),
            },
            "weight_bytes": self.weight_bytes,
            "weight_quantization": (self.stored.label or None) if self.stored is not None else None,
            "weight_bytes_towers": self.weight_bytes_towers,
            "decode": {
                "flops": d.flops,
                "bytes": d.bytes,
                "arithmetic_intensity": d.arithmetic_intensity,
                "attention_flops": d.attention_flops,
                "attention_bytes": d.attention_bytes,
                "attention_arithmetic_intensity": d.attention_intensity,
                "prefill_flops": d.prefill_flops,
                "bytes_breakdown": dict(d.bytes_breakdown),
                "flops_breakdown": dict(d.flops_breakdown),
                "per_device_bytes": d.per_device_bytes,
                "per_device_flops": d.per_device_flops,
            },
        }
        # Every key is always there: null where it does not apply (shazeer for MLA,
        # roofline and fit without hardware), so consumers need no key checks.
        out["shazeer"] = out["shazeer_batched"] = out["roofline"] = out["fit"] = None
        if self.shazeer is not None:
            out["shazeer"] = _shazeer_dict(self.shazeer)
            out["shazeer_batched"] = _shazeer_dict(self.shazeer_batched)
        if self.shazeer_by_kind:
            out["shazeer_by_kind"] = {k: {"incremental": _shazeer_dict(i),
                                          "batched": _shazeer_dict(b)}
                                      for k, (i, b) in self.shazeer_by_kind.items()}
        if self.roofline is not None:
            r = self.roofline
            out["roofline"] = {
                "time_s": r.time_s,
                "memory_s": r.memory_s,
                "compute_s": r.compute_s,
                "bound": r.bound,
                "tokens_per_s": r.tokens_per_s,
                "ridge_flops_per_byte": r.ridge_flops_per_byte,
                "bandwidth_bytes_per_s": r.bandwidth_bytes_per_s,
                "peak_flops_per_s": r.peak_flops_per_s,
            }
        if self.fit is not None:
            f = self.fit
            out["fit"] = {
                "fits": self.fits,
                "engine": (self.verdict if self.serving is None else self.serving).as_dict(),
                "floor": "weights + KV only, under --memory-fraction and --reserve",
                "floor_fits": f.fits,
                "usable_bytes_per_device": f.usable_bytes,
                "weight_bytes_per_device": f.weight_bytes,
                # none negative: weights over the memory are a named shortfall
                "free_for_kv_bytes_per_device": max(0, f.free_for_kv_bytes),
                "kv_cache_shortfall_bytes_per_device": max(0, -f.free_for_kv_bytes),
                "max_batch": f.max_batch,
                "max_seq_len": f.max_seq_len,
                "max_seq_len_unbounded": f.max_seq_len_unbounded,
                "min_tp_that_fits": self.min_tp_that_fits,
            }
        out["latency"] = self.latency.as_dict() if self.latency is not None else None
        out["allreduce"] = None
        if self.allreduce is not None:
            step_s = self.roofline.time_s if self.roofline is not None else 0.0
            out["allreduce"] = {**self.allreduce.as_dict(),
                                "step_time_with_allreduce_s": step_s + self.allreduce.time_s,
                                "dominates": self.allreduce.time_s > step_s}
        source = weights_source(self)
        if source is not None:  # a model folder or Hub id (presets keep their JSON as it was)
            out["weights_source"] = source
        out["notes"] = list(self.notes())
        return out

    def as_row(self) -> dict:
        """One flat row: the columns `kvcalc sweep` writes (exact ints for bytes), read
        from the figures this estimate holds. The sweep computes the same columns with
        row_columns() on whole arrays (tests/test_sweep.py holds them equal)."""
        s, c, d = self.spec, self.cache, self.decode
        a = s.attention_shape
        row = {
            "model": s.name,
            "attention": s.attention_kind,
            "layers": s.layers,
            "heads": a and a.heads,
            "kv_heads": a and a.kv_heads,
            "head_dim": a and a.head_dim,
            "seq_len": self.seq_len,
            "batch": self.batch,
            "kv_dtype": self.kv_dtype.name,
            "weight_dtype": self.weight_label,
            "tp": self.tp,
            "kv_bytes_per_token": c.bytes_per_token,
            "kv_cache_bytes": c.bytes,
            "kv_cache_bytes_full": c.bytes_full,
            "kv_cache_bytes_per_device": c.bytes_per_device,
            "params_total": self.params.total,
            "params_attention": self.params.attention,
            "weight_bytes": self.weight_bytes,
            "decode_flops": d.flops,
            "decode_bytes": d.bytes,
            "arithmetic_intensity": d.arithmetic_intensity,
            "attention_arithmetic_intensity": d.attention_intensity,
        }
        if self.hardware is not None:
            r, f = self.roofline, self.fit
            row.update({
                "gpu": self.hardware.name,
                "roofline_s": r.time_s,
                "roofline_bound": r.bound,
                "tokens_per_s": r.tokens_per_s,
                "free_for_kv_bytes_per_device": f.free_for_kv_bytes,
                "fits": self.fits,
                "floor_fits": f.fits,
            })
            if self.latency is not None and self.latency.engine_name:
                row.update({"engine": self.latency.engine_name, "tpot_s": self.latency.tpot_s})
        return row

    def notes(self) -> tuple[str, ...]:
        out = list(self.decode.notes)
        s = self.spec
        if s.extra.get("approximate"):
            out.append(f"approximate: {s.extra['approximate']}")
        if s.sliding_layers or s.layers_of("chunked"):
            out.append("windowed layers hold min(seq_len, window) tokens; kv_cache_bytes_full is "
                       "the figure without the windows")
        windows = {getattr(layer.mixer, "window", 0) for layer, _ in s.groups()} - {0}
        for w in sorted(windows):
            if s.max_context and w >= s.max_context:
                out.append(f"a {w:,}-token window is not shorter than the model's max context "
                           f"({s.max_context:,}): those layers keep every token a request can "
                           "have, as full attention would")
        if self.cache.state_bytes_per_sequence:
            out.append(f"state layers hold {self.cache.state_bytes_per_sequence:,} B per sequence "
                       f"whatever its length (recurrent state {self.cache.state_dtype}, "
                       f"convolution state {self.kv_dtype.name})")
        if s.mla is not None:
            out.append("MLA caches one latent of kv_lora_rank + qk_rope_head_dim per token per "
                       "layer, replicated on every TP device")
        if s.mla is None and self.tp > 1 and self.cache.bytes_all_devices > self.cache.bytes:
            out.append(f"tp={self.tp} > kv_heads: K/V heads are replicated, so the devices "
                       f"together hold {self.cache.bytes_all_devices / self.cache.bytes:.3g}x the cache")
        if s.max_context and self.seq_len > s.max_context:
            out.append(f"seq_len {self.seq_len:,} exceeds the model's max context {s.max_context:,}")
        if (self.fit is not None and s.max_context and self.fit.max_seq_len > s.max_context
                and not self.fit.max_seq_len_unbounded):
            out.append(f"memory allows {self.fit.max_seq_len:,} tokens at batch {self.batch}, "
                       f"beyond the model's max context {s.max_context:,}")
        if self.fit is not None and self.fit.max_seq_len_unbounded:
            limit = (f"the model's max context, {s.max_context:,} tokens, does" if s.max_context
                     else "the model's max context is not known")
            what = ("no attention, only a constant state" if s.attention_free else
                    "every layer's cache stops growing (windows, chunks or constant state)")
            out.append(f"{what}: memory does not bound the context; {limit}")
        if self.scale_bytes and self.kv_dtype.bits >= 16:
            out.append(f"--kv-scale-bytes {self.scale_bytes} with an unquantized {self.kv_dtype.name} "
                       f"cache: scales are usually kept for int8/fp8/int4 caches only")
        a, r = self.allreduce, self.roofline
        if a is not None and a.count and r is not None:
            from kvcalc.ground.units import human_seconds as _seconds

            share = a.time_s / (a.time_s + r.time_s)
            out.append(f"tp={self.tp}: {a.count} all-reduces of {a.message_bytes:,} B per step over "
                       f"{a.interconnect or 'the interconnect'} take "
                       + (f"{_seconds(a.time_s)} ({a.count} x {_seconds(a.latency_s)} latency "
                          f"+ {_seconds(a.bandwidth_s)} of bandwidth)" if a.latency_s else
                          f">= {_seconds(a.time_s)} (bandwidth only: the preset has no latency "
                          "figure)")
                       + f", {share:.0%} of the step with them"
                       + ("; the all-reduce dominates" if a.time_s > r.time_s else ""))
        return tuple(out)


def effective_context(spec: ModelSpec, seq_len: int) -> int:
    """The context an attention layer attends over, averaged over attention layers
    (windows and chunks applied): Shazeer's n for a model whose layers differ."""
    tokens = layers = 0
    for layer, n in spec.groups():
        if layer.mixer.attends:
            tokens += n * layer.mixer.tokens_read(seq_len)
            layers += n
    return tokens // layers if layers else 0


def shazeer_ratios(spec: ModelSpec, batch: int, seq_len: int) -> tuple:
    """(incremental, batched, {label: (incremental, batched)}) Shazeer ratios from the
    attention layers' own heads: the first two for `spec.attention` (the kind most layers
    have) at the layer-average context; the per-kind ones, each at its own context, only
    where the layers' heads differ. (None, None, {}) for MLA or without attention."""
    from kvcalc.layers import head_shape

    a = spec.attention
    if spec.mla is not None or a is None:
        return None, None, {}

    def ratios(shape, n_eff):
        return (shazeer_ratio("incremental", batch, n_eff, spec.d_model, shape.heads,
                              shape.kv_heads, shape.head_dim, shape.v_head_dim),
                shazeer_ratio("batched", batch, seq_len, spec.d_model, shape.heads,
                              shape.kv_heads, shape.head_dim, shape.v_head_dim))

    # n is the context each layer attends over: with sliding windows, the layer-average
    # of min(seq_len, window), as the cache and decode bytes use.
    incremental, batched = ratios(head_shape(a), max(1, effective_context(spec, seq_len)))
    kinds = spec.attention_layers()
    by_kind: dict = {}
    if len({head_shape(mx) for mx, _ in kinds}) > 1:
        seen = set()  # a kind that reads another's K/V (Gemma's shared layers) adds nothing
        for mx, _ in kinds:
            key = (head_shape(mx), max(1, mx.tokens_read(seq_len)))
            if key not in seen:
                seen.add(key)
                by_kind[mx.label] = ratios(*key)
    return incremental, batched, by_kind


def layer_pattern(spec: ModelSpec) -> list[dict]:
    """The decoder as runs of alike layers, in order (JSON `layers`)."""
    out = []
    for r in spec.runs:
        mx, mlp = r.layer.mixer, r.layer.mlp
        row = {"count": r.count, "kind": mx.label, "cache": mx.cache_kind,
               "mlp": None if mlp is None else mlp.kind}
        if hasattr(mx, "kv_heads"):
            row["kv_heads"] = mx.kv_heads
        if not r.layer.owns_weights:  # a looped model's pass over an earlier layer's weights
            row["owns_weights"] = False
        if r.layer.beside is not None:  # a parallel hybrid's second mixer
            row["beside"] = {"kind": r.layer.beside.label, "cache": r.layer.beside.cache_kind}
        out.append(row)
    return out


def _shazeer_dict(r: ShazeerRatio) -> dict:
    return {"mode": r.mode, "n": r.n, "ratio": r.ratio, "terms": r.terms,
            "dominant_term": r.dominant_term}


def check_encoder_len(spec: ModelSpec, encoder_seq_len: int | None) -> None:
    """An encoder length is refused for a model that keeps no encoder's K/V."""
    if encoder_seq_len is not None and not spec.cross_attends:
        raise ParameterError("{encoder_seq_len} applies to models that cross-attend to an "
                             "encoder's tokens (encoder-decoder, Mllama, MusicGen); "
                             + literal(spec.name) + " has no cross-attention", "encoder_seq_len")


def workload_for(spec: ModelSpec, *, seq_len: int, batch: int = 1,
                 kv_dtype: DType | str = "bf16", weight_dtype: DType | str | None = None,
                 tp: int = 1, scale_bytes: int = 0, encoder_seq_len: int | None = None,
                 prompt_len: int | None = None, group_size: int | None = None) -> Workload:
    """The Workload for `spec` from the values a user gives (dtype names or DTypes),
    checked here in this order (the first error is the one reported); the lengths and tp
    are checked by the formulas, the first time the cache is computed.

    Weights: `weight_dtype` None reads them as the model's config stores them (its
    quantization_config, else bf16); a dtype quantizes every matrix to it, with scales
    per `group_size` for the quantized ones (int4, int8, fp8, mxfp4, nvfp4)."""
    check_encoder_len(spec, encoder_seq_len)
    if scale_bytes < 0:  # 0 (no scales) is the default
        raise KvcalcError(f"kv_scale_bytes must be >= 0, got {scale_bytes}")
    check_size("kv_scale_bytes", scale_bytes, 64) if scale_bytes else None
    kdt = kv_dtype if isinstance(kv_dtype, DType) else _dtype(kv_dtype)
    quantization = weights_as(spec, weight_dtype, group_size)
    wdt = _dtype("bf16") if weight_dtype is None else (
        weight_dtype if isinstance(weight_dtype, DType) else _weight_dtype(weight_dtype))
    return Workload(seq_len=seq_len, batch=batch, kv_dtype=kdt, weight_dtype=wdt, tp=tp,
                    kv_scale_bytes=scale_bytes, encoder_seq_len=encoder_seq_len,
                    prompt_len=prompt_len, quantization=quantization)


def estimate(spec: ModelSpec, workload: Workload, *, memory: Memory | None = None,
             mfu: float | str = DEFAULT_MFU,
             bandwidth_efficiency: float | str = DEFAULT_BANDWIDTH_EFFICIENCY,
             engine=None, serving: dict | None = None,
             memory_engine=None) -> Estimate:
    """Every analytical figure for one configuration, each computed once. With `memory`
    (a device): the roofline, the floor fit, the verdict (vLLM's count for `batch`
    requests of seq_len tokens with the engine's defaults, `serving` overriding them by
    EngineSettings' names), the smallest tp it serves them at, and the latency (TTFT for
    the batch's prompts, TPOT at seq_len) at the stated MFU and bandwidth efficiency.
    """
    w = workload
    stored = stored_weights(spec, w.quantization, w.tp)
    cache = kv_cache(spec, w.seq_len, w.batch, w.kv_dtype, w.tp, w.kv_scale_bytes,
                     w.encoder_seq_len)
    params = param_counts(spec)
    compute_dtype = roofline.compute_dtype_for(w.weight_dtype)
    decode = decode_step(spec, w.seq_len, w.batch, w.weight_dtype, w.kv_dtype, compute_dtype,
                         w.tp, w.kv_scale_bytes, w.encoder_seq_len, stored=stored)
    shazeer, batched, by_kind = shazeer_ratios(spec, w.batch, w.seq_len)
    if memory is None:
        return Estimate(spec=spec, workload=w, cache=cache, params=params, decode=decode,
                        shazeer=shazeer, shazeer_batched=batched, stored=stored,
                        shazeer_by_kind=by_kind)
    hardware = memory.hardware
    roof = roofline.decode_roofline(decode, hardware, compute_dtype)
    fit = plain_fit(spec, w, memory=memory, stored=stored)
    settings = settings_for(w, **(serving or {}))
    verdict = engine_verdict(spec, hardware, settings, batch=w.batch,
                             kv_scale_bytes=w.kv_scale_bytes, with_fixes=True)
    smallest = verdict if verdict.serves and settings.tp == 1 else smallest_tp(
        spec, hardware, settings, batch=w.batch, kv_scale_bytes=w.kv_scale_bytes)
    min_tp = None if smallest is None else smallest.settings.tp
    counted = None
    if memory_engine is not None and memory_engine.name != "vllm":
        counted, min_tp = _engine_count(spec, hardware, settings, memory_engine, w)
    lat = latency(spec, w, hardware=hardware, mfu=mfu,
                  bandwidth_efficiency=bandwidth_efficiency, stored=stored, step=decode,
                  cache=cache, params=params, engine=engine)
    comm = None
    if w.tp > 1 and hardware.interconnect_bandwidth_bytes_per_s:
        from kvcalc.speed.comm import decode_allreduce

        comm = decode_allreduce(spec, w.batch, w.tp,
                                roofline.exchanged_dtype_for(w.weight_dtype),
                                hardware.interconnect_bandwidth_bytes_per_s,
                                hardware.interconnect, hardware.allreduce_latency_s)
    return Estimate(spec=spec, workload=w, cache=cache, params=params, decode=decode,
                    shazeer=shazeer, shazeer_batched=batched, stored=stored, memory=memory,
                    roofline=roof, fit=fit, verdict=verdict, min_tp_that_fits=min_tp, latency=lat,
                    allreduce=comm, serving=counted, shazeer_by_kind=by_kind)


def _engine_count(spec: ModelSpec, hardware: Hardware, settings, ref, w: Workload):
    """(the engine's count at the workload's tp, the smallest valid tp it serves the
    batch at, or None) for a memory engine other than vLLM (kvcalc.serving)."""
    from dataclasses import replace as _replace

    from kvcalc.formulas.cache import valid_tps
    from kvcalc.serving import count
    from kvcalc.serving.flags import engine_flags

    def at(tp: int):
        return count(spec, hardware, engine_flags(ref, _replace(settings, tp=tp),
                                                  kv_scale_bytes=w.kv_scale_bytes))

    counted = at(settings.tp)
    if counted.serves(w.batch):
        return counted, settings.tp if settings.tp == 1 else next(
            (tp for tp in valid_tps(spec) if tp < settings.tp and at(tp).serves(w.batch)),
            settings.tp)
    return counted, next((tp for tp in valid_tps(spec) if tp > settings.tp
                          and at(tp).serves(w.batch)), None)


def approximate_fields(spec: ModelSpec) -> dict:
    """{"approximate": True, "approximate_reason": ...} for a model read without its
    family's reader (kvcalc.hfconfig.fallback); {} otherwise, so other JSON is as it was."""
    reason = spec.extra.get("approximate")
    return {"approximate": True, "approximate_reason": reason} if reason else {}


def weights_source(est: Estimate) -> str | None:
    """Where the weights' bytes come from, for a model read from a folder or the Hub
    (None for presets and config files, whose weights come from the config alone)."""
    if "checkpoint" not in est.spec.extra:
        return None
    if est.stored is not None and est.stored.source:
        return est.stored.source
    stored = est.workload.quantization
    if not isinstance(stored, AsStored):
        return f"--weight-dtype {est.stored.label if est.stored else est.weight_dtype.name}"
    what = stored.quantization.label if stored.quantization is not None else "bf16"
    if stored.checkpoint is None:
        return f"config.json ({what}): no safetensors files to read headers from"
    return f"config.json ({what}): the checkpoint's headers describe another shape"


def default_gqa_kv_heads(heads: int) -> int:
    """The GQA variant shown by --compare when the model has none: 8 groups
    (Ainslie et al. 2023 use 8 for T5-XXL) if heads allows, else the divisor of
    heads nearest heads/4."""
    if heads % 8 == 0 and 1 < 8 < heads:
        return 8
    divisors = [g for g in range(2, heads) if heads % g == 0]
    if not divisors:
        raise KvcalcError(f"{heads} heads have no GQA grouping between MQA and MHA")
    return min(divisors, key=lambda g: abs(g - heads / 4))


def attention_variants(spec: ModelSpec, kv_heads: int | None = None) -> list[ModelSpec]:
    """MHA, GQA and MQA of the same model (same query heads, head_dim and MLP)."""
    if spec.attention_free:
        raise ParameterError(literal(f"{spec.name} has no attention ({spec.state_mixers} "
                                     "layers only); ") + "{compare} needs MHA/GQA/MQA attention",
                             "compare")
    if spec.mla is not None:
        raise ParameterError(literal(spec.name) + " uses MLA; {compare} needs MHA/GQA/MQA "
                             "attention", "compare")
    heads = spec.attention_shape.heads
    g = kv_heads or spec.attention_shape.kv_heads
    if g in (1, heads):
        # No grouping between 1 and heads (a prime count, like Falcon-7B's 71): MHA vs MQA.
        g = default_gqa_kv_heads(heads) if any(heads % k == 0 for k in range(2, heads)) else 1
    out = []
    for kv in (heads, g, 1):
        if kv not in [v.attention_shape.kv_heads for v in out]:
            out.append(spec.with_kv_heads(kv))
    return out
