"""`kvcalc measure`: time decode attention on this machine beside kvcalc's prediction.

Thin: parse, call kvcalc.measure (the whole-model steps: kvcalc.cli.measure_model),
render. Progress goes to stderr; stdout carries only the table, JSON or CSV.
"""

import sys
from typing import Optional

import typer

from kvcalc.cli.options import OutputFormat, output_format
from kvcalc.cli.parsing import command, with_options
from kvcalc.errors import KvcalcError, quoted


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @with_options("kvcalc.cli.measure_options:MEASURE")
    def measure(options: dict) -> None:
        """Time real decode steps on this machine beside kvcalc's prediction.

        Decode attention (and a decode layer step), next to kvcalc's predicted bytes,
        FLOPs and roofline time from ceilings measured in the same run.

        Examples: `kvcalc measure --heads 32 --kv-heads 8`; `kvcalc measure --preset
        llama3-8b --compare --format csv -o reports/llama3-8b-cpu.csv`; `kvcalc measure
        --heads 32 --kv-heads 8 --impl all --step both`; `kvcalc measure --calibrate -o
        mygpu.yaml`, then `kvcalc estimate --preset llama3-8b --gpu mygpu.yaml`; `kvcalc
        measure --step model --preset llama3.2-1b --gpu mygpu.yaml`; `kvcalc measure --preset
        gpt2 --batch 4 --seq-len 512 --prefill-tokens 256 --prefill-start 256` (a served
        step: a decode batch with a prefill chunk in the same forward pass).
        """
        _measure_command(**options)


def _measure_command(**o) -> None:
    """measure: the step asked for, each parsed and run its own way."""
    step = o["step"]
    prefill = o["prefill_tokens"] is not None or o["prefill_start"] is not None
    if step is None:
        step = "mixed" if prefill else "attention"
    if step == "mixed":
        _mixed_step(**o)
        return
    if prefill:
        raise KvcalcError(f"--prefill-tokens and --prefill-start go with --step mixed "
                          f"(not --step {step})")
    if o["config_file"] is not None and step != "model":
        raise KvcalcError("--config goes with --step model or mixed; the attention and layer "
                          "steps take --preset or --heads")
    if o["calibrate"] or step == "model":
        _model_step(step=step, **{k: v for k, v in o.items() if k != "step"})
        return
    _attention_step(step=step, **{k: v for k, v in o.items() if k != "step"})


def _mixed_step(*, calibrate, preset, config_file, device, dtype, seq_len, batch,
                prefill_tokens, prefill_start, warmup, iters, cuda_graphs, cache_ceilings,
                fmt, output, force, heads, kv_heads, head_dim, d_model, sweep, plot, compare,
                tp, gpu, impl, l2, step) -> None:
    """--step mixed: a served scheduler step of a whole model (kvcalc.cli.measure_model)."""
    from kvcalc.cli import measure_model
    from kvcalc.measure.ceilings import default_cache_path

    if calibrate:
        raise KvcalcError("--calibrate and --step mixed are separate runs")
    _refuse_with_mixed(heads=heads, kv_heads=kv_heads, head_dim=head_dim, d_model=d_model,
                       sweep=sweep, plot=plot, compare=compare, tp=tp, gpu=gpu,
                       impl=impl != "auto", l2=l2 != "auto")
    measure_model.mixed_command(
        preset, config_file, device, dtype, _one(seq_len, "--seq-len"), _one(batch, "--batch"),
        _one(prefill_tokens, "--prefill-tokens") or 0, _one(prefill_start, "--prefill-start") or 0,
        warmup, iters, cuda_graphs, default_cache_path() if cache_ceilings else None,
        output_format(fmt, output), output, force, _run_with_progress)


def _one(text: Optional[str], flag: str) -> Optional[int]:
    return _sizes(text, flag, False)[0] if text else None


def _model_step(*, calibrate, step, tp, sweep, compare, plot, device, dtype, output, force,
                preset, seq_len, batch, gpu, warmup, iters, cuda_graphs, fmt, config_file,
                **_) -> None:
    """--step model (a whole decode step beside estimate's time) or --calibrate."""
    from kvcalc.cli import measure_model

    if calibrate and step == "model":
        raise KvcalcError("--calibrate and --step model are separate runs: calibrate "
                          "first (-o FILE), then --step model --gpu FILE")
    tps = _tp_degrees(tp) if calibrate else []
    if sweep or (tp is not None and not calibrate) or compare or plot is not None:
        raise KvcalcError("--sweep, --tp, --compare and --plot time the attention and "
                          "layer steps; drop them with --step model (--calibrate "
                          "takes one --tp, for the all-reduce)")
    if len(tps) > 1:
        raise KvcalcError("--calibrate measures one all-reduce: give one --tp, e.g. 2")
    if calibrate:
        measure_model.calibrate_command(device, dtype, output, force, tps[0] if tps else 1)
        return
    measure_model.model_command(
        preset, device, dtype, _one(seq_len, "--seq-len"), _one(batch, "--batch"), gpu,
        warmup, iters, cuda_graphs, output_format(fmt, output), output, force, config_file)


