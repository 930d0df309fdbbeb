"""`kvcalc schema COMMAND`: the JSON Schema of a command's `--format json` (kvcalc.schema)."""

from __future__ import annotations

from typing import Annotated

import typer

from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError, ParameterError


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only, name="schema")
    def schema_command(
        name: Annotated[str, typer.Argument(
            metavar="COMMAND", help="estimate, fit, check, sweep, plan or bench.")],
    ) -> None:
        """Print the JSON Schema (draft 2020-12) of COMMAND's `--format json`: every
        property typed, with its unit (kvcalc/schemas/COMMAND.json, kvcalc.schema(COMMAND)).
        Example: `kvcalc schema fit`."""
        import json

        import kvcalc

        try:
            schema = kvcalc.schema(name)
        except ParameterError as e:
            raise KvcalcError(e.worded(lambda p: "COMMAND")) from None
        typer.echo(json.dumps(schema, indent=2))
