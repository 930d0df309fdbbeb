"""`kvcalc fit` as a library function: `kvcalc.fit(model=..., gpu=..., ...)` returns a
FitAnswer whose `as_dict()` is `kvcalc fit --format json`, exactly (tests/test_answers.py
holds them equal on the golden cases).

vLLM's own start-up count decides (kvcalc.serving.vllm): driver-visible memory x
gpu_memory_utilization, less weights, the profiling pass's activation peak, non-torch
memory and CUDA graphs; then KV blocks, "KV cache tokens" and the concurrency at
max_model_len. Without engine parameters it is the plain fit: `batch` requests of
`seq_len` tokens, with the floor (weights + KV only) beside the count. engine="sglang" or
"tensorrt-llm" counts that engine's start-up instead, with its own flags by name.
"""

from __future__ import annotations

import os
from dataclasses import field, replace

from kvcalc.errors import ParameterError, literal
from kvcalc.ground.record import record

AUTO = "auto"  # max_model_len: the longest that fits, as vLLM's auto-fit finds it
DEFAULT_SEQ_LEN = 4096  # tokens, when the model states no max context
PLAIN_FIT_LEAVES_OUT = (
    "floor_fits (weights + KV only) leaves out the serving engine's activation peak, "
    "non-torch memory (CUDA context, NCCL), CUDA graphs, driver-visible rather than nominal "
    "memory and block rounding; fits is the engine's own count")


@record
class FitAnswer:
    """What `kvcalc fit` answers: `as_dict()` is its JSON; the rest is what its tables
    draw. `fits`: the engine starts and serves the requests (and a host tier asked for
    is kept)."""

    estimate: object  # kvcalc.estimate.Estimate, its verdict vLLM's count
    max_batch_for_slo: int | None  # the largest batch meeting ttft_ms / tpot_ms
    speculative: object | None  # kvcalc.serving.speculative_time's record at batch 1
    speculative_timed_on: str | None
    host_tier: object | None  # kvcalc.serving.offload's host tier (kv_offloading_size)
    engine_parameters: bool  # engine parameters given: the count is per max_model_len
    data: dict = field(hash=False, repr=False)
    count: object | None = None  # another engine's count (kvcalc.serving), None for vLLM's

    @property
    def fits(self) -> bool:
        return bool(self.data["fits"])

    def as_dict(self) -> dict:
        import copy

        return copy.deepcopy(self.data)


