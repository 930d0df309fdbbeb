"""Presets: strict loading of the YAML files under presets/ into specs.

Every preset is a plain YAML mapping whose keys are exactly the fields of
`ModelSpec` (models) or `Hardware` (hardware), with `mla:` and `moe:` nested
mappings for the fields of `MLA` and `MoE`. Loading is deliberately strict: a
misspelt key, a string where a number belongs or a missing `source:` is an
error that names the file and the key, never a silently used default.

Only `yaml.safe_load`-level constructors are available (a `!!python/...` tag is
refused), and nothing here imports torch or pandas.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kvcalc.errors import KvcalcError, os_problem, value_problem
from kvcalc.inputfile import read_text
from kvcalc.spec import MLA, Hardware, ModelSpec, MoE, dtype

__all__ = [
    "hardware_from_mapping",
    "hardware_from_yaml_file",
    "hardware_names",
    "load_hardware",
    "load_model",
    "model_from_mapping",
    "model_from_yaml_file",
    "model_names",
    "presets_dir",
]

# Dataclass fields that are not YAML keys: `extra` is for values a loader
# (such as the HF config.json reader) wants to carry along, not for presets.
_NOT_YAML_KEYS = {ModelSpec: {"extra", "runs"}, Hardware: set(), MLA: set(), MoE: set()}
# A preset whose layers differ gives its architecture as the published config.json:
# `hf_config:` names a file under presets/hf/ or holds the config's fields inline.
# Beside it, only these keys describe the preset itself.
_HF_PRESET_KEYS = ("name", "source", "notes", "published_params", "hf_config")


# --- where presets live --------------------------------------------------------
def presets_dir() -> Path:
    """The presets folder: `kvcalc/presets` in an installed wheel, else the checkout's `presets/`."""
    packaged = Path(__file__).resolve().parent / "presets"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "presets"


def model_names() -> list[str]:
    """Names of the model presets (file stems of presets/models/*.yaml), sorted."""
    return _names("models")


def hardware_names() -> list[str]:
    """Names of the hardware presets (file stems of presets/hardware/*.yaml), sorted."""
    return _names("hardware")


def _names(kind: str) -> list[str]:
    folder = presets_dir() / kind
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


# --- named presets ---------------------------------------------------------------
def load_model(name: str) -> ModelSpec:
    """The model preset called `name` (case-insensitive); a KvcalcError suggests near names."""
    return _load_model(_resolve(name, model_names(), "model"))


def load_hardware(name: str) -> Hardware:
    """The hardware preset called `name` (case-insensitive); a KvcalcError suggests near names."""
    return _load_hardware(_resolve(name, hardware_names(), "hardware"))


@functools.lru_cache(maxsize=None)
def _load_model(stem: str) -> ModelSpec:
    spec = model_from_yaml_file(presets_dir() / "models" / f"{stem}.yaml")
    _check_name_matches_file(spec.name, stem, "models")
    return spec


@functools.lru_cache(maxsize=None)
def _load_hardware(stem: str) -> Hardware:
    hw = hardware_from_yaml_file(presets_dir() / "hardware" / f"{stem}.yaml")
    _check_name_matches_file(hw.name, stem, "hardware")
    return hw


def _check_name_matches_file(name: str, stem: str, kind: str) -> None:
    if name != stem:
        raise KvcalcError(
            f"presets/{kind}/{stem}.yaml: name {name!r} differs from the file name; "
            f"drop the `name:` key or rename the file"
        )


def _resolve(name: str, names: list[str], kind: str) -> str:
    """The preset stem matching `name` case-insensitively, or a did-you-mean error."""
    by_lower = {n.lower(): n for n in names}
    key = name.strip().lower()
    if key in by_lower:
        return by_lower[key]
    raise KvcalcError(f"unknown {kind} preset {name!r}; {suggest(key, list(by_lower))}")


def suggest(key: str, names: list[str]) -> str:
    """'did you mean: a, b?' from close and substring matches, else the full list."""
    contained = sorted(n for n in names if key and (key in n or n in key))
    close = difflib.get_close_matches(key, names, n=4, cutoff=0.6)
    picks = list(dict.fromkeys(contained + close))[:6]
    if picks:
        return f"did you mean: {', '.join(picks)}?"
    return f"available: {', '.join(sorted(names))}" if names else "no presets are installed"


# --- files -------------------------------------------------------------------------
def model_from_yaml_file(path: str | Path, *, require_source: bool = True) -> ModelSpec:
    """A ModelSpec from one YAML file; `name` defaults to the file stem."""
    path = Path(path)
    return model_from_mapping(_read_yaml(path), _display(path), default_name=path.stem,
                              require_source=require_source)


def hardware_from_yaml_file(path: str | Path, *, require_source: bool = True) -> Hardware:
    """A Hardware from one YAML file; `name` defaults to the file stem."""
    path = Path(path)
    return hardware_from_mapping(_read_yaml(path), _display(path), default_name=path.stem,
                                 require_source=require_source)