def _attention_step(*, gpu, output, plot, fmt, force, tp, sweep, seq_len, batch,
                    **parameters) -> None:
    """The attention and layer steps: parse, call kvcalc.measure, write (and draw)."""
    if gpu is not None:
        raise KvcalcError("--gpu goes with --step model (the attention and layer steps "
                          "predict from ceilings measured in the same run)")
    fmt = _check_targets(fmt, output, plot, force)
    tps = _tp_degrees(tp)
    seq_lens, batches = _sizes(seq_len, "--seq-len", sweep), _sizes(batch, "--batch", sweep)
    for name in ("prefill_tokens", "prefill_start", "config_file", "calibrate"):
        parameters.pop(name)
    from kvcalc.measure.answer import measure, measure_config

    given = dict(parameters, tp=tps or None, sweep=sweep,
                 seq_len=seq_lens if sweep else (seq_lens[0] if seq_lens else None),
                 batch=batches if sweep else (batches[0] if batches else None))
    measure_config(**given)  # refused before the progress bar, as before any timing
    if tps and plot is not None:
        raise KvcalcError("--plot draws single-process runs; drop it with --tp")
    result = _run_with_progress(
        lambda _, progress, notice: measure(**given, progress=progress, notice=notice), None)
    if result is None:  # a torchrun rank other than 0: rank 0 reports
        return
    if tps:
        _emit_tp(result, fmt, output, force)
        return
    _draw(result, plot, force)
    from kvcalc.report.render import deliver

    tab = _measure_tab(result) if fmt in (OutputFormat.table, OutputFormat.md) else None
    deliver(fmt.value, [tab], data=result.to_dict(), rows=result.rows, output=output,
            force=force, width=160)


def _check_targets(fmt, output, plot, force):
    """The format, and the files to write checked before minutes of measuring."""
    if output is not None and plot is not None and output.resolve() == plot.resolve():
        raise KvcalcError("--output and --plot name the same file")
    fmt = output_format(fmt, output)
    from kvcalc.report.files import check_writable

    for target in (output, plot):  # fail before minutes of measuring, not after
        if target is not None:
            check_writable(target, force)
    if plot is not None:
        from kvcalc.plot import require_matplotlib

        require_matplotlib(plot)
    return fmt


def _draw(result, plot, force) -> None:
    if plot is None:
        return
    timed_rows = [r for r in result.rows if r["median_s"]]
    if not timed_rows:
        # The rows still say why each implementation failed: print them, skip the plot.
        sys.stderr.write(f"kvcalc: warning: no row was timed, so {plot} was not drawn\n")
        return
    from kvcalc.plot import plot_measure
    from kvcalc.report.consoles import error_console

    plot_measure(timed_rows, plot, force)
    error_console().print(f"wrote {plot}", highlight=False, markup=False)


def _refuse_with_mixed(**given) -> None:
    """--step mixed runs a whole model as its preset or config has it, predicted from the
    ceilings it measures: the attention and layer steps' flags are refused by name."""
    names = {"heads": "--heads", "kv_heads": "--kv-heads", "head_dim": "--head-dim",
             "d_model": "--d-model", "sweep": "--sweep", "plot": "--plot",
             "compare": "--compare", "tp": "--tp", "gpu": "--gpu", "impl": "--impl",
             "l2": "--l2"}
    flags = [names[k] for k, v in given.items() if v not in (None, False)]
    if flags:
        raise KvcalcError(f"{', '.join(flags)}: not with --step mixed, which runs the model of "
                          "--preset or --config as it is, predicted from ceilings measured in "
                          "the same run")


def _tp_degrees(text: Optional[str]) -> list[int]:
    if text is None:
        return []
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise KvcalcError(f"--tp takes integers, e.g. 2 or 1,2 (got {text!r})") from None
    if not values or any(v < 1 for v in values):
        raise KvcalcError(f"--tp takes integers >= 1 (got {text!r})")
    if max(values) > 64:
        raise KvcalcError(f"--tp {max(values)}: at most 64 ranks")
    return list(dict.fromkeys(values))


def _emit_tp(result, fmt, output, force) -> None:
    from kvcalc.report.render import deliver

    tab = _tp_tab(result) if fmt in (OutputFormat.table, OutputFormat.md) else None
    deliver(fmt.value, [tab], data=result.to_dict(), rows=result.rows, output=output,
            force=force, width=160)