def fit(*, model, gpu="h100-sxm", seq_len: int | None = None, batch: int | None = None,
        kv_dtype="bf16", weight_dtype=None, group_size: int | None = None, tp: int = 1,
        pp: int | None = None, max_model_len: int | str | None = None,
        kv_cache_memory_bytes: int | None = None,
        gpu_memory_utilization: float | str | None = None, block_size: int | None = None,
        max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
        enforce_eager: bool = False, vllm_version: str | None = None, calibration=None,
        ttft_ms: float | None = None, tpot_ms: float | None = None,
        prompt_len: int | None = None, mfu: float | str | None = None,
        bandwidth_efficiency: float | str | None = None, engine: str | None = None,
        kv_scale_bytes: int = 0, encoder_seq_len: int | None = None,
        memory_fraction: float | str | None = None, reserve_bytes: int | None = None,
        speculative_config: str | None = None, acceptance_rate: float | None = None,
        enable_lora: bool = False, max_loras: int | None = None,
        max_lora_rank: int | None = None, lora_dtype: str | None = None,
        lora_target_modules: str | None = None, data_parallel_size: int | None = None,
        enable_expert_parallel: bool = False, enable_prefix_caching: bool | None = None,
        kv_offloading_size: str | float | None = None,
        kv_offloading_backend: str | None = None, limit_mm_per_prompt: str | None = None,
        mm_encoder_tp_mode: str | None = None, **engine_flags) -> FitAnswer:
    """Does it fit? vLLM's start-up count decides, the floor (weights + KV) beside it.

    `model`: a ModelSpec or MODEL (a preset, Hub id, folder or config file); `gpu`: a
    Hardware, a hardware preset or a hardware YAML file. Lengths are in tokens
    (`seq_len`, `max_model_len`: a number or "auto", `prompt_len`, `encoder_seq_len`),
    memory in bytes (`kv_cache_memory_bytes`, `reserve_bytes`, `kv_scale_bytes`; but
    `kv_offloading_size` in GiB over all ranks, as vLLM takes it), latency targets in
    milliseconds (`ttft_ms`, `tpot_ms`), shares in (0, 1] (`gpu_memory_utilization`,
    `memory_fraction`, `mfu`, `bandwidth_efficiency`, `acceptance_rate`). The plain fit
    (`batch` requests of `seq_len` tokens; `memory_fraction`, `reserve_bytes`) and the
    engine parameters (max_model_len, gpu_memory_utilization, pp, block_size, ...: vLLM's
    own, by their vLLM names) exclude each other. `engine`: whose time ttft_ms and tpot_ms
    are counted on (vllm@0.21.0, llama.cpp, roofline; default vLLM on a GPU); vLLM's
    release counted is `vllm_version` (or engine's). `calibration`: a file `kvcalc check
    LOG -o FILE` wrote, its measured terms in place of kvcalc's models.

    engine="sglang[@release]" or "tensorrt-llm[@release]" counts that engine's start-up
    instead (`engine_flags`: its own flags by their parameter names, as
    kvcalc.serving.flags lists them: mem_fraction_static, context_length and max_seq_len
    in tokens, max_running_requests, max_batch_size, hicache_size in GB, ...).
    """
    parameters = dict(locals())  # each parameter by its name, for another engine's count
    from kvcalc.answers import speed

    hardware = _hardware(gpu)
    other = speed.memory_engine(engine)
    multimodal = {k: v for k, v in (("limit_mm_per_prompt", limit_mm_per_prompt),
                                    ("mm_encoder_tp_mode", mm_encoder_tp_mode)) if v is not None}
    _check_flags(other.name if other is not None else "vllm", {**engine_flags, **multimodal})
    if other is not None and other.name != "vllm":
        return _other_engine(other, {**parameters, "gpu": hardware})
    vllm_version, speed_engine = _whose(engine, vllm_version, mfu, bandwidth_efficiency)
    mfu, bandwidth_efficiency = speed.shares(mfu, bandwidth_efficiency)
    given = {"max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
             "pp": pp, "block_size": block_size, "max_num_batched_tokens": max_num_batched_tokens,
             "max_num_seqs": max_num_seqs, "vllm_version": vllm_version,
             "enforce_eager": enforce_eager or None, "calibration": calibration,
             "kv_cache_memory_bytes": kv_cache_memory_bytes,
             "speculative_config": speculative_config, "enable_lora": enable_lora or None,
             "data_parallel_size": data_parallel_size,
             "enable_expert_parallel": enable_expert_parallel or None,
             "limit_mm_per_prompt": limit_mm_per_prompt,
             "mm_encoder_tp_mode": mm_encoder_tp_mode}
    engine_parameters = any(v is not None for v in given.values())
    _check_plain(engine_parameters, batch, memory_fraction, reserve_bytes)
    length = _length(max_model_len)
    learnt = None
    if calibration is not None:
        from kvcalc.serving.vllm.calibration import read_calibration

        learnt = read_calibration(calibration)
        if learnt.visible_memory_bytes:
            hardware = replace(hardware, visible_memory_bytes=learnt.visible_memory_bytes)
    serving = _serving(
        pp=pp, utilization=gpu_memory_utilization, block_size=block_size,
        batched=max_num_batched_tokens, seqs=max_num_seqs, enforce_eager=enforce_eager,
        vllm_version=vllm_version, kv_cache_memory_bytes=kv_cache_memory_bytes,
        learnt=learnt, dp=data_parallel_size, expert_parallel=enable_expert_parallel or None)
    extra = {"speculative_config": speculative_config, "enable_lora": enable_lora or None,
             "max_lora_rank": max_lora_rank, "lora_target_modules": lora_target_modules,
             "max_loras": max_loras, "lora_dtype": lora_dtype,
             "prefix_caching": enable_prefix_caching,  # a hybrid's state cache follows it
             "limit_mm_per_prompt": limit_mm_per_prompt,
             "mm_encoder_tp_mode": mm_encoder_tp_mode}
    serving.update({k: v for k, v in extra.items() if v is not None})
    est = _counted(length, serving, model=model, seq_len=seq_len, batch=batch or 1,
                   kv_dtype=kv_dtype, weight_dtype=weight_dtype, tp=tp, hardware=hardware,
                   kv_scale_bytes=kv_scale_bytes, encoder_seq_len=encoder_seq_len,
                   memory_fraction=memory_fraction, reserve_bytes=reserve_bytes,
                   prompt_len=prompt_len, group_size=group_size, mfu=mfu,
                   bandwidth_efficiency=bandwidth_efficiency,
                   engine=speed.resolve(speed_engine, hardware))
    if ttft_ms is None and tpot_ms is None:
        _check_counted(engine, est)
    if learnt is not None:
        est = _calibrated(est, learnt, calibration)
    return _answer(est, engine_parameters, ttft_ms=ttft_ms, tpot_ms=tpot_ms, mfu=mfu,
                   bandwidth_efficiency=bandwidth_efficiency,
                   speed_engine=speed.resolve(speed_engine, est.hardware),
                   acceptance_rate=acceptance_rate,
                   side={"kv_offloading_size": kv_offloading_size,
                         "kv_offloading_backend": kv_offloading_backend,
                         "enable_prefix_caching": enable_prefix_caching})


