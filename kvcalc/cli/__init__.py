"""The `kvcalc` command: thin typer commands over the library.

Errors: a KvcalcError (bad input, a request that cannot be met) or a usage error
becomes one line on stderr and exit code 2; nothing below the CLI prints or exits.
"""

import gc
import os
import sys
from typing import Annotated, Optional


def _running_kvcalc() -> bool:
    """This process is the kvcalc command (not a program that imports kvcalc.cli)."""
    prog = sys.argv[0] if sys.argv else ""
    return os.path.basename(prog) in ("kvcalc", "kvcalc.exe") or prog.endswith(
        os.path.join("kvcalc", "__main__.py"))


# Start-up makes some 28,000 objects the cyclic collector tracks (typer's, rich's, kvcalc's
# modules, classes and functions), and they all live until exit: its passes over them
# during the imports, and its last one at exit, found nothing to free and were 12% of
# `kvcalc estimate`'s instructions (README "Start-up"). So it is off until the command
# runs; then what exists is frozen, and it collects the command's own objects only.
_COMMAND_PROCESS = _running_kvcalc()
if _COMMAND_PROCESS:
    gc.disable()

import typer  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from kvcalc import __version__  # noqa: E402
from kvcalc.cli.parsing import OptionProblem, refuse_repeats  # noqa: E402
from kvcalc.errors import KvcalcError, ParameterError, flag_of, os_problem  # noqa: E402


OVERVIEW = """\
kvcalc: how big is a model's KV cache, how many parameters it has, how fast it
can decode on a device and what fits there -- exact, from the model's config.

Try:
  kvcalc estimate Qwen/Qwen3-8B                 a Hub id (or a model's folder)
  kvcalc estimate --preset llama3-8b            one-line answer, then a table
  kvcalc estimate --preset llama2-7b --compare  MHA vs GQA vs MQA
  kvcalc fit --preset llama3-70b --tp 4         the largest batch and context
  kvcalc plan llama3-70b --gpus 8               layouts and the vllm serve line
  kvcalc presets                                the models and devices it knows
  kvcalc estimate llama3-8b --engine vllm       as an engine runs it
  kvcalc measure --heads 32 --kv-heads 8        time real decode steps (torch)
  kvcalc measure --calibrate -o mine.yaml       this device's terms, for --gpu
  kvcalc check vllm.log                         a vLLM start-up log vs kvcalc
  kvcalc mcp                                    its tools for an agent (MCP)

Every command takes -h/--help; `kvcalc --version` prints the version.
"""


# click's UsageError and ClickException, reached through typer's public BadParameter
# (typer >= 0.20 vendors click privately; older typer uses click itself).
_USAGE_ERROR, _CLICK_EXCEPTION = (next(c for c in typer.BadParameter.__mro__ if c.__name__ == n)
                                  for n in ("UsageError", "ClickException"))


class _ReaderGone(Exception):
    """stdout's reader closed the pipe (`kvcalc ... | head`); click would exit 1 on it."""


