"""What `estimate` and `fit` share below their parsing: the estimate for a request, one
result written in the chosen format, and fit's count for an engine other than vLLM
(kvcalc.serving; vLLM's is the library's kvcalc.fit)."""

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


def _engine_fit(request, ref, given, *, fmt, output, force, seq_len, kv_dtype, weight_dtype,
                group_size, tp, pp, gpu, kv_scale_bytes, encoder_seq_len, prompt_len, mfu,
                bandwidth_efficiency, speed_engine, ttft_ms, tpot_ms,
                acceptance_rate=None) -> None:
    """`kvcalc fit --engine sglang|tensorrt-llm`: that engine's own start-up count, the
    floor beside it."""
    from kvcalc.answers.fit import max_batch_for_slo, slo_fields
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
    slo = max_batch_for_slo(est, ttft_ms=ttft_ms, tpot_ms=tpot_ms, mfu=mfu,
                            bandwidth_efficiency=bandwidth_efficiency,
                            speed_engine=speed.resolve(speed_engine, est.hardware),
                            seq_len=counted.context_len,
                            limit=limit or 0) if counted.starts else None
    source = weights_source(est)
    obj = {"model": est.spec.name, **approximate_fields(est.spec), **counted.as_dict(),
           "kv_dtype": est.kv_dtype.name, "weight_dtype": est.weight_label,
           "fits": counted.starts, "floor_fits": est.fit.fits,
           **({"weights_source": source} if source is not None else {}),
           **slo_fields(est, slo)}
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
