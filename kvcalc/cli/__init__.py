"""The `kvcalc` command: thin typer commands over the library.

Errors: a KvcalcError (bad input, a request that cannot be met) or a usage error
becomes one line on stderr and exit code 2; nothing below the CLI prints or exits.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click as typer._click
    from typer._click import exceptions as click_exceptions
except ImportError:  # older typer uses click itself
    from click import exceptions as click_exceptions

from kvcalc import __version__
from kvcalc.errors import KvcalcError


class _ReaderGone(Exception):
    """stdout's reader closed the pipe (`kvcalc ... | head`); click would exit 1 on it."""


class KvcalcGroup(TyperGroup):
    """Turns every expected failure into `kvcalc: error: ...` and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            raise _ReaderGone from e

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
            sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        except KvcalcError as e:
            _fail(str(e))
        except click_exceptions.UsageError as e:
            message = e.format_message().replace("\n", " ")
            if not message:  # `kvcalc` alone: the help was the answer
                sys.exit(e.exit_code)
            hint = f" (see `kvcalc {e.ctx.info_name} --help`)" if e.ctx and e.ctx.parent else ""
            _fail(message + hint)
        except click_exceptions.ClickException as e:
            _fail(e.format_message().replace("\n", " "))
        except typer.Abort:
            sys.stderr.write("kvcalc: aborted\n")
            sys.exit(1)
        except (BrokenPipeError, _ReaderGone):  # `kvcalc ... | head`: the reader has what it wanted
            # Point stdout at /dev/null so the flush at interpreter exit cannot fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as e:  # a full disk or a size limit while writing a report
            where = f" ({e.filename})" if e.filename else ""
            _fail(f"cannot write{where}: {e.strerror or e}")
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str) -> None:
    sys.stderr.write(f"kvcalc: error: {message}\n")
    sys.exit(2)


app = typer.Typer(
    cls=KvcalcGroup,
    name="kvcalc",
    help="KV-cache, parameter and decode-bandwidth calculator for MHA, GQA, MQA and MLA "
    "models, that measures what it predicts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvcalc {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """kvcalc: exact KV-cache and bandwidth math, checked against real decode steps."""


def _register() -> None:
    from kvcalc.cli import estimate, presets_cmd

    estimate.register(app)
    presets_cmd.register(app)
    for name in ("measure", "sweep"):
        try:
            module = __import__(f"kvcalc.cli.{name}", fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name != f"kvcalc.cli.{name}":
                raise
            continue
        module.register(app)


_register()
