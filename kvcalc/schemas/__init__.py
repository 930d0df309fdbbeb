"""The JSON Schema (draft 2020-12) of each command's `--format json`, kept beside this
module as <command>.json: the record each library function returns (`as_dict()`) is
declared there, every property typed, with its unit. `kvcalc schema COMMAND` prints one,
the MCP tools declare theirs as outputSchema, and tests/test_schema.py validates every
golden answer against them. Reading one imports nothing but json."""

from __future__ import annotations

import json
from pathlib import Path

from kvcalc.errors import ParameterError

COMMANDS = ("estimate", "fit", "check", "sweep", "plan", "bench")

_HERE = Path(__file__).resolve().parent


def schema(command: str) -> dict:
    """The JSON Schema of `kvcalc COMMAND --format json`, a fresh dict (COMMANDS)."""
    if command not in COMMANDS:
        said = repr(command).replace("{", "{{").replace("}", "}}")
        raise ParameterError(f"{{command}} {said}: kvcalc's schemas are for "
                             + ", ".join(COMMANDS), "command")
    return json.loads((_HERE / f"{command}.json").read_text(encoding="utf-8"))
