"""`kvcalc estimate` and `kvcalc fit`: parse, call kvcalc.estimate, render."""

from typing import Annotated

import typer

from kvcalc.cli.options import (
    DEFAULT_GPU,
    BatchOpt,
    EncoderLenOpt,
    ForceOpt,
    FormatOpt,
    GpuOpt,
    KvDtypeOpt,
    MemFractionOpt,
    ModelRequest,
    OutputFormat,
    OutputOpt,
    ReserveOpt,
    ScaleOpt,
    SeqLenOpt,
    TpOpt,
    WeightDtypeOpt,
    default_seq_len,
    device_memory,
    model_options,
    output_format,
    resolve_gpu,
)
from kvcalc.errors import KvcalcError


def _estimates(request: ModelRequest, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
               kv_scale_bytes, encoder_seq_len, memory_fraction, reserve, compare=False):
    from kvcalc.estimate import attention_variants, estimate as run_estimate

    hardware = resolve_gpu(gpu)
    fraction, reserve_bytes = device_memory(hardware, memory_fraction, reserve)
    spec = request.resolve()
    length = default_seq_len(spec, seq_len)
    specs = attention_variants(spec, request.kv_heads) if compare else [spec]
    return [run_estimate(s, length, batch, kv_dtype, weight_dtype, tp, hardware, kv_scale_bytes,
                         encoder_seq_len, fraction, reserve_bytes) for s in specs]


def write(fmt: OutputFormat, output, force: bool, obj, rows: list[dict], items: list) -> None:
    """One result in the chosen format, to stdout or atomically to `output`.

    `obj` is the JSON, `rows` the CSV rows, `items` the paragraphs and tables (Tab) that
    table and md draw."""
    from kvcalc import report

    if fmt is OutputFormat.table and (output is None or str(output) == "-"):
        report.show(items)
    elif fmt is OutputFormat.table:
        report.emit(report.to_text(items), output, force)
    elif fmt is OutputFormat.md:
        report.emit(report.to_markdown(items), output, force)
    elif fmt is OutputFormat.json:
        report.emit(report.to_json(obj), output, force)
    else:
        report.emit(report.rows_to_csv(rows), output, force)


def _notes(est) -> list[str]:
    from kvcalc import report

    notes = report.estimate_notes(est)
    return ["\n".join(f"note: {n}" for n in notes)] if notes else []


def register(app: typer.Typer) -> None:
    @app.command()
    @model_options
    def estimate(
        request: ModelRequest,
        seq_len: SeqLenOpt = None,
        batch: BatchOpt = 1,
        kv_dtype: KvDtypeOpt = "bf16",
        weight_dtype: WeightDtypeOpt = "bf16",
        tp: TpOpt = 1,
        gpu: GpuOpt = DEFAULT_GPU,
        compare: Annotated[bool, typer.Option(
            "--compare", help="MHA, GQA and MQA of this model side by side.")] = False,
        detail: Annotated[bool, typer.Option(
            "--detail", help="Every breakdown (cache, parameters matrix by matrix, decode bytes "
            "and FLOPs, Shazeer's terms, roofline, fit) instead of the compact table.")] = False,
        kv_scale_bytes: ScaleOpt = 0,
        encoder_seq_len: EncoderLenOpt = None,
        memory_fraction: MemFractionOpt = None,
        reserve: ReserveOpt = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """KV cache, parameters, decode time and what fits, for one model: one line, then a
        compact table (--detail for every breakdown).

        Examples: `kvcalc estimate --preset gpt3`; `kvcalc estimate --preset llama3-70b
        --seq-len 8192 --batch 16 --tp 4 --format json`; `kvcalc estimate --preset
        llama2-7b --compare`; `-o r.md` writes markdown.
        """
        from kvcalc import report

        fmt = output_format(fmt, output)
        ests = _estimates(request, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
                          kv_scale_bytes, encoder_seq_len, memory_fraction, reserve, compare)
        if compare:
            obj = {"variants": [e.as_dict() for e in ests],
                   "reductions_vs_mha": [_reductions(ests[0], e) for e in ests[1:]]}
            rows = [{**e.as_row(), **_reductions(ests[0], e)} for e in ests]
            items = [report.compare_table(ests)]
        else:
            est = ests[0]
            obj, rows = est.as_dict(), [est.as_row()]
            body = report.estimate_tables(est) if detail else [report.summary_table(est)]
            items = [report.headline(est), *body, *_notes(est)]
        write(fmt, output, force, obj, rows, items)

    @app.command()
    @model_options
    def fit(
        request: ModelRequest,
        seq_len: SeqLenOpt = None,
        batch: BatchOpt = 1,
        kv_dtype: KvDtypeOpt = "bf16",
        weight_dtype: WeightDtypeOpt = "bf16",
        tp: TpOpt = 1,
        gpu: Annotated[str, typer.Option("--gpu", help="Hardware preset to fit on.")] = DEFAULT_GPU,
        kv_scale_bytes: ScaleOpt = 0,
        encoder_seq_len: EncoderLenOpt = None,
        memory_fraction: MemFractionOpt = None,
        reserve: ReserveOpt = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """How much fits on a device after the weights.

        The largest batch at --seq-len and the longest context at --batch, per device
        under --tp, and the smallest tp that fits.
        """
        from kvcalc import report

        fmt = output_format(fmt, output)
        if gpu.strip().lower() == "none":
            raise KvcalcError("fit needs a device: --gpu NAME (see `kvcalc presets`)")
        est = _estimates(request, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
                         kv_scale_bytes, encoder_seq_len, memory_fraction, reserve)[0]
        obj = {"model": est.spec.name, "gpu": est.hardware.name, "seq_len": est.seq_len,
               "batch": est.batch, "tp": est.tp, "kv_dtype": est.kv_dtype.name,
               "weight_dtype": est.weight_dtype.name, **est.as_dict()["fit"]}
        write(fmt, output, force, obj, [obj], [report.fit_table(est)])


def _reductions(base, other) -> dict:
    """How many times smaller `other` makes each quantity than `base` (MHA)."""
    out = {
        "kv_bytes_reduction": base.cache.bytes / other.cache.bytes,
        "params_reduction": base.params.total / other.params.total,
        "decode_bytes_reduction": base.decode.bytes / other.decode.bytes,
        "intensity_gain": other.decode.arithmetic_intensity / base.decode.arithmetic_intensity,
    }
    if base.roofline is not None:
        out["roofline_speedup"] = base.roofline.time_s / other.roofline.time_s
    return out
