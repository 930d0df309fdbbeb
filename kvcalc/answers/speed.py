"""Whose time and whose memory count: `engine`, `mfu` and `bandwidth_efficiency` as every
command and its library function read them (the speed engine kvcalc.engines names, the
memory engine kvcalc.serving counts, or the datasheet roofline at given shares)."""

from __future__ import annotations

from kvcalc.errors import KvcalcError, ParameterError, literal

# No engine and no share given: the device's default engine, chosen once the device is
# known (kvcalc.engines.default_engine: vLLM on a GPU).
DEFAULT = object()


def engine_option(text, mfu=None, bandwidth_efficiency=None, default=None):
    """engine NAME[@VERSION]: the engine file; `roofline`, mfu or bandwidth_efficiency:
    None (the datasheet roofline); none of them: `default`."""
    from kvcalc.engines import ROOFLINE, load_engine

    if text is None:
        return None if mfu is not None or bandwidth_efficiency is not None else default
    if text.strip() == ROOFLINE:
        return None
    if mfu is not None or bandwidth_efficiency is not None:
        raise ParameterError("{mfu} and {bandwidth_efficiency} set the datasheet roofline; "
                             "{engine} " + literal(text) + " times with its own fitted terms: "
                             "give one", "mfu", "bandwidth_efficiency", "engine")
    ref = memory_engine(text)
    if ref is not None:
        # The release decides the memory count (checked by the engine's wing); the times
        # are the engine's terms fitted on its published rows, whatever their release.
        return load_engine(ref.name)[0]
    return load_engine(text)[0]


def memory_engine(text):
    """The engine whose memory engine NAME[@VERSION] counts (kvcalc.serving), or None for
    an engine kvcalc only times (llama.cpp, ...) or the roofline."""
    if text is None:
        return None
    from kvcalc.engines import ROOFLINE
    from kvcalc.serving import _SPELLINGS, engine_ref

    name = text.strip().partition("@")[0].strip().lower()
    if text.strip() == ROOFLINE or name not in _SPELLINGS:
        return None
    try:
        return engine_ref(text)
    except KvcalcError as e:
        raise ParameterError("{engine} " + literal(text.strip()) + ": " + literal(e),
                             "engine") from None


def resolve(engine, hardware):
    """`engine` once the device is known: DEFAULT becomes the device's default engine."""
    if engine is not DEFAULT:
        return engine
    from kvcalc.engines import default_engine

    return default_engine(hardware)


def shares(mfu, bandwidth_efficiency) -> tuple:
    """mfu and bandwidth_efficiency, their defaults where not given."""
    from kvcalc.speed.latency import DEFAULT_BANDWIDTH_EFFICIENCY, DEFAULT_MFU

    return (DEFAULT_MFU if mfu is None else mfu,
            DEFAULT_BANDWIDTH_EFFICIENCY if bandwidth_efficiency is None else bandwidth_efficiency)
