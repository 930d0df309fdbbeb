"""`kvcalc sweep`: estimate over a grid of SPECs, streamed as tidy CSV (and a plot).

Thin: parse, call kvcalc.sweep (kvcalc/sweep/answer.py), stream the rows, optionally draw
(kvcalc.plot).
numpy and matplotlib are imported inside the command, so `kvcalc estimate`
starts without them.
"""

import dataclasses
import io
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.parsing import command

from kvcalc.errors import KvcalcError
from kvcalc.ground.units import SUFFIX_HELP
from kvcalc.cli.options import (
    DEFAULT_SEQ_LEN,
    DEFAULT_GPU,
    EncoderLenOpt,
    SweepEngineOpt,
    GpuOpt,
    MemFractionOpt,
    ModelRequest,
    OutputFormat,
    ReserveOpt,
    ScaleOpt,
    WeightDtypeOpt,
    device_memory,
    model_options,
    output_format,
    resolve_gpu,
)

_SPEC = ("SPEC: a value (8), a list (1,8,32), a linear range start:stop:+step "
         "(1024:65536:+1024) or a geometric range start:stop:*factor (1024:131072:*2); "
         "stop included when reached.")

SeqLenSpec = Annotated[Optional[str], typer.Option(
    "--seq-len", metavar="SPEC",
    help=f"Context lengths in tokens. {_SPEC} Values take suffixes, {SUFFIX_HELP} "
         f"(1k:128k:*2). (default: the model's max context, or {DEFAULT_SEQ_LEN}).")]
BatchSpec = Annotated[str, typer.Option(
    "--batch", metavar="SPEC",
    help="Batch sizes (sequences decoded together), a SPEC; suffixes as --seq-len.")]
KvHeadsSpec = Annotated[Optional[str], typer.Option(
    "--kv-heads", metavar="SPEC",
    help="K/V head counts, a SPEC: each replaces the model's (its MHA/GQA/MQA variant); "
         "each must divide --heads. Not for MLA models (default: the model's own).")]
KvDtypeSpec = Annotated[str, typer.Option(
    "--kv-dtype", metavar="LIST", help="KV cache dtypes, comma list (bf16,fp8,int4).")]
TpSpec = Annotated[str, typer.Option(
    "--tp", metavar="SPEC", help="Tensor-parallel degrees, a SPEC (1,2,4,8 or 1:8:*2).")]
SweepOutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="File to write, in the format its suffix names (.csv, .json, .md, "
                           ".txt) unless --format says; atomically, never overwriting without "
                           "--force (default: stdout).")]
MAX_TABLE_ROWS = 10_000  # json, md and table hold every row in memory
SweepFormatOpt = Annotated[Optional[OutputFormat], typer.Option(
    "--format", help="csv or parquet (streamed, any size; parquet needs pyarrow: "
                     "pip install 'kvcalc[parquet]'), or json, md or table for sweeps up to "
                     f"{MAX_TABLE_ROWS:,} rows (default: csv, or what the -o file's suffix says: "
                     ".csv, .parquet, .json, .md, .txt).")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", help="Also draw KV cache per device against context for each K/V-head count "
                   "(at the largest batch, first --kv-dtype and --tp; against batch if one "
                   "--seq-len), with the device's memory after weights as a line; PNG, or "
                   "SVG/PDF by suffix; "
                   "needs matplotlib (pip install 'kvcalc\\[plot]').")]
SweepForceOpt = Annotated[bool, typer.Option(
    "--force", help="Overwrite existing --output/--plot files; allow more than 50,000,000 rows.")]
