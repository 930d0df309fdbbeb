"""The model as users name it: a preset, a Hub id, a model folder or a config file.

`resolve_model(text)` reads MODEL (the positional argument of estimate, fit and sweep,
and a string given to the Python API) in this order, the first that applies winning:

1. A path by its spelling: absolute, or starting with `./`, `../` or `~`: always a
   path (a folder holding config.json, or a config file), never a preset or an id.
2. A preset name (`kvcalc presets`; case, spaces, '-' and '_' ignored): a preset wins
   over a folder of the same name in the current folder (write `./llama3-8b` for that).
3. Anything else that exists on disk: a folder or a config file (`models/qwen3`
   is the folder when there is one, as transformers' from_pretrained reads it).
4. A Hub id, `org/name` or `org/name@revision`: from the Hugging Face cache when it
   holds it (read without huggingface_hub), else through huggingface_hub
   (kvcalc.model_source.hub); the cache only with HF_HUB_OFFLINE=1.

A config file is read as `--config` reads it: `.json` as a Hugging Face config.json,
anything else as a preset-format YAML. A folder or a Hub id is weighed by its
safetensors headers (kvcalc.model_source.safetensors) when it has them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kvcalc.errors import KvcalcError, quoted
from kvcalc.spec import ModelSpec

__all__ = ["hub_id", "resolve_model"]


def hub_id(spec: ModelSpec) -> str | None:
    """The Hugging Face id a preset was read from (its source names huggingface.co/ORG/NAME)."""
    m = re.search(r"huggingface\.co/([A-Za-z0-9][\w.-]*/[\w.-]*[\w])", spec.source or "")
    return m.group(1) if m else None


def resolve_model(text: str | os.PathLike) -> ModelSpec:
    """The ModelSpec MODEL names (module docstring: the order); one-line KvcalcError
    otherwise."""
    if isinstance(text, os.PathLike):
        return _from_path(Path(text))
    if not isinstance(text, str) or not text.strip():
        raise KvcalcError("MODEL is empty: give a preset name, a Hub id (org/name), a model "
                          "folder or a config file")
    if _spelt_as_path(text):
        # os.path's expanduser leaves an unknown ~user as written (Path's raises).
        return _from_path(Path(os.path.expanduser(text)))
    from kvcalc import presets

    stem = presets.find(text, presets.model_names())
    if stem is not None:
        return presets.load_model(stem)
    if os.path.lexists(text):
        return _from_path(Path(text))
    from kvcalc.model_source.hub import parse_hub_id

    hub_id = parse_hub_id(text.strip())
    if hub_id is not None:
        return _from_hub(*hub_id)
    names = [n.lower() for n in presets.model_names()]
    raise KvcalcError(f"unknown model {quoted(text)}: not a preset, a folder or file here, "
                      f"nor a Hub id (org/name); {presets.suggest(text.strip().lower(), names)}")


def _spelt_as_path(text: str) -> bool:
    if os.path.isabs(text) or text in (".", "..") or text.startswith("~"):
        return True
    seps = ("/", os.sep) + ((os.altsep,) if os.altsep else ())
    return any(text.startswith(f"{dots}{s}") for dots in (".", "..") for s in seps)


def _from_path(path: Path) -> ModelSpec:
    from kvcalc.model_source.folder import folder_model

    if path.is_dir():
        return folder_model(path)
    if not os.path.lexists(path):
        raise KvcalcError(f"{path}: no such folder or file")
    if path.suffix.lower() == ".json":
        from kvcalc.hfconfig import spec_from_hf_config_file

        return spec_from_hf_config_file(path)
    from kvcalc.presets import model_from_yaml_file

    return model_from_yaml_file(path, require_source=False)


def _from_hub(repo_id: str, revision: str | None) -> ModelSpec:
    """The id's config.json from the cache or the Hub; its headers from the cached files
    when the snapshot holds them all, else (online) by HTTP range requests."""
    from kvcalc.model_source import hfcache, hub
    from kvcalc.model_source.folder import Incomplete, folder_checkpoint, folder_model

    snapshot, shown = hub.hub_files(repo_id, revision)
    try:
        checkpoint = folder_checkpoint(snapshot, shown)
    except Incomplete as e:
        if hfcache.offline():
            raise KvcalcError(f"{e}: HF_HUB_OFFLINE is set, so the cache is all there is; "
                              "download the missing files or unset it") from None
        checkpoint = hub.remote_checkpoint(repo_id, revision, shown)
    else:
        if checkpoint is None and not hfcache.offline():
            checkpoint = hub.remote_checkpoint(repo_id, revision, shown)
    return folder_model(snapshot, name=repo_id, label=f"Hugging Face Hub {shown}",
                        checkpoint=checkpoint)
