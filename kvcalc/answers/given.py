"""What the library functions share in reading their parameters: a device, a model, a
size, and the engine flags each engine owns, every error naming the parameter
(ParameterError), which the command line says as its flag."""

from __future__ import annotations

import os
import re

from kvcalc.errors import KvcalcError, ParameterError, literal

_MARK = re.compile("\x00([a-z0-9_]+)\x01")


def device(gpu, command: str):
    """A Hardware: itself, a hardware preset's name or a hardware YAML file; None or
    "none" is refused: `command` needs a device."""
    if isinstance(gpu, os.PathLike):
        gpu = os.fspath(gpu)
    if isinstance(gpu, str) and gpu.strip().lower() != "none":
        from kvcalc.presets import hardware_named

        return hardware_named(gpu)
    if gpu is None or isinstance(gpu, str):
        raise ParameterError(command + " needs a device: {gpu} NAME (see `kvcalc presets`)",
                             "gpu")
    return gpu


def model_spec(model):
    """A ModelSpec: itself, or MODEL (a preset, Hub id, model folder or config file)."""
    if isinstance(model, (str, os.PathLike)):
        from kvcalc.model_source import resolve_model

        return resolve_model(model)
    return model


def sized(name: str, value, upper: int) -> None:
    """A positive whole number below a sanity limit (kvcalc.ground.dtypes.check_size),
    else a ParameterError naming `name`."""
    from kvcalc.ground.dtypes import check_size

    try:
        check_size("\x00" + name + "\x01", value, upper)
    except KvcalcError as e:
        raise _named(e) from None


def owned(engine: str, given: dict) -> None:
    """Each engine flag given (by parameter name) is `engine`'s own
    (kvcalc.serving.flags.check_owners), else a ParameterError naming it and the
    engine's own."""
    from kvcalc.serving.flags import check_owners

    try:
        check_owners(engine, given, lambda name: "\x00" + name + "\x01")
    except KvcalcError as e:
        raise _named(e) from None


def _named(e: KvcalcError) -> ParameterError:
    """A message whose parameters are marked ("\\0name\\1") as a ParameterError."""
    text = literal(e)
    return ParameterError(_MARK.sub(r"{\1}", text), *_MARK.findall(text))


def unexpected(function: str, given: dict, known) -> None:
    """A keyword argument beyond the function's named ones and `known` is a TypeError,
    as Python says it for a named one."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
