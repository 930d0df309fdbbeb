"""Options shared by the analytical commands, and turning them into a ModelSpec.

`model_options` adds the model-selection flags (--preset / --config / ad hoc)
and the workload flags to a command's signature once, so estimate, fit and sweep
spell them the same way; the command receives them as one `ModelRequest`.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.ground.record import record
from kvcalc.ground import units
from kvcalc.errors import KvcalcError, quoted
from kvcalc.ground.dtypes import DTYPES, MAX_LAYERS, MAX_WIDTH, check_size
from kvcalc.spec import Hardware, ModelSpec

DEFAULT_GPU = "h100-sxm"
DEFAULT_SEQ_LEN = 4096  # when the model states no max context


class Choice(str, Enum):
    """The choices of an option. str() gives the value, as the user types it: typer finds
    the member a `parser=` returns by str(member), which for a plain str-Enum is
    'OutputFormat.json' on Python >= 3.11."""

    def __str__(self) -> str:
        return self.value


class OutputFormat(Choice):
    table = "table"
    json = "json"
    csv = "csv"
    md = "md"
    parquet = "parquet"  # kvcalc sweep only


TEXT_FORMATS = (OutputFormat.table, OutputFormat.json, OutputFormat.csv, OutputFormat.md)


# --format where Parquet is not offered (everything but `kvcalc sweep`): typer offers an
# Enum's values as the choices, so the text formats get an Enum of their own.
TextFormat = Choice("TextFormat", [(f.name, f.value) for f in TEXT_FORMATS])


# -o FILE without --format: the format its suffix names.
_SUFFIX_FORMATS = {".json": OutputFormat.json, ".csv": OutputFormat.csv, ".md": OutputFormat.md,
                   ".markdown": OutputFormat.md, ".txt": OutputFormat.table,
                   ".parquet": OutputFormat.parquet, ".pq": OutputFormat.parquet}


def output_format(fmt: Optional[OutputFormat], output: Optional[Path],
                  allowed: tuple[OutputFormat, ...] = TEXT_FORMATS) -> OutputFormat:
    """--format if given, else the -o file's suffix (.json, .csv, .md, .txt, and
    .parquet where offered), else table."""
    names = ", ".join(sorted(k for k, v in _SUFFIX_FORMATS.items() if v in allowed))
    if fmt is None:
        if output is None or str(output) == "-":
            fmt = OutputFormat.table
        else:
            fmt = _SUFFIX_FORMATS.get(output.suffix.lower())
            if fmt is None:
                raise KvcalcError(f"-o {output}: cannot tell the format from the suffix "
                                  f"{output.suffix or '(none)'}; use {names} or give --format")
            if fmt not in allowed:
                raise KvcalcError(f"-o {output}: {fmt.value} files are written by kvcalc sweep "
                                  f"only; here use {names}")
    fmt = OutputFormat(fmt.value)
    if fmt not in allowed:
        raise KvcalcError(f"--format {fmt.value} is not offered here; use "
                          f"{', '.join(f.value for f in allowed)}")
    return fmt


DTYPE_HELP = "one of " + ", ".join(DTYPES)

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "pb": 10**15, "eb": 10**18, "kib": 2**10, "mib": 2**20, "gib": 2**30,
               "tib": 2**40, "pib": 2**50, "eib": 2**60}
MAX_SIZE = 2**60  # 1 EiB: far beyond any device, small enough to catch a typo
_SIZE_DIGITS = 40  # digits a size may be written with (1 EiB has 19)


def parse_size(text: str, flag: str = "--reserve") -> int:
    """'2GiB' -> 2147483648, '500MB' -> 500000000, '1e9' -> 1000000000 (bytes).

    Units: B, kB, MB, GB, TB, PB, EB (powers of 1000) and KiB ... EiB (powers of
    1024), any case. A one-letter unit is read as vLLM reads --kv-cache-memory-bytes
    (kvcalc.ground.units): k, m, g, t are powers of 1000 and K, M, G, T powers of 1024, so
    2G = 2GiB and 2g = 2GB; an uppercase letter takes whole numbers only. The size is
    judged from the digits and the exponent before the number is built, so
    '1e999999999' is refused at once.
    """
    shown = quoted(text)
    m = re.fullmatch(r"\s*([0-9]*)(?:\.([0-9]+))?(?:[eE]([0-9]+))?\s*([a-zA-Z]*)\s*", text)
    unit = m.group(4) if m else ""
    if len(unit) == 1 and unit in units.DECIMAL.keys() | units.BINARY.keys():
        one = units.SUFFIXED.fullmatch(text.strip())
        if one is None:
            raise KvcalcError(f"{flag}: cannot read size {shown}: a one-letter unit follows the "
                              "digits directly, as vLLM writes it: 2G (= 2GiB), 1.5g (= 1.5GB)")
        if len(one.group(1)) + len(one.group(2) or "") > _SIZE_DIGITS:
            raise KvcalcError(f"{flag}: size {shown} has over {_SIZE_DIGITS} digits")
        value = units.scaled(one, flag, "bytes", like_vllm=False)
        if value > MAX_SIZE:
            raise KvcalcError(f"{flag}: size {shown} is absurdly large (limit 1 EiB)")
        return value
    if not m or not (m.group(1) or m.group(2)) or unit.lower() not in _SIZE_UNITS:
        raise KvcalcError(f"{flag}: cannot read size {shown}: use e.g. 2GiB, 500MB, 2G (= 2GiB, "
                          "as vLLM reads it), 2g (= 2GB) or 1e9 (units B, kB ... EB, KiB ... EiB)")
    whole, frac, exp = m.group(1), m.group(2) or "", (m.group(3) or "0").lstrip("0") or "0"
    if len(whole) + len(frac) > _SIZE_DIGITS:
        raise KvcalcError(f"{flag}: size {shown} has over {_SIZE_DIGITS} digits")
    if not (whole + frac).strip("0"):
        return 0
    # Digits before the point plus the exponent bound the magnitude: beyond 20 the
    # value is at least 10**20 > 1 EiB, whatever the unit.
    if len(exp) > 3 or len(whole.lstrip("0")) + int(exp) > 20:
        raise KvcalcError(f"{flag}: size {shown} is absurdly large (limit 1 EiB)")
    from fractions import Fraction

    number = Fraction(int(whole + frac), 10 ** len(frac)) * 10 ** int(exp)
    exact = number * _SIZE_UNITS[m.group(4).lower()]
    if exact.denominator != 1:
        raise KvcalcError(f"{flag}: size {shown} is not a whole number of bytes "
                          f"({float(exact):,.1f} B); use a smaller unit, e.g. 1536MB for 1.536GB")
    value = int(exact)
    if value > MAX_SIZE:
        raise KvcalcError(f"{flag}: size {shown} is absurdly large (limit 1 EiB)")
    return value


@record(frozen=False)
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
    model: Optional[str] = None  # MODEL: a preset, Hub id, model folder or config file

    def resolve(self) -> ModelSpec:
        """The ModelSpec: MODEL, a preset or config file with overrides, or ad hoc flags."""
        if self.model is not None and (self.preset or self.config):
            given = "--preset" if self.preset else "--config"
            raise KvcalcError(f"give MODEL or {given}, not both (MODEL {quoted(self.model)} "
                              "names the model already)")
        if self.preset and self.config:
            raise KvcalcError("give --preset or --config, not both")
        _check_sizes(self)
        overrides = {k: v for k, v in (
            ("layers", self.layers), ("d_model", self.d_model), ("heads", self.heads),
            ("head_dim", self.head_dim), ("d_ff", self.d_ff), ("vocab", self.vocab),
            ("mlp", self.mlp)) if v is not None}
        if not (self.preset or self.config or self.model is not None):
            return self._ad_hoc()
        spec = self._overridden(self._named(), overrides)
        if spec.extra.get("approximate"):
            # Data stays on stdout; the person reads why the figures are approximate.
            sys.stderr.write(f"kvcalc: warning: {spec.name} is approximate: "
                             f"{spec.extra['approximate']}\n")
        return spec

    def _named(self) -> ModelSpec:
        """MODEL, --preset or --config, as it is."""
        from kvcalc import presets

        if self.model is not None:
            return _resolve_model(self.model)
        if self.preset:
            return presets.load_model(self.preset)
        if self.config.suffix.lower() == ".json":
            from kvcalc import hfconfig

            return hfconfig.spec_from_hf_config_file(self.config)
        return presets.model_from_yaml_file(self.config, require_source=False)

    def _overridden(self, spec: ModelSpec, overrides: dict) -> ModelSpec:
        """A named model with the architecture flags given (and --kv-heads' variant)."""
        if spec.attention_free and (self.kv_heads is not None
                                    or {"heads", "head_dim"} & overrides.keys()):
            raise KvcalcError(f"{spec.name} has no attention ({spec.state_mixers} layers "
                              "only): --heads, --kv-heads and --head-dim do not apply")
        own_kv = spec.attention_shape and spec.attention_shape.kv_heads  # the layers'
        if self.kv_heads is not None and self.kv_heads != own_kv:
            if spec.mla is not None:
                raise KvcalcError(f"{spec.name} uses MLA: it has no K/V heads to change")
            overrides["kv_heads"] = self.kv_heads
        if not overrides:
            return spec
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
        changed = spec.replace(**overrides, **_modified_labels(spec, overrides))
        if self.kv_heads is not None and self.kv_heads != own_kv:
            changed = changed.with_kv_heads(self.kv_heads)  # names the variant
        return changed

    def _ad_hoc(self) -> ModelSpec:
        """A uniform model from --layers, --d-model and --heads (and the rest's defaults)."""
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
        # Defaults only for flags not given: an explicit 0 or '' is checked, not replaced.
        return ModelSpec.uniform(
            name="custom",
            layers=self.layers,
            d_model=self.d_model,
            heads=self.heads,
            kv_heads=self.heads if self.kv_heads is None else self.kv_heads,
            head_dim=head_dim,
            d_ff=4 * self.d_model if self.d_ff is None else self.d_ff,
            vocab=32000 if self.vocab is None else self.vocab,
            mlp="plain" if self.mlp is None else self.mlp,
            source="ad hoc flags",
        )


@functools.lru_cache(maxsize=4)
def _resolve_model(text: str) -> ModelSpec:
    """MODEL read once per process: sweep resolves the request again for each --kv-heads,
    and a Hub id is not asked twice."""
    from kvcalc.model_source import resolve_model

    return resolve_model(text)


# The architecture flags, in the order a modified model's name lists them.
_ARCH_FLAGS = (("layers", "--layers"), ("d_model", "--d-model"), ("heads", "--heads"),
               ("head_dim", "--head-dim"), ("d_ff", "--d-ff"), ("vocab", "--vocab"),
               ("mlp", "--mlp"))


def _check_sizes(request: ModelRequest) -> None:
    """Each size flag given is a positive integer below its sanity limit, before any
    arithmetic uses it (d_model % heads, the MHA default kv_heads = heads)."""
    for name, value in (("layers", request.layers), ("d_model", request.d_model),
                        ("heads", request.heads), ("kv_heads", request.kv_heads),
                        ("head_dim", request.head_dim), ("d_ff", request.d_ff),
                        ("vocab", request.vocab)):
        if value is not None:
            check_size(name, value, MAX_LAYERS if name == "layers" else MAX_WIDTH)


def _modified_labels(spec: ModelSpec, overrides: dict) -> dict:
    """name and source for a preset or config whose architecture flags changed it:
    'llama2-7b[layers=2,d_model=128]', '<source>, modified by flags: --layers 2, ...'.

    --kv-heads alone is left to with_kv_heads, which names the variant (gpt3[MQA]).
    """
    changed = [(field, flag, overrides[field]) for field, flag in _ARCH_FLAGS
               if field in overrides and overrides[field] != getattr(spec, field)]
    if not changed:
        return {}
    name = f"{spec.name}[{','.join(f'{field}={value}' for field, _, value in changed)}]"
    flags = ", ".join(f"{flag} {value}" for _, flag, value in changed)
    source = f"{spec.source}, modified by flags: {flags}" if spec.source else \
        f"modified by flags: {flags}"
    return {"name": name, "source": source}


MODEL_HELP = (
    "The model: a preset name (`kvcalc presets`), a Hugging Face Hub id (org/name, "
    "org/name@revision; the local cache first, HF_HUB_OFFLINE=1 for the cache only; needs "
    "huggingface_hub), a model folder (config.json and safetensors files) or a config file. "
    "A path that starts with ./, ../, ~ or / is always a path; otherwise a preset name wins, "
    "then a folder or file here, then a Hub id. Folders and Hub ids count the weights from "
    "their safetensors headers (never the weights themselves). Or use --preset/--config.")

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
    # Built by kvcalc.cli.parsing.command only for the command this process runs: the
    # signature work below is start-up time.
    inner = getattr(fn, "build_options", None)  # kvcalc.cli.parsing.with_options
    fn.build_options = lambda: _with_model_options(inner() if inner else fn, exclude)
    return fn


def _with_model_options(fn, exclude: tuple[str, ...]):
    params = [p for p in _MODEL_PARAMS if p[0] not in exclude]
    sig = inspect.signature(fn, eval_str=True)  # resolve `from __future__` string annotations
    own = [p for p in sig.parameters.values() if p.name != "request"]
    # typer's default-value form (`x: int = typer.Option(default, "--x")`), not
    # Annotated[...]: building an Annotated alias costs more than the rest of a flag.
    model = inspect.Parameter("model", inspect.Parameter.KEYWORD_ONLY,
                              default=typer.Argument(None, metavar="[MODEL]",
                                                     show_default=False, help=MODEL_HELP),
                              annotation=Optional[str])
    extra = [model] + [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                          default=typer.Option(default, flag, help=help_text,
                                               rich_help_panel="Model"),
                          annotation=typ)
        for name, typ, default, flag, help_text in params
    ]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name, *_ in params}
        values["model"] = kwargs.pop("model")
        values.update(dict.fromkeys(exclude))
        return fn(*args, request=ModelRequest(**values), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + extra)
    wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
    return wrapper