SkipOpt = Annotated[bool, typer.Option(
    "--skip-invalid", help="Leave out (kv_heads, tp) pairs estimate would reject (named on "
                           "stderr) instead of failing.")]


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @model_options(exclude=("kv_heads",))
    def sweep(
        request: ModelRequest,
        seq_len: SeqLenSpec = None,
        batch: BatchSpec = "1",
        kv_heads: KvHeadsSpec = None,
        kv_dtype: KvDtypeSpec = "bf16",
        tp: TpSpec = "1",
        weight_dtype: WeightDtypeOpt = None,
        gpu: GpuOpt = DEFAULT_GPU,
        engine: SweepEngineOpt = None,
        kv_scale_bytes: ScaleOpt = 0,
        encoder_seq_len: EncoderLenOpt = None,
        memory_fraction: MemFractionOpt = None,
        reserve: ReserveOpt = None,
        fmt: SweepFormatOpt = None,
        output: SweepOutputOpt = None,
        plot: PlotOpt = None,
        skip_invalid: SkipOpt = False,
        force: SweepForceOpt = False,
    ) -> None:
        """Estimate over a grid of configurations, streamed as tidy CSV.

        One row per (kv_heads, kv_dtype, tp, seq_len, batch), with exactly the columns
        of `kvcalc estimate --format csv`.

        Computed column-wise with numpy and streamed, so millions of rows take seconds.
        More than 50,000,000 rows needs --force. Examples: `kvcalc sweep --preset
        llama3-8b --seq-len 1024:131072:*2 --batch 1,8,32 --kv-heads 1,8,32 -o s.csv
        --plot s.png`; `kvcalc sweep --preset mistral-7b --seq-len 1024:65536:+1024
        --batch 1:64:+1 --kv-dtype bf16,fp8 --tp 1,2 -o mistral.csv`.
        """
        _sweep(dict(locals()))  # every option, by its parameter name


def _sweep(p: dict) -> None:
    """sweep: the output checked before any row is computed, kvcalc.sweep called, its rows
    written (streamed for csv and parquet), the plot drawn."""
    from kvcalc.plot import MISSING
    from kvcalc.sweep.answer import sweep

    output, plot, force = p["output"], p["plot"], p["force"]
    to_stdout = output is None or str(output) == "-"
    fmt, draw = _checked_output(p["fmt"], output, plot, force, to_stdout)
    hardware = resolve_gpu(p["gpu"])
    reserve_bytes = device_memory(hardware, p["memory_fraction"], p["reserve"])[1]
    request = p["request"]
    answer = sweep(
        model=request.resolve(), seq_len=p["seq_len"], batch=p["batch"],
        kv_heads=p["kv_heads"], kv_dtype=p["kv_dtype"], tp=p["tp"],
        weight_dtype=p["weight_dtype"], gpu=hardware, engine=p["engine"],
        kv_scale_bytes=p["kv_scale_bytes"], encoder_seq_len=p["encoder_seq_len"],
        memory_fraction=p["memory_fraction"],
        reserve_bytes=None if p["reserve"] is None else reserve_bytes,
        skip_invalid=p["skip_invalid"], force=force,
        # Each K/V-head count resolved as `kvcalc estimate --kv-heads N` would.
        variant=lambda g: dataclasses.replace(request, kv_heads=g).resolve())
    streamed = fmt in (OutputFormat.csv, OutputFormat.parquet)
    if not streamed and answer.rows > MAX_TABLE_ROWS:
        raise KvcalcError(f"--format {fmt.value} holds every row in memory: this sweep has "
                          f"{answer.rows:,} rows (limit {MAX_TABLE_ROWS:,}); use csv")
    for line in answer.skipped:
        _say(f"skipped {line}")
    from kvcalc.sweep.plot_selection import PlotSelection

    selection = PlotSelection(answer.plan) if draw else None
    rows = _write(answer, fmt, output, force, selection)
    if rows is None:  # the reader of stdout is gone
        return
    if plot is not None and not draw:
        where = "stdout" if to_stdout else str(output)
        raise KvcalcError(f"{MISSING}; the {rows:,} rows went to {where}, without the plot")
    if not to_stdout and streamed:
        _say(f"wrote {output} ({rows:,} rows x {len(answer.columns)} columns)")
    if selection is not None:
        from kvcalc.plot import plot_sweep

        plot_sweep(selection, plot, force=force)
        _say(f"wrote {plot}")


