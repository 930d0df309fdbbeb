"""`kvcalc check LOG` as a library function: `kvcalc.check(log=TEXT, model=..., gpu=...)`
returns a CheckAnswer whose `as_dict()` is `kvcalc check LOG --format json`, exactly
(tests/test_answers_check_sweep.py holds them equal).

A vLLM, SGLang or TensorRT-LLM start-up log beside kvcalc's count of the same start-up
(kvcalc.serving.vllm.check, kvcalc.serving.sglang.check, kvcalc.serving.trtllm.check); for
a start-up that failed, the cause the log gives and the fix (each engine's `fail`), with
or without the count.
"""

from __future__ import annotations

import copy
from dataclasses import field

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.ground.record import record

ENGINES = ("vllm", "sglang", "tensorrt-llm")


@record
class CheckAnswer:
    """What `kvcalc check` answers: `as_dict()` is its JSON; the rest is what its tables
    draw."""

    engine: str  # whose start-up log: "vllm", "sglang" or "tensorrt-llm"
    data: dict = field(hash=False, repr=False)
    # The engine's check (kvcalc.serving.<engine>.check): each logged figure beside
    # kvcalc's count; None for a failed start-up answered from the log alone
    result: object | None = None
    log: object | None = None  # the parsed vLLM log (a failed start-up's table reads it)
    diagnosis: object | None = None  # SGLang's or TensorRT-LLM's failure, from the log alone
    spec: object | None = None  # kvcalc.spec.ModelSpec counted (SGLang, TensorRT-LLM)
    hardware: object | None = None  # kvcalc.spec.Hardware counted on (SGLang, TensorRT-LLM)

    @property
    def counted(self) -> bool:
        """kvcalc's count is set beside the log's figures."""
        return self.result is not None

    def as_dict(self) -> dict:
        return copy.deepcopy(self.data)

    def calibration_text(self, source: str) -> str | None:
        """The calibration file a vLLM log teaches (its measured terms, with the GPU,
        model, tp and pp they belong to; `fit(calibration=...)` reads it), naming the
        log `source`; None where there is none: another engine's log, or a start-up that
        failed before kvcalc's count was set beside it."""
        if self.engine != "vllm" or self.result is None:
            return None
        from kvcalc.serving.vllm.calibration import calibration_text

        return calibration_text(self.result, source)


def check(*, log: str, model=None, gpu=None, vllm_version: str | None = None,
          engine: str | None = None, log_name: str | None = None) -> CheckAnswer:
    """kvcalc's count set beside every figure a start-up log printed.

    `log`: the log's text (vLLM 0.6 to 0.33, SGLang or TensorRT-LLM; one that started or
    one that failed). `model`: a ModelSpec or MODEL (a preset, Hub id, folder or config
    file; default: the model the log names). `gpu`: a Hardware, a hardware preset or a
    hardware YAML file (default: the GPU the log names). `vllm_version`: the release, for
    a vLLM log that does not print it (e.g. "0.9.2"). `engine`: the engine and release a
    log that does not say ran ("sglang@0.5.4": SGLang logs never print their release;
    default: read from the log). `log_name`: where the log came from (a file name), said
    in the messages about it. Memory figures are in bytes (`*_bytes`), token counts in
    tokens.
    """
    which = log_engine_of(log, engine)
    if which == "sglang":
        return _sglang(log, model, gpu, engine)
    if which == "tensorrt-llm":
        return _trtllm(log, model, gpu, engine)
    return _vllm(log, model, gpu, vllm_version, engine, log_name)


def log_engine_of(text: str, engine: str | None) -> str:
    """Whose start-up log this is ("vllm", "sglang" or "tensorrt-llm"): `engine` says so,
    or its lines do."""
    from kvcalc.serving import engine_ref
    from kvcalc.serving.startup import log_engine

    if engine is not None:
        try:
            return engine_ref(engine.partition("@")[0]).name
        except KvcalcError:
            raise ParameterError("{engine} " + literal(engine) + ": check reads vLLM, SGLang "
                                 "and TensorRT-LLM start-up logs", "engine") from None
    return log_engine(text) or "vllm"


