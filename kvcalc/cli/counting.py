"""What `estimate` and `fit` share below their parsing: the estimate for a request, one
result written in the chosen format, the largest batch meeting latency targets, and fit's
count for an engine other than vLLM (kvcalc.serving)."""

from __future__ import annotations

import typer

from kvcalc.cli import speed
from kvcalc.cli.options import (ModelRequest, OutputFormat, default_seq_len, device_memory,
                                resolve_gpu)
from kvcalc.errors import KvcalcError


def _estimates(request: ModelRequest, *, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
               kv_scale_bytes, encoder_seq_len, memory_fraction, reserve, prompt_len,
               group_size, compare=False, hardware=None, **options):
    from kvcalc.estimate import attention_variants, estimate as run_estimate, workload_for
    from kvcalc.workload import Memory

    hardware = hardware or resolve_gpu(gpu)
    if "engine" in options:  # none named: the device's default (vLLM on a GPU)
        options["engine"] = speed.resolve(options["engine"], hardware)
    if hardware is None and options.get("engine") is not None:
        raise KvcalcError("--engine times tokens on a device: give --gpu NAME")
    fraction, reserve_bytes = device_memory(hardware, memory_fraction, reserve)
    spec = request.resolve()
    length = default_seq_len(spec, seq_len)
    specs = attention_variants(spec, request.kv_heads) if compare else [spec]
    memory = None if hardware is None else Memory(hardware=hardware, fraction=fraction,
                                                  reserve_bytes=reserve_bytes)
    return [run_estimate(s, workload_for(s, seq_len=length, batch=batch, kv_dtype=kv_dtype,
                                         weight_dtype=weight_dtype, tp=tp,
                                         scale_bytes=kv_scale_bytes,
                                         encoder_seq_len=encoder_seq_len, prompt_len=prompt_len,
                                         group_size=group_size),
                         memory=memory, **options) for s in specs]


def write(fmt: OutputFormat, output, force: bool, obj, rows, items) -> None:
    """One result in the chosen format, to stdout or atomically to `output`.

    Each a function, of which only the chosen format's is called: `obj` gives the JSON,
    `rows` the CSV rows, `items` the paragraphs and tables (Tab) that table and md draw."""
    from kvcalc.report.render import deliver

    kind = fmt.value
    deliver(kind, items() if kind in ("table", "md") else [],
            data=obj() if kind == "json" else None, rows=rows() if kind == "csv" else None,
            output=output, force=force)


def _slo(est, *, ttft_ms, tpot_ms, mfu, bandwidth_efficiency, seq_len=None, limit=None,
         speed_engine=None):
    """The largest batch meeting the latency targets: requests of `seq_len` tokens (the
    estimate's by default; prompts of --prompt-len, else the whole length), at most
    `limit` of them (what memory holds at that length by default)."""
    if ttft_ms is None and tpot_ms is None:
        return None
    for flag, value in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
        if value is not None and not value > 0:
            raise KvcalcError(f"{flag} must be a positive number of milliseconds, got {value}")
    from dataclasses import replace

    from kvcalc.speed.latency import max_batch_for_slo

    workload = est.workload if seq_len is None else replace(est.workload, seq_len=seq_len)
    return max_batch_for_slo(
        est.spec, workload, hardware=est.hardware,
        ttft_s=None if ttft_ms is None else ttft_ms / 1000,
        tpot_s=None if tpot_ms is None else tpot_ms / 1000,
        limit=est.fit.max_batch if limit is None else limit, mfu=mfu,
        bandwidth_efficiency=bandwidth_efficiency, stored=est.stored, engine=speed_engine)


def _engine_fit(request, ref, given, *, fmt, output, force, seq_len, kv_dtype, weight_dtype,
                group_size, tp, pp, gpu, kv_scale_bytes, encoder_seq_len, prompt_len, mfu,
                bandwidth_efficiency, speed_engine, ttft_ms, tpot_ms,
                acceptance_rate=None) -> None:
    """`kvcalc fit --engine sglang|tensorrt-llm`: that engine's own start-up count, the
    floor beside it."""
    from kvcalc.ground import units
    from kvcalc.serving.vllm.settings import settings_for
    from kvcalc.cli import engine_flags as ef
    from kvcalc.estimate import approximate_fields, weights_source
    from kvcalc.report.csv_json import flatten
    from kvcalc.report.serving import serving_table
    from kvcalc.serving import count
    from kvcalc.serving.flags import engine_flags

    for name in ("context_length", "max_seq_len"):
        if given.get(name) is not None:
            given[name] = units.count(given[name], ef.flag_of(name))
    length = given.get("context_length") or given.get("max_seq_len")
    est = _estimates(request, seq_len=seq_len if seq_len is not None else length, batch=1,
                     kv_dtype=kv_dtype, weight_dtype=weight_dtype, tp=tp, gpu=gpu,
                     kv_scale_bytes=kv_scale_bytes, encoder_seq_len=encoder_seq_len,
                     memory_fraction=None, reserve=None, prompt_len=prompt_len,
                     group_size=group_size, mfu=mfu, bandwidth_efficiency=bandwidth_efficiency,
                     engine=speed_engine)[0]
    settings = settings_for(est.workload)
    flags = engine_flags(ref, settings, kv_scale_bytes=est.workload.kv_scale_bytes,
                         pp=pp, **given)
    counted = count(est.spec, est.hardware, flags)
    from kvcalc.serving.offload import host_tier

    tier = host_tier(counted, given, mla=est.spec.mla is not None) if counted.starts else None
    limit = counted.max_running_requests
    if counted.max_concurrency is not None and limit is not None:
        limit = min(limit, max(int(counted.max_concurrency), 0))
    slo = _slo(est, ttft_ms=ttft_ms, tpot_ms=tpot_ms, mfu=mfu,
               bandwidth_efficiency=bandwidth_efficiency,
               speed_engine=speed.resolve(speed_engine, est.hardware),
               seq_len=counted.context_len, limit=limit or 0) if counted.starts else None
    obj = {"model": est.spec.name, **approximate_fields(est.spec), **counted.as_dict(),
           "kv_dtype": est.kv_dtype.name, "weight_dtype": est.weight_label,
           "fits": counted.starts, "floor_fits": est.fit.fits}
    source = weights_source(est)
    if source is not None:
        obj["weights_source"] = source
    obj.update(slo_fields(est, slo))
    from kvcalc.cli.feature_flags import speculative_time_parts
    from kvcalc.serving.drafts import draft_of

    timed, timed_tab = speculative_time_parts(
        est, draft_of(est.spec, flags), acceptance_rate,
        speed.resolve(speed_engine, est.hardware), mfu, bandwidth_efficiency)
    tables = [serving_table(est, counted, slo)]
    if timed is not None:
        obj["speculative_time"] = timed
        tables.append(timed_tab)
    if tier is not None:
        from kvcalc.report.offload import host_tier_table

        obj["host_tier"] = tier.as_dict()
        obj["fits"] = obj["fits"] and not tier.refusal
        tables.append(host_tier_table(tier))
    write(fmt, output, force, lambda: obj, lambda: [flatten(obj)], lambda: tables)
    if not obj["fits"]:
        raise typer.Exit(1)


def slo_fields(est, slo) -> dict:
    """fit's JSON for --ttft-ms / --tpot-ms: the largest batch, and whose times decided it
    (the engine's fitted terms, vLLM's by default, or the datasheet roofline)."""
    if slo is None:
        return {}
    lat = est.latency
    return {"max_batch_for_slo": slo,
            "slo_timed_on": lat.engine_name if lat is not None and lat.engine_name
            else "roofline"}