def _display(path: Path) -> str:
    """A path for messages: 'presets/models/x.yaml' for presets, else as given."""
    try:
        return f"presets/{path.resolve().relative_to(presets_dir().resolve()).as_posix()}"
    except (ValueError, OSError, RuntimeError):  # elsewhere, or a loop of symbolic links
        return str(path)


_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_MERGED_KEYS = 10_000  # keys copied by merges in one document: a schema has ~40


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml parses when present
    """SafeLoader that also refuses duplicate keys (the later one would silently win),
    and resolves merge keys (`<<: *base`, `<<: [*a, *b]`) as YAML 1.1 defines them:
    the mapping's own keys win over merged ones, and earlier merged mappings over
    later ones. Merged keys land in the mapping, so the schema checks them like
    any other key. Each merged key is copied once, and the copies in a document
    are counted, so merges cannot multiply a small file into a huge one.
    """

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._merged_keys = 0
        self._flattening: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        merge_node = None
        own: list[tuple[yaml.Node, yaml.Node]] = []
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                if merge_node is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, "duplicate key '<<' (list the mappings to merge: "
                        "<<: [*a, *b])", key_node.start_mark)
                merge_node = value_node
                continue
            if key_node.tag == "tag:yaml.org,2002:value":  # as SafeLoader: '=' is a string
                key_node.tag = "tag:yaml.org,2002:str"
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable):  # SafeLoader itself reports unhashable keys
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            own.append((key_node, value_node))
        if merge_node is None:
            return
        sources = merge_node.value if isinstance(merge_node, yaml.SequenceNode) else [merge_node]
        merged: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        self._flattening.add(id(node))
        try:
            for source in reversed(sources):  # earlier mappings win: apply them last
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        None, None, f"merge key '<<' needs a mapping or a list of mappings, "
                        f"got a {source.id}", source.start_mark)
                if id(source) in self._flattening:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a mapping merges itself ('<<' of an alias to an enclosing "
                        "mapping)", source.start_mark)
                self.flatten_mapping(source)
                self._merged_keys += len(source.value)
                if self._merged_keys > _MAX_MERGED_KEYS:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"merge keys copy over {_MAX_MERGED_KEYS:,} keys",
                        merge_node.start_mark)
                for key_node, value_node in source.value:
                    key = self.construct_object(key_node, deep=True)
                    slot = key if isinstance(key, typing.Hashable) else id(key_node)
                    merged.pop(slot, None)  # re-insert: dict order follows the winner
                    merged[slot] = (key_node, value_node)
        finally:
            self._flattening.discard(id(node))
        for slot in seen:
            merged.pop(slot, None)  # the mapping's own keys win
        node.value = list(merged.values()) + own


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


