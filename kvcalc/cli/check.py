"""`kvcalc check LOG`: read the log, call kvcalc.check (kvcalc/answers/check.py: a vLLM,
SGLang or TensorRT-LLM start-up log beside kvcalc's count, or a failed start-up's cause and
fix), write the calibration file (-o) and print its tables."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.options import ForceOpt, OutputFormat, TextFormat
from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError

_FORMATS = (OutputFormat.table, OutputFormat.json, OutputFormat.md)

LogArg = Annotated[Path, typer.Argument(
    help="The start-up log (a file, or - for stdin): vLLM 0.6 to 0.33, SGLang or "
    "TensorRT-LLM, one that started or one that failed.",
    show_default=False)]
ModelArg = Annotated[Optional[str], typer.Argument(
    help="The model: a preset, Hub id, model folder or config.json (default: the "
    "model the log names).", show_default=False)]
CheckGpuOpt = Annotated[Optional[str], typer.Option(
    "--gpu", show_default=False, help="Hardware preset (or YAML file) the log ran "
    "on (default: the GPU the log names).")]
VllmVersionOpt = Annotated[Optional[str], typer.Option(
    "--vllm-version", show_default=False,
    help="The release, for a log that does not print it (e.g. 0.9.2).")]
CheckEngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", show_default=False, metavar="NAME@VERSION",
    help="The engine and release a log that does not say ran (sglang@0.5.4: SGLang "
    "logs never print their release; default: read from the log, vLLM's, SGLang's "
    "or TensorRT-LLM's).")]
CheckFormatOpt = Annotated[Optional[TextFormat], typer.Option(
    "--format", help="table (rich), json or md (markdown, for issues and docs) "
    "(default: table; -o names the calibration file, not this output).")]
CalibrationOutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", show_default=False,
    help="Write what the log taught about this GPU and release (its measured "
    "terms, with the GPU, model, tp and pp they belong to) to this YAML file, for "
    "`fit --calibration` and `plan --calibration` (never overwrites without "
    "--force).")]


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only, name="check")
    def check(log: LogArg, model: ModelArg = None, gpu: CheckGpuOpt = None,
              vllm_version: VllmVersionOpt = None, engine: CheckEngineOpt = None,
              fmt: CheckFormatOpt = None, output: CalibrationOutputOpt = None,
              force: ForceOpt = False) -> None:
        """Set kvcalc's count beside every term a vLLM start-up log printed.

        Reads the release, model, GPU memory and flags (non-default args, the engine
        config: dtype, quantization, KV-cache dtype), then each logged term: weights, the
        profile run's activation peak, non-torch memory, the CUDA-graph estimate,
        available KV cache memory, blocks, KV cache tokens and concurrency; says which
        term differs and by how much. For a start-up that failed it names the cause the
        log gives (a --max-model-len beyond the model's context, another process holding
        memory, out of memory loading, profiling, warming up the sampler or capturing CUDA
        graphs, missing model files, too little KV cache) and the fix. SGLang and
        TensorRT-LLM logs are read the same way (their figures beside kvcalc's with MODEL
        and --gpu); a failed one gets its cause and fix from the log alone: a
        --context-length beyond the model's, another process holding memory, a
        --mem-fraction-static too small for the weights (and the smallest that works), out
        of memory loading, creating the KV cache or capturing CUDA graphs, missing files.
        Example: `kvcalc check vllm.log Qwen/Qwen3-8B --gpu l4 --format json`.
        """
        _check(log, model, gpu, vllm_version, engine, fmt, output, force)


def _check(log: Path, model, gpu, vllm_version, engine, fmt, output, force: bool) -> None:
    """check: read the log, call kvcalc.check, write the calibration file (-o), print."""
    from kvcalc.answers.check import check, log_engine_of
    from kvcalc.report.render import deliver

    if fmt is not None and OutputFormat(fmt.value) not in _FORMATS:
        raise KvcalcError(f"--format {fmt.value} is not offered here; use table, json or md")
    text = _read_log(log)
    whose = log_engine_of(text, engine) if output is not None else "vllm"
    if whose != "vllm":
        from kvcalc.serving.releases import TITLES

        raise KvcalcError(f"-o writes a vLLM calibration file; {TITLES[whose]} logs have none")
    answer = check(log=text, model=model, gpu=gpu, vllm_version=vllm_version, engine=engine,
                   log_name=str(log))
    if output is not None:
        calibration = answer.calibration_text("-" if str(log) == "-" else Path(log).name)
        if calibration is None:
            raise KvcalcError("--output: the log's start-up failed before kvcalc could set "
                              "its count beside the terms, so there is nothing to calibrate "
                              "from")
        from kvcalc.report.files import emit

        emit(calibration, output, force)
    deliver("table" if fmt is None else fmt.value, _items(answer), data=answer.as_dict())


def _items(answer) -> list:
    """check's tables: the log beside kvcalc's count, or a failed start-up's cause and fix."""
    if answer.engine == "vllm":
        return _vllm_items(answer.result) if answer.counted else _failure_items(answer.log,
                                                                                answer.data)
    if not answer.counted:
        return _other_failure_items(answer.data, answer.diagnosis)
    return (_sglang_items if answer.engine == "sglang" else _trtllm_items)(answer)


