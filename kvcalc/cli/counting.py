"""What the commands share below their parsing: the estimate for a request, and one result
written in the chosen format."""

from __future__ import annotations

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
