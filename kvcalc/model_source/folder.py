"""A model folder as `save_pretrained` or a Hub download leaves it: config.json, and the
safetensors files its index names (or every `*.safetensors` when it has no index).

Only config.json, the index and each file's header are read. The model's spec carries
the headers' sum (`extra["checkpoint"]`), with the architecture it was read for
(`extra["checkpoint_of"]`): a variant made from it later (other K/V heads, flags that
change its shape) is not the checkpoint, and kvcalc.estimate counts its weights from
the config instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvcalc.errors import KvcalcError, quoted
from kvcalc.model_source.safetensors import (CheckpointBytes, checkpoint_bytes, index_files,
                                             read_header)
from kvcalc.spec import ModelSpec, architecture

INDEX_NAME = "model.safetensors.index.json"  # transformers' names; other indexes end alike
SINGLE_NAME = "model.safetensors"


class Incomplete(Exception):
    """The folder's index names files the folder does not hold (a partial Hub download)."""


def safetensors_files(folder: Path, where: str) -> list[Path]:
    """The checkpoint's files: the ones its index names (model.safetensors.index.json,
    else the one `*.safetensors.index.json`), else model.safetensors, else every
    `*.safetensors` file (Mistral's consolidated.safetensors); [] when it has none.
    Raises Incomplete when an index names a file that is not there."""
    indexes = sorted(p.name for p in folder.glob("*.safetensors.index.json"))
    if indexes:
        if INDEX_NAME in indexes:
            name = INDEX_NAME
        elif len(indexes) == 1:
            name = indexes[0]
        else:
            raise KvcalcError(f"{where}: {len(indexes)} safetensors index files and none is "
                              f"{INDEX_NAME}: kvcalc cannot tell which is the model")
        files = index_files(folder / name, f"{where}/{name}")
        missing = [f for f in files if not os.path.lexists(folder / f)]
        if missing:
            raise Incomplete(f"{where}: {name} names {len(missing):,} file"
                             f"{'s' if len(missing) > 1 else ''} the folder does not hold "
                             f"({', '.join(quoted(m) for m in missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''})")
        return [folder / f for f in files]
    if os.path.lexists(folder / SINGLE_NAME):  # transformers reads it alone, beside others
        return [folder / SINGLE_NAME]
    return sorted(folder.glob("*.safetensors"))


def folder_checkpoint(folder: Path, where: str) -> CheckpointBytes | None:
    """The headers of the folder's safetensors files, summed; None when it holds none."""
    files = safetensors_files(folder, where)
    if not files:
        return None
    return checkpoint_bytes([read_header(f, f"{where}/{f.name}") for f in files])


_READ = object()


def folder_model(folder: Path, name: str | None = None, label: str | None = None,
                 checkpoint: CheckpointBytes | None | object = _READ) -> ModelSpec:
    """The model in `folder` (its config.json), weighed by its safetensors headers, read
    here unless the caller gives their sum (`checkpoint`, None for none). `label` says
    where the folder came from in the spec's source ("model folder ..." by default)."""
    from kvcalc.hfconfig import spec_from_hf_config_file

    where = str(folder)
    config = folder / "config.json"
    if not os.path.lexists(config):
        raise KvcalcError(f"{where}: no config.json in this folder (a model folder holds the "
                          "config.json and safetensors files save_pretrained writes)")
    spec = spec_from_hf_config_file(config, name or _folder_name(folder))
    if checkpoint is _READ:
        try:
            checkpoint = folder_checkpoint(folder, where)
        except Incomplete as e:
            raise KvcalcError(str(e)) from None
    read = "config.json" + (f" and {checkpoint.where}" if checkpoint is not None else "")
    spec = spec.replace(source=f"{label or f'model folder {where}'}: {read}")
    return with_checkpoint(spec, checkpoint)


def with_checkpoint(spec: ModelSpec, checkpoint: CheckpointBytes | None) -> ModelSpec:
    """The spec, carrying the headers' sum and the architecture they were read for."""
    extra = dict(spec.extra)
    extra["checkpoint"] = checkpoint
    extra["checkpoint_of"] = architecture(spec) if checkpoint is not None else None
    return spec.replace(extra=extra)


def _folder_name(folder: Path) -> str:
    """The model's name: the folder's own (`./Qwen3-8B` -> Qwen3-8B)."""
    return folder.resolve().name or str(folder)