def _failure_items(parsed, data: dict) -> list:
    """A failed vLLM start-up without kvcalc's count: what the log says, the cause, the fix."""
    from kvcalc.report.render import Tab
    from kvcalc.serving.vllm.check import FAILURE_LABELS, diagnose

    d = diagnose(parsed)
    where = data["gpu"]
    tp = parsed.flags.get("tensor_parallel_size")
    head = ("vLLM " + (parsed.vllm_version or "(release not printed)")
            + (f" ({parsed.engine})" if parsed.engine else "")
            + (f", {parsed.model}" if parsed.model else "")
            + (f" on {where}" if where else "")
            + (f", tp {tp}" if isinstance(tp, int) and tp > 1 else "")
            + f": did not start ({FAILURE_LABELS[d.kind]})")
    items: list = [head]
    if parsed.terms:
        rows = [[name.replace("_", " "), f"{value / 2**30:.2f} GiB"]
                for name, value in parsed.terms.items()]
        items.append(Tab("Logged before it failed", ["term", "log"], rows))
    items += [f"vLLM says: {d.words}", f"cause: {d.cause}", f"fix: {d.fix}"]
    return [*items, *data["notes"]]


def _read_log(path: Path) -> str:
    import sys

    from kvcalc.ground.inputfile import MAX_INPUT_BYTES, read_text

    if str(path) == "-":
        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise KvcalcError(f"stdin: over {MAX_INPUT_BYTES:,} bytes; paste the start-up part")
        return data.decode("utf-8", errors="replace")
    try:
        return read_text(path, str(path))
    except FileNotFoundError:
        raise KvcalcError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise KvcalcError(f"{path}: is a folder, not a log file") from None


def _vllm_items(result) -> list:
    from kvcalc.report.render import Tab
    from kvcalc.ground.units import human_bytes

    def shown(t, value) -> str:
        if t.unit == "bytes":
            return f"{value / 2**30:.2f} GiB"
        if t.unit == "x":
            return f"{value:.2f}x"
        return f"{value:,}"

    def diff(t) -> str:
        if t.status:
            return {"not subtracted": "logged, not subtracted",
                    "from the log": "taken from the log"}.get(t.status, t.status)
        if t.unit == "bytes":
            d = f"{t.difference / 2**30:+.2f} GiB"
        elif t.unit == "x":
            d = f"{t.difference:+.2f}x"
        else:
            d = f"{t.difference:+,}"
        ratio = f" ({t.kvcalc / t.logged:.3f})" if t.logged else ""
        return d + ratio + (" <" if t.differs else "")

    s, cap = result.settings, result.capacity
    rows = [[t.name.replace("_", " "), shown(t, t.logged),
             "-" if t.status == "not subtracted" else shown(t, t.kvcalc), diff(t)]
            for t in (*result.terms, *result.counts)]
    rows.append(["refused", "yes" if result.log.refused else "no",
                 "yes" if not cap.fits else "no", ""])
    head = (f"vLLM {s.vllm_version} ({s.engine}), {result.log.model or result.model} on "
            f"{result.hardware}" + (f" x{s.tp * s.pp}" if s.tp * s.pp > 1 else "")
            + f": max_model_len {s.max_model_len:,}, gpu_memory_utilization "
            f"{s.gpu_memory_utilization}, {cap.max_num_batched_tokens:,} batched tokens, "
            f"{cap.max_num_seqs} seqs, block {cap.block_size}")
    off = result.differing
    verdict = ("kvcalc reproduces every figure the log printed (within 5%)" if not off else
               "differs most: " + "; ".join(
                   f"{t.name.replace('_', ' ')} by {diff(t).rstrip(' <')}" for t in off[:3]))
    notes = list(result.as_dict()["notes"])
    caption = ("< marks a figure off by more than 5% (and 0.05 GiB); GiB = 2^30 bytes, as vLLM "
               "prints them" + (f"; total {human_bytes(cap.deciding.total)}" if cap else ""))
    from kvcalc.serving.vllm.check import FAILURE_LABELS

    d = result.diagnosis
    failure = [] if d is None else [
        f"vLLM did not start ({FAILURE_LABELS[d.kind]}): {d.cause}", f"fix: {d.fix}"]
    return [head, Tab("Log vs kvcalc", ["term", "log", "kvcalc", "kvcalc - log"], rows,
                      caption=caption), verdict, *failure, *notes]


