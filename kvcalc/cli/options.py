"""Options shared by the analytical commands, and turning them into a ModelSpec.

`model_options` adds the model-selection flags (--preset / --config / ad hoc)
and the workload flags to a command's signature once, so estimate, fit and sweep
spell them the same way; the command receives them as one `ModelRequest`.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.errors import KvcalcError
from kvcalc.spec import DTYPES, Hardware, ModelSpec

DEFAULT_GPU = "h100-sxm"
DEFAULT_SEQ_LEN = 4096  # when the model states no max context


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


DTYPE_HELP = "one of " + ", ".join(DTYPES)

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """'2GiB' -> 2147483648, '500MB' -> 500000000, '1e9' -> 1000000000 (bytes)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise KvcalcError(f"cannot read size {text!r}: use e.g. 2GiB, 500MB or 1e9")
    from fractions import Fraction

    value = int(Fraction(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value > 2**60:
        raise KvcalcError(f"size {text!r} is absurdly large (limit 1 EiB)")
    return value


@dataclass
class ModelRequest:
    """What the user asked for, before presets are loaded."""

    preset: Optional[str]
    config: Optional[Path]
    layers: Optional[int]
    d_model: Optional[int]
    heads: Optional[int]
    kv_heads: Optional[int]
    head_dim: Optional[int]
    d_ff: Optional[int]
    vocab: Optional[int]
    mlp: Optional[str]

    def resolve(self) -> ModelSpec:
        """The ModelSpec: a preset or config file with overrides, or ad hoc flags."""
        from kvcalc import hfconfig, presets

        if self.preset and self.config:
            raise KvcalcError("give --preset or --config, not both")
        overrides = {k: v for k, v in (
            ("layers", self.layers), ("d_model", self.d_model), ("heads", self.heads),
            ("head_dim", self.head_dim), ("d_ff", self.d_ff), ("vocab", self.vocab),
            ("mlp", self.mlp)) if v is not None}
        if self.preset or self.config:
            if self.preset:
                spec = presets.load_model(self.preset)
            elif self.config.suffix.lower() == ".json":
                spec = hfconfig.spec_from_hf_config_file(self.config)
            else:
                spec = presets.model_from_yaml_file(self.config, require_source=False)
            if self.kv_heads is not None and self.kv_heads != spec.kv_heads:
                if spec.mla is not None:
                    raise KvcalcError(f"{spec.name} uses MLA: it has no K/V heads to change")
                overrides["kv_heads"] = self.kv_heads
            if overrides:
                if spec.mla is not None and {"heads", "head_dim"} & overrides.keys():
                    raise KvcalcError(f"{spec.name} uses MLA: --heads/--head-dim do not apply")
                if ("heads" in overrides and "kv_heads" not in overrides
                        and spec.mla is None and spec.kv_heads == spec.heads):
                    overrides["kv_heads"] = overrides["heads"]  # an MHA preset stays MHA
                elif "heads" in overrides and "kv_heads" not in overrides and (
                        overrides["heads"] % spec.kv_heads):
                    raise KvcalcError(f"--heads {overrides['heads']} is not divisible by the preset's "
                                      f"{spec.kv_heads} K/V heads; give --kv-heads too")
                if "head_dim" in overrides and spec.v_head_dim == spec.head_dim:
                    overrides["v_head_dim"] = overrides["head_dim"]  # V follows K's width
                # One replace, so heads and kv_heads are validated together.
                changed = spec.replace(**overrides)
                if self.kv_heads is not None and self.kv_heads != spec.kv_heads:
                    changed = changed.with_kv_heads(changed.kv_heads)  # names the variant
                spec = changed
            return spec
        missing = [f for f, v in (("--layers", self.layers), ("--d-model", self.d_model),
                                  ("--heads", self.heads)) if v is None]
        if missing:
            raise KvcalcError(
                "choose a model: --preset NAME, --config FILE, or ad hoc flags "
                f"(missing {', '.join(missing)}); `kvcalc presets` lists the presets")
        head_dim = self.head_dim
        if head_dim is None:
            # Only ad hoc, and only when asked nothing else: heads split d_model evenly.
            if self.d_model % self.heads:
                raise KvcalcError(f"--d-model {self.d_model} is not divisible by --heads "
                                  f"{self.heads}; give --head-dim")
            head_dim = self.d_model // self.heads
        return ModelSpec(
            name="custom",
            layers=self.layers,
            d_model=self.d_model,
            heads=self.heads,
            kv_heads=self.kv_heads or self.heads,
            head_dim=head_dim,
            d_ff=self.d_ff or 4 * self.d_model,
            vocab=self.vocab or 32000,
            mlp=self.mlp or "plain",
            source="ad hoc flags",
        )


_MODEL_PARAMS = [
    ("preset", Optional[str], None, "--preset", "Model preset name (see `kvcalc presets`)."),
    ("config", Optional[Path], None, "--config",
     "A preset-format YAML or a Hugging Face config.json (local file, never downloaded)."),
    ("layers", Optional[int], None, "--layers", "Decoder layers (ad hoc, or override)."),
    ("d_model", Optional[int], None, "--d-model", "Model width (ad hoc, or override)."),
    ("heads", Optional[int], None, "--heads", "Query heads (ad hoc, or override)."),
    ("kv_heads", Optional[int], None, "--kv-heads",
     "K/V heads: = heads for MHA, 1 for MQA, between for GQA. On a preset: its variant."),
    ("head_dim", Optional[int], None, "--head-dim",
     "Per-head width (ad hoc default d_model/heads; presets give their own)."),
    ("d_ff", Optional[int], None, "--d-ff", "MLP width (ad hoc default 4 x d_model)."),
    ("vocab", Optional[int], None, "--vocab", "Vocabulary size (ad hoc default 32000)."),
    ("mlp", Optional[str], None, "--mlp", "MLP kind: gated (3 matrices) or plain (2; ad hoc default)."),
]


def model_options(fn=None, *, exclude: tuple[str, ...] = ()):
    """Add the model-selection flags to a command; it receives `request: ModelRequest`.

    `exclude` leaves flags out (their request fields stay None), for a command that
    spells one of them its own way (sweep's --kv-heads takes a SPEC).
    """
    if fn is None:
        return functools.partial(model_options, exclude=exclude)
    params = [p for p in _MODEL_PARAMS if p[0] not in exclude]
    sig = inspect.signature(fn, eval_str=True)  # resolve `from __future__` string annotations
    own = [p for p in sig.parameters.values() if p.name != "request"]
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                          annotation=Annotated[typ, typer.Option(flag, help=help_text,
                                                                 rich_help_panel="Model")])
        for name, typ, default, flag, help_text in params
    ]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name, *_ in params}
        values.update(dict.fromkeys(exclude))
        return fn(*args, request=ModelRequest(**values), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + extra)
    wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
    return wrapper


