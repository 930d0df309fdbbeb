"""Checkpoint formats: a `quantization_config` (or `--weight-dtype`) read into a
`Quantization`, and which of the model's modules it converts.

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
- NVIDIA ModelOpt (`quant_method: modelopt` in config.json, or hf_quant_config.json's
  `quantization`), as vLLM's ModelOptFp8LinearMethod / ModelOptNvFp4LinearMethod load
  it: FP8, weight e4m3 [N, K] + fp32 `weight_scale` [1] + fp32 `input_scale` [1];
  NVFP4, weight uint8 [N, K/2] (two 4-bit values a byte) + e4m3 `weight_scale`
  [N, K/16] + fp32 `weight_scale_2` [1] + fp32 `input_scale` [1]. `exclude_modules`
  (config.json: `ignore`) stay in the model dtype; `kv_cache_quant_algo` is the KV
  cache's dtype the checkpoint asks for (`kv_cache_dtype`).

Sources: transformers 5.23 integrations (finegrained_fp8.FP8Linear, mxfp4,
bitsandbytes, fbgemm_fp8); AutoAWQ and AutoGPTQ QuantLinear; compressed-tensors'
compressors; vLLM model_executor/layers/quantization/modelopt.py (ModelOptQuantConfigBase
.from_config for the two files' fields, the FP8 and NVFP4 linear methods' parameters); checked against published checkpoint totals in tests/test_quant.py
(tests/data/quant/README.md lists them).
"""

from __future__ import annotations