def _tp_tab(result):
    from kvcalc.report.render import Tab
    from kvcalc.ground.units import human_count, human_rate

    columns = ["tp", "rank", "q / kv heads", "KV held", "median", "predicted", "all-reduce",
               "AR predicted", "AR bytes", "step (slowest rank)", "bound"]
    body = []
    for r in result.rows:
        body.append([
            str(r["tp"]), str(r["rank"]), f"{r['q_heads']} / {r['kv_heads_range']}",
            human_count(r["kv_bytes_held"], "B"), _fmt_s(r["median_s"]),
            f"{_fmt_s(r['predicted_s'])} ({_fmt_ratio(r['measured_over_predicted'])})",
            _fmt_s(r["allreduce_median_s"] if r["tp"] > 1 else None),
            _fmt_s(r["allreduce_predicted_s"] if r["tp"] > 1 else None),
            human_count(r["allreduce_bytes"], "B") if r["tp"] > 1 else "-",
            f"{_fmt_s(r['step_median_s'])} / {_fmt_s(r['step_predicted_s'])} "
            f"({_fmt_ratio(r['step_measured_over_predicted'])})",
            r["bound"]])
    cfg, dev = result.config, result.device
    caption = [
        f"{dev['name']} ({dev['type']}), torch {dev['torch_version']}, {cfg['dtype']}, "
        f"{cfg['heads']}/{cfg['kv_heads']} heads, head_dim {cfg['head_dim']}, seq_len "
        f"{cfg['seq_len']} x batch {cfg['batch']}, {cfg['step']} step, impl {cfg['impl']}, "
        f"launched by {cfg['launcher']}",
        "predicted = max(K/V / read, attention FLOPs / FLOP/s at shape) [+ max(weights / read, "
        "projection FLOPs / FLOP/s at shape)] + overhead + all-reduce (latency + 2(N-1)/N x "
        "bytes / bus bandwidth), every ceiling measured by the ranks at once in this run",
    ]
    for r in result.rows:
        if r["tp"] > 1 and r["rank"] == 0:
            caption.append(f"tp {r['tp']}: {r['backend']} all-reduce latency "
                           f"{_fmt_s(r['allreduce_latency_s'])}, bus bandwidth "
                           f"{human_rate(r['allreduce_bus_bytes_per_s'])}")
    for text in dict.fromkeys(list(cfg.get("notes") or [])
                              + [r["note"] for r in result.rows if r["note"]]):
        caption.append(f"note: {text}")
    return Tab("kvcalc measure --tp: per rank, measured vs predicted", columns, body,
               caption="\n".join(caption))


def _sizes(text: Optional[str], flag: str, sweep: bool) -> list[int]:
    """A size flag's values: one integer, or with --sweep every value of its SPEC."""
    if text is None:
        return []
    if not sweep:
        if "," in text or ":" in text:
            raise KvcalcError(f"{flag} takes one value (got {quoted(text)}); add --sweep for a "
                              "SPEC")
        from kvcalc.ground import units
        return [units.count(text, flag)]  # 32k = 32,000, 32K = 32,768 (vLLM's suffixes)
    from kvcalc.sweep.grammar import parse_spec

    spec = parse_spec(text, flag)
    if spec.count > 256:
        raise KvcalcError(f"{flag} {text} has {spec.count} values; a measured sweep takes at most 256")
    return spec.values()


def _run_with_progress(run, config):
    """A rich progress bar on stderr while the library reports its phases, drawn before
    torch is imported (a second or two) so that a run shows itself at once; and a notice
    (a dtype this device cannot time well) as one `kvcalc: note:` line on stderr, at once.

    The bar only on a terminal: redirected, a transient bar leaves nothing useful, only a
    stray blank line before any error message. The notice everywhere."""
    from kvcalc.report.consoles import error_console

    console = error_console()

    def notice(text: str) -> None:
        # soft_wrap: one line whatever the width (a file or pipe gets rich's 80 columns)
        console.print(f"kvcalc: note: {text}", markup=False, highlight=False, soft_wrap=True)

    if not console.is_terminal:
        return run(config, progress=None, notice=notice)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("kvcalc measure: loading torch", total=None)

        def progress(description: str, done: int, total: int) -> None:
            # total 0: the phases are not counted yet (a pulsing bar, no "0/0")
            bar.update(task, description=description, completed=done, total=total or None)

        return run(config, progress=progress, notice=notice)


def _fmt_s(value) -> str:
    from kvcalc.ground.units import human_seconds

    return "-" if value is None else human_seconds(value)


