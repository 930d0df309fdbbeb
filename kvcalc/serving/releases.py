"""The release each engine's memory is counted for when none is named: the newest whose
source was read for every rule in its wing. Written here once (a leaf: it imports only
the error type, so every wing and command may read it), with the reader of a release's
version text the SGLang and TensorRT-LLM wings share."""

from kvcalc.errors import KvcalcError

DEFAULT_RELEASE = {"vllm": "0.33", "sglang": "0.5.4", "tensorrt-llm": "1.0"}
# How each engine is named in a headline or a message.
TITLES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}


def version_parts(text: str, engine: str, shape: str) -> tuple[int, int, int]:
    """A release's (major, minor, patch) from its version text as the engine prints it:
    '0.5.4' -> (0, 5, 4); '0.4.6.post5' -> (0, 4, 6); 'v0.21.0rc1' -> (0, 21, 0);
    '1.1' -> (1, 1, 0). `engine` and `shape` ("0.MINOR[.PATCH]") word the refusal."""
    parts: list[int] = []
    for p in str(text).strip().lstrip("v").split("."):
        digits = ""
        for ch in p:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(parts) == 3 or digits != p:
            break
    if len(parts) < 2:
        raise KvcalcError(f"a{'n' if engine[0] in 'AEIOS' else ''} {engine} release looks like "
                          f"{shape}, got {text!r}")
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)  # type: ignore[return-value]