def resolve_gpu(name: Optional[str]) -> Optional[Hardware]:
    """A hardware preset, or None for --gpu none."""
    from kvcalc import presets

    if name is None or name.lower() == "none":
        return None
    return presets.load_hardware(name)


# Workload options, as Annotated aliases the commands list explicitly.
SeqLenOpt = Annotated[Optional[int], typer.Option(
    "--seq-len", help=f"Context length in tokens (default: the model's max context, or {DEFAULT_SEQ_LEN}).")]
BatchOpt = Annotated[int, typer.Option("--batch", help="Sequences decoded together.")]
KvDtypeOpt = Annotated[str, typer.Option("--kv-dtype", help=f"KV cache dtype: {DTYPE_HELP}.")]
WeightDtypeOpt = Annotated[str, typer.Option("--weight-dtype", help=f"Weight dtype: {DTYPE_HELP}.")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel devices.")]
GpuOpt = Annotated[str, typer.Option(
    "--gpu", help="Hardware preset for roofline and fit (`none` to skip).")]
ScaleOpt = Annotated[int, typer.Option(
    "--kv-scale-bytes", help="Bytes of quantization scale per token per K/V head (e.g. 2 for fp16 scales).")]
EncoderLenOpt = Annotated[Optional[int], typer.Option(
    "--encoder-seq-len", help="Encoder tokens for encoder-decoder models (default: --seq-len).")]
MemFractionOpt = Annotated[float, typer.Option(
    "--memory-fraction", help="Share of device memory usable (like vLLM's gpu_memory_utilization).")]
ReserveOpt = Annotated[str, typer.Option(
    "--reserve", help="Memory per device kept for activations and runtime, e.g. 2GiB or 500MB.")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table (rich), json or csv on stdout.")]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write json/csv to this file (atomically; never overwrites without --force).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")]


def default_seq_len(spec: ModelSpec, seq_len: Optional[int]) -> int:
    if seq_len is not None:
        return seq_len
    return spec.max_context or DEFAULT_SEQ_LEN