def _check_counted(engine, est) -> None:
    """An engine kvcalc only times (llama.cpp, ...) has no memory count: without latency
    targets it answers nothing here."""
    from kvcalc.answers import speed

    if engine is not None and engine.strip() != "roofline" and speed.memory_engine(engine) is None:
        from kvcalc.serving import MEMORY_ENGINES

        raise ParameterError(
            "kvcalc counts the memory of " + literal(", ".join(MEMORY_ENGINES)) + "; {engine} "
            + literal(est.latency.engine_name or engine) + " only times the batch {ttft_ms} "
            "and {tpot_ms} allow: give one of them", "engine", "ttft_ms", "tpot_ms")


def _whose(engine, vllm_version, mfu, bandwidth_efficiency) -> tuple:
    """(the vLLM release counted, the engine that times the tokens): engine vllm@0.21.0
    names the release; another memory engine is the command line's `fit --engine`."""
    from kvcalc.answers import speed

    ref = speed.memory_engine(engine)
    if ref is not None and ref.named:
        if vllm_version is not None and vllm_version != ref.release:
            raise ParameterError("{engine} " + literal(engine) + " and {vllm_version} "
                                 + literal(vllm_version) + " name two releases: give one",
                                 "engine", "vllm_version")
        vllm_version = ref.release
    return vllm_version, speed.engine_option(engine, mfu, bandwidth_efficiency, speed.DEFAULT)


def _counted(length, serving: dict, *, seq_len, **args):
    """The estimate with vLLM's count at max_model_len `length` (AUTO: vLLM's auto-fit,
    counted at the model's context first); the floor beside it at the length asked."""
    if length is not None and length != AUTO:
        serving["max_model_len"] = length
        if seq_len is None:
            seq_len = length
    est = _estimate(**args, seq_len=seq_len, serving=serving)
    if length == AUTO:
        from kvcalc.serving.vllm.verdict import auto_max_model_len

        fitted = auto_max_model_len(est.spec, est.hardware, est.verdict.settings,
                                    kv_scale_bytes=est.workload.kv_scale_bytes)
        if fitted:
            args["model"] = est.spec
            est = _estimate(**args, seq_len=seq_len or fitted,
                            serving={**serving, "max_model_len": fitted})
    return est