import functools
import re
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import weight_dtype as spec_weight_dtype
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.spec import ModelSpec

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
    # ModelOpt's kv_cache_quant_algo: the KV cache dtype the checkpoint asks for ("fp8"),
    # "" when it names none
    kv_cache_dtype: str = ""
    quant_type: str = ""  # bitsandbytes 4-bit: nf4 or fp4
    source: str = field(default="", compare=False)  # what it was read from, for notes

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise KvcalcError(f"quantization layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.bits not in (2, 3, 4, 8, 16):
            raise KvcalcError(f"quantization bits must be 2, 3, 4, 8 or 16, got {self.bits}")
        if self.group_size < 0:
            raise KvcalcError(f"group size must be >= 0 (0: per output channel), got {self.group_size}")

    def converts(self, name: str, role: str) -> bool:
        """Whether the matrix `name` (its module under the decoder: "layers.3.mlp.gate")
        in `role` (linear, expert, router, head) is stored in this format."""
        if role == "head":
            return self.lm_head and not _matches(name, self.not_converted)
        if self.experts_only and role != "expert":
            return False
        if role == "router" and not self.routers:
            return False
        names = (name, name.rsplit(".", 2)[0] if role == "expert" else name)
        return not any(_matches(n, self.not_converted) for n in names)

    @property
    def from_config(self) -> bool:
        """Read from a checkpoint's quantization_config, not asked for by --weight-dtype."""
        return not self.source.startswith("--weight-dtype")

    @property
    def dtype_label(self) -> str:
        """The weights' dtype in a few words, as every output names a quantized
        checkpoint's: 'fp8 (block 128x128)', 'mxfp4 experts', 'int4 g128'."""
        if self.layout == "fp8_block":
            return f"fp8 (block {self.block[0]}x{self.block[1]})"
        if self.layout in ("fp8_channel", "fp8_tensor"):
            return f"fp8 (per {self.layout[4:]})"
        if self.layout in ("mxfp4", "nvfp4"):
            return self.layout + (" experts" if self.experts_only else "")
        if self.layout == "bnb4":
            return f"{self.quant_type or 'nf4'} (bitsandbytes)"
        if self.layout == "bnb8":
            return "int8 (bitsandbytes)"
        return f"int{self.bits} " + (f"g{self.group_size}" if self.group_size else "per channel")

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
    if m == "bitnet":
        # transformers' BitNetHfQuantizer (integrations/bitnet.py): "online" keeps the
        # checkpoint's weights as they are stored (bf16, microsoft/bitnet-b1.58-2B-4T-bf16)
        # and ternarises them on the fly, so they weigh what unquantized ones do; "offline"
        # packs four ternary values into each uint8 with a scale a matrix, a layout kvcalc
        # does not model
        mode = _field(qc, "quantization_mode", where, (str,), "offline").lower()
        if mode == "online":
            return None
        raise KvcalcError(f"{where}: quantization_config: bitnet with quantization_mode "
                          f"{mode!r}: kvcalc models the online mode only (weights stored "
                          "unpacked), not the packed 2-bit ternary layout")
    if m in ("modelopt", "modelopt_fp4", "modelopt_fp8"):
        return _modelopt(qc, where, "quantization_config", _patterns(qc, where, "ignore",
                                                                     "exclude_modules"))
    raise KvcalcError(f"{where}: quantization_config.quant_method {method!r} is not one kvcalc "
                      "models (fp8, fbgemm_fp8, mxfp4, awq, gptq, bitsandbytes, "
                      "compressed-tensors, modelopt)")


def quantization_from_hf_quant_config(hq: dict, where: str = "hf_quant_config.json"
                                      ) -> Quantization | None:
    """ModelOpt's hf_quant_config.json (`{"producer": ..., "quantization": {...}}`), which
    a ModelOpt checkpoint may carry instead of a quantization_config in config.json
    (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 does): read as vLLM reads it."""
    if not isinstance(hq, dict) or not isinstance(hq.get("quantization"), dict):
        raise KvcalcError(f"{where}: expected an object with a 'quantization' object")
    q = hq["quantization"]
    if q.get("quant_algo") is None:
        return None
    return _modelopt(q, where, "quantization", _patterns(q, where, "exclude_modules"))


_MODELOPT_KV = {"FP8": "fp8", "NVFP4": "nvfp4"}


def _modelopt(qc: dict, where: str, part: str, skip: tuple[str, ...]) -> Quantization:
    """quant_algo FP8 (per-tensor e4m3) or NVFP4 (4-bit, e4m3 scale per group_size 16, one
    fp32 scale a matrix); both store an fp32 input scale a matrix (static activations)."""
    algo = _field(qc, "quant_algo", where, (str,))
    if algo is None:
        raise KvcalcError(f"{where}: {part}.quant_algo is missing")
    algo = algo.upper()
    kv = _field(qc, "kv_cache_quant_algo", where, (str,), None)
    kv_dtype = ""
    if kv is not None:
        kv_dtype = _MODELOPT_KV.get(kv.upper(), "")
        if not kv_dtype:
            raise KvcalcError(f"{where}: {part}.kv_cache_quant_algo={kv!r}: kvcalc reads FP8 "
                              "and NVFP4")
    if algo == "FP8":
        return Quantization("modelopt", "fp8_tensor", 8, static_input_scale=True,
                            not_converted=skip, kv_cache_dtype=kv_dtype, source=where)
    if algo == "NVFP4":
        g = _group(qc, "group_size", where, 16)
        if g != 16:
            raise KvcalcError(f"{where}: {part}.group_size={g}: NVFP4 blocks are 16 weights")
        return Quantization("modelopt", "nvfp4", 4, group_size=16, scale_dtype="fp8",
                            static_input_scale=True, not_converted=skip,
                            kv_cache_dtype=kv_dtype, source=where)
    raise KvcalcError(f"{where}: {part}.quant_algo={algo!r}: kvcalc models ModelOpt's FP8 and "
                      "NVFP4 (MIXED_PRECISION and the others: not yet)")


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
        raise ParameterError("{group_size} must be a positive number of weights, got "
                             + literal(group_size), "group_size")
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
            raise ParameterError("mxfp4 blocks are 32 weights; {group_size} must be 32 or left "
                                 "out", "group_size")
        return Quantization("adhoc", "mxfp4", 4, group_size=32, scale_dtype="uint8",
                            source=f"--weight-dtype {weight_dtype}")
    if key == "nvfp4":
        if g not in (0, 16):
            raise ParameterError("nvfp4 blocks are 16 weights; {group_size} must be 16 or left "
                                 "out", "group_size")
        return Quantization("adhoc", "nvfp4", 4, group_size=16, scale_dtype="fp8",
                            source=f"--weight-dtype {weight_dtype}")
    spec_weight_dtype(weight_dtype)  # bf16, fp16, fp32 (or an error naming the choices)
    if group_size:
        raise ParameterError("{group_size} applies to quantized weights, not "
                             + literal(weight_dtype), "group_size")
    return None


def quantization_of(spec: ModelSpec) -> Quantization | None:
    """The quantization hfconfig read from the model's config (None: unquantized).
    A config kvcalc could not read raises its KvcalcError here, when bytes are asked."""
    err = spec.extra.get("quantization_error")
    if err:
        raise KvcalcError(err)
    return spec.extra.get("quantization")


# --------------------------------------------------------------------------------
# Module names (for not_converted patterns) and pattern matching
# --------------------------------------------------------------------------------
_PREFIXES = ("model.", "model.language_model.", "language_model.model.", "language_model.",
             "backbone.", "")


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """transformers' should_convert_module (inverted), over the usual model prefixes.
    Nemotron-H names each block's one module `mixer` (backbone.layers.5.mixer.q_proj,
    ...mixer.experts.0.up_proj) where kvcalc says self_attn or mlp: a pattern naming a
    `mixer` is matched against the name with the block's module so renamed."""
    if not patterns:
        return False
    regexes, module, plain, broken, mixer = _compiled(patterns)
    if mixer:
        parts = name.split(".")
        if len(parts) > 3 and parts[0] == "layers" and parts[2] != "mixer":
            renamed = ".".join(parts[:2] + ["mixer"] + parts[3:])
            if _matches(renamed, patterns):
                return True
    for prefix in _PREFIXES:
        full = name if name == "lm_head" and prefix not in ("", "language_model.") else prefix + name
        if any(r.match(full) for r in regexes):
            return True
        if (module is not None and module.match(full)) or full.endswith(plain):
            return True
        if any(full == p or full.startswith(p + ".") for p in broken):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple:
    """`patterns` compiled once (a checkpoint's ignore list can name hundreds of modules,
    each matched against every matrix: Llama 4 Scout's FP8 ignore list of 449 took 17 s
    matched one by one): the "re:" ones as given; the others as one alternation, each a
    module name or its parent's (`p` then a dot or the end), which a name matches where one
    of them does; those that are no regex, by their text; and whether any names a
    Nemotron-H `mixer`."""
    suffix = r"(?:(?<=\.)|(?=\.|$))"  # the module itself or a parent of it
    regexes = [re.compile(p[3:]) for p in patterns if p.startswith("re:")]
    plain = tuple(p for p in patterns if not p.startswith("re:"))
    valid, broken = [], []
    for p in plain:
        try:
            re.compile(p)
        except re.error:
            broken.append(p)
            continue
        if re.search(r"\\[1-9]|\(\?P=", p):  # a backreference: its own regex
            regexes.append(re.compile(rf"(?:{p}){suffix}"))
        else:
            valid.append(p)
    alternation = "|".join(f"(?:{p})" for p in valid)
    module = re.compile(rf"(?:{alternation}){suffix}") if valid else None
    mixer = any(".mixer." in p or p.endswith(".mixer") for p in patterns)
    return tuple(regexes), module, plain, tuple(broken), mixer