def _fmt_ratio(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _measure_tab(result):
    from kvcalc.report.render import Tab

    rows = result.rows
    compare = any(r["predicted_speedup_vs_mha"] is not None for r in rows)
    regimes = list(dict.fromkeys(r["l2_regime"] for r in rows))
    # Regimes are long sentences: the table names them by letter, the caption spells them out.
    regime_key = {text: chr(ord("a") + i) for i, text in enumerate(regimes)}
    steps = list(dict.fromkeys(r["step"] for r in rows))
    points = len({(r["seq_len"], r["batch"]) for r in rows}) > 1  # a --sweep
    columns = (["step"] if len(steps) > 1 else []) + (["seq_len", "batch"] if points else []) + [
        "impl", "heads/kv", "KV cache", "median", "predicted", "achieved", "bound"]
    if len(regimes) > 1:
        columns.append("L2")
    if compare:
        columns.append("vs MHA")
    body = []
    for r in rows:
        line = ([r["step"]] if len(steps) > 1 else []) + (
            [f"{r['seq_len']:,}", f"{r['batch']:,}"] if points else []) + _measure_cells(r)
        if len(regimes) > 1:
            line.append(regime_key[r["l2_regime"]])
        if compare:
            # spaced, so a narrow terminal wraps between the numbers, not inside one
            line.append(f"{_fmt_ratio(r['speedup_vs_mha'])} / {_fmt_ratio(r['predicted_speedup_vs_mha'])}")
        body.append(line)
    caption = _measure_caption(result, regimes, compare)
    if len(regimes) > 1:
        caption += [f"L2 {regime_key[text]}: {text}" for text in regimes]
    caption += [f"note: {n}" for n in result.config.get("notes", [])]
    notes: dict[str, list[str]] = {}
    for r in rows:
        if r["note"]:
            notes.setdefault(r["note"], []).append(f"{r['step']} {r['impl']} kv={r['kv_heads']}")
    for text, where in notes.items():
        caption.append(f"{', '.join(dict.fromkeys(where))}: {text}")
    what = "decode " + (steps[0] if len(steps) == 1 else "step")
    # Cells are plain text (Tab): paths, device names and SDPA's messages with brackets
    # print as written, never as markup.
    return Tab(f"kvcalc measure: {what}, measured vs predicted", columns,
               [list(line) for line in body], caption="\n".join(caption))


def _measure_cells(r: dict) -> list[str]:
    """One row's cells from impl to bound."""
    from kvcalc.ground.units import human_count, human_rate

    timed = r["median_s"] is not None
    return [
        # grouped and repeat are plain matmuls; an SDPA row names the backend that ran
        r["impl"] if r["backend"] in ("", "matmul") else f"{r['impl']} ({r['backend']})",
        f"{r['heads']}/{r['kv_heads']} {r['attention']}",
        human_count(r["kv_cache_bytes"], "B"),
        f"{_fmt_s(r['median_s'])} ±{50 * (r['p90_s'] - r['p10_s']) / r['median_s']:.0f}%" if timed
        else ("failed" if not r["correct"] else "not timed"),
        f"{_fmt_s(r['predicted_s'])} ({_fmt_ratio(r['measured_over_predicted'])})",
        f"{human_rate(r['achieved_bytes_per_s'])} {100 * r['fraction_of_ceiling']:.0f}%"
        if timed else "-",
        r["bound"],
    ]


def _measure_caption(result, regimes: list, compare: bool) -> list[str]:
    """The caption's first lines: device, ceilings, timer, how to read the columns."""
    from kvcalc.ground.units import human_count, human_rate

    dev, c, cfg = result.device, result.ceilings, result.config
    timer = result.rows[0]["timer"] if result.rows else "-"
    return [
        f"{dev['name']} ({dev['type']}), torch {dev['torch_version']}, {cfg['dtype']}, "
        f"seq_len {cfg['seq_len']} x batch {cfg['batch']}, head_dim {cfg['head_dim']}"
        + (f", preset {cfg['model']}" if cfg.get("model") else ""),
        f"ceilings ({c['source']}): copy {human_rate(c['copy_bytes_per_s'])} (read + write "
        f"counted), read {human_rate(c['read_bytes_per_s'])}, matmul "
        f"{human_count(c['matmul_flops_per_s'], 'FLOP/s')} ({c['dtype']}"
        + (f", {c['matmul_n']}x{c['matmul_n']}: sized to a time budget" if c.get("matmul_time_budgeted")
           else "") + ")",
        f"timer {timer}, median of {cfg['iters']} after {cfg['warmup']} warm-up, CUDA graphs "
        f"{'on' if cfg['cuda_graphs'] else 'off'}"
        + (f"; {regimes[0]}" if len(regimes) == 1 else ""),
        "median ± (p90 - p10) / 2 / median; predicted = max(minimum bytes / the faster of the "
        "copy and read ceilings, FLOPs / matmul ceiling), with measured / predicted after it; "
        "achieved = minimum bytes / median, and its share of the copy ceiling; impl (the SDPA "
        "backend that ran)" + ("; vs MHA = speed-up over MHA, measured / predicted" if compare else ""),
    ]