def _check_flags(engine: str, engine_flags: dict) -> None:
    """Each engine flag is a known one (kvcalc.serving.flags) and the counted engine's."""
    from kvcalc.serving.flags import OWNER, check_owners

    unknown = sorted(set(engine_flags) - set(OWNER))
    if unknown:
        raise TypeError(f"fit() got an unexpected keyword argument {unknown[0]!r}")
    check_owners(engine, engine_flags)


def _other_engine(ref, p: dict) -> FitAnswer:
    """engine sglang or tensorrt-llm: that engine's own start-up count (kvcalc.serving),
    the floor beside it."""
    from kvcalc.answers import speed
    from kvcalc.estimate import approximate_fields, weights_source
    from kvcalc.serving import count
    from kvcalc.serving.drafts import draft_of
    from kvcalc.serving.flags import check_types, engine_flags
    from kvcalc.serving.offload import host_tier
    from kvcalc.serving.vllm.settings import settings_for

    if p["memory_fraction"] is not None or p["reserve_bytes"] is not None:
        raise ParameterError("{memory_fraction} and {reserve_bytes} shape the plain fit; "
                             + literal(ref.title) + " counts its own terms",
                             "memory_fraction", "reserve_bytes")
    if p["batch"] is not None:
        raise ParameterError("{batch} sizes the plain fit; " + literal(ref.title) + " serves "
                             "up to its running-request limit at once", "batch")
    shared = {"enable_lora": p["enable_lora"] or None,
              **{k: p[k] for k in ("max_lora_rank", "lora_target_modules",
                                   "enable_prefix_caching", "kv_offloading_size",
                                   "kv_offloading_backend")}}
    given = {**p["engine_flags"], **{k: v for k, v in shared.items() if v is not None}}
    check_types(ref.name, given)
    speed_engine = speed.engine_option(p["engine"], p["mfu"], p["bandwidth_efficiency"],
                                       speed.DEFAULT)
    mfu, bandwidth_efficiency = speed.shares(p["mfu"], p["bandwidth_efficiency"])
    length = given.get("context_length") or given.get("max_seq_len")
    est = _estimate(**{k: p[k] for k in ("model", "kv_dtype", "weight_dtype", "tp",
                                         "kv_scale_bytes", "encoder_seq_len", "prompt_len",
                                         "group_size")},
                    seq_len=p["seq_len"] if p["seq_len"] is not None else length, batch=1,
                    hardware=p["gpu"], memory_fraction=None, reserve_bytes=None, mfu=mfu,
                    bandwidth_efficiency=bandwidth_efficiency,
                    engine=speed.resolve(speed_engine, p["gpu"]), serving=None)
    flags = engine_flags(ref, settings_for(est.workload),
                         kv_scale_bytes=est.workload.kv_scale_bytes, pp=p["pp"], **given)
    counted = count(est.spec, est.hardware, flags)
    tier = host_tier(counted, given, mla=est.spec.mla is not None) if counted.starts else None
    limit = counted.max_running_requests
    if counted.max_concurrency is not None and limit is not None:
        limit = min(limit, max(int(counted.max_concurrency), 0))
    timing = speed.resolve(speed_engine, est.hardware)
    slo = max_batch_for_slo(est, ttft_ms=p["ttft_ms"], tpot_ms=p["tpot_ms"], mfu=mfu,
                            bandwidth_efficiency=bandwidth_efficiency, speed_engine=timing,
                            seq_len=counted.context_len,
                            limit=limit or 0) if counted.starts else None
    source = weights_source(est)
    data = {"model": est.spec.name, **approximate_fields(est.spec), **counted.as_dict(),
            "kv_dtype": est.kv_dtype.name, "weight_dtype": est.weight_label,
            "fits": counted.starts, "floor_fits": est.fit.fits,
            **({"weights_source": source} if source is not None else {}),
            **slo_fields(est, slo)}
    timed = speculative_time(est, draft_of(est.spec, flags), p["acceptance_rate"], timing, mfu,
                             bandwidth_efficiency)
    if timed is not None:
        data["speculative_time"] = {**timed[0].as_dict(), "timed_on": timed[1]}
    if tier is not None:
        data["host_tier"] = tier.as_dict()
        data["fits"] = data["fits"] and not tier.refusal
    return FitAnswer(estimate=est, max_batch_for_slo=slo, speculative=timed and timed[0],
                     speculative_timed_on=timed and timed[1], host_tier=tier,
                     engine_parameters=True, data=data, count=counted)


