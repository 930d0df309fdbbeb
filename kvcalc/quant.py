"""Weights as stored: bytes of a checkpoint whose linear layers are quantized.

A quantized linear layer of `fan_out` x `fan_in` weights stores, per matrix, its
values at their own width plus scales (and zero points) per group or block, so the
bytes follow each matrix's shape, not the parameter total. This module lists the
model's tensors matrix by matrix (kvcalc.layers gives the shapes) and stores each
one as its checkpoint format does. Everything else (embeddings, lm_head, norms,
biases, routers, convolutions, excluded modules) stays in the model's own dtype.

Formats, each as the checkpoint files hold it (tensor shapes for a weight of
N = fan_out rows and K = fan_in columns; G = group size):

- fp8, block scales (DeepSeek-V3/R1, Qwen3-*-FP8: `quant_method: fp8`,
  `weight_block_size: [128, 128]`): weight e4m3 [N, K] + fp32 `weight_scale_inv`
  [ceil(N/128), ceil(K/128)]; no `weight_block_size`: one fp32 scale per matrix
  (transformers' FP8Linear); `activation_scheme: static` adds one fp32 input scale.
- fbgemm_fp8: weight e4m3 [N, K] + fp32 `weight_scale` [N, 1].
- mxfp4 (gpt-oss experts, OCP MX): 4-bit values in blocks of 32 along K, one uint8
  (e8m0) scale per block: `*_blocks` uint8 [N, ceil(K/32), 16] + `*_scales` uint8
  [N, ceil(K/32)]; only the MoE experts (transformers' Mxfp4GptOssExperts).
- AWQ, GEMM layout (AutoAWQ WQLinear_GEMM): `qweight` int32 [K, N*bits/32],
  `qzeros` int32 [K/G, N*bits/32], `scales` fp16 [K/G, N].
- GPTQ (AutoGPTQ/GPTQModel QuantLinear): `qweight` int32 [K*bits/32, N], `qzeros`
  int32 [ceil(K/G), N*bits/32], `scales` fp16 [ceil(K/G), N], and `g_idx` int32 [K]
  stored whatever desc_act says; group_size -1 is one group of K.
- bitsandbytes 4-bit (nf4/fp4): `weight` uint8 [ceil(N*K/2), 1], `absmax` fp32 per
  block of 64 (double quantization: uint8, plus fp32 `nested_absmax` per 256 blocks
  and a 256-entry fp32 `nested_quant_map`), a 16-entry fp32 `quant_map`, and the
  quant state as a JSON string in a uint8 tensor (its length depends on a float's
  digits: exact to a few bytes a matrix). 8-bit (LLM.int8): int8 [N, K] + fp32
  `SCB` [N]. Every nn.Linear is converted, routers included.
- compressed-tensors: pack-quantized int (W4A16/W8A16): `weight_packed` int32
  [N, ceil(K*bits/32)], `weight_scale` [N, ceil(K/G)] in the model dtype,
  `weight_zero_point` int32 [ceil(N*bits/32), ceil(K/G)] when asymmetric,
  `weight_shape` int64 [2]; float-quantized fp8: e4m3 [N, K] + `weight_scale`
  [N, 1] (channel), [1] (tensor) or [ceil(N/bn), ceil(K/bk)] (block), fp32.

Sources: transformers 5.23 integrations (finegrained_fp8.FP8Linear, mxfp4,
bitsandbytes, fbgemm_fp8); AutoAWQ and AutoGPTQ QuantLinear; compressed-tensors'
compressors; checked against published checkpoint totals in tests/test_quant.py
(tests/data/quant/README.md lists them).
"""

from __future__ import annotations

import re
from dataclasses import field

from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.dtypes import DType, dtype
from kvcalc.spec import ModelSpec
from kvcalc.dtypes import weight_dtype as spec_weight_dtype

# Stored element types and their bytes (checkpoint tensor dtypes).
_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int32": 4, "int64": 8,
                  "int8": 1, "uint8": 1}

LAYOUTS = ("fp8_block", "fp8_channel", "fp8_tensor", "mxfp4", "nvfp4", "awq", "gptq",
           "bnb4", "bnb8", "ct_int", "int")