def resolve_gpu(name: Optional[str]) -> Optional[Hardware]:
    """A hardware preset, a hardware YAML file (the presets' schema, strict keys), or None
    for --gpu none."""
    from kvcalc import presets

    if name is None or name.lower() == "none":
        return None
    return presets.hardware_named(name)


SUFFIXES = units.SUFFIX_HELP  # the rule, for --help

# Workload options, as Annotated aliases the commands list explicitly.
SeqLenOpt = Annotated[Optional[int], typer.Option(
    "--seq-len", metavar="<tokens>",
    help=f"Context length in tokens; {SUFFIXES} (default: the model's max context, or "
    f"{DEFAULT_SEQ_LEN}).")]
BatchOpt = Annotated[int, typer.Option(
    "--batch", metavar="<count>",
    help="Sequences decoded together (count; 1k = 1,000, 1K = 1,024).")]
# fit: None tells a --batch the user gave from the default, which the engine count refuses.
FitBatchOpt = Annotated[Optional[int], typer.Option(
    "--batch", metavar="<count>", show_default=False,
    help="Plain fit: sequences decoded together (default 1; 1k = 1,000, 1K = 1,024). The "
    "engine count serves up to --max-num-seqs instead.")]
KvDtypeOpt = Annotated[str, typer.Option("--kv-dtype", help=f"KV cache dtype: {DTYPE_HELP}.")]
WeightDtypeOpt = Annotated[Optional[str], typer.Option(
    "--weight-dtype", show_default=False,
    help=f"Weight dtype: {DTYPE_HELP}; int4, int8 and fp8 store scales per "
    "--group-size; awq or gptq: int4 in that checkpoint layout, 128 weights per group unless "
    "--group-size says (default: as the config stores them: its quantization_config, else "
    "bf16).")]
