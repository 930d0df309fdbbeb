"""The weights' bytes as stored, tallied over the model's tensors: in all, by
param_counts key, by role and by element type, and on one of `tp` devices.

kvcalc.quant.inventory lists the tensors, kvcalc.quant.formats says which matrices the
checkpoint converts, kvcalc.quant.stored what each converted matrix stores.
"""

from __future__ import annotations

import functools

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import DType, dtype
from kvcalc.errors import KvcalcError
from kvcalc.quant.formats import Quantization
from kvcalc.quant.inventory import Plain, model_tensors
from kvcalc.quant.stored import ELEMENT_BYTES, matrix_tensors
from kvcalc.spec import ModelSpec


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



def _model_dtype(default_dtype: DType | str) -> str:
    dt = default_dtype if isinstance(default_dtype, DType) else dtype(default_dtype)
    if dt.name not in ("bf16", "fp16", "fp32"):
        raise KvcalcError(f"the model dtype (unquantized weights) must be bf16, fp16 or fp32, "
                          f"got {dt.name}")
    return dt.name


def _tally(spec: ModelSpec, quant: Quantization | None, model_dt: str, mtp_layers: int,
           tp: int = 1):
    """Bytes by key, part and dtype for all devices (tp=1) or one of `tp`, as fresh dicts.
    Remembered: estimate asks once per tp it tries and a sweep once per combination, and
    DeepSeek-R1's 91,991 tensors take ~20 ms to tally. ModelSpec equality leaves `extra`
    out, so the one entry of it the tally reads (the checkpoint's module names follow
    hf_model_type) is part of the key."""
    breakdown, parts, elements, kv_all, kv_dev = _remembered_tally(
        spec, spec.extra.get("hf_model_type", ""), quant, model_dt, mtp_layers, tp)
    return dict(breakdown), dict(parts), dict(elements), kv_all, kv_dev


@functools.lru_cache(maxsize=64)
def _remembered_tally(spec: ModelSpec, model_type: str, quant: Quantization | None,
                      model_dt: str, mtp_layers: int, tp: int):
    return _count(spec, quant, model_dt, mtp_layers, tp)


def _count(spec: ModelSpec, quant: Quantization | None, model_dt: str, mtp_layers: int,
           tp: int = 1):
    breakdown: dict[str, int] = {}
    parts: dict[str, int] = {}
    elements: dict[str, int] = {}
    kv_all = kv_dev = 0
    cache: dict = {}

    def put(key: str, part: str, dt: str, n: int, times: int) -> int:
        if not n:
            return 0
        b = n * ELEMENT_BYTES[dt] * times
        breakdown[key] = breakdown.get(key, 0) + b
        parts[part] = parts.get(part, 0) + b
        elements[dt] = elements.get(dt, 0) + n * times
        return b

    # Module names matter only to a format that leaves some modules out by name.
    per_layer = quant is not None and bool(quant.not_converted)
    for items, times, layer in model_tensors(spec, mtp_layers, per_layer=per_layer):
        share = None
        if tp > 1 and layer is not None:
            mx = layer.mixer
            if getattr(mx, "kv_heads", 0):
                share = (mx.kv_heads_per_device(tp), mx.kv_heads)
        for it in items:
            if isinstance(it, Plain):
                put(it.key, "unquantized", it.dtype or model_dt, it.elements, times)
                continue
            conv = quant is not None and quant.converts(it.name, it.role)
            if conv:
                tkey = (it.rows, it.cols)
                if tkey not in cache:
                    cache[tkey] = matrix_tensors(quant, it.rows, it.cols, model_dt)
                b = sum(put(it.key, part, dt, n * it.count, times) for part, dt, n in cache[tkey])
            else:
                b = put(it.key, "unquantized", model_dt, it.rows * it.cols * it.count, times)
            if it.bias:
                b += put(it.key, "unquantized", model_dt, it.rows * it.count, times)
            if it.kv and share is not None:
                kv_all += b
                # Per layer, as each layer's own share rounds.
                kv_dev += b // times * share[0] // share[1] * times
    return breakdown, parts, elements, kv_all, kv_dev


def weight_bytes(spec: ModelSpec, quant: Quantization | None = None,
                 default_dtype: DType | str = "bf16", mtp_layers: int = 0) -> WeightBytes:
    """Exact bytes of the weights as stored: quantized matrices at their width plus
    scales, zero points and g_idx; everything else in `default_dtype` (the model's
    own dtype). `quant` None: every weight in `default_dtype` (then the breakdown is
    param_counts' times the dtype's bytes) but hyper-connections, fp32 in any model.
    `mtp_layers`: add DeepSeek-V3's multi-token-prediction module(s) the checkpoint
    carries (config `num_nextn_predict_layers`; inference engines load them only to
    speculate).
    """
    model_dt = _model_dtype(default_dtype)
    breakdown, parts, elements, _, _ = _tally(spec, quant, model_dt, mtp_layers)
    towers = sum(spec.extra.get("towers", {}).values()) * ELEMENT_BYTES[model_dt]
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


# safetensors dtype names of the unquantized floats, as kvcalc names them.
_HEADER_FLOATS = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}


def model_dtype_of(elements_by_dtype: dict[str, int]) -> str:
    """The model's own dtype as a checkpoint's headers show it: the float dtype (bf16,
    fp16, fp32) holding the most elements; bf16 when the headers hold none."""
    floats = {_HEADER_FLOATS[k]: n for k, n in elements_by_dtype.items() if k in _HEADER_FLOATS}
    return max(floats, key=floats.get) if floats else "bf16"


@record
class CheckpointWeights:
    """The weights as a checkpoint's headers count them, split as kvcalc splits its own
    count: `total` the language model (the headers' sum less `towers`), `per_device`
    one of `tp` devices' share, `breakdown` the config's count by param_counts key (what
    a decode step leaves unread is taken from it), `config_total` what the config
    gives for the whole checkpoint in the same dtype (the cross-check)."""

    total: int
    towers: int
    per_device: int
    breakdown: dict[str, int]
    config_total: int
    model_dtype: str


def checkpoint_weights(spec: ModelSpec, quant: Quantization | None, stored_bytes: int,
                       elements_by_dtype: dict[str, int], tp: int) -> CheckpointWeights:
    """`stored_bytes` (every tensor of the checkpoint, from its headers) split as the
    config's own count splits: the vision towers as the config counts them (in the
    headers' float dtype), and on each of `tp` devices the config's share plus an even
    share of whatever the headers hold beyond the config's count (or less)."""
    model_dt = model_dtype_of(elements_by_dtype)
    wb = weight_bytes(spec, quant, model_dt)
    towers = min(wb.towers, stored_bytes)
    total = stored_bytes - towers
    per_device = weight_bytes_per_device(spec, quant, tp, model_dt) + -(-(total - wb.total) // tp)
    return CheckpointWeights(total=total, towers=towers, per_device=per_device,
                             breakdown=dict(wb.breakdown), config_total=wb.checkpoint,
                             model_dtype=model_dt)
