"""Reading the command line in kvcalc's own words.

typer leaves an option's value to click's types, whose messages ("Invalid value for
'--tp': 'x' is not a valid integer.") are not kvcalc's.
`plain_options` gives every option of the simple kinds kvcalc uses (int, float,
str, Path, an Enum of choices) a `parser=` (typer's public setting) that says what
was expected, naming the flag and its unit.
`refuse_repeats` refuses an option given twice (click keeps the last).
"""

from __future__ import annotations

import re
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from kvcalc.ground import units
from kvcalc.errors import KvcalcError, quoted

# What a whole-number flag counts, for messages: "--layers expects a whole number
# of layers". Token and sequence counts (--seq-len, --batch ...) are read by
# kvcalc.ground.units, which also takes vLLM's suffixes (32k, 32K).
UNITS = {
    "--tp": "devices", "--kv-scale-bytes": "bytes", "--layers": "layers",
    "--heads": "query heads", "--kv-heads": "K/V heads", "--head-dim": "elements per head",
    "--d-model": "elements", "--d-ff": "elements", "--vocab": "tokens",
    "--warmup": "calls", "--iters": "repetitions",
}
_INT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")
_MAX_INT_DIGITS = 30  # far beyond every limit kvcalc checks afterwards


def _flag(param) -> str:
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    return longs[0] if longs else (getattr(param, "human_readable_name", None) or param.name)


def _read(kind: Any, flag: str, value: Any) -> Any:
    """`value` of `flag` as a `kind` (int, float, str, Path or an Enum), or a
    KvcalcError in kvcalc's words."""
    if value is None:
        return None
    if isinstance(kind, type) and issubclass(kind, Enum):
        if isinstance(value, kind):
            return value
        text = str(value).strip().lower()
        for member in kind:
            if str(member.value).lower() == text:
                return member
        raise KvcalcError(f"{flag} expects one of {', '.join(str(m.value) for m in kind)}; "
                          f"got {quoted(str(value))}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        if flag in units.COUNTS:  # 32k, 128K: vLLM's suffixes (kvcalc.ground.units)
            return units.count(text, flag)
        unit = UNITS.get(flag)
        what = f"a whole number of {unit}" if unit else "a whole number"
        if not _INT.fullmatch(text):
            raise KvcalcError(f"{flag} expects {what}, got {quoted(str(value))}")
        if len(text.replace("_", "").lstrip("+-")) > _MAX_INT_DIGITS:
            raise KvcalcError(f"{flag}: {quoted(text)} is absurdly large")
        return int(text)
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is None or number != number or number in (float("inf"), float("-inf")) \
                or len(text) > 40:
            raise KvcalcError(f"{flag} expects a number such as 0.9, got {quoted(str(value))}")
        return number
    if kind is Path:
        if isinstance(value, Path):
            return value
        if not str(value):
            raise KvcalcError(f"{flag} expects a file name, got ''")
        return Path(value)
    return value if isinstance(value, str) else str(value)


def _simple_kind(annotation: Any) -> Any:
    """int, float, bool, str, Path or an Enum class (Optional stripped), else None."""
    args = typing.get_args(annotation)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return None
        annotation = rest[0]
    if annotation in (int, float, bool, str, Path):
        return annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return annotation
    return None


class OptionProblem(Exception):
    """A value kvcalc cannot read, raised from a `parser=`. Not a ValueError: click, which
    runs every parser, would rewrite a ValueError's message in its own words ("Invalid
    value for ..."); this passes through it untouched to KvcalcGroup, which prints it."""


def reader(kind: Any, flag: str):
    """The `parser=` plain_options gives a `kind` option: kvcalc's words, vLLM's suffixes
    for the count flags of kvcalc.ground.units."""
    def parse(value: Any) -> Any:
        try:
            return _read(kind, flag, value)
        except KvcalcError as e:
            raise OptionProblem(str(e)) from None

    return parse


def plain_options(fn):
    """Give every option and argument of the simple kinds kvcalc uses (int, float, str,
    Path, an Enum of choices; Optional or not) a `parser=` that reads it in kvcalc's
    words and units, through typer's public `parser` setting. Switches (bool) need none:
    typer passes a switch's True or False through as it is."""
    import copy
    import inspect

    sig = inspect.signature(fn, eval_str=True)
    params = []
    for p in sig.parameters.values():
        annotation = p.annotation
        meta = getattr(annotation, "__metadata__", ())
        if meta:  # Annotated[T, typer.Option(...)]
            info, kind = meta[0], _simple_kind(typing.get_args(annotation)[0])
        else:  # `x: T = typer.Option(...)`, or a plain parameter
            info, kind = p.default, _simple_kind(annotation)
        if getattr(info, "parser", False) is None and kind not in (None, bool):
            flag = _declared_flag(info, p.name)
            if meta and not flag.startswith("--"):  # named after the parameter: its own
                info = copy.copy(info)
                annotation = typing.Annotated[typing.get_args(annotation)[0], info]
            # Else in place: the parser follows from the option alone, so an alias that
            # several commands share takes it once (a new Annotated per option was a
            # third of a command's build time).
            info.parser = reader(kind, flag)
        params.append(p.replace(annotation=annotation))
    fn.__signature__ = sig.replace(parameters=params)
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


def with_options(table: str):
    """Give a command the options of `table` ("module:NAME", a sequence of (parameter,
    Annotated[T, typer.Option(...)] alias, default) read when the command is built), in
    order, after its own parameters; it receives them as one dict, `options`. A command's
    options so live in a module of their own, and the command stays parse, call, print."""
    def decorate(fn):
        inner = getattr(fn, "build_options", None)
        fn.build_options = lambda: _with_table(inner() if inner else fn, table)
        return fn

    return decorate


def _with_table(fn, table: str):
    import functools
    import importlib
    import inspect

    module, _, name = table.partition(":")
    rows = getattr(importlib.import_module(module), name)
    sig = inspect.signature(fn, eval_str=True)
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in sig.parameters.values() if p.name != "options"]
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=alias) for n, alias, default in rows]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        options = {n: kwargs.pop(n) for n, _, _ in rows}
        return fn(*args, options=options, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=own + extra)
    wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
    return wrapper