GroupSizeOpt = Annotated[Optional[int], typer.Option(
    "--group-size", show_default=False,
    help="Weights per quantization scale for a quantized --weight-dtype, e.g. 128 "
    "(default: one scale per output row).")]
PromptLenOpt = Annotated[Optional[int], typer.Option(
    "--prompt-len", show_default=False, metavar="<tokens>",
    help="Prompt tokens for the time to first token, suffixes as --seq-len (default: --seq-len).")]
MfuOpt = Annotated[Optional[str], typer.Option(
    "--mfu", show_default=False,
    help="Share of the dense peak a prefill reaches on the datasheet roofline, in [0.001, 1] "
    "(default: 0.5; giving it times on the roofline, as --engine roofline).")]
BandwidthEffOpt = Annotated[Optional[str], typer.Option(
    "--bandwidth-efficiency", show_default=False,
    help="Share of the memory bandwidth decode reaches on the datasheet roofline, in "
    "[0.001, 1] (default: 0.8; giving it times on the roofline, as --engine roofline).")]
EngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", show_default=False, metavar="NAME[@VERSION]",
    help="Time first and output tokens as this engine runs them (vllm, sglang, llama.cpp, "
    "tensorrt-llm, transformers, gpt-fast, exllamav2, mlc-llm, autoawq: terms fitted on "
    "published measurements, presets/engines), or `roofline` for the datasheet roofline at "
    "--mfu and --bandwidth-efficiency (default: vllm on a GPU, the roofline on a CPU or "
    "without --gpu; a calibration file times with its own terms).")]
FitEngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", show_default=False, metavar="NAME[@VERSION]",
    help="Time the --ttft-ms / --tpot-ms batch as this engine runs it (vllm, sglang, "
    "llama.cpp, tensorrt-llm, transformers, gpt-fast, exllamav2, mlc-llm, autoawq: "
    "presets/engines), or `roofline` for the datasheet roofline at --mfu and "
    "--bandwidth-efficiency (default: vllm on a GPU, as estimate; a calibration file "
    "times with its own terms).")]
SweepEngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", show_default=False, metavar="NAME[@VERSION]",
    help="Add each row's time per output token on this engine (vllm, sglang, llama.cpp, "
    "tensorrt-llm, transformers, gpt-fast, exllamav2, mlc-llm, autoawq: presets/engines), "
    "or `roofline` for the roofline columns only (default: vllm on a GPU, as estimate; "
    "the roofline columns only on a CPU or with --gpu none).")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel devices (count).")]
# vLLM's own spellings (vllm/engine/arg_utils.py::EngineArgs.add_cli_args, ParallelConfig:
# "--data-parallel-size", "-dp"; "--enable-expert-parallel", a switch). SGLang's
# server_args.py takes "--data-parallel-size" too, as its --dp-size (0.4.0-0.5.23).
DataParallelOpt = Annotated[Optional[int], typer.Option(
    "--data-parallel-size", "-dp", show_default=False, metavar="<replicas>",
    help="vLLM: engines side by side, each on --tp x --pp GPUs with a KV pool of its own; "
    "a MoE model's experts are spread over tp x dp GPUs (default 1). With --engine sglang: "
    "SGLang's own alias of --dp-size.")]
