"""`kvcalc measure`: time decode attention on this machine beside kvcalc's prediction.

Thin: parse, build a MeasureConfig, call kvcalc.measure.run, render. Progress goes
to stderr; stdout carries only the table, JSON or CSV.
"""

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvcalc.cli.parsing import command

from kvcalc.cli.options import ForceOpt, FormatOpt, OutputFormat, OutputOpt, output_format
from kvcalc.errors import KvcalcError, quoted


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    def measure(
        heads: Annotated[Optional[int], typer.Option(
            "--heads",
            help="Query heads (count) (default: the preset's; required without --preset).")] = None,
        kv_heads: Annotated[Optional[int], typer.Option(
            "--kv-heads", help="K/V heads (count), dividing --heads: = heads MHA, 1 MQA, between GQA "
            "(default: the preset's, else --heads).")] = None,
        head_dim: Annotated[Optional[int], typer.Option(
            "--head-dim", help="Per-head width (elements) (default: the preset's, else 128).")] = None,
        seq_len: Annotated[Optional[str], typer.Option(
            "--seq-len", help="Cached tokens per sequence (32k = 32,000, 32K = 32,768, as vLLM "
            "reads them); with --sweep a SPEC (default: 8192 on a GPU, 2048 on a CPU).")] = None,
        batch: Annotated[Optional[str], typer.Option(
            "--batch", help="Sequences, one query token each; with --sweep a SPEC (default: the "
            "smallest power of two giving a >= 1 GB cache on a GPU, >= 64 MiB (at most 16) on a "
            "CPU).")] = None,
        sweep: Annotated[bool, typer.Option(
            "--sweep", help="Measure every (--seq-len, --batch) pair, both given as SPECs: a value, "
            "a list (1,8,32), start:stop:+step or start:stop:*factor; ceilings measured once "
            "(default: off).")] = False,
        plot: Annotated[Optional[Path], typer.Option(
            "--plot", help="Also draw measured against predicted time and achieved bandwidth "
            "against cache size to this PNG (needs matplotlib: pip install 'kvcalc\\[plot]') "
            "(default: none).")] = None,
        dtype: Annotated[Optional[str], typer.Option(
            "--dtype", help="fp32, bf16 or fp16 for cache, queries and weights "
            "(default: bf16 on a GPU, fp32 on a CPU).")] = None,
        device: Annotated[str, typer.Option(
            "--device", help="auto, cuda or cpu (default: auto = cuda when available).")] = "auto",
        impl: Annotated[str, typer.Option(
            "--impl", help="auto, all, or one or more (comma-separated) of grouped, sdpa, repeat, "
            "sdpa-flash, sdpa-efficient, sdpa-cudnn, sdpa-math (default: auto = time grouped, sdpa "
            "and, on CUDA when flash accepts the inputs, sdpa-flash; keep the fastest correct).")] = "auto",
        step: Annotated[Optional[str], typer.Option(
            "--step", help="attention (the attention call), layer (x -> qkv -> cache write -> "
            "attention -> output projection), both, model (a whole decode step of --preset, "
            "beside `estimate`'s time per output token on --gpu), or mixed (a served scheduler "
            "step of --preset or --config: --batch decode tokens at --seq-len and "
            "--prefill-tokens of a prompt in the same forward pass, beside the roofline of its "
            "bytes and FLOPs at ceilings measured in the run; --batch 1 and --seq-len 1024 on a "
            "GPU, 256 on a CPU unless given) (default: attention; mixed when --prefill-tokens "
            "is given).")] = None,
        prefill_tokens: Annotated[Optional[str], typer.Option(
            "--prefill-tokens", help="With --step mixed: prompt tokens (a chunked-prefill "
            "chunk of one prompt) carried in the decode step's forward pass (count, >= 0; "
            "0 = the decode step alone) (default: 0).")] = None,
        prefill_start: Annotated[Optional[str], typer.Option(
            "--prefill-start", help="With --step mixed: the chunk's first position in its "
            "prompt, i.e. prompt tokens already cached that its causal attention also covers "
            "(tokens) (default: 0, the prompt's first chunk).")] = None,
        config_file: Annotated[Optional[Path], typer.Option(
            "--config", help="With --step model or mixed: the model as a preset-format YAML or "
            "a Hugging Face config.json (local file), in place of --preset (default: none).")] = None,
        warmup: Annotated[Optional[int], typer.Option(
            "--warmup", help="Untimed calls before timing (count) (default: 10 GPU, 3 CPU).")] = None,
        iters: Annotated[Optional[int], typer.Option(
            "--iters", help="Timed repetitions (count); median and p10/p90 reported "
            "(default: 100 GPU, 20 CPU).")] = None,
        preset: Annotated[Optional[str], typer.Option(
            "--preset", help="Take heads, K/V heads, head_dim, d_model and layers from a model "
            "preset (see `kvcalc presets`); flags given override it (default: none).")] = None,
        d_model: Annotated[Optional[int], typer.Option(
            "--d-model", help="Model width for the layer step (elements) "
            "(default: the preset's, else heads x head_dim).")] = None,
        compare: Annotated[bool, typer.Option(
            "--compare", help="Also run MHA (kv_heads = heads) and MQA (kv_heads = 1) with the same "
            "query heads; adds measured and predicted speed-ups over MHA (default: off).")] = False,
        cuda_graphs: Annotated[bool, typer.Option(
            "--cuda-graphs", help="Replay each call from a CUDA graph, removing launch gaps "
            "(CUDA only) (default: off).")] = False,
        l2: Annotated[str, typer.Option(
            "--l2", help="Keeping the cache out of L2/LLC: auto (rotate over distinct caches "
            "totalling >= 8x the L2/LLC size, or flush when that would take > 64), rotate, flush, or none "
            "(default: auto).")] = "auto",
        cache_ceilings: Annotated[bool, typer.Option(
            "--cache-ceilings", help="Reuse this device's measured ceilings from "
            "~/.cache/kvcalc/ceilings.json, measuring and storing them when absent (default: off, "
            "measure every run).")] = False,
        tp: Annotated[Optional[str], typer.Option(
            "--tp", help="Tensor-parallel degree(s), e.g. 2 or 1,2: that many torch.distributed "
            "ranks (gloo on a CPU, NCCL with one GPU per rank), each holding its query heads and "
            "their K/V heads; the output's all-reduce is real and timed (default: off, one "
            "process).")] = None,
        calibrate: Annotated[bool, typer.Option(
            "--calibrate", help="Measure this device's decode terms (read and F.linear "
            "streaming, SDPA's K/V streaming, matmul FLOP/s, fixed costs per step and layer) "
            "and write them as a hardware file for `--gpu FILE` (default: off).")] = False,
        gpu: Annotated[Optional[str], typer.Option(
            "--gpu", help="With --step model: the hardware preset or file (e.g. one --calibrate "
            "wrote) to predict on (default: calibrate this device first).")] = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
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
        if step is None:
            step = "mixed" if (prefill_tokens is not None or prefill_start is not None) else "attention"
        if step == "mixed":
            from kvcalc.cli import measure_model

            if calibrate:
                raise KvcalcError("--calibrate and --step mixed are separate runs")
            _refuse_with_mixed(heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                               d_model=d_model, sweep=sweep, plot=plot, compare=compare, tp=tp,
                               gpu=gpu, impl=impl != "auto", l2=l2 != "auto")
            measure_model.mixed_command(
                preset, config_file, device, dtype,
                _sizes(seq_len, "--seq-len", False)[0] if seq_len else None,
                _sizes(batch, "--batch", False)[0] if batch else None,
                _sizes(prefill_tokens, "--prefill-tokens", False)[0] if prefill_tokens else 0,
                _sizes(prefill_start, "--prefill-start", False)[0] if prefill_start else 0,
                warmup, iters, cuda_graphs, _cache_path() if cache_ceilings else None,
                output_format(fmt, output), output, force, _run_with_progress)
            return
        if prefill_tokens is not None or prefill_start is not None:
            raise KvcalcError(f"--prefill-tokens and --prefill-start go with --step mixed "
                              f"(not --step {step})")
        if config_file is not None and step != "model":
            raise KvcalcError("--config goes with --step model or mixed; the attention and layer "
                              "steps take --preset or --heads")
        if calibrate or step == "model":
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
                measure_model.calibrate_command(device, dtype, output, force,
                                                tps[0] if tps else 1)
                return
            measure_model.model_command(
                preset, device, dtype, _sizes(seq_len, "--seq-len", False)[0] if seq_len else None,
                _sizes(batch, "--batch", False)[0] if batch else None, gpu, warmup, iters,
                cuda_graphs, output_format(fmt, output), output, force, config_file)
            return
        if gpu is not None:
            raise KvcalcError("--gpu goes with --step model (the attention and layer steps "
                              "predict from ceilings measured in the same run)")
        if output is not None and plot is not None and output.resolve() == plot.resolve():
            raise KvcalcError("--output and --plot name the same file")
        fmt = output_format(fmt, output)
        from kvcalc.measure import MeasureConfig, run, run_sweep
        from kvcalc.report.consoles import error_console
        from kvcalc.report.files import check_writable
        from kvcalc.report.render import deliver

        for target in (output, plot):  # fail before minutes of measuring, not after
            if target is not None:
                check_writable(target, force)
        if output is not None and plot is not None and output.resolve() == plot.resolve():
            raise KvcalcError("--output and --plot name the same file")
        if plot is not None:
            from kvcalc.plot import require_matplotlib

            require_matplotlib(plot)
        tps = _tp_degrees(tp)
        if tps and sweep:
            raise KvcalcError("--tp and --sweep do not combine: give one --seq-len and --batch")
        if tps and plot is not None:
            raise KvcalcError("--plot draws single-process runs; drop it with --tp")
        seq_lens, batches = _sizes(seq_len, "--seq-len", sweep), _sizes(batch, "--batch", sweep)
        config = MeasureConfig(**_model_fields(preset, heads, kv_heads, head_dim, d_model),
                               seq_len=seq_lens[0] if seq_lens else None,
                               batch=batches[0] if batches else None, dtype=_dtype_name(dtype),
                               device=device, impl=impl, step=step, warmup=warmup, iters=iters,
                               compare=compare, cuda_graphs=cuda_graphs, l2=l2,
                               ceilings_cache=_cache_path() if cache_ceilings else None,
                               tp=tuple(tps) if tps else None)
        if sweep:
            result = _run_with_progress(
                lambda c, progress, notice: run_sweep(c, seq_lens or [None], batches or [None],
                                                      progress, notice),
                config)
        else:
            result = _run_with_progress(run, config)
        if result is None:  # a torchrun rank other than 0: rank 0 reports
            return
        if tps:
            _emit_tp(result, fmt, output, force)
            return
        timed_rows = [r for r in result.rows if r["median_s"]]
        if plot is not None and not timed_rows:
            # The rows still say why each implementation failed: print them, skip the plot.
            sys.stderr.write(f"kvcalc: warning: no row was timed, so {plot} was not drawn\n")
        elif plot is not None:
            from kvcalc.plot import plot_measure

            plot_measure(timed_rows, plot, force)
            error_console().print(f"wrote {plot}", highlight=False, markup=False)
        tab = _measure_tab(result) if fmt in (OutputFormat.table, OutputFormat.md) else None
        deliver(fmt.value, [tab], data=result.to_dict(), rows=result.rows, output=output,
                force=force, width=160)


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


def _model_fields(preset, heads, kv_heads, head_dim, d_model) -> dict[str, Any]:
    """heads, kv_heads, head_dim, d_model, layers, model: flags over the preset's values."""
    fields: dict[str, Any] = {"head_dim": 128, "layers": 1, "model": ""}
    if preset is not None:
        from kvcalc.presets import load_model

        spec = load_model(preset)
        if spec.mla is not None:
            raise KvcalcError(f"{spec.name} uses MLA: kvcalc measure times MHA/GQA/MQA attention only")
        a = spec.attention_shape  # the attention most layers have
        if a is None:
            raise KvcalcError(f"{spec.name} has no attention: kvcalc measure times attention")
        if a.v_head_dim != a.head_dim:
            raise KvcalcError(f"{spec.name} has v_head_dim {a.v_head_dim} != head_dim "
                              f"{a.head_dim}; kvcalc measure needs them equal")
        fields.update(heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                      d_model=spec.d_model, layers=spec.layers, model=spec.name)
    elif heads is None:
        raise KvcalcError("give --heads (and --kv-heads), or --preset NAME")
    changed = []
    for name, value in (("heads", heads), ("head_dim", head_dim), ("d_model", d_model)):
        if value is not None:
            if preset is not None and value != fields[name]:
                changed.append(f"{name}={value}")
            fields[name] = value
    if changed:  # no longer the preset's attention: say so, as estimate does
        fields["model"] = f"{fields['model']}[{','.join(changed)}]"
    if kv_heads is not None:
        fields["kv_heads"] = kv_heads
    elif preset is None or fields["kv_heads"] > fields["heads"]:
        fields["kv_heads"] = fields["heads"]
    return fields


def _dtype_name(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    from kvcalc.ground.dtypes import dtype

    return dtype(name).name  # accepts aliases (bfloat16, float32, half ...)


def _cache_path() -> Path:
    from kvcalc.measure.ceilings import default_cache_path

    return default_cache_path()


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
    from kvcalc.ground.units import human_count, human_rate

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
        timed = r["median_s"] is not None
        line = ([r["step"]] if len(steps) > 1 else []) + (
            [f"{r['seq_len']:,}", f"{r['batch']:,}"] if points else []) + [
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
        if len(regimes) > 1:
            line.append(regime_key[r["l2_regime"]])
        if compare:
            # spaced, so a narrow terminal wraps between the numbers, not inside one
            line.append(f"{_fmt_ratio(r['speedup_vs_mha'])} / {_fmt_ratio(r['predicted_speedup_vs_mha'])}")
        body.append(line)
    dev, c, cfg = result.device, result.ceilings, result.config
    timer = rows[0]["timer"] if rows else "-"
    caption = [
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
    if len(regimes) > 1:
        caption += [f"L2 {regime_key[text]}: {text}" for text in regimes]
    caption += [f"note: {n}" for n in cfg.get("notes", [])]
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
