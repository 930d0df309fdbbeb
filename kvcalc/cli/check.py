"""`kvcalc check LOG`: a vLLM, SGLang or TensorRT-LLM start-up log beside kvcalc's count
(kvcalc.serving.vllm.check, kvcalc.serving.sglang.check, kvcalc.serving.trtllm.check), and
for a start-up that failed, the cause the log gives and the fix (each engine's `fail`)."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.options import ForceOpt, OutputFormat, TextFormat, resolve_gpu
from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError

_FORMATS = (OutputFormat.table, OutputFormat.json, OutputFormat.md)


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only, name="check")
    def check(
        log: Annotated[Path, typer.Argument(
            help="The start-up log (a file, or - for stdin): vLLM 0.6 to 0.33, SGLang or "
            "TensorRT-LLM, one that started or one that failed.",
            show_default=False)],
        model: Annotated[Optional[str], typer.Argument(
            help="The model: a preset, Hub id, model folder or config.json (default: the "
            "model the log names).", show_default=False)] = None,
        gpu: Annotated[Optional[str], typer.Option(
            "--gpu", show_default=False, help="Hardware preset (or YAML file) the log ran "
            "on (default: the GPU the log names).")] = None,
        vllm_version: Annotated[Optional[str], typer.Option(
            "--vllm-version", show_default=False,
            help="The release, for a log that does not print it (e.g. 0.9.2).")] = None,
        engine: Annotated[Optional[str], typer.Option(
            "--engine", show_default=False, metavar="NAME@VERSION",
            help="The engine and release a log that does not say ran (sglang@0.5.4: SGLang "
            "logs never print their release; default: read from the log, vLLM's, SGLang's "
            "or TensorRT-LLM's).")] = None,
        fmt: Annotated[Optional[TextFormat], typer.Option(
            "--format", help="table (rich), json or md (markdown, for issues and docs) "
            "(default: table; -o names the calibration file, not this output).")] = None,
        output: Annotated[Optional[Path], typer.Option(
            "--output", "-o", show_default=False,
            help="Write what the log taught about this GPU and release (its measured "
            "terms, with the GPU, model, tp and pp they belong to) to this YAML file, for "
            "`fit --calibration` and `plan --calibration` (never overwrites without "
            "--force).")] = None,
        force: ForceOpt = False,
    ) -> None:
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
        from kvcalc.serving.vllm.check import check_log, gpu_preset_for
        from kvcalc.serving.vllm.log import parse_vllm_log
        from kvcalc.report.render import deliver

        if fmt is not None and OutputFormat(fmt.value) not in _FORMATS:
            raise KvcalcError(f"--format {fmt.value} is not offered here; use table, json or md")
        text = _read_log(log)
        which = _engine_of(text, engine)
        if which == "sglang":
            _check_sglang(text, model, gpu, engine, "table" if fmt is None else fmt.value,
                          output)
            return
        if which == "tensorrt-llm":
            _check_trtllm(text, model, gpu, engine, "table" if fmt is None else fmt.value,
                          output)
            return
        try:
            parsed = parse_vllm_log(text)
        except KvcalcError as e:
            if engine is None and "does not look like" in str(e):
                raise KvcalcError(f"{log}: this does not look like a vLLM, SGLang or "
                                  "TensorRT-LLM start-up log: no line any of them prints while "
                                  "loading a model, sizing its KV cache or failing to start "
                                  "was found") from None
            raise
        failed = parsed.failure is not None
        if not parsed.sized_kv_cache and not parsed.terms and not failed:
            raise KvcalcError(f"{log}: the log stops before vLLM printed any memory term "
                              "(weights, profile, KV cache): paste it up to 'Maximum "
                              "concurrency' or the error that stopped the engine")
        chosen = "table" if fmt is None else fmt.value
        measured = [t for t in parsed.terms if t not in ("total", "budget")]
        if failed and not parsed.sized_kv_cache and not measured:
            # Nothing to count against: the cause and the fix are the answer.
            _no_calibration(output)
            deliver(chosen, _failure_items(parsed, gpu, []), data=_failure_data(parsed, gpu, []))
            return
        try:
            spec = _model(model, parsed.model)
            if gpu is None:
                name = gpu_preset_for(parsed.gpu_name) if parsed.gpu_name else None
                if name is None:
                    raise KvcalcError("the log does not name a GPU kvcalc knows"
                                      + (f" ({parsed.gpu_name})" if parsed.gpu_name else "")
                                      + ": give --gpu NAME (see `kvcalc presets`)")
                gpu = name
            hardware = resolve_gpu(gpu)
            if hardware is None:
                raise KvcalcError("check needs the GPU the log ran on: --gpu NAME")
            result = check_log(parsed, spec, hardware, vllm_version=vllm_version)
        except KvcalcError as e:
            if not failed or (model is not None and gpu is not None):
                raise
            # A failed start-up whose model, GPU or release the log does not give: its
            # cause and fix still stand; kvcalc's count needs what is missing.
            _no_calibration(output)
            notes = [f"kvcalc's count is not set beside the logged terms: {e}"]
            deliver(chosen, _failure_items(parsed, gpu, notes),
                    data=_failure_data(parsed, gpu, notes))
            return
        if output is not None:
            from kvcalc.serving.vllm.calibration import calibration_text
            from kvcalc.report.files import emit

            emit(calibration_text(result, "-" if str(log) == "-" else Path(log).name),
                 output, force)
        deliver(chosen, _items(result), data=result.as_dict())


def _no_calibration(output: Optional[Path]) -> None:
    if output is not None:
        raise KvcalcError("--output: the log's start-up failed before kvcalc could set its "
                          "count beside the terms, so there is nothing to calibrate from")


def _failure_data(parsed, gpu: Optional[str], notes: list) -> dict:
    """JSON for a failed start-up without kvcalc's count: what the log says, the cause
    and the fix."""
    from kvcalc.serving.vllm.check import diagnose, failure_dict

    return {
        "vllm_version": parsed.vllm_version, "engine": parsed.engine,
        "version_printed": parsed.vllm_version is not None,
        "model": parsed.model, "gpu": gpu or parsed.gpu_name,
        "settings": {k: v for k, v in parsed.flags.items()
                     if isinstance(v, (str, int, float, bool))},
        "terms": {name: {"logged_bytes": value} for name, value in parsed.terms.items()},
        "refused": {"logged": parsed.refused, "kvcalc": None},
        "refusal": {"logged": parsed.refusal, "kvcalc": None},
        "failure": failure_dict(diagnose(parsed), parsed),
        "ranks": list(parsed.ranks),
        "notes": [*parsed.notes, *notes],
    }


def _failure_items(parsed, gpu: Optional[str], notes: list) -> list:
    from kvcalc.serving.vllm.check import FAILURE_LABELS, diagnose
    from kvcalc.report.render import Tab

    d = diagnose(parsed)
    where = gpu or parsed.gpu_name
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
    return [*items, *parsed.notes, *notes]


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


def _model(given: Optional[str], logged: Optional[str]):
    from kvcalc.model_source import resolve_model

    name = given or logged
    if name is None:
        raise KvcalcError("the log does not name its model: give MODEL (a preset, Hub id, "
                          "model folder or config.json)")
    try:
        return resolve_model(str(name))
    except KvcalcError as e:
        if given is None:
            raise KvcalcError(f"the log's model {name!r} could not be read ({e}); give MODEL "
                              "(a preset, Hub id, model folder or config.json)") from None
        raise


def _items(result) -> list:
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


def _engine_of(text: str, engine: Optional[str]) -> str:
    """Whose start-up log this is: --engine says so, or its lines do."""
    from kvcalc.serving import engine_ref
    from kvcalc.serving.startup import log_engine

    if engine is not None:
        try:
            return engine_ref(engine.partition("@")[0]).name
        except KvcalcError:
            raise KvcalcError(f"--engine {engine}: check reads vLLM, SGLang and "
                              "TensorRT-LLM start-up logs") from None
    return log_engine(text) or "vllm"


def _check_trtllm(text: str, model, gpu, engine, fmt: str, output) -> None:
    """A TensorRT-LLM log beside kvcalc's count: each logged figure, kvcalc's, the ratio;
    for a start-up that failed, the cause and the fix (with or without the count)."""
    from kvcalc.report.render import Tab, deliver
    from kvcalc.serving.trtllm.check import check_trtllm, clamp_note, diagnose_log
    from kvcalc.serving.trtllm.log import read_log

    if output is not None:
        raise KvcalcError("-o writes a vLLM calibration file; TensorRT-LLM logs have none")
    release = (engine.partition("@")[2].strip() or None) if engine else None
    log = read_log(text)
    if log.failure is not None and (gpu is None or model is None or len(log.figures) <= 1):
        d = diagnose_log(log, release)
        settings = {**log.command, **log.setting}
        notes = [n for n in (clamp_note(log),) if n]
        if gpu is None or model is None:
            notes.append("kvcalc's count is not set beside the log: give MODEL and --gpu NAME "
                         "(TensorRT-LLM logs name neither)")
        _deliver_failure(fmt, "tensorrt-llm", release or log.version, model, gpu, settings,
                         d, notes)
        return
    if gpu is None:
        raise KvcalcError("give --gpu NAME: kvcalc reads no GPU name from TensorRT-LLM "
                          "logs (see `kvcalc presets`)")
    if model is None:
        raise KvcalcError("give MODEL (a preset, Hub id, model folder or config.json): "
                          "TensorRT-LLM logs do not name it")
    hardware = resolve_gpu(gpu)
    spec = _model(model, None)
    result = check_trtllm(text, spec, hardware, release=release)

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
    head = f"TensorRT-LLM {result.release} ({result.backend}), {spec.name} on {hardware.name}"
    items = [Tab(head, ["", "logged", "kvcalc", "kvcalc / logged"], rows,
                 caption="\n".join(f"note: {n}" for n in result.notes) or None)]
    d = result.diagnosis
    if d is not None:
        items += [f"did not start ({d.label}): {d.cause}", f"fix: {d.fix}"]
    elif result.refused:
        items.append(f"did not start: {result.refusal}")
    deliver(fmt, items, data=result.as_dict())


def _deliver_failure(fmt: str, engine: str, release, model, gpu, settings: dict, d,
                     notes: list, figures: Optional[dict] = None) -> None:
    """A failed SGLang or TensorRT-LLM start-up without kvcalc's count: what the log says,
    the cause and the fix (JSON: the same, `failure` as for vLLM with `engine_says`)."""
    from kvcalc.report.render import Tab, deliver
    from kvcalc.serving.releases import TITLES

    title = TITLES[engine]
    if d is None:
        raise KvcalcError(f"the log shows no {title} failure kvcalc reads")
    tp = settings.get("tp_size")
    head = (f"{title} " + (release or "(release not printed)")
            + (f", {model}" if model else "") + (f" on {gpu}" if gpu else "")
            + (f", tp {tp}" if isinstance(tp, int) and tp > 1 else "")
            + f": did not start ({d.label})")
    items: list = [head]
    if figures:
        items.append(Tab("Logged before it failed", ["figure", "log"],
                         [[k.replace("_", " "), str(v)] for k, v in figures.items()]))
    items += [f"{title} says: {d.words}", f"cause: {d.cause}", f"fix: {d.fix}", *notes]
    data = {"engine": engine, "engine_release": release, "model": model, "gpu": gpu,
            "settings": {k: v for k, v in settings.items()
                         if isinstance(v, (str, int, float, bool))},
            "figures": dict(figures or {}), "refused": True, "failure": d.as_dict(),
            "notes": list(notes)}
    deliver(fmt, items, data=data)


def _one_request(log, d, model, gpu, release, notes: list):
    """kvcalc's count of MODEL under the log's settings, for the fraction one full-context
    request needs (kvcalc.serving.sglang.check.with_one_request)."""
    from kvcalc.serving import DEFAULT_RELEASE, count, engine_ref
    from kvcalc.serving.sglang.check import flags_from_log, with_one_request
    from kvcalc.serving.weights import Weights

    ref = engine_ref(f"sglang@{release or DEFAULT_RELEASE['sglang']}")
    try:
        counted = count(_model(model, None), resolve_gpu(gpu), flags_from_log(log, ref, Weights()))
    except KvcalcError as e:
        notes.append(f"kvcalc could not count {model} for the one-request fraction: {e}")
        return d
    return with_one_request(d, counted)


def _check_sglang(text: str, model, gpu, engine, fmt: str, output) -> None:
    """An SGLang log beside kvcalc's count: each logged figure, kvcalc's, their ratio."""
    from kvcalc.report.render import Tab, deliver
    from kvcalc.serving.sglang.check import check_sglang
    from kvcalc.serving.sglang.log import read_sglang_log

    if output is not None:
        raise KvcalcError("-o writes a vLLM calibration file; SGLang logs have none")
    from kvcalc.serving.sglang.fail import diagnose

    log = read_sglang_log(text)
    release = engine.partition("@")[2].strip() or None if engine else None
    if log.failure is not None and (gpu is None or not log.figures.get("avail_mem_start_gb")):
        settings = {**log.command, **log.server_args}
        notes = [] if gpu is not None else [
            "kvcalc's count is not set beside the log: give --gpu NAME (SGLang logs do not "
            "name the GPU)"]
        if release is None:
            notes.append("SGLang logs do not print their release (give --engine "
                         "sglang@VERSION); the cause does not depend on it")
        d = diagnose(log)
        if d is not None and d.kind == "no_kv_memory" and gpu is not None and model is not None:
            d = _one_request(log, d, model, gpu, release, notes)
        _deliver_failure(fmt, "sglang", release, model or settings.get("model_path"), gpu,
                         settings, d, notes, figures=log.figures)
        return
    if gpu is None:
        raise KvcalcError("SGLang logs do not name the GPU: give --gpu NAME (see `kvcalc "
                          "presets`)")
    hardware = resolve_gpu(gpu)
    spec = _model(model, log.server_args.get("model_path"))
    result = check_sglang(text, spec, hardware, release=release)

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
    head = f"SGLang {result.release}, {spec.name} on {hardware.name}"
    items = [Tab(head, ["", "logged", "kvcalc", "kvcalc / logged"], rows,
                 caption="\n".join(f"note: {n}" for n in result.notes) or None)]
    d = result.diagnosis
    if d is not None:
        items += [f"did not start ({d.label}): {d.cause}", f"fix: {d.fix}"]
    deliver(fmt, items, data=result.as_dict())