ExpertParallelOpt = Annotated[bool, typer.Option(
    "--enable-expert-parallel", help="vLLM: whole experts on each of the tp x dp GPUs of "
    "a MoE model instead of a slice of every expert.")]

GpuOpt = Annotated[str, typer.Option(
    "--gpu", help="Hardware preset, or a YAML file in the presets' schema, for roofline and "
    "fit (`none` to skip).")]
ScaleOpt = Annotated[int, typer.Option(
    "--kv-scale-bytes", help="Bytes of quantization scale per token per K/V head (e.g. 2 for fp16 scales).")]
EncoderLenOpt = Annotated[Optional[int], typer.Option(
    "--encoder-seq-len", metavar="<tokens>",
    help="Encoder tokens whose K/V a cross-attending model keeps (an encoder-decoder's input, "
    "Mllama's image tokens, MusicGen's text prompt), suffixes as --seq-len (default: "
    "--seq-len).")]
MemFractionOpt = Annotated[Optional[float], typer.Option(
    "--memory-fraction", show_default=False,
    help="The floor only (weights + KV): share of device memory usable, in (0, 1]; the "
    "verdict is vLLM's count, at fit's --gpu-memory-utilization (default: 1).")]
ReserveOpt = Annotated[Optional[str], typer.Option(
    "--reserve", show_default=False,
    help="The floor only (weights + KV): memory per device kept for activations and "
    "runtime, in bytes with a unit: 2GiB "
    "(2^30 each), 500MB (10^6 each), 1e9; one letter as vLLM's --kv-cache-memory-bytes reads "
    "it: 2G = 2GiB, 2g = 2GB (default: 0).")]


def device_memory(hardware: Optional[Hardware], memory_fraction: Optional[float],
                  reserve: Optional[str]) -> tuple[float, int]:
    """(memory_fraction, reserve_bytes), checked; refused with --gpu none, where no device
    memory exists for them to shape."""
    if hardware is None and (memory_fraction is not None or reserve is not None):
        flags = " and ".join(f for f, v in (("--memory-fraction", memory_fraction),
                                            ("--reserve", reserve)) if v is not None)
        verb = "apply" if " and " in flags else "applies"
        raise KvcalcError(f"{flags} {verb} to a device's memory, and --gpu none has none: "
                          "name a device with --gpu, or leave it out")
    fraction = 1.0 if memory_fraction is None else memory_fraction
    if not 0 < fraction <= 1:
        raise KvcalcError(f"--memory-fraction must be in (0, 1], got {fraction}")
    return fraction, parse_size(reserve) if reserve is not None else 0
FormatOpt = Annotated[Optional[TextFormat], typer.Option(
    "--format", help="table (rich), json, csv or md (markdown, for issues and docs) "
    "(default: table, or what the -o file's suffix says: .json, .csv, .md, .txt).")]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write to this file instead of stdout, in the format its suffix "
    "names unless --format says (atomically; never overwrites without --force).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")]
# For commands that only print (presets): no -o to take the format from.
PrintFormatOpt = Annotated[Optional[TextFormat], typer.Option(
    "--format", help="table (rich), json, csv or md (markdown, for issues and docs) "
    "(default: table).")]


def default_seq_len(spec: ModelSpec, seq_len: Optional[int]) -> int:
    if seq_len is not None:
        return seq_len
    return spec.max_context or DEFAULT_SEQ_LEN