class KvcalcGroup(TyperGroup):
    """Turns every expected failure into `kvcalc: error: ...` and exit code 2."""

    def invoke(self, ctx):
        if _COMMAND_PROCESS and not gc.isenabled():  # the command runs: collect its objects
            gc.freeze()
            gc.enable()
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            raise _ReaderGone from e

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        try:
            return self._run_kvcalc(args, *rest, standalone_mode=standalone_mode, **kwargs)
        finally:
            if _COMMAND_PROCESS:  # the process ends: no collection over what lives on
                gc.freeze()

    def _run_kvcalc(self, args, *rest, standalone_mode: bool, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        _safe_streams()
        stdout_before = _stdout_identity()
        try:
            if not args:  # `kvcalc` alone: what it answers and what to try
                sys.stdout.write(OVERVIEW)
                rv = 0
            else:
                problem = _completion_shell_problem(args)
                if problem:
                    raise KvcalcError(problem)
                refuse_repeats(self, args)
                try:
                    rv = super().main(args, *rest, standalone_mode=False, **kwargs)
                except SystemExit as e:
                    # click (help pages) meets a closed pipe by exiting 1, rich by pointing
                    # stdout at /dev/null first; the reader had what it wanted: exit 0.
                    if e.code == 1 and (_stdout_reader_gone() or (
                            _stdout_identity() != stdout_before and _stdout_is_devnull())):
                        _silence_stdout()
                        sys.exit(0)
                    raise
            sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        except ParameterError as e:  # a library function's parameter: said as its flag
            _fail(e.worded(flag_of))
        except (KvcalcError, OptionProblem) as e:
            _fail(str(e))
        except _USAGE_ERROR as e:
            message = e.format_message().replace("\n", " ")
            if not message:
                sys.exit(e.exit_code)
            hint = f" (see `kvcalc {e.ctx.info_name} --help`)" if e.ctx and e.ctx.parent else ""
            _fail(message + hint)
        except _CLICK_EXCEPTION as e:
            _fail(e.format_message().replace("\n", " "))
        except typer.Abort:
            sys.stderr.write("kvcalc: aborted\n")
            sys.exit(1)
        except (BrokenPipeError, _ReaderGone):  # `kvcalc ... | head`: the reader has what it wanted
            _silence_stdout()
            sys.exit(0)
        except OSError as e:  # a full disk or a size limit while writing a report
            _fail(f"cannot write: {os_problem(e)}")
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


def _stdout_identity() -> tuple[int, int] | None:
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _stdout_reader_gone() -> bool:
    """stdout is a pipe whose reading end is closed (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no poll()
        return False


def _stdout_is_devnull() -> bool:
    try:
        st = os.stat(os.devnull)
    except OSError:  # pragma: no cover - no /dev/null
        return False
    return _stdout_identity() == (st.st_dev, st.st_ino)


# typer's completion options, --show-completion and --install-completion, are flags: the
# shell is detected (shellingham). Where none is detected, or typer has no script for it,
# typer prints "Shell  not supported." and exits 1: kvcalc says so in its words, exit 2.
_COMPLETION_FLAGS = ("--show-completion", "--install-completion")
_COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion_shell_problem(args: list[str]) -> str | None:
    for arg in args:
        if not arg.startswith("-"):
            return None  # a command: the completion options belong to kvcalc itself
        if arg not in _COMPLETION_FLAGS:
            continue
        shell = _detected_shell()
        if shell is None:
            return (f"{arg}: cannot tell which shell this is; run it from the shell to "
                    f"complete in ({', '.join(_COMPLETION_SHELLS)})")
        if shell not in _COMPLETION_SHELLS:
            return (f"{arg}: kvcalc completes {', '.join(_COMPLETION_SHELLS)}; this shell "
                    f"is {shell}")
    return None


def _detected_shell() -> str | None:
    """The shell kvcalc runs under, as typer detects it; None where none is found."""
    try:
        import shellingham

        return shellingham.detect_shell()[0].lower()
    except Exception:  # shellingham not installed, or no shell among the parents
        return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the flush at interpreter exit cannot fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _safe_streams() -> None:
    """A closed stdout (`kvcalc ... >&-`) or stderr becomes /dev/null's writer, so output
    goes nowhere instead of raising; a stream whose encoding cannot show a character
    (PYTHONIOENCODING=ascii) replaces it instead of failing."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
            continue
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf_8") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):  # pragma: no cover - a detached stream
                pass


def _fail(message: str) -> None:
    message = " ".join(message.split())
    try:
        sys.stderr.write(f"kvcalc: error: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(2)


def _invoked_command(argv: list[str]) -> str | None:
    """The command `argv` runs, where only it needs building; None while the shell
    completes a line (every command is a candidate) or when argv names none."""
    if not argv or any(k.startswith("_KVCALC_COMPLETE") for k in os.environ):
        return None
    return argv[0]


app = typer.Typer(
    cls=KvcalcGroup,
    name="kvcalc",
    help="KV-cache, parameter and decode-bandwidth calculator for MHA, GQA, MQA and MLA "
    "models, that measures what it predicts.",
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    add_completion=True,
    # click's own help layout: option names whole and descriptions wrapped at any width
    # (rich's panels cut "--gpu-memory-utilizat…" at 80 columns), and no rich import.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
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
    """kvcalc: exact KV-cache and bandwidth math, checked against real decode steps.

    Start with `kvcalc estimate --preset llama3-8b`; `kvcalc presets` lists the models
    and devices.
    """


# The module that registers each command; `kvcalc NAME ...` imports only NAME's (help,
# completion and anything else import them all).
_MODULES = {"estimate": "estimate", "fit": "estimate", "presets": "presets_cmd",
            "measure": "measure", "sweep": "sweep", "check": "check", "plan": "plan",
            "bench": "bench", "mcp": "mcp", "schema": "schema_cmd"}


def _register() -> None:
    invoked = _invoked_command(sys.argv[1:]) if _COMMAND_PROCESS else None
    wanted = _MODULES.get(invoked) if invoked else None
    for module_name in dict.fromkeys(_MODULES.values()):
        if wanted is not None and module_name != wanted:
            continue
        try:
            module = __import__(f"kvcalc.cli.{module_name}", fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name != f"kvcalc.cli.{module_name}":
                raise
            continue
        module.register(app, only=invoked if wanted is not None else None)


_register()
