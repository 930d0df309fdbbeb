"""The one error type the CLI turns into a one-line message and exit code 2."""


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