def _vllm(text: str, model, gpu, vllm_version, engine, log_name) -> CheckAnswer:
    from kvcalc.serving.vllm.check import check_log, gpu_preset_for
    from kvcalc.serving.vllm.log import parse_vllm_log

    where = f"{log_name}: " if log_name else ""
    try:
        parsed = parse_vllm_log(text)
    except KvcalcError as e:
        if engine is None and "does not look like" in str(e):
            raise KvcalcError(f"{where}this does not look like a vLLM, SGLang or TensorRT-LLM "
                              "start-up log: no line any of them prints while loading a model, "
                              "sizing its KV cache or failing to start was found") from None
        raise
    failed = parsed.failure is not None
    if not parsed.sized_kv_cache and not parsed.terms and not failed:
        raise KvcalcError(f"{where}the log stops before vLLM printed any memory term (weights, "
                          "profile, KV cache): paste it up to 'Maximum concurrency' or the "
                          "error that stopped the engine")
    measured = [t for t in parsed.terms if t not in ("total", "budget")]
    if failed and not parsed.sized_kv_cache and not measured:
        # Nothing to count against: the cause and the fix are the answer.
        return CheckAnswer(engine="vllm", data=_failure_data(parsed, _name(gpu), []),
                           log=parsed)
    try:
        spec = _model(model, parsed.model)
        if gpu is None:
            name = gpu_preset_for(parsed.gpu_name) if parsed.gpu_name else None
            if name is None:
                raise ParameterError("the log does not name a GPU kvcalc knows" + (
                    f" ({literal(parsed.gpu_name)})" if parsed.gpu_name else "")
                    + ": give {gpu} NAME (see `kvcalc presets`)", "gpu")
            gpu = name
        hardware = _hardware(gpu)
        if hardware is None:
            raise ParameterError("check needs the GPU the log ran on: {gpu} NAME", "gpu")
        result = check_log(parsed, spec, hardware, vllm_version=vllm_version)
    except KvcalcError as e:
        if not failed or (model is not None and gpu is not None):
            raise
        # A failed start-up whose model, GPU or release the log does not give: its cause
        # and fix still stand; kvcalc's count needs what is missing.
        notes = [f"kvcalc's count is not set beside the logged terms: {_as_flags(e)}"]
        return CheckAnswer(engine="vllm", data=_failure_data(parsed, _name(gpu), notes),
                           log=parsed)
    return CheckAnswer(engine="vllm", data=result.as_dict(), result=result, log=parsed)


def _as_flags(e: KvcalcError) -> str:
    """A note in the command's JSON (its contract: as the command line has always said
    it) names a missing parameter as the command line takes it."""
    if isinstance(e, ParameterError):
        return e.worded(lambda p: "MODEL" if p == "model" else "--" + p.replace("_", "-"))
    return str(e)


def _failure_data(parsed, gpu: str | None, notes: list) -> dict:
    """JSON for a failed vLLM start-up without kvcalc's count: what the log says, the
    cause and the fix."""
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


def _trtllm(text: str, model, gpu, engine) -> CheckAnswer:
    """A TensorRT-LLM log beside kvcalc's count; for a start-up that failed, the cause
    and the fix (with or without the count)."""
    from kvcalc.serving.trtllm.check import check_trtllm, clamp_note, diagnose_log
    from kvcalc.serving.trtllm.log import read_log

    release = (engine.partition("@")[2].strip() or None) if engine else None
    log = read_log(text)
    if log.failure is not None and (gpu is None or model is None or len(log.figures) <= 1):
        d = diagnose_log(log, release)
        notes = [n for n in (clamp_note(log),) if n]
        if gpu is None or model is None:
            notes.append("kvcalc's count is not set beside the log: give MODEL and --gpu NAME "
                         "(TensorRT-LLM logs name neither)")
        return _failure("tensorrt-llm", release or log.version, _name(model), _name(gpu),
                        {**log.command, **log.setting}, d, notes)
    if gpu is None:
        raise ParameterError("give {gpu} NAME: kvcalc reads no GPU name from TensorRT-LLM "
                             "logs (see `kvcalc presets`)", "gpu")
    if model is None:
        raise ParameterError("give {model} (a preset, Hub id, model folder or config.json): "
                             "TensorRT-LLM logs do not name it", "model")
    hardware = _hardware(gpu)
    spec = _model(model, None)
    result = check_trtllm(text, spec, hardware, release=release)
    return CheckAnswer(engine="tensorrt-llm", data=result.as_dict(), result=result, spec=spec,
                       hardware=hardware)


