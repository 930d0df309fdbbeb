"""Presets: strict loading of the YAML files under presets/ into specs.

Every preset is a plain YAML mapping whose keys are exactly the fields of
`ModelSpec` (models) or `Hardware` (hardware); a model's keys also give the flat
description `ModelSpec.uniform` builds its layers from: `sliding_window`,
`global_every`, and `mla:` and `moe:` nested mappings (translated here into the layer
kinds kvcalc.layers.Latent and MoE). Loading is deliberately strict: a
misspelt key, a string where a number belongs or a missing `source:` is an
error that names the file and the key, never a silently used default.

Only `yaml.safe_load`-level constructors are available (a `!!python/...` tag is
refused), and nothing here imports torch or pandas.
"""

from __future__ import annotations

import dataclasses
import functools
import marshal
import re
import stat
import typing
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvcalc.ground.record import record as _record
from kvcalc.errors import KvcalcError, quoted
from kvcalc.ground.inputfile import read_text
from kvcalc.ground.dtypes import MAX_WIDTH, check_size, dtype
from kvcalc.layers import Latent, MoE
from kvcalc.spec import Calibration, Hardware, ModelSpec

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


@_record
class _MLAKeys:
    """A preset's `mla:` mapping: DeepSeek's config.json names (the Latent layer's fields)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: queries use a full-rank d_model x heads*qk_head_dim matrix


@_record
class _MoEKeys:
    """A preset's `moe:` mapping: experts replacing the MLP of every layer but the first
    `dense_layers`."""

    experts: int  # routed experts per MoE layer
    active: int  # routed experts each token goes to
    expert_d_ff: int  # width of one routed expert's MLP
    shared_experts: int = 0  # always-on experts of width expert_d_ff (DeepSeek)
    dense_layers: int = 0  # leading layers with an ordinary MLP of width d_ff
    router_bias: bool = False  # a per-expert bias (DeepSeek-V3's e_score_correction_bias)


@_record
class _UniformKeys:
    """A model preset's keys that are ModelSpec.uniform's own, not ModelSpec fields."""

    sliding_window: int = 0  # 0: full attention in every layer
    global_every: int = 0  # 0: all layers slide; n: every n-th layer is global (Gemma 2: 2)
    mla: _MLAKeys | None = None
    moe: _MoEKeys | None = None


# Where a model preset's own keys go among ModelSpec's (the order messages list keys in).
_UNIFORM_KEYS_AFTER = {"max_context": ("sliding_window", "global_every"),
                       "encoder_layers": ("mla", "moe")}
# Dataclass fields that are not YAML keys: `extra` is for values a loader
# (such as the HF config.json reader) wants to carry along, not for presets.
_NOT_YAML_KEYS = {ModelSpec: {"extra", "runs", "recipe"}, Hardware: set(), _MLAKeys: set(),
                  _MoEKeys: set(), Calibration: set()}
# A preset whose layers differ gives its architecture as the published config.json:
# `hf_config:` names a file under presets/hf/ or holds the config's fields inline.
# Beside it, only these keys describe the preset itself.
_HF_PRESET_KEYS = ("name", "source", "notes", "published_params", "hf_config")


# --- where presets live --------------------------------------------------------
@functools.lru_cache(maxsize=1)
def presets_dir() -> Path:
    """The presets folder: `kvcalc/presets` in an installed wheel, else the checkout's `presets/`
    (resolved once: `kvcalc presets` reads every preset through it)."""
    packaged = Path(__file__).resolve().parent / "presets"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "presets"


def model_names() -> list[str]:
    """Names of the model presets (file stems of presets/models/*.yaml), sorted."""
    return preset_names("models")


def hardware_names() -> list[str]:
    """Names of the hardware presets (file stems of presets/hardware/*.yaml), sorted."""
    return preset_names("hardware")


def preset_names(kind: str) -> list[str]:
    """Names of one kind's presets (file stems of presets/<kind>/*.yaml: models, hardware,
    engines), sorted."""
    folder = presets_dir() / kind
    try:
        st = folder.stat()
    except OSError:
        return []
    # Listed once per version of the folder: a file added or removed changes its mtime.
    return list(_stems(folder, st.st_mtime_ns)) if stat.S_ISDIR(st.st_mode) else []


@functools.lru_cache(maxsize=8)
def _stems(folder: Path, changed_ns: int) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in folder.glob("*.yaml")))


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
    """The preset stem matching `name`, or a did-you-mean error. Case is ignored, and so
    are spaces, '-' and '_' (H100-SXM, h100 sxm and h100_sxm are h100-sxm); a family
    name that is more than one preset (H100: h100-pcie, h100-sxm) is not guessed."""
    stem = find(name, names)
    if stem is not None:
        return stem
    key = name.strip().lower()
    family = sorted(n for n in names if "-" in n and _loose(n.split("-")[0]) == _loose(key))
    if len(family) > 1:
        raise KvcalcError(f"unknown {kind} preset {quoted(name)}; did you mean: "
                          f"{', '.join(family)}? ({len(family)} presets of that name: pick one)")
    raise KvcalcError(f"unknown {kind} preset {quoted(name)}; "
                      f"{suggest(key, [n.lower() for n in names])}")


def find(name: str, names: list[str]) -> str | None:
    """The one name in `names` that `name` spells, ignoring case, spaces, '-' and '_';
    None when none does."""
    key = name.strip().lower()
    by_lower = {n.lower(): n for n in names}
    if key in by_lower:
        return by_lower[key]
    loose = [n for n in names if _loose(n) == _loose(key)]
    return loose[0] if len(loose) == 1 else None


def _loose(name: str) -> str:
    """A preset name without case or separators: 'H100 SXM' -> 'h100sxm'."""
    return re.sub(r"[\s_-]+", "", name.lower())


def suggest(key: str, names: list[str]) -> str:
    """'did you mean: a, b?' from close and substring matches, else the full list."""
    import difflib  # only on the way to an error

    contained = sorted(n for n in names if key and (key in n or n in key))
    close = difflib.get_close_matches(key, names, n=4, cutoff=0.6)
    picks = list(dict.fromkeys(contained + close))[:6]
    if picks:
        return f"did you mean: {', '.join(picks)}?"
    return f"available: {', '.join(sorted(names))}" if names else "no presets are installed"


# --- files -------------------------------------------------------------------------
def read_preset(kind: str, stem: str) -> Any:
    """presets/<kind>/<stem>.yaml as parsed (from the installed index when there is one):
    for a file whose fields are no record's (presets/served/terms.yaml)."""
    return _read_yaml(presets_dir() / kind / f"{stem}.yaml")


def load_preset(cls: type, kind: str, stem: str) -> Any:
    """presets/<kind>/<stem>.yaml read strictly into the record `cls` (an engine file into
    kvcalc.engines.Engine): every key one of its fields, every value of its type, and a
    `source:`; its name the file's stem unless it names itself."""
    where = f"presets/{kind}/{stem}.yaml"
    return _construct(cls, _fields_from_mapping(read_preset(kind, stem), cls, where, stem, True),
                      where)


def model_from_yaml_file(path: str | Path, *, require_source: bool = True) -> ModelSpec:
    """A ModelSpec from one YAML file; `name` defaults to the file stem."""
    path = Path(path)
    return model_from_mapping(_read_yaml(path), _display(path), default_name=path.stem,
                              require_source=require_source)


def hardware_named(name: str) -> Hardware:
    """A hardware preset by name, or a hardware YAML file (the presets' schema, strict
    keys): a name ending in .yaml or .yml, or holding a '/', is a file."""
    if name.lower().endswith((".yaml", ".yml")) or "/" in name:
        return hardware_from_yaml_file(Path(name), require_source=False)
    return load_hardware(name)


def hardware_from_yaml_file(path: str | Path, *, require_source: bool = True) -> Hardware:
    """A Hardware from one YAML file; `name` defaults to the file stem."""
    path = Path(path)
    return hardware_from_mapping(_read_yaml(path), _display(path), default_name=path.stem,
                                 require_source=require_source)


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict:
    """The class's field types, evaluated once (its annotations are strings); a model
    preset's keys include ModelSpec.uniform's own."""
    own = typing.get_type_hints(_UniformKeys) if cls is ModelSpec else {}
    return {**typing.get_type_hints(cls), **own}


@functools.lru_cache(maxsize=4)
def _resolved(folder: Path) -> Path:
    return folder.resolve()


def _display(path: Path) -> str:
    """A path for messages: 'presets/models/x.yaml' for presets, else as given."""
    try:
        return f"presets/{path.resolve().relative_to(_resolved(presets_dir())).as_posix()}"
    except (ValueError, OSError, RuntimeError):  # elsewhere, or a loop of symbolic links
        return str(path)


def _read_yaml(path: Path) -> Any:
    where = _display(path)
    try:
        text = read_text(path, where)
    except FileNotFoundError:
        raise KvcalcError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise KvcalcError(f"{where}: is a folder; give a YAML file") from None
    data = _indexed(path, text)
    if data is _NOT_INDEXED:
        from kvcalc.ground.yamlread import parse

        data = parse(text, where)
    if data is not None and not isinstance(data, Mapping):
        # Never quote it: a file that is not a preset may hold anything.
        kind = "a list" if isinstance(data, list) else "a single value"
        raise KvcalcError(f"{where}: not a preset: expected a mapping of keys (layers: 32, ...), "
                          f"found {kind}")
    return data


# --- the parsed index: presets without importing PyYAML --------------------------------
# presets/_parsed.marshal holds, for each shipped YAML file, its size, CRC-32 and the data
# kvcalc.ground.yamlread parsed from it. A file whose text still matches is read from there
# (importing and running PyYAML costs more than the rest of `kvcalc estimate`); an edited
# file, or one whose data marshal cannot hold exactly, is parsed as YAML. The wheel's
# build hook (hatch_build.py) makes it; a checkout has none (`python -m kvcalc.presets`
# writes one there, to time start-up as installed). marshal, not JSON: it is built in,
# where importing json and parsing the index took 9M instructions, 7% of what `kvcalc
# estimate` adds to typer + rich; the file is kvcalc's own, and one that does not read
# (another Python's format, a damaged file) only means the YAML is parsed.
INDEX_NAME = "_parsed.marshal"
_NOT_INDEXED = object()
_UNREADABLE = (ValueError, EOFError, TypeError)  # marshal's errors for bytes it cannot read


@functools.lru_cache(maxsize=1)
def _index() -> dict:
    try:
        data = marshal.loads((presets_dir() / INDEX_NAME).read_bytes())
    except (OSError, *_UNREADABLE):
        return {}
    return data if isinstance(data, dict) else {}


def _indexed(path: Path, text: str) -> Any:
    try:
        key = path.resolve().relative_to(presets_dir().resolve()).as_posix()
    except (ValueError, OSError, RuntimeError):
        return _NOT_INDEXED
    entry = _index().get(key)
    raw = text.encode()
    if (not isinstance(entry, tuple) or len(entry) != 3 or not isinstance(entry[2], bytes)
            or entry[:2] != (len(raw), zlib.crc32(raw))):
        return _NOT_INDEXED
    try:
        return marshal.loads(entry[2])  # a fresh copy each time
    except _UNREADABLE:
        return _NOT_INDEXED


def build_index() -> bytes:
    """The bytes of presets/_parsed.marshal for the YAML files there now."""
    from kvcalc.ground.yamlread import parse

    root = presets_dir()
    entries = {}
    for path in sorted(root.glob("*/*.yaml")):
        text = read_text(path, _display(path))
        data = parse(text, _display(path))
        try:
            encoded = marshal.dumps(data)
        except ValueError:  # a value marshal cannot hold: parsed as YAML
            continue
        if not _same(marshal.loads(encoded), data):
            continue
        raw = text.encode()
        entries[path.relative_to(root).as_posix()] = (len(raw), zlib.crc32(raw), encoded)
    return marshal.dumps(entries)


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0 or True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


# --- mappings ---------------------------------------------------------------------------
def model_from_mapping(d: Any, where: str, *, default_name: str | None = None,
                       require_source: bool = True) -> ModelSpec:
    """A ModelSpec from a parsed YAML mapping; `where` prefixes every error message."""
    if isinstance(d, Mapping) and "hf_config" in d:
        return _model_from_hf_preset(d, where, default_name, require_source)
    values = _fields_from_mapping(d, ModelSpec, where, default_name, require_source)
    return _construct(_uniform, values, where)


def _uniform(mla: _MLAKeys | None = None, moe: _MoEKeys | None = None, **values) -> ModelSpec:
    """ModelSpec.uniform from a preset's keys: `mla:` and `moe:` become the layer kinds,
    their values checked as they are named in the file."""
    if mla is not None:
        values["mla"] = Latent(heads=values["heads"], kv_lora_rank=mla.kv_lora_rank,
                               rope_dim=mla.qk_rope_head_dim, nope_dim=mla.qk_nope_head_dim,
                               v_dim=mla.v_head_dim, q_lora_rank=mla.q_lora_rank,
                               bias=values.get("qkv_bias", False))
    if moe is not None:
        if not 1 <= moe.active <= moe.experts:
            raise KvcalcError(f"moe.active must be 1..experts ({moe.experts}), got {moe.active}")
        check_size("moe.experts", moe.experts, MAX_WIDTH)
        check_size("moe.expert_d_ff", moe.expert_d_ff, MAX_WIDTH)
        if not 0 <= moe.shared_experts <= MAX_WIDTH:
            raise KvcalcError(f"moe.shared_experts must be 0..{MAX_WIDTH}, "
                              f"got {moe.shared_experts}")
        values["moe"] = MoE(experts=moe.experts, active=moe.active, expert_d_ff=moe.expert_d_ff,
                            shared_experts=moe.shared_experts, router_bias=moe.router_bias,
                            gated=values.get("mlp", "gated") == "gated",
                            expert_bias=values.get("mlp_bias", False))
        values["dense_layers"] = moe.dense_layers
    return ModelSpec.uniform(**values)


def _model_from_hf_preset(d: Mapping, where: str, default_name: str | None,
                          require_source: bool) -> ModelSpec:
    from kvcalc import hfconfig

    for key in d:
        if key not in _HF_PRESET_KEYS:
            raise KvcalcError(f"{where}: unknown key {key!r} beside hf_config (the config gives "
                              f"the architecture; allowed: {', '.join(_HF_PRESET_KEYS)})")
    meta = {k: _checked_value(d[k], _type_hints(ModelSpec)[k], k, where)
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
    hints = _type_hints(cls)
    return {key: _checked_value(value, hints[key], prefix + key, where) for key, value in d.items()}


@functools.lru_cache(maxsize=None)
def _yaml_fields(cls: type) -> dict[str, dataclasses.Field]:
    out = {}
    own = {f.name: f for f in dataclasses.fields(_UniformKeys)}
    for f in dataclasses.fields(cls):
        if f.name not in _NOT_YAML_KEYS.get(cls, ()):
            out[f.name] = f
        if cls is ModelSpec:  # the flat description's own keys, where they always stood
            out.update((k, own[k]) for k in _UNIFORM_KEYS_AFTER.get(f.name, ()))
    return out


def _is_required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _hint(key: str, fields: Mapping[str, Any], prefix: str) -> str:
    import difflib  # only on the way to an error

    close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
    if close:
        return f" (did you mean {prefix + close[0]!r}?)"
    return f" (allowed: {', '.join(prefix + k for k in fields)})"


def _checked_value(value: Any, hint: Any, key: str, where: str) -> Any:
    """`value` if it has the type `hint` asks for; nested `mla:`/`moe:` mappings become records."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if args and type(None) in args:  # `X | None`: null or an X
        if value is None:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Calibration:  # its own checks name the key; the file goes in front
        return _construct(hint, _checked_mapping(value, hint, where, prefix=f"{key}."), where)
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
    if hint is float:  # a measured or published quantity in seconds (not bytes: those are ints)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KvcalcError(f"{where}: {key} must be a number, got {_describe(value)}")
        return float(value)
    raise KvcalcError(f"{where}: {key}: unsupported field type {hint!r}")  # a spec.py change


def _describe(value: Any) -> str:
    # A file's strings are never quoted back (a file that is not a preset may hold anything).
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a mapping", type(None): "null"}
    kind = next((v for k, v in kinds.items() if type(value) is k), type(value).__name__)
    if isinstance(value, (list, dict, str)) or value is None:
        return kind
    return f"{kind} {value!r}"


def _construct(make: Any, values: dict[str, Any], where: str) -> Any:
    """`make(**values)`, with `where` put in front of any KvcalcError it raises."""
    try:
        return make(**values)
    except KvcalcError as e:
        raise KvcalcError(f"{where}: {e}") from None


if __name__ == "__main__":  # python -m kvcalc.presets: rewrite presets/_parsed.marshal
    target = presets_dir() / INDEX_NAME
    target.write_bytes(build_index())
    print(f"wrote {target}")
