"""The one error type the CLI turns into a one-line message and exit code 2."""

import errno


class KvcalcError(ValueError):
    """Bad input or a request that cannot be met; the message is shown to the user."""


def quoted(text: str, limit: int = 60) -> str:
    """repr(text) for a message, cut short when long: '999...' (5,000 characters)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit // 2]!r}... ({len(text):,} characters)"


def value_problem(e: ValueError) -> str:
    """One line for a ValueError raised while parsing a file (json, yaml): Python's
    limit on integer digits is said plainly, without its advice to raise the limit."""
    text = " ".join(str(e).split())
    if "integer string conversion" in text:
        import sys

        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        return f"a number has over {limit:,} digits"
    return text


_ERRNO_WORDS = {
    errno.ENOENT: "no such file or folder",
    errno.EISDIR: "it is a folder",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "not permitted",
    errno.ELOOP: "a loop of symbolic links",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "over the disk quota",
    errno.EFBIG: "the file is too large for this file system or limit",
    errno.EROFS: "the file system is read-only",
    errno.ENAMETOOLONG: "the name is too long",
    errno.EIO: "an input/output error",
}


def os_problem(e: OSError) -> str:
    """An OSError in words, with the file it names, without Python's '[Errno N]'."""
    words = _ERRNO_WORDS.get(e.errno) or (e.strerror or "the system refused").lower()
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{words}"


class ParameterError(KvcalcError):
    """A value a library function cannot take. The message names the function's own
    parameters (`max_model_len must be positive, got 0`); `worded(name_of)` says it with
    other names for them: the command line's flags (`--max-model-len must be ...`).

    `template` holds `{name}` for each parameter named (other braces doubled)."""

    def __init__(self, template: str, *parameters: str):
        self.template, self.parameters = template, parameters
        super().__init__(template.format(**{p: p for p in parameters}))

    def worded(self, name_of) -> str:
        return self.template.format(**{p: name_of(p) for p in self.parameters})


def literal(text: object) -> str:
    """`text` safe inside a ParameterError template (its braces doubled)."""
    return str(text).replace("{", "{{").replace("}", "}}")


# Library parameters whose flag is not the name with '-' for '_' (kvcalc.fit's, ...).
_FLAGS = {"model": "MODEL", "kv_cache_memory_bytes": "--kv-cache-memory",
          "reserve_bytes": "--reserve", "hardware": "--gpu", "dp": "--data-parallel-size",
          "transfer_bandwidth_gb_per_s": "--transfer-bandwidth"}


def flag_of(parameter: str) -> str:
    """The command line's flag for a library function's parameter: max_model_len ->
    --max-model-len (kvcalc.cli says a ParameterError with these)."""
    return _FLAGS.get(parameter) or "--" + parameter.replace("_", "-")


def as_flags(e: Exception) -> str:
    """`e` as the command line says it, for text kept where the command's words are the
    contract: a refusal carried into a command's JSON or into another error's message."""
    return e.worded(flag_of) if isinstance(e, ParameterError) else str(e)
