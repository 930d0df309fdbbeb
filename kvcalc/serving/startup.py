"""A start-up log of any engine: whose it is (`log_engine`) and, when it failed, why and
what to change (`failed_startup`): the library's `kvcalc check LOG` for a failed start-up,
without a model or GPU. It sits above the three wings (it reads each one's log reader and
`fail` module); the records are kvcalc.serving.failure's."""

from __future__ import annotations

from kvcalc.serving.failure import Diagnosis

__all__ = ["failed_startup", "log_engine"]


def log_engine(text: str) -> str | None:
    """Whose start-up log `text` is, by the lines only that engine prints (TensorRT-LLM's
    "[TensorRT-LLM]" / "[TRT-LLM]" tags first, then SGLang's); None: neither, which the
    vLLM reader then judges."""
    from kvcalc.serving.sglang.log import is_sglang_log
    from kvcalc.serving.trtllm.log import is_trtllm_log

    if is_trtllm_log(text):
        return "tensorrt-llm"
    return "sglang" if is_sglang_log(text) else None


def failed_startup(text: str, engine: str | None = None,
                   release: str | None = None) -> Diagnosis | None:
    """Why the start-up `text` logs failed, and the fix (None: it shows no failure), for
    any of the three engines: `kvcalc check LOG`'s cause and fix, without a model or GPU.
    `engine` ("vllm", "sglang", "tensorrt-llm"; default: read from the lines) and
    `release` (TensorRT-LLM's, where the log does not print it: its default fraction)."""
    which = engine or log_engine(text) or "vllm"
    if which == "sglang":
        from kvcalc.serving.sglang.fail import diagnose
        from kvcalc.serving.sglang.log import read_sglang_log

        return diagnose(read_sglang_log(text))
    if which == "tensorrt-llm":
        from kvcalc.serving.trtllm.check import diagnose_log
        from kvcalc.serving.trtllm.log import read_log

        return diagnose_log(read_log(text), release)
    from kvcalc.serving.vllm.check import diagnose
    from kvcalc.serving.vllm.log import parse_vllm_log

    log = parse_vllm_log(text)
    d = diagnose(log)
    if d is None:
        return None
    return Diagnosis(engine="vllm", kind=d.kind, cause=d.cause, fix=d.fix, words=d.words,
                     figures=dict(log.failure.figures) if log.failure else {})
