"""`kvcalc estimate` and `kvcalc fit`: parse, call kvcalc.estimate, render."""

from __future__ import annotations

from typing import Annotated

import typer

from kvcalc import report
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
    model_options,
    parse_size,
    resolve_gpu,
)
from kvcalc.errors import KvcalcError
from kvcalc.estimate import attention_variants, estimate as run_estimate


def _estimates(request: ModelRequest, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
               kv_scale_bytes, encoder_seq_len, memory_fraction, reserve, compare=False):
    if not 0 < memory_fraction <= 1:  # checked even when no device uses it
        raise KvcalcError(f"--memory-fraction must be in (0, 1], got {memory_fraction}")
    spec = request.resolve()
    length = default_seq_len(spec, seq_len)
    hardware = resolve_gpu(gpu)
    specs = attention_variants(spec, request.kv_heads) if compare else [spec]
    return [run_estimate(s, length, batch, kv_dtype, weight_dtype, tp, hardware, kv_scale_bytes,
                         encoder_seq_len, memory_fraction, parse_size(reserve)) for s in specs]


def _write(fmt: OutputFormat, output, force: bool, obj, rows: list[dict]) -> None:
    if output is not None and fmt is OutputFormat.table:
        # A file gets data, not a drawing: pick the format from its name.
        fmt = OutputFormat.csv if output.suffix.lower() == ".csv" else OutputFormat.json
    if fmt is OutputFormat.json:
        report.emit(report.to_json(obj), output, force)
    else:
        report.emit(report.rows_to_csv(rows), output, force)


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
        kv_scale_bytes: ScaleOpt = 0,
        encoder_seq_len: EncoderLenOpt = None,
        memory_fraction: MemFractionOpt = 1.0,
        reserve: ReserveOpt = "0",
        fmt: FormatOpt = OutputFormat.table,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """KV cache, parameters, decode-step FLOPs and bytes, roofline and fit for one model.

        Examples: `kvcalc estimate --preset gpt3`; `kvcalc estimate --preset llama3-70b
        --seq-len 8192 --batch 16 --tp 4 --format json`; `kvcalc estimate --preset
        llama2-7b --compare`.
        """
        ests = _estimates(request, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
                          kv_scale_bytes, encoder_seq_len, memory_fraction, reserve, compare)
        if fmt is OutputFormat.table and output is None:
            con = report.console()
            if compare:
                con.print(report.compare_table(ests))
            else:
                for part in report.estimate_tables(ests[0]):
                    con.print(part)
            return
        if compare:
            obj = {"variants": [e.as_dict() for e in ests],
                   "reductions_vs_mha": [_reductions(ests[0], e) for e in ests[1:]]}
        else:
            obj = ests[0].as_dict()
        rows = [{**e.as_row(), **_reductions(ests[0], e)} if compare else e.as_row() for e in ests]
        _write(fmt, output, force, obj, rows)

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
        memory_fraction: MemFractionOpt = 1.0,
        reserve: ReserveOpt = "0",
        fmt: FormatOpt = OutputFormat.table,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """How much fits on a device after the weights.

        The largest batch at --seq-len and the longest context at --batch, per device
        under --tp, and the smallest tp that fits.
        """
        if gpu.lower() == "none":
            raise KvcalcError("fit needs a device: --gpu NAME (see `kvcalc presets`)")
        est = _estimates(request, seq_len, batch, kv_dtype, weight_dtype, tp, gpu,
                         kv_scale_bytes, encoder_seq_len, memory_fraction, reserve)[0]
        if fmt is OutputFormat.table and output is None:
            report.console().print(report.fit_table(est))
            return
        obj = {"model": est.spec.name, "gpu": est.hardware.name, "seq_len": est.seq_len,
               "batch": est.batch, "tp": est.tp, "kv_dtype": est.kv_dtype.name,
               "weight_dtype": est.weight_dtype.name, **est.as_dict()["fit"]}
        _write(fmt, output, force, obj, [obj])


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