def _checked_output(fmt, output, plot, force: bool, to_stdout: bool) -> tuple:
    """(the format, whether the plot can be drawn): the files checked writable before any
    row is computed."""
    from kvcalc.plot import check_plot_name, has_matplotlib
    from kvcalc.report.files import check_writable

    if plot is not None and not to_stdout and output.resolve() == plot.resolve():
        raise KvcalcError("--output and --plot name the same file")
    fmt = output_format(fmt, None if to_stdout else output, tuple(OutputFormat)) \
        if (fmt or not to_stdout) else OutputFormat.csv
    if fmt is OutputFormat.parquet:
        from kvcalc.sweep.parquet import PARQUET_MISSING, has_pyarrow

        if to_stdout:
            raise KvcalcError("Parquet is a binary file format: give -o FILE.parquet")
        if not has_pyarrow():
            raise KvcalcError(PARQUET_MISSING)
    if not to_stdout:
        check_writable(output, force)
    draw = False
    if plot is not None:
        check_writable(plot, force)
        check_plot_name(plot)
        draw = has_matplotlib()  # without it: the rows first, then say what to install
    return fmt, draw


def _write(answer, fmt, output, force: bool, selection) -> int | None:
    """The rows in `fmt` to `output` (stdout for None or -), each chunk also kept for the
    plot (`selection`); the number of rows, None where stdout's reader left."""
    from kvcalc.report.files import AtomicOutput
    from kvcalc.report.render import deliver

    with _progress(answer.plan) as advance:
        def on_chunk(chunk) -> None:
            if selection is not None:
                selection.add(chunk)
            advance(len(chunk))

        if fmt is OutputFormat.parquet:
            with AtomicOutput(output, force) as out:
                return answer.write_parquet(out, progress=on_chunk)
        if fmt is OutputFormat.json:  # the rows' own values: floats in full
            data = answer.row_dicts(progress=on_chunk)
            deliver("json", [], data=data, output=output, force=force)
            return len(data)
        if fmt is not OutputFormat.csv:
            buf = io.BytesIO()
            rows = answer.write_csv(buf, progress=on_chunk)
            _write_small(fmt, buf.getvalue().decode(), output, force, answer.plan.spec.name)
            return rows
        if output is None or str(output) == "-":
            out = sys.stdout.buffer
            try:
                rows = answer.write_csv(out, progress=on_chunk)
                out.flush()
            except BrokenPipeError:  # `kvcalc sweep ... | head`: the reader is gone
                _silence_stdout()
                return None
            return rows
        with AtomicOutput(output, force) as out:
            return answer.write_csv(out, progress=on_chunk)


def _write_small(fmt: OutputFormat, text: str, output, force: bool, name: str) -> None:
    """A small sweep's CSV text as md or a table."""
    import csv

    from kvcalc.report.render import Tab, deliver

    reader = csv.reader(io.StringIO(text))
    columns = next(reader)
    cells = list(reader)
    tab = Tab(f"kvcalc sweep: {name}, {len(cells):,} rows", columns, cells, records=True)
    deliver(fmt.value, [tab], output=output, force=force, width=400)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


class _NoProgress:
    def __enter__(self):
        return lambda n: None

    def __exit__(self, *exc) -> None:
        return None


def _say(text: str) -> None:
    """A line for the person on stderr (plain: no rich import on the way to the rows)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _progress(plan):
    """A rich progress bar over rows on stderr, only for a terminal and a big sweep."""
    if plan.rows < 200_000 or not sys.stderr.isatty():
        return _NoProgress()
    from kvcalc.report.consoles import error_console

    console = error_console()
    if not console.is_terminal:
        return _NoProgress()
    from rich.progress import (
        BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn,
    )

    class _Bar:
        def __enter__(self):
            self.progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("rows"), TimeRemainingColumn(),
                                     console=console, transient=True)
            self.progress.start()
            task = self.progress.add_task("sweep", total=plan.rows)
            return lambda n: self.progress.advance(task, n)

        def __exit__(self, *exc) -> None:
            self.progress.stop()

    return _Bar()