def _check_plain(engine_parameters: bool, batch, memory_fraction, reserve_bytes) -> None:
    """The plain fit's shapes and the engine's parameters exclude each other."""
    if not engine_parameters:
        return
    if memory_fraction is not None or reserve_bytes is not None:
        raise ParameterError("{memory_fraction} and {reserve_bytes} shape the plain fit; with "
                             "engine parameters use {gpu_memory_utilization} (the engine "
                             "subtracts activations, non-torch memory and CUDA graphs itself)",
                             "memory_fraction", "reserve_bytes", "gpu_memory_utilization")
    if batch is not None:
        raise ParameterError("{batch} sizes the plain fit; the engine count is per "
                             "{max_model_len} request and serves up to {max_num_seqs} at once: "
                             "give {max_num_seqs}, or drop the engine parameters",
                             "batch", "max_model_len", "max_num_seqs")


def _length(value) -> int | str | None:
    """max_model_len: tokens (a whole number), or AUTO ("auto", or -1 as vLLM spells it)."""
    from kvcalc.serving.vllm.verdict import AUTO as VLLM_AUTO, check_length

    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() == AUTO:
            return AUTO
        raise ParameterError("{max_model_len} is a number of tokens or 'auto', got "
                             + literal(repr(value)), "max_model_len")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError("{max_model_len} is a whole number of tokens or 'auto', got "
                             + literal(repr(value)), "max_model_len")
    check_length(value)
    return AUTO if value == VLLM_AUTO else value


def _hardware(gpu):
    """A Hardware: itself, a hardware preset's name, or a hardware YAML file."""
    if not isinstance(gpu, str):
        if gpu is None:
            raise ParameterError("fit needs a device: {gpu} NAME (see `kvcalc presets`)", "gpu")
        return gpu
    if gpu.strip().lower() == "none":
        raise ParameterError("fit needs a device: {gpu} NAME (see `kvcalc presets`)", "gpu")
    from kvcalc.presets import hardware_named

    return hardware_named(gpu)


def _serving(*, pp, utilization, block_size, batched, seqs, enforce_eager, vllm_version,
             kv_cache_memory_bytes, learnt=None, dp=None, expert_parallel=None) -> dict:
    """The engine parameters given, as EngineSettings' names (the rest: the engine's
    defaults), with a calibration file's measured terms (`learnt`) in place of kvcalc's
    models."""
    from kvcalc.serving.releases import DEFAULT_RELEASE
    from kvcalc.serving.vllm import release_settings

    version = vllm_version or (learnt.vllm_version if learnt else DEFAULT_RELEASE["vllm"])
    given = {"gpu_memory_utilization": utilization, "pp": pp, "block_size": block_size,
             "max_num_batched_tokens": batched, "max_num_seqs": seqs,
             "kv_cache_memory_bytes": kv_cache_memory_bytes, "dp": dp,
             "enable_expert_parallel": expert_parallel}
    if learnt is not None:
        given.update({k: getattr(learnt, k) for k in
                      ("weights_bytes", "activation_peak_bytes", "non_torch_bytes",
                       "cuda_graph_bytes", "sampler")})
    out = {k: v for k, v in given.items() if v is not None}
    return {**out, "enforce_eager": enforce_eager, **release_settings(version),
            "allow_long_max_model_len": allows_long_max_model_len()}


def allows_long_max_model_len() -> bool:
    """vLLM's switch VLLM_ALLOW_LONG_MAX_MODEL_LEN (vllm/envs.py): "1" or "true", any case."""
    return os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