def command(app, only: str | None = None, name: str | None = None):
    """`app.command(name=name)` over plain_options. `only`: the command this process
    runs (kvcalc/cli/__init__.py reads it off argv): the others of the module are not
    built, since turning their signatures into click options is start-up time."""
    def decorate(fn):
        if only is None or only == (name or fn.__name__.replace("_", "-")):
            build = getattr(fn, "build_options", None)  # kvcalc.cli.options.model_options
            app.command(name=name)(plain_options(build() if build else fn))
        return fn

    return decorate


def _declared_flag(info: Any, name: str) -> str:
    # In Annotated[..., typer.Option("--tp")] typer reads the first string as a flag.
    first = getattr(info, "default", None)
    decls = [*([first] if isinstance(first, str) else []), *(getattr(info, "param_decls", None) or ())]
    longs = [d for d in decls if d.startswith("--")]
    return longs[0] if longs else name.upper().replace("_", "-")


def refuse_repeats(group, args: list[str]) -> None:
    """A single-valued option given twice (`--preset a --preset b`) is an error, not the
    last one silently winning."""
    commands = getattr(group, "commands", {})
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 1  # the group's own switches (--version, -h)
    if i >= len(args) or args[i] not in commands:
        return
    command = commands[args[i]]
    by_name: dict[str, Any] = {}
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option" or getattr(param, "multiple", False) \
                or getattr(param, "count", False):
            continue
        for name in [*param.opts, *param.secondary_opts]:
            by_name[name] = param
    seen: dict[str, int] = {}
    rest = args[i + 1:]
    j = 0
    while j < len(rest):
        token = rest[j]
        j += 1
        if token == "--":
            break
        name = token.split("=", 1)[0] if token.startswith("--") else token[:2]
        param = by_name.get(name)
        if param is None or not token.startswith("-"):
            continue
        attached = "=" in token if token.startswith("--") else len(token) > 2
        if not getattr(param, "is_flag", False) and not attached:
            j += 1  # its value
        seen[param.name] = seen.get(param.name, 0) + 1
        if seen[param.name] > 1:
            raise KvcalcError(f"{_flag(param)} is given more than once; give it once")