def _trtllm_items(answer) -> list:
    """A TensorRT-LLM log beside kvcalc's count: each logged figure, kvcalc's, the ratio;
    for a refused start-up, the cause and the fix."""
    from kvcalc.report.render import Tab

    result = answer.result

    def shown(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.2f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    rows = [[r.name.replace("_", " "), shown(r.logged), shown(r.counted),
             "-" if r.ratio is None else f"{r.ratio:.3f}"] for r in result.rows]
    if result.tokens_from_logged_memory is not None:
        rows.append(["KV tokens from the logged memory", "", shown(
            result.tokens_from_logged_memory), ""])
    head = (f"TensorRT-LLM {result.release} ({result.backend}), {answer.spec.name} on "
            f"{answer.hardware.name}")
    items = [Tab(head, ["", "logged", "kvcalc", "kvcalc / logged"], rows,
                 caption="\n".join(f"note: {n}" for n in result.notes) or None)]
    d = result.diagnosis
    if d is not None:
        items += [f"did not start ({d.label}): {d.cause}", f"fix: {d.fix}"]
    elif result.refused:
        items.append(f"did not start: {result.refusal}")
    return items


def _other_failure_items(data: dict, d) -> list:
    """A failed SGLang or TensorRT-LLM start-up without kvcalc's count: what the log says,
    the cause and the fix."""
    from kvcalc.report.render import Tab
    from kvcalc.serving.releases import TITLES

    title = TITLES[data["engine"]]
    release, model, gpu, figures = (data[k] for k in ("engine_release", "model", "gpu",
                                                      "figures"))
    tp = data["settings"].get("tp_size")
    head = (f"{title} " + (release or "(release not printed)")
            + (f", {model}" if model else "") + (f" on {gpu}" if gpu else "")
            + (f", tp {tp}" if isinstance(tp, int) and tp > 1 else "")
            + f": did not start ({d.label})")
    items: list = [head]
    if figures:
        items.append(Tab("Logged before it failed", ["figure", "log"],
                         [[k.replace("_", " "), str(v)] for k, v in figures.items()]))
    return [*items, f"{title} says: {d.words}", f"cause: {d.cause}", f"fix: {d.fix}",
            *data["notes"]]


def _sglang_items(answer) -> list:
    """An SGLang log beside kvcalc's count: each logged figure, kvcalc's, their ratio."""
    from kvcalc.report.render import Tab

    result = answer.result

    def shown(name: str, v) -> str:
        if v is None:
            return "-"
        return f"{v / (1 << 30):,.2f} GiB" if name.endswith("bytes") else f"{v:,}"

    rows = []
    for name, logged, ours in result.rows:
        ratio = f"{ours / logged:.3f}" if logged and ours is not None else "-"
        rows.append([name.replace(", bytes", ""), shown(name, logged), shown(name, ours), ratio])
    if result.tokens_from_logged_start is not None and result.rows:
        logged = dict((n, v) for n, v, _ in result.rows).get("KV tokens")
        ours = result.tokens_from_logged_start
        rows.append(["KV tokens from the logged free memory and weights",
                     "-" if logged is None else f"{logged:,}", f"{ours:,}",
                     f"{ours / logged:.3f}" if logged else "-"])
    head = f"SGLang {result.release}, {answer.spec.name} on {answer.hardware.name}"
    items = [Tab(head, ["", "logged", "kvcalc", "kvcalc / logged"], rows,
                 caption="\n".join(f"note: {n}" for n in result.notes) or None)]
    d = result.diagnosis
    if d is not None:
        items += [f"did not start ({d.label}): {d.cause}", f"fix: {d.fix}"]
    return items