@record
class Quantization:
    """How a checkpoint stores its quantized linear weights.

    `layout` says which tensors each converted matrix holds (module docstring);
    `bits` the width of one weight value; `group_size` weights per scale along the
    input dimension (0: one scale per output row); `block` (rows, cols) of a 2-D
    fp8 block. `not_converted` lists module-name patterns kept in the model dtype
    (transformers' rule: a prefix match at a module boundary, as a regex, or a
    suffix; "re:" patterns are regexes matched from the start, as compressed-tensors
    does). `experts_only`: only MoE experts are converted (mxfp4 in gpt-oss).
    `routers`: MoE router linears are converted too (bitsandbytes converts every
    nn.Linear; AWQ/GPTQ/fp8 tooling leaves them alone).
    """

    method: str  # the config's quant_method, or "adhoc"
    layout: str
    bits: int
    group_size: int = 0
    block: tuple[int, int] = ()
    scale_dtype: str = "fp32"  # "model": the model's own dtype (compressed-tensors)
    zero_points: bool = False
    g_idx: bool = False
    double_quant: bool = False  # bitsandbytes: 8-bit absmax with fp32 second level
    static_input_scale: bool = False  # fp8 with activation_scheme static
    not_converted: tuple[str, ...] = ()
    experts_only: bool = False
    routers: bool = False
    lm_head: bool = False  # GPTQ's lm_head: true quantizes the output layer too
    quant_type: str = ""  # bitsandbytes 4-bit: nf4 or fp4
    source: str = field(default="", compare=False)  # what it was read from, for notes

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise KvcalcError(f"quantization layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.bits not in (2, 3, 4, 8, 16):
            raise KvcalcError(f"quantization bits must be 2, 3, 4, 8 or 16, got {self.bits}")
        if self.group_size < 0:
            raise KvcalcError(f"group size must be >= 0 (0: per output channel), got {self.group_size}")

    @property
    def label(self) -> str:
        """A short description: 'fp8 (128x128 blocks)', 'gptq int4 g128'..."""
        if self.layout == "fp8_block":
            return f"{self.method} fp8, {self.block[0]}x{self.block[1]} block scales"
        if self.layout in ("fp8_channel", "fp8_tensor"):
            return f"{self.method} fp8, {self.layout[4:]} scales"
        if self.layout == "mxfp4":
            return "mxfp4 (4-bit, e8m0 scale per 32)"
        if self.layout == "nvfp4":
            return "nvfp4 (4-bit, fp8 scale per 16)"
        if self.layout == "bnb4":
            dq = " (double quant)" if self.double_quant else ""
            return f"bitsandbytes {self.quant_type or 'nf4'}{dq}"
        if self.layout == "bnb8":
            return "bitsandbytes int8"
        g = f" g{self.group_size}" if self.group_size else " per channel"
        return f"{self.method} int{self.bits}{g}"


@record
class WeightBytes:
    """Bytes of the weights as stored.

    `total`: every tensor of the language model (as kvcalc.formulas.param_counts
    counts it: no multimodal towers, no MTP module unless asked for); `breakdown`:
    bytes under param_counts' keys ("attention/q", "moe/experts", "embedding"...);
    `parts`: bytes by role ("values", "scales", "zeros", "g_idx", "unquantized");
    `elements`: stored tensor elements by dtype (a packed int32 counts once, as
    safetensors and the Hub count them). Key "buffers": tensors the checkpoint holds
    that transformers keeps as buffers (DeepSeek-V3's fp32 e_score_correction_bias),
    outside param_counts. `towers`: vision towers and projectors,
    in the model dtype, apart.
    """

    total: int
    breakdown: dict[str, int]
    parts: dict[str, int]
    elements: dict[str, int]
    towers: int = 0
    quantization: Quantization | None = None

    @property
    def stored_elements(self) -> int:
        """All tensor elements (the Hub's safetensors parameter count)."""
        return sum(self.elements.values())

    @property
    def checkpoint(self) -> int:
        """The language model and its towers: the checkpoint's tensor bytes."""
        return self.total + self.towers


# --------------------------------------------------------------------------------
# Reading quantization_config
# --------------------------------------------------------------------------------
def _field(qc: dict, key: str, where: str, kinds: tuple, default=None):
    value = qc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in kinds:
        raise KvcalcError(f"{where}: quantization_config.{key} must be "
                          f"{' or '.join(k.__name__ for k in kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        raise KvcalcError(f"{where}: quantization_config.{key} must be "
                          f"{' or '.join(k.__name__ for k in kinds)}, got {value!r}")
    return value


def _patterns(qc: dict, where: str, *keys: str) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        value = qc.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise KvcalcError(f"{where}: quantization_config.{key} must be a list of module names")
        out += value
    return tuple(out)


def _bits(qc: dict, key: str, where: str, allowed: tuple[int, ...], default: int | None = None) -> int:
    b = _field(qc, key, where, (int,), default)
    if b is None:
        raise KvcalcError(f"{where}: quantization_config.{key} is missing")
    if b not in allowed:
        raise KvcalcError(f"{where}: quantization_config.{key}={b}: kvcalc reads "
                          f"{', '.join(map(str, allowed))}")
    return b


def _group(qc: dict, key: str, where: str, default: int | None = None) -> int:
    g = _field(qc, key, where, (int,), default)
    if g is None:
        raise KvcalcError(f"{where}: quantization_config.{key} is missing")
    if g == -1:
        return 0  # one group over the whole input: per output channel
    if g <= 0:
        raise KvcalcError(f"{where}: quantization_config.{key} must be a positive size or -1, got {g}")
    return g


def quantization_from_hf(cfg: dict, where: str = "config.json") -> Quantization | None:
    """The `quantization_config` of a Hugging Face config dict, or None without one.

    Raises KvcalcError (one line naming the field) for a method kvcalc does not
    model or a field of the wrong type.
    """
    qc = cfg.get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise KvcalcError(f"{where}: quantization_config must be an object")
    method = qc.get("quant_method")
    if method is None and ("load_in_4bit" in qc or "load_in_8bit" in qc):
        method = "bitsandbytes"
    if not isinstance(method, str):
        raise KvcalcError(f"{where}: quantization_config.quant_method is missing or not a string")
    m = method.lower()
    skip = _patterns(qc, where, "modules_to_not_convert")
    if m == "fp8":
        block = qc.get("weight_block_size")
        static = _field(qc, "activation_scheme", where, (str,), "dynamic") == "static"
        if block is None:
            return Quantization(m, "fp8_tensor", 8, static_input_scale=static,
                                not_converted=skip, source=where)
        if (not isinstance(block, list) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise KvcalcError(f"{where}: quantization_config.weight_block_size must be two "
                              f"positive integers, got {block!r}")
        return Quantization(m, "fp8_block", 8, block=(block[0], block[1]),
                            static_input_scale=static, not_converted=skip, source=where)
    if m == "fbgemm_fp8":
        return Quantization(m, "fp8_channel", 8, not_converted=skip, source=where)
    if m == "mxfp4":
        return Quantization(m, "mxfp4", 4, group_size=32, scale_dtype="uint8",
                            not_converted=skip, experts_only=True, source=where)
    if m == "awq":
        version = _field(qc, "version", where, (str,), "gemm").lower()
        if version != "gemm":
            raise KvcalcError(f"{where}: quantization_config.version={version!r}: kvcalc models "
                              "AWQ's gemm layout only")
        return Quantization(m, "awq", _bits(qc, "bits", where, (4,), qc.get("w_bit", 4)),
                            group_size=_group(qc, "group_size", where, qc.get("q_group_size", 128)),
                            scale_dtype="fp16", zero_points=_field(qc, "zero_point", where, (bool,), True),
                            not_converted=skip, source=where)
    if m == "gptq":
        fmt = _field(qc, "checkpoint_format", where, (str,), "gptq").lower()
        if fmt not in ("gptq", "gptq_v2"):
            raise KvcalcError(f"{where}: quantization_config.checkpoint_format={fmt!r}: kvcalc "
                              "models the gptq layout only")
        skip = skip + _patterns(qc, where, "dynamic_skip")
        return Quantization(m, "gptq", _bits(qc, "bits", where, (2, 3, 4, 8)),
                            group_size=_group(qc, "group_size", where, 128), scale_dtype="fp16",
                            zero_points=True, g_idx=True, not_converted=skip,
                            lm_head=_field(qc, "lm_head", where, (bool,), False), source=where)
    if m == "bitsandbytes" or m.startswith("bitsandbytes_"):
        skip = skip + _patterns(qc, where, "llm_int8_skip_modules")
        if _field(qc, "load_in_4bit", where, (bool,), False) or m == "bitsandbytes_4bit":
            qt = _field(qc, "bnb_4bit_quant_type", where, (str,), "fp4").lower()
            if qt not in ("nf4", "fp4"):
                raise KvcalcError(f"{where}: quantization_config.bnb_4bit_quant_type must be nf4 "
                                  f"or fp4, got {qt!r}")
            return Quantization("bitsandbytes", "bnb4", 4, group_size=64, quant_type=qt,
                                double_quant=_field(qc, "bnb_4bit_use_double_quant", where, (bool,), False),
                                not_converted=skip, routers=True, source=where)
        if _field(qc, "load_in_8bit", where, (bool,), False) or m == "bitsandbytes_8bit":
            return Quantization("bitsandbytes", "bnb8", 8, not_converted=skip, routers=True,
                                source=where)
        raise KvcalcError(f"{where}: quantization_config: bitsandbytes with neither load_in_4bit "
                          "nor load_in_8bit")
    if m == "compressed-tensors":
        return _compressed_tensors(qc, where)
    raise KvcalcError(f"{where}: quantization_config.quant_method {method!r} is not one kvcalc "
                      "models (fp8, fbgemm_fp8, mxfp4, awq, gptq, bitsandbytes, compressed-tensors)")


def _compressed_tensors(qc: dict, where: str) -> Quantization:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise KvcalcError(f"{where}: quantization_config.config_groups must be a non-empty object")
    if len(groups) > 1:
        raise KvcalcError(f"{where}: quantization_config.config_groups: kvcalc reads one group, "
                          f"found {len(groups)}")
    (name, group), = groups.items()
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        raise KvcalcError(f"{where}: quantization_config.config_groups.{name}.weights must be an object")
    targets = group.get("targets", ["Linear"])
    if targets not in (["Linear"], "Linear"):
        raise KvcalcError(f"{where}: quantization_config.config_groups.{name}.targets={targets!r}: "
                          "kvcalc reads groups that target Linear")
    w = group["weights"]
    f = f"config_groups.{name}.weights"
    num_bits = w.get("num_bits")
    kind = w.get("type", "int")
    strategy = w.get("strategy", "tensor")
    fmt = qc.get("format", "")
    skip = _patterns(qc, where, "ignore")
    static = isinstance(group.get("input_activations"), dict) and not group["input_activations"].get(
        "dynamic", True)
    if kind == "float" and num_bits == 8:
        if strategy == "block":
            bs = w.get("block_structure")
            if not (isinstance(bs, list) and len(bs) == 2 and all(isinstance(b, int) for b in bs)):
                raise KvcalcError(f"{where}: quantization_config.{f}.block_structure must be two integers")
            return Quantization("compressed-tensors", "fp8_block", 8, block=(bs[0], bs[1]),
                                static_input_scale=static, not_converted=skip, source=where)
        layout = {"channel": "fp8_channel", "tensor": "fp8_tensor"}.get(strategy)
        if layout is None:
            raise KvcalcError(f"{where}: quantization_config.{f}.strategy={strategy!r}: kvcalc reads "
                              "channel, tensor and block fp8")
        return Quantization("compressed-tensors", layout, 8, static_input_scale=static,
                            not_converted=skip, source=where)
    if kind == "float" and num_bits == 4 and fmt == "nvfp4-pack-quantized":
        return Quantization("compressed-tensors", "nvfp4", 4, group_size=16, scale_dtype="fp8",
                            not_converted=skip, source=where)
    if kind == "int" and num_bits in (4, 8) and fmt == "pack-quantized":
        if strategy not in ("group", "channel"):
            raise KvcalcError(f"{where}: quantization_config.{f}.strategy={strategy!r}: kvcalc reads "
                              "group and channel int")
        g = w.get("group_size") if strategy == "group" else 0
        if strategy == "group" and not (isinstance(g, int) and g > 0):
            raise KvcalcError(f"{where}: quantization_config.{f}.group_size must be a positive integer")
        return Quantization("compressed-tensors", "ct_int", num_bits, group_size=g,
                            scale_dtype="model", zero_points=not w.get("symmetric", True),
                            g_idx=w.get("actorder") == "group", not_converted=skip, source=where)
    raise KvcalcError(f"{where}: quantization_config: compressed-tensors format {fmt!r} with "
                      f"{kind} {num_bits}-bit weights is not one kvcalc models")


def adhoc(weight_dtype: str, group_size: int | None = None) -> Quantization | None:
    """A quantization given by hand (`--weight-dtype int4 --group-size 128`).

    int4/int8: values plus an fp16 scale per `group_size` inputs (None: per output
    channel); int4 also stores a packed 4-bit zero point per group, as AWQ and
    GPTQ checkpoints do. fp8: e4m3 values, fp32 scales per 128x128 block when
    `group_size` is given (its value the block edge), else per output channel.
    mxfp4 / nvfp4: 4-bit values with e8m0 scales per 32 / fp8 scales per 16 (plus
    one fp32 global scale). awq / gptq: the AWQ (GEMM) / GPTQ checkpoint layout a
    `quantization_config` of that quant_method with its tools' defaults gives (int4,
    128 weights per group unless `group_size` says; fp16 scales, packed zero points,
    and GPTQ's int32 g_idx per input column). bf16, fp16, fp32: no quantization (None).
    """
    key = weight_dtype.strip().lower().replace("-", "")
    if group_size is not None and group_size <= 0:
        raise KvcalcError(f"--group-size must be a positive number of weights, got {group_size}")
    g = group_size or 0
    if key in ("awq", "gptq"):
        # AutoAWQ writes bits 4, group_size 128, zero_point true, version gemm; AutoGPTQ
        # and GPTQModel bits 4, group_size 128: as if the config said so.
        qc = {"quant_method": key, "bits": 4, "group_size": group_size or 128}
        return quantization_from_hf({"quantization_config": qc},
                                    f"--weight-dtype {weight_dtype.strip()}")
    if key in ("int4", "w4a16", "int8", "w8a16"):
        bits = 4 if "4" in key else 8
        return Quantization("adhoc", "int", bits, group_size=g, scale_dtype="fp16",
                            zero_points=bits == 4, source=f"--weight-dtype {weight_dtype}")
    if key in ("fp8", "float8", "fp8_e4m3"):
        if g:
            return Quantization("adhoc", "fp8_block", 8, block=(g, g),
                                source=f"--weight-dtype {weight_dtype}")
        return Quantization("adhoc", "fp8_channel", 8, source=f"--weight-dtype {weight_dtype}")
    if key in ("mxfp4", "fp4"):
        if g not in (0, 32):
            raise KvcalcError("mxfp4 blocks are 32 weights; --group-size must be 32 or left out")
        return Quantization("adhoc", "mxfp4", 4, group_size=32, scale_dtype="uint8",
                            source=f"--weight-dtype {weight_dtype}")
    if key == "nvfp4":
        if g not in (0, 16):
            raise KvcalcError("nvfp4 blocks are 16 weights; --group-size must be 16 or left out")
        return Quantization("adhoc", "nvfp4", 4, group_size=16, scale_dtype="fp8",
                            source=f"--weight-dtype {weight_dtype}")
    spec_weight_dtype(weight_dtype)  # bf16, fp16, fp32 (or an error naming the choices)
    if group_size:
        raise KvcalcError(f"--group-size applies to quantized weights, not {weight_dtype}")
    return None


# --------------------------------------------------------------------------------
# Module names (for not_converted patterns) and pattern matching
# --------------------------------------------------------------------------------
_PREFIXES = ("model.", "model.language_model.", "language_model.model.", "language_model.",
             "backbone.", "")


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """transformers' should_convert_module (inverted), over the usual model prefixes."""
    for p in patterns:
        regex = p[3:] if p.startswith("re:") else None
        for prefix in _PREFIXES:
            full = name if name == "lm_head" and prefix not in ("", "language_model.") else prefix + name
            if regex is not None:
                if re.match(regex, full):
                    return True
                continue
            try:
                if re.match(rf"(?:{p})(?:(?<=\.)|(?=\.|$))", full) or full.endswith(p):
                    return True
            except re.error:
                if full == p or full.startswith(p + ".") or full.endswith(p):
                    return True
    return False


# --------------------------------------------------------------------------------
# The model's tensors
# --------------------------------------------------------------------------------
@record
class _Matrix:
    key: str  # param_counts breakdown key
    name: str  # module name under the decoder ("layers.3.self_attn.q_proj")
    rows: int  # fan_out
    cols: int  # fan_in
    count: int = 1  # identical matrices (experts)
    bias: bool = False
    role: str = "linear"  # linear, expert, router, head
    kv: bool = False  # a K/V projection (follows its heads under TP)


@record
class _Plain:
    key: str
    elements: int
    dtype: str = ""  # "": the model dtype


def _attention_items(mx, d: int, key: str, base: str) -> list:
    from kvcalc.layers import Attention, Latent

    out: list = []
    if isinstance(mx, Attention):
        b = mx.qkv_bias
        q_out = mx.heads * mx.head_dim * (2 if mx.gated else 1)
        out += [_Matrix(f"{key}/q", f"{base}.q_proj", q_out, d, bias=b),
                _Matrix(f"{key}/k", f"{base}.k_proj", mx.kv_heads * mx.head_dim, d, bias=b, kv=True),
                _Matrix(f"{key}/v", f"{base}.v_proj", mx.kv_heads * mx.v_head_dim, d, bias=b, kv=True),
                _Matrix(f"{key}/o", f"{base}.o_proj", d, mx.heads * mx.v_head_dim, bias=mx.out_bias)]
        if mx.qk_norm:
            out.append(_Plain(f"{key}/qk_norm", mx.qk_norm))
        if mx.sinks:
            out.append(_Plain(f"{key}/sinks", mx.heads))
        return out
    assert isinstance(mx, Latent)
    h, qk = mx.heads, mx.nope_dim + mx.rope_dim
    if mx.q_lora_rank:
        out += [_Matrix(f"{key}/q_a", f"{base}.q_a_proj", mx.q_lora_rank, d, bias=mx.bias),
                _Plain(f"{key}/q_a_norm", mx.q_lora_rank),
                _Matrix(f"{key}/q_b", f"{base}.q_b_proj", h * qk, mx.q_lora_rank)]
    else:
        out.append(_Matrix(f"{key}/q", f"{base}.q_proj", h * qk, d))
    out += [_Matrix(f"{key}/kv_a", f"{base}.kv_a_proj_with_mqa", mx.kv_lora_rank + mx.rope_dim, d,
                    bias=mx.bias),
            _Plain(f"{key}/kv_a_norm", mx.kv_lora_rank),
            _Matrix(f"{key}/kv_b", f"{base}.kv_b_proj", h * (mx.nope_dim + mx.v_dim), mx.kv_lora_rank),
            _Matrix(f"{key}/o", f"{base}.o_proj", d, h * mx.v_dim, bias=mx.bias)]
    return out


def _mixer_items(mx, d: int, prefix: str) -> list:
    """The mixer's tensors: its projections as matrices, the rest as plain params."""
    from kvcalc.layers import Attention, GatedDeltaNet, Latent, Mamba, Mamba2, ShortConv

    key = "attention" if mx.attends else mx.kind
    if isinstance(mx, (Attention, Latent)):
        return _attention_items(mx, d, key, f"{prefix}.self_attn")
    params = mx.params(d)
    if isinstance(mx, Mamba):
        n, base, b = mx.d_inner, f"{prefix}.mixer", mx.proj_bias
        mats = [_Matrix(f"{key}/in_proj", f"{base}.in_proj", 2 * n, d, bias=b),
                _Matrix(f"{key}/x_proj", f"{base}.x_proj", mx.dt_rank + 2 * mx.d_state, n),
                _Matrix(f"{key}/dt_proj", f"{base}.dt_proj", n, mx.dt_rank, bias=True),
                _Matrix(f"{key}/out_proj", f"{base}.out_proj", d, n, bias=b)]
    elif isinstance(mx, Mamba2):
        n, base, b = mx.d_inner, f"{prefix}.mixer", mx.proj_bias
        mats = [_Matrix(f"{key}/in_proj", f"{base}.in_proj", n + mx.conv_channels + mx.heads, d, bias=b),
                _Matrix(f"{key}/out_proj", f"{base}.out_proj", d, n, bias=b)]
    elif isinstance(mx, GatedDeltaNet):
        k, v, base = mx.k_heads * mx.k_dim, mx.v_heads * mx.v_dim, f"{prefix}.linear_attn"
        mats = [_Matrix(f"{key}/in_proj_qkvz", f"{base}.in_proj_qkvz", 2 * k + 2 * v, d),
                _Matrix(f"{key}/in_proj_ba", f"{base}.in_proj_ba", 2 * mx.v_heads, d),
                _Matrix(f"{key}/out_proj", f"{base}.out_proj", d, v)]
    elif isinstance(mx, ShortConv):
        base, b = f"{prefix}.conv", mx.bias
        mats = [_Matrix(f"{key}/in_proj", f"{base}.in_proj", 3 * mx.width, d, bias=b),
                _Matrix(f"{key}/out_proj", f"{base}.out_proj", d, mx.width, bias=b)]
    else:  # NoMixer, or a kind without matrices known here: every parameter plain
        mats = []
    named = {m.key.split("/", 1)[1] for m in mats}
    return mats + [_Plain(f"{key}/{k}", n) for k, n in params.items() if k not in named]


def _dense_items(mlp, d: int, key: str, base: str, count: int = 1, role: str = "linear") -> list:
    f, b = mlp.d_ff, mlp.bias
    ups = [("gate_proj", f), ("up_proj", f)] if mlp.gated else [("up_proj", f)]
    return ([_Matrix(key, f"{base}.{n}", rows, d, count, b, role) for n, rows in ups]
            + [_Matrix(key, f"{base}.down_proj", d, f, count, b, role)])


_SCORE_BIAS_BUFFER = ("deepseek_v3",)


def _mlp_items(mlp, d: int, prefix: str, model_type: str) -> list:
    if mlp is None:
        return []
    if mlp.kind == "dense":
        return _dense_items(mlp, d, "mlp", f"{prefix}.mlp")
    router = "router" if model_type == "gpt_oss" else "gate"
    out: list = [_Matrix("moe/router", f"{prefix}.mlp.{router}", mlp.experts, d,
                         bias=mlp.router_bias, role="router")]
    if model_type in _SCORE_BIAS_BUFFER:
        # DeepSeek-V3's e_score_correction_bias: fp32 in the checkpoint, a buffer (not a
        # parameter) in transformers, so param_counts leaves it out.
        out.append(_Plain("buffers", mlp.experts, "fp32"))
    out += _dense_items(mlp.expert, d, "moe/experts", f"{prefix}.mlp.experts.0", mlp.experts, "expert")
    if mlp.shared_experts:
        shared = "shared_expert" if mlp.shared_gate else "shared_experts"
        out += _dense_items(mlp.shared, d, "moe/shared_experts", f"{prefix}.mlp.{shared}",
                            mlp.shared_experts)
        if mlp.shared_gate:
            out.append(_Matrix("moe/shared_gate", f"{prefix}.mlp.shared_expert_gate", 1, d,
                               role="router"))
    return out


def _layer_items(layer, d: int, index: int, model_type: str, norm: int) -> list:
    prefix = f"layers.{index}"
    items = _mixer_items(layer.mixer, d, prefix) + _mlp_items(layer.mlp, d, prefix, model_type)
    if layer.norms:
        items.append(_Plain("norms", layer.norms * norm))
    return items


def _model_items(spec: ModelSpec, mtp_layers: int = 0) -> list[tuple[list, int]]:
    """(items, times) for every decoder layer (each index once: patterns may name
    layers), then the embedding, lm_head, final norm and whatever param_counts counts
    beyond the decoder layers (encoder stacks, position tables) as plain params."""
    from kvcalc.formulas.params import norm_params, param_counts

    d = spec.d_model
    model_type = spec.extra.get("hf_model_type", "")
    norm = norm_params(spec)
    out: list[tuple[list, int]] = []
    i = 0
    for run in spec.runs:
        for _ in range(run.count):
            out.append((_layer_items(run.layer, d, i, model_type, norm), 1))
            i += 1
    if mtp_layers:
        # DeepSeek-V3's multi-token-prediction module (num_nextn_predict_layers), as its
        # checkpoint stores it: a copy of the last decoder layer, enorm, hnorm, eh_proj
        # (2d -> d, kept in the model dtype), and its own embedding, norm and head.
        last = spec.runs[-1].layer
        for j in range(mtp_layers):
            items = _layer_items(last, d, spec.layers + j, model_type, norm)
            items += [_Plain("mtp", 2 * d * d + 3 * norm + 2 * spec.vocab * d)]
            out.append((items, 1))
    counts = param_counts(spec).breakdown
    covered: dict[str, int] = {}
    for items, times in out[: spec.layers]:
        for it in items:
            if it.key == "buffers":
                continue
            n = it.elements if isinstance(it, _Plain) else it.count * (
                it.rows * it.cols + (it.rows if it.bias else 0))
            covered[it.key] = covered.get(it.key, 0) + n * times
    tail: list = []
    head = counts.get("lm_head", 0)
    if head:
        tail.append(_Matrix("lm_head", "lm_head", spec.vocab, d, role="head"))
    for key, n in counts.items():
        rest = n - covered.get(key, 0) - (head if key == "lm_head" else 0)
        if rest < 0:
            raise KvcalcError(f"{spec.name}: the tensors listed for {key!r} exceed its parameter "
                              f"count by {-rest:,} (a layer kind kvcalc.quant does not know)")
        if rest:
            tail.append(_Plain(key, rest))
    out.append((tail, 1))
    return out


# --------------------------------------------------------------------------------
# Bytes of one matrix as stored
# --------------------------------------------------------------------------------
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _qs_json_bytes(q: Quantization, rows: int, cols: int, model_dtype: str) -> int:
    """Length of bitsandbytes' packed quant state (json.dumps of its non-tensor fields)."""
    torch_name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(model_dtype, "bfloat16")
    text = (f'{{"quant_type": "{q.quant_type or "nf4"}", "blocksize": {q.group_size}, '
            f'"dtype": "{torch_name}", "shape": [{rows}, {cols}]')
    if q.double_quant:
        # nested_offset is a float32 mean as a Python float: 17 significant digits
        # ("0.0" and 17 digits is typical; the real length varies by a byte or two).
        text += ', "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.04016156122088432'
    return len(text + "}")


def _matrix_tensors(q: Quantization, rows: int, cols: int, model_dtype: str) -> list[tuple[str, str, int]]:
    """(role, element dtype, elements) of the tensors one converted matrix stores."""
    n, k, g = rows, cols, q.group_size
    lay = q.layout
    if lay == "fp8_block":
        bn, bk = q.block
        t = [("values", "fp8", n * k), ("scales", "fp32", _cdiv(n, bn) * _cdiv(k, bk))]
    elif lay == "fp8_channel":
        t = [("values", "fp8", n * k), ("scales", "fp32", n)]
    elif lay == "fp8_tensor":
        t = [("values", "fp8", n * k), ("scales", "fp32", 1)]
    elif lay == "mxfp4":
        blocks = _cdiv(k, 32)
        t = [("values", "uint8", n * blocks * 16), ("scales", "uint8", n * blocks)]
    elif lay == "nvfp4":
        t = [("values", "uint8", n * _cdiv(k, 2)), ("scales", "fp8", n * _cdiv(k, 16)),
             ("scales", "fp32", 1)]
    elif lay == "awq":
        groups = _cdiv(k, g) if g else 1
        packed = _cdiv(n * q.bits, 32)
        t = [("values", "int32", k * packed), ("scales", "fp16", groups * n)]
        if q.zero_points:
            t.append(("zeros", "int32", groups * packed))
    elif lay == "gptq":
        groups = _cdiv(k, g) if g else 1
        t = [("values", "int32", _cdiv(k * q.bits, 32) * n), ("scales", "fp16", groups * n),
             ("zeros", "int32", groups * _cdiv(n * q.bits, 32)), ("g_idx", "int32", k)]
    elif lay == "ct_int":
        groups = _cdiv(k, g) if g else 1
        scale = model_dtype if model_dtype in ("bf16", "fp16", "fp32") else "bf16"
        t = [("values", "int32", n * _cdiv(k * q.bits, 32)), ("scales", scale, n * groups),
             ("other", "int64", 2)]
        if q.zero_points:
            t.append(("zeros", "int32", _cdiv(n * q.bits, 32) * groups))
        if q.g_idx:
            t.append(("g_idx", "int32", k))
    elif lay == "bnb4":
        blocks = _cdiv(n * k, g or 64)
        t = [("values", "uint8", _cdiv(n * k, 2)), ("scales", "fp32", 16)]
        if q.double_quant:
            t += [("scales", "uint8", blocks), ("scales", "fp32", _cdiv(blocks, 256) + 256)]
        else:
            t.append(("scales", "fp32", blocks))
        t.append(("other", "uint8", _qs_json_bytes(q, n, k, model_dtype)))
    elif lay == "bnb8":
        t = [("values", "int8", n * k), ("scales", "fp32", n)]
    else:  # int (ad hoc): packed values, fp16 scales per group, packed zeros
        groups = _cdiv(k, g) if g else 1
        t = [("values", "uint8", _cdiv(n * k * q.bits, 8)), ("scales", q.scale_dtype, n * groups)]
        if q.zero_points:
            t.append(("zeros", "uint8", _cdiv(n * groups * q.bits, 8)))
    if q.static_input_scale and lay.startswith("fp8"):
        t.append(("scales", "fp32", 1))
    return t


def _converted(q: Quantization, m: _Matrix) -> bool:
    if m.role == "head":
        return q.lm_head and not _matches(m.name, q.not_converted)
    if q.experts_only and m.role != "expert":
        return False
    if m.role == "router" and not q.routers:
        return False
    names = (m.name, m.name.rsplit(".", 2)[0] if m.role == "expert" else m.name)
    return not any(_matches(n, q.not_converted) for n in names)


# --------------------------------------------------------------------------------
# The whole model
# --------------------------------------------------------------------------------
def _model_dtype(default_dtype: DType | str) -> str:
    dt = default_dtype if isinstance(default_dtype, DType) else dtype(default_dtype)
    if dt.name not in ("bf16", "fp16", "fp32"):
        raise KvcalcError(f"the model dtype (unquantized weights) must be bf16, fp16 or fp32, "
                          f"got {dt.name}")
    return dt.name


def _tally(spec: ModelSpec, quant: Quantization | None, model_dt: str, mtp_layers: int,
           tp: int = 1):
    """Bytes by key, part and dtype for all devices (tp=1) or one of `tp`."""
    breakdown: dict[str, int] = {}
    parts: dict[str, int] = {}
    elements: dict[str, int] = {}
    kv_all = kv_dev = 0
    cache: dict = {}

    def put(key: str, part: str, dt: str, n: int, times: int) -> int:
        if not n:
            return 0
        b = n * _ELEMENT_BYTES[dt] * times
        breakdown[key] = breakdown.get(key, 0) + b
        parts[part] = parts.get(part, 0) + b
        elements[dt] = elements.get(dt, 0) + n * times
        return b

    layer_mixers = [r.layer.mixer for r in spec.runs for _ in range(r.count)]
    for index, (items, times) in enumerate(_model_items(spec, mtp_layers)):
        share = None
        if tp > 1 and index < spec.layers:
            mx = layer_mixers[index]
            if getattr(mx, "kv_heads", 0):
                share = (mx.kv_heads_per_device(tp), mx.kv_heads)
        for it in items:
            if isinstance(it, _Plain):
                put(it.key, "unquantized", it.dtype or model_dt, it.elements, times)
                continue
            conv = quant is not None and _converted(quant, it)
            if conv:
                tkey = (it.rows, it.cols)
                if tkey not in cache:
                    cache[tkey] = _matrix_tensors(quant, it.rows, it.cols, model_dt)
                b = sum(put(it.key, part, dt, n * it.count, times) for part, dt, n in cache[tkey])
            else:
                b = put(it.key, "unquantized", model_dt, it.rows * it.cols * it.count, times)
            if it.bias:
                b += put(it.key, "unquantized", model_dt, it.rows * it.count, times)
            if it.kv and share is not None:
                kv_all += b
                kv_dev += b * share[0] // share[1]
    return breakdown, parts, elements, kv_all, kv_dev


def weight_bytes(spec: ModelSpec, quant: Quantization | None = None,
                 default_dtype: DType | str = "bf16", mtp_layers: int = 0) -> WeightBytes:
    """Exact bytes of the weights as stored: quantized matrices at their width plus
    scales, zero points and g_idx; everything else in `default_dtype` (the model's
    own dtype). `quant` None: every weight in `default_dtype` (then the breakdown is
    param_counts' times the dtype's bytes). `mtp_layers`: add DeepSeek-V3's
    multi-token-prediction module(s) the checkpoint carries (config
    `num_nextn_predict_layers`; inference engines load them only to speculate).
    """
    model_dt = _model_dtype(default_dtype)
    breakdown, parts, elements, _, _ = _tally(spec, quant, model_dt, mtp_layers)
    towers = sum(spec.extra.get("towers", {}).values()) * _ELEMENT_BYTES[model_dt]
    return WeightBytes(total=sum(breakdown.values()), breakdown=breakdown, parts=parts,
                       elements=elements, towers=towers, quantization=quant)


def weight_bytes_per_device(spec: ModelSpec, quant: Quantization | None, tp: int,
                            default_dtype: DType | str = "bf16") -> int:
    """Bytes of weights one of `tp` tensor-parallel devices holds, as
    kvcalc.formulas.weight_params_per_device splits parameters: everything evenly
    (rounded up) except the self-attention K/V projections (values, scales and
    biases), which follow their heads and are replicated when tp > kv_heads.
    Towers are not included (add `weight_bytes(...).towers` split as you place them).
    """
    if tp < 1:
        raise KvcalcError(f"tp must be >= 1, got {tp}")
    model_dt = _model_dtype(default_dtype)
    breakdown, _, _, kv_all, kv_dev = _tally(spec, quant, model_dt, 0, tp)
    total = sum(breakdown.values())
    return -(-(total - kv_all) // tp) + kv_dev


def quantization_of(spec: ModelSpec) -> Quantization | None:
    """The quantization hfconfig read from the model's config (None: unquantized).
    A config kvcalc could not read raises its KvcalcError here, when bytes are asked."""
    err = spec.extra.get("quantization_error")
    if err:
        raise KvcalcError(err)
    return spec.extra.get("quantization")
