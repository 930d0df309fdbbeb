"""The one error type the CLI turns into a one-line message and exit code 2."""


class KvcalcError(ValueError):
    """Bad input or a request that cannot be met; the message is shown to the user."""