def _sglang(text: str, model, gpu, engine) -> CheckAnswer:
    """An SGLang log beside kvcalc's count; for a start-up that failed without the free
    memory it started with (or without a GPU), the cause and the fix."""
    from kvcalc.serving.sglang.check import check_sglang
    from kvcalc.serving.sglang.fail import diagnose
    from kvcalc.serving.sglang.log import read_sglang_log

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
        return _failure("sglang", release, _name(model) or settings.get("model_path"),
                        _name(gpu), settings, d, notes, figures=log.figures)
    if gpu is None:
        raise ParameterError("SGLang logs do not name the GPU: give {gpu} NAME (see `kvcalc "
                             "presets`)", "gpu")
    hardware = _hardware(gpu)
    spec = _model(model, log.server_args.get("model_path"))
    result = check_sglang(text, spec, hardware, release=release)
    return CheckAnswer(engine="sglang", data=result.as_dict(), result=result, spec=spec,
                       hardware=hardware)


def _one_request(log, d, model, gpu, release, notes: list):
    """kvcalc's count of the model under the log's settings, for the fraction one
    full-context request needs (kvcalc.serving.sglang.check.with_one_request)."""
    from kvcalc.serving import DEFAULT_RELEASE, count, engine_ref
    from kvcalc.serving.sglang.check import flags_from_log, with_one_request
    from kvcalc.serving.weights import Weights

    ref = engine_ref(f"sglang@{release or DEFAULT_RELEASE['sglang']}")
    try:
        counted = count(_model(model, None), _hardware(gpu), flags_from_log(log, ref, Weights()))
    except KvcalcError as e:
        notes.append(f"kvcalc could not count {_name(model)} for the one-request fraction: "
                     f"{_as_flags(e)}")
        return d
    return with_one_request(d, counted)


def _failure(engine: str, release, model, gpu, settings: dict, d, notes: list,
             figures: dict | None = None) -> CheckAnswer:
    """A failed SGLang or TensorRT-LLM start-up without kvcalc's count: what the log says,
    the cause and the fix (`failure` as for vLLM, with `engine_says`)."""
    if d is None:
        from kvcalc.serving.releases import TITLES

        raise KvcalcError(f"the log shows no {TITLES[engine]} failure kvcalc reads")
    data = {"engine": engine, "engine_release": release, "model": model, "gpu": gpu,
            "settings": {k: v for k, v in settings.items()
                         if isinstance(v, (str, int, float, bool))},
            "figures": dict(figures or {}), "refused": True, "failure": d.as_dict(),
            "notes": list(notes)}
    return CheckAnswer(engine=engine, data=data, diagnosis=d)


def _name(thing) -> str | None:
    """A model or device as its name: the text given, or a ModelSpec's or Hardware's."""
    return thing if thing is None or isinstance(thing, str) else thing.name


def _model(given, logged: str | None):
    """The ModelSpec: `given` (a ModelSpec or MODEL), else the model the log names."""
    from kvcalc.model_source import resolve_model

    if given is not None and not isinstance(given, str):
        return given
    name = given or logged
    if name is None:
        raise ParameterError("the log does not name its model: give {model} (a preset, Hub id, "
                             "model folder or config.json)", "model")
    try:
        return resolve_model(str(name))
    except KvcalcError as e:
        if given is None:
            raise ParameterError("the log's model " + literal(repr(name)) + " could not be read ("
                                 + literal(e) + "); give {model} (a preset, Hub id, model "
                                 "folder or config.json)", "model") from None
        raise


def _hardware(gpu):
    """A Hardware: itself, a hardware preset's name or a hardware YAML file; None for
    "none"."""
    if gpu is None or not isinstance(gpu, str):
        return gpu
    if gpu.lower() == "none":
        return None
    from kvcalc.presets import hardware_named

    return hardware_named(gpu)
