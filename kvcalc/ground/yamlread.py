"""Strict YAML reading for presets and --config files (PyYAML, libyaml when present).

YAML 1.2 scalars: the YAML 1.1 forms that 1.2 reads differently (`040`, `0b101`, base 60
`1:30`, `yes`/`on` as booleans) are refused or read as 1.2 does; duplicate keys and
merge keys are refused. Only safe_load's constructors exist (a `!!python/...` tag is an
error). Imported only when a YAML file has to be parsed: the shipped presets are read from
their parsed index (kvcalc.presets) unless a file changed.
"""

from __future__ import annotations

import re
import typing
from typing import Any

import yaml

from kvcalc.errors import KvcalcError, value_problem

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml parses when present
    """SafeLoader that also refuses duplicate keys (the later one would silently win) and
    merge keys (`<<: *base`): no preset needs them, and a merge is one more way for a
    key to come from somewhere other than the line that shows it (YAML 1.2 has none)."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                raise yaml.constructor.ConstructorError(
                    None, None, "merge keys ('<<') are not read: write the keys out",
                    key_node.start_mark)
            if key_node.tag == "tag:yaml.org,2002:value":  # as SafeLoader: '=' is a string
                key_node.tag = "tag:yaml.org,2002:str"
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable):  # SafeLoader itself reports unhashable keys
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)


# YAML 1.2 (core schema) scalars, not YAML 1.1's: `yes`/`on` are strings, not booleans;
# `1e9` is a number; and the 1.1 integer forms that 1.2 reads differently -- a leading
# zero (`040`: octal 32 in 1.1, 40 in 1.2), `0b101`, base 60 (`1:30` = 90) -- are refused
# rather than guessed. Underscores between digits (3_350_000_000_000) stay allowed.
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_AMBIGUOUS_TAG = "tag:kvcalc,2026:ambiguous-number"
_YAML11_ONLY = {_INT_TAG, _FLOAT_TAG, _BOOL_TAG, "tag:yaml.org,2002:timestamp"}
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_StrictLoader.add_implicit_resolver(
    _INT_TAG, re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+|0o[0-7_]+)$"),
    list("-+0123456789"))
_StrictLoader.add_implicit_resolver(
    _FLOAT_TAG, re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
                           r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
                           r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))
_StrictLoader.add_implicit_resolver(
    _AMBIGUOUS_TAG, re.compile(r"^[-+]?(?:0[0-9_]+(?:\.[0-9_]*)?|0b[01_]+"
                               r"|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)$"),
    list("-+0123456789"))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    if text.startswith(("0x", "0o")):
        return sign * int(text[2:], 16 if text[1] == "x" else 8)
    if text.startswith("0b") or ":" in text or (len(text) > 1 and text.startswith("0")):
        _refuse_ambiguous(loader, node)  # an explicit !!int tag on a YAML 1.1 form
    return sign * int(text)


def _refuse_ambiguous(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    text = loader.construct_scalar(node)
    if ":" in text:
        why = "YAML 1.1 reads it in base 60 (1:30 = 90)"
    elif text.lstrip("+-").startswith("0b"):
        why = "a binary number (YAML 1.1 only)"
    else:
        why = "a leading zero (YAML 1.1 reads 040 as octal 32, YAML 1.2 as 40)"
    raise yaml.constructor.ConstructorError(
        None, None, f"number {text!r} is ambiguous: {why}; write it in plain decimal digits "
        "(or 0x.. / 0o.. for hex / octal)", node.start_mark)


_StrictLoader.add_constructor(_INT_TAG, _construct_int)
_StrictLoader.add_constructor(_AMBIGUOUS_TAG, _refuse_ambiguous)


# Nesting kvcalc reads: a model or hardware file nests 3-4 levels. PyYAML composes
# documents recursively: in C (libyaml, CSafeLoader) a deep enough file overflows the
# stack and kills the process (PyYAML 6.0.3 and older: 40,000 levels in 80 kB), in Python
# it raises RecursionError; 6.0.4's libyaml stops at 1,000 levels with its own message.
# So the depth is bounded first, on the event stream of PyYAML's pure-Python parser,
# which is iterative and has no limit of its own.
MAX_NESTING = 100
# Every level opens with one of these characters ('-' item, ':' value, '?' key, flow
# brackets): a text holding no more of them than the limit cannot nest deeper, and the
# check costs nothing (a shipped preset holds at most 45).
_OPENERS = "-:?[{"


def _nesting_problem(text: str) -> str | None:
    if sum(map(text.count, _OPENERS)) <= MAX_NESTING:
        return None
    loader = yaml.SafeLoader(text)
    try:
        depth = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    mark = event.start_mark
                    return (f"nested too deeply (over {MAX_NESTING} levels at line "
                            f"{mark.line + 1}, column {mark.column + 1})")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return None
    finally:
        loader.dispose()


def parse(text: str, where: str) -> Any:
    """The data of a YAML document, or a KvcalcError naming `where` and the problem."""
    try:
        too_deep = _nesting_problem(text)
        if too_deep is None:
            data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise KvcalcError(f"{where}: malformed YAML: {_yaml_problem(e)}") from None
    except RecursionError:  # not reached below MAX_NESTING; kept as the last guard
        raise KvcalcError(f"{where}: malformed YAML: nested too deeply") from None
    except ValueError as e:  # a constructor's int(): digits over the limit
        raise KvcalcError(f"{where}: malformed YAML: {value_problem(e)}") from None
    if too_deep is not None:
        raise KvcalcError(f"{where}: malformed YAML: {too_deep}")
    return data


def _yaml_problem(e: yaml.YAMLError) -> str:
    """One line out of PyYAML's multi-line error text."""
    if isinstance(e, yaml.MarkedYAMLError):
        problem = e.problem or e.context or "syntax error"
        mark = e.problem_mark or e.context_mark
        if "could not determine a constructor" in problem:
            problem = problem.replace("could not determine a constructor for the tag",
                                      "tag not allowed in plain data:")
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return " ".join(problem.split()) + line
    return " ".join(str(e).split())