def _estimate(*, model, seq_len, batch, kv_dtype, weight_dtype, tp, hardware, kv_scale_bytes,
              encoder_seq_len, memory_fraction, reserve_bytes, prompt_len, group_size, mfu,
              bandwidth_efficiency, engine, serving):
    from kvcalc.estimate import estimate, workload_for
    from kvcalc.workload import Memory

    fraction = 1.0 if memory_fraction is None else memory_fraction
    if not 0 < float(fraction) <= 1:
        raise ParameterError("{memory_fraction} must be in (0, 1], got " + literal(fraction),
                             "memory_fraction")
    spec = _model(model)
    length = seq_len if seq_len is not None else spec.max_context or DEFAULT_SEQ_LEN
    workload = workload_for(spec, seq_len=length, batch=batch, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype, tp=tp, scale_bytes=kv_scale_bytes,
                            encoder_seq_len=encoder_seq_len, prompt_len=prompt_len,
                            group_size=group_size)
    memory = Memory(hardware=hardware, fraction=fraction, reserve_bytes=reserve_bytes or 0)
    return estimate(spec, workload, memory=memory, mfu=mfu,
                    bandwidth_efficiency=bandwidth_efficiency, engine=engine, serving=serving)


def _model(model):
    if isinstance(model, (str, os.PathLike)):
        from kvcalc.model_source import resolve_model

        return resolve_model(model)
    return model


def _calibrated(est, learnt, calibration):
    """The estimate with the calibration's check made and its note in the count: the
    terms are one GPU's, model's and layout's."""
    s = est.verdict.settings
    learnt.check_for(est.spec, est.hardware, str(calibration))
    if not learnt.matches(s.tp, s.pp):
        raise ParameterError(
            "{calibration} " + literal(calibration) + ": learnt at "
            + literal(learnt.layout_words()) + f", not tp={s.tp} pp={s.pp}: its terms are per "
            "device of the layout its log ran (plan {calibration} prices other layouts by "
            "kvcalc's models)", "calibration")
    note = (f"measured terms from {calibration} (vLLM {learnt.vllm_version} on "
            f"{learnt.gpu or 'its GPU'}) in place of kvcalc's models")
    v = est.verdict
    return replace(est, verdict=replace(v, capacity=replace(
        v.capacity, notes=(*v.capacity.notes, note))))


def _answer(est, engine_parameters: bool, *, ttft_ms, tpot_ms, mfu, bandwidth_efficiency,
            speed_engine, acceptance_rate, side) -> FitAnswer:
    """The count made: its JSON, the largest batch for the latency targets, the
    speculative time and the host tier."""
    from kvcalc.estimate import approximate_fields, weights_source
    from kvcalc.serving.offload import vllm_host_tier
    from kvcalc.serving.vllm.capacity import speculative_draft

    v = est.verdict
    cap = v.capacity
    room = cap.max_num_seqs if cap.max_concurrency is None else int(cap.max_concurrency)
    # Requests as the engine takes them: up to max_model_len tokens each, at most as many
    # at once as its blocks and max_num_seqs allow.
    slo = max_batch_for_slo(est, ttft_ms=ttft_ms, tpot_ms=tpot_ms, mfu=mfu,
                            bandwidth_efficiency=bandwidth_efficiency,
                            speed_engine=speed_engine, seq_len=v.settings.max_model_len,
                            limit=min(cap.max_num_seqs, room))
    verdict = {"fits": v.serves, "floor_fits": est.fit.fits,
               "kv_needed_bytes": v.kv_needed_bytes, "shortfall_bytes": v.shortfall_bytes,
               "refusal": v.refusal, "fixes": v.as_dict()["fixes"]}
    if engine_parameters:
        from kvcalc.serving.vllm.verdict import fit_fields

        data = {**fit_fields(est, cap, approximate_fields(est.spec)), **verdict}
    else:
        data = {"model": est.spec.name, **approximate_fields(est.spec),
                "gpu": est.hardware.name, "seq_len": est.seq_len, "batch": est.batch,
                "tp": est.tp, "kv_dtype": est.kv_dtype.name, "weight_dtype": est.weight_label,
                **est.as_dict()["fit"], **verdict, "leaves_out": PLAIN_FIT_LEAVES_OUT}
        source = weights_source(est)
        if source is not None:  # a model folder or Hub id
            data["weights_source"] = source
    data.update(slo_fields(est, slo))
    timed = speculative_time(est, speculative_draft(est.spec, v.settings), acceptance_rate,
                             speed_engine, mfu, bandwidth_efficiency)
    if timed is not None:
        data["speculative_time"] = {**timed[0].as_dict(), "timed_on": timed[1]}
    tier = vllm_host_tier(est, side)
    if tier is not None:
        data["host_tier"] = tier.as_dict()
        data["fits"] = data["fits"] and not tier.refusal
    return FitAnswer(estimate=est, max_batch_for_slo=slo,
                     speculative=timed and timed[0], speculative_timed_on=timed and timed[1],
                     host_tier=tier, engine_parameters=engine_parameters, data=data)