def _read_yaml(path: Path) -> Any:
    where = _display(path)
    try:
        text = read_text(path, where)
    except FileNotFoundError:
        raise KvcalcError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise KvcalcError(f"{where}: is a folder; give a YAML file") from None
    except OSError as e:
        raise KvcalcError(f"{where}: cannot read: {os_problem(e)}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise KvcalcError(f"{where}: malformed YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise KvcalcError(f"{where}: malformed YAML: nested too deeply") from None
    except ValueError as e:  # a constructor's int(): digits over the limit
        raise KvcalcError(f"{where}: malformed YAML: {value_problem(e)}") from None
    if data is not None and not isinstance(data, Mapping):
        # Never quote it: a file that is not a preset may hold anything.
        kind = "a list" if isinstance(data, list) else "a single value"
        raise KvcalcError(f"{where}: not a preset: expected a mapping of keys (layers: 32, ...), "
                          f"found {kind}")
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


# --- mappings ---------------------------------------------------------------------------
def model_from_mapping(d: Any, where: str, *, default_name: str | None = None,
                       require_source: bool = True) -> ModelSpec:
    """A ModelSpec from a parsed YAML mapping; `where` prefixes every error message."""
    if isinstance(d, Mapping) and "hf_config" in d:
        return _model_from_hf_preset(d, where, default_name, require_source)
    values = _fields_from_mapping(d, ModelSpec, where, default_name, require_source)
    return _construct(ModelSpec, values, where)


def _model_from_hf_preset(d: Mapping, where: str, default_name: str | None,
                          require_source: bool) -> ModelSpec:
    from kvcalc import hfconfig

    for key in d:
        if key not in _HF_PRESET_KEYS:
            raise KvcalcError(f"{where}: unknown key {key!r} beside hf_config (the config gives "
                              f"the architecture; allowed: {', '.join(_HF_PRESET_KEYS)})")
    meta = {k: _checked_value(d[k], typing.get_type_hints(ModelSpec)[k], k, where)
            for k in ("name", "source", "notes", "published_params") if k in d}
    name = meta.get("name", default_name if default_name is not None else Path(where).stem)
    if require_source and not str(meta.get("source", "")).strip():
        raise KvcalcError(f"{where}: `source:` is required: name the config file the values "
                          "come from")
    cfg = d["hf_config"]
    if isinstance(cfg, str):
        path = presets_dir() / "hf" / cfg
        if "/" in cfg or "\\" in cfg or not path.is_file():
            raise KvcalcError(f"{where}: hf_config {cfg!r} is not a file in presets/hf/")
        spec = hfconfig.spec_from_hf_config_file(path, name)
    elif isinstance(cfg, Mapping):
        spec = hfconfig.spec_from_hf_config(dict(cfg), name, where)
    else:
        raise KvcalcError(f"{where}: hf_config must name a file in presets/hf/ or be a mapping "
                          f"of config.json fields, got {_describe(cfg)}")
    notes = "; ".join(n for n in (meta.get("notes", ""), spec.notes) if n)
    return spec.replace(source=meta.get("source", spec.source), notes=notes,
                        published_params=meta.get("published_params", 0))


def hardware_from_mapping(d: Any, where: str, *, default_name: str | None = None,
                          require_source: bool = True) -> Hardware:
    """A Hardware from a parsed YAML mapping; `where` prefixes every error message."""
    values = _fields_from_mapping(d, Hardware, where, default_name, require_source)
    for table in ("flops_per_s", "sparse_flops_per_s"):
        for key in values.get(table, {}):
            canonical = _construct(dtype, {"name": key}, where).name
            if canonical != key:  # peak_flops() looks canonical names up
                raise KvcalcError(f"{where}: {table}.{key}: write the dtype as {canonical!r}")
    return _construct(Hardware, values, where)


def _fields_from_mapping(d: Any, cls: type, where: str, default_name: str | None,
                         require_source: bool) -> dict[str, Any]:
    if d is None:
        raise KvcalcError(f"{where}: empty; expected a mapping of {cls.__name__} keys")
    values = _checked_mapping(d, cls, where, prefix="")
    if "name" not in values:
        values["name"] = default_name if default_name is not None else Path(where).stem
    if require_source and not str(values.get("source", "")).strip():
        raise KvcalcError(
            f"{where}: `source:` is required: name the config file, paper table or datasheet "
            f"the values come from"
        )
    return values


def _checked_mapping(d: Any, cls: type, where: str, prefix: str) -> dict[str, Any]:
    """Keys checked against the fields of `cls` by name, values by type; nested specs recursed."""
    label = prefix.rstrip(".") or "top level"
    if not isinstance(d, Mapping):
        raise KvcalcError(
            f"{where}: {label} must be a mapping of keys, got {_describe(d)}"
        )
    fields = _yaml_fields(cls)
    for key in d:
        if not isinstance(key, str):
            raise KvcalcError(f"{where}: keys must be strings, got {_describe(key)} in {label}")
        if key not in fields:
            raise KvcalcError(f"{where}: unknown key {prefix + key!r}{_hint(key, fields, prefix)}")
    missing = [
        prefix + f.name for f in fields.values()
        if f.name not in d and f.name != "name" and _is_required(f)
    ]
    if missing:
        raise KvcalcError(f"{where}: missing required key{'s' * (len(missing) > 1)}: "
                          f"{', '.join(missing)}")
    hints = typing.get_type_hints(cls)
    return {key: _checked_value(value, hints[key], prefix + key, where) for key, value in d.items()}


@functools.lru_cache(maxsize=None)
def _yaml_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.name not in _NOT_YAML_KEYS[cls]}


def _is_required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _hint(key: str, fields: Mapping[str, Any], prefix: str) -> str:
    close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
    if close:
        return f" (did you mean {prefix + close[0]!r}?)"
    return f" (allowed: {', '.join(prefix + k for k in fields)})"


def _checked_value(value: Any, hint: Any, key: str, where: str) -> Any:
    """`value` if it has the type `hint` asks for; nested MLA/MoE mappings become dataclasses."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if args and type(None) in args:  # `X | None`: null or an X
        if value is None:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return hint(**_checked_mapping(value, hint, where, prefix=f"{key}."))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise KvcalcError(f"{where}: {key} must be a mapping, got {_describe(value)}")
        key_type, value_type = args
        return {
            _checked_value(k, key_type, f"{key} key", where):
                _checked_value(v, value_type, f"{key}.{k}", where)
            for k, v in value.items()
        }
    if hint is bool:
        if not isinstance(value, bool):
            raise KvcalcError(f"{where}: {key} must be true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            tip = ""
            if isinstance(value, float) and value.is_integer():
                tip = " (write it as an integer, e.g. 3_350_000_000_000, not in float notation)"
            raise KvcalcError(f"{where}: {key} must be an integer, got {_describe(value)}{tip}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise KvcalcError(f"{where}: {key} must be a string, got {_describe(value)}")
        return value
    raise KvcalcError(f"{where}: {key}: unsupported field type {hint!r}")  # a spec.py change


def _describe(value: Any) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "the string",
             list: "a list", dict: "a mapping", type(None): "null"}
    kind = next((v for k, v in kinds.items() if type(value) is k), type(value).__name__)
    if isinstance(value, (list, dict)):
        return kind
    return f"{kind} {value!r}" if value is not None else kind


def _construct(make: Any, values: dict[str, Any], where: str) -> Any:
    """`make(**values)`, with `where` put in front of any KvcalcError it raises."""
    try:
        return make(**values)
    except KvcalcError as e:
        raise KvcalcError(f"{where}: {e}") from None