def max_batch_for_slo(est, *, ttft_ms, tpot_ms, mfu, bandwidth_efficiency, seq_len=None,
                      limit=None, speed_engine=None) -> int | None:
    """The largest batch meeting the latency targets (ms): requests of `seq_len` tokens
    (the estimate's by default; prompts of prompt_len, else the whole length), at most
    `limit` of them (what memory holds at that length by default); None without targets."""
    if ttft_ms is None and tpot_ms is None:
        return None
    for name, value in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if value is not None and not value > 0:
            raise ParameterError("{" + name + "} must be a positive number of milliseconds, "
                                 "got " + literal(value), name)
    from kvcalc.speed.latency import max_batch_for_slo as search

    workload = est.workload if seq_len is None else replace(est.workload, seq_len=seq_len)
    return search(est.spec, workload, hardware=est.hardware,
                  ttft_s=None if ttft_ms is None else ttft_ms / 1000,
                  tpot_s=None if tpot_ms is None else tpot_ms / 1000,
                  limit=est.fit.max_batch if limit is None else limit, mfu=mfu,
                  bandwidth_efficiency=bandwidth_efficiency, stored=est.stored,
                  engine=speed_engine)


def slo_fields(est, slo) -> dict:
    """fit's JSON for ttft_ms / tpot_ms: the largest batch, and whose times decided it
    (the engine's fitted terms, vLLM's by default, or the datasheet roofline)."""
    if slo is None:
        return {}
    lat = est.latency
    return {"max_batch_for_slo": slo,
            "slo_timed_on": lat.engine_name if lat is not None and lat.engine_name
            else "roofline"}


def speculative_time(est, draft, acceptance_rate, speed_engine, mfu=None,
                     bandwidth_efficiency=None):
    """Speculative decoding at batch 1 (kvcalc.serving.speculative_time) for the
    estimate's model, dtypes, tp and length: (its record, whose times: an engine's name or
    "roofline"), or None without a draft or without an acceptance rate (given, or the
    method's published one); acceptance_rate without a draft is an error."""
    if acceptance_rate is not None and not 0 <= acceptance_rate <= 1:
        raise ParameterError("{acceptance_rate} must be in [0, 1], got "
                             + literal(acceptance_rate), "acceptance_rate")
    if draft is None:
        if acceptance_rate is not None:
            raise ParameterError("{acceptance_rate} times speculative decoding: give the "
                                 "engine's speculative flag ({speculative_config}, "
                                 "{speculative_algorithm}, {extra_llm_api_options})",
                                 "acceptance_rate", "speculative_config",
                                 "speculative_algorithm", "extra_llm_api_options")
        return None
    from kvcalc.serving.speculative_time import PUBLISHED_ACCEPTANCE
    from kvcalc.serving.speculative_time import speculative_time as timed

    if acceptance_rate is None and draft.method not in PUBLISHED_ACCEPTANCE:
        return None  # the memory alone: no published rate to time it with
    t = timed(est.spec, replace(est.workload, batch=1), draft, hardware=est.hardware,
              acceptance_rate=acceptance_rate, stored=est.stored, engine=speed_engine,
              mfu=mfu, bandwidth_efficiency=bandwidth_efficiency)
    return t, speed_engine.name if speed_engine is not None else "roofline"
