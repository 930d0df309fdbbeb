"""Weights as a model folder or Hub checkpoint stores them: its safetensors headers'
sum first, the config's quantization_config as the fallback and the cross-check. One
record (`AsStored`) that estimate, fit, the sweep, plan and the engine count all read,
so that a checkpoint has one set of bytes and one name everywhere (issue #22 point 2).

What the engine holds (kvcalc.serving.vllm.memory) follows the headers for a quantized
checkpoint (values, scales and whatever else it stores, loaded as stored); a checkpoint
of float tensors only is loaded in the engine's dtype (vLLM casts an fp32 checkpoint
to 16 bits: `ModelConfig`'s dtype "auto"), so there the config's count in that dtype
stands, as the headers' bytes do for the checkpoint's own size.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError
from kvcalc.formulas.step import StoredWeights
from kvcalc.spec import ModelSpec, architecture

__all__ = ["AsStored", "engine_surplus_bytes", "header_label", "stored_weights"]

# Element types a plain float checkpoint holds; any other type is a quantized one.
FLOAT_TYPES = frozenset({"BF16", "F16", "F32", "F64"})


@record
class AsStored:
    """Weights as a model folder or Hub checkpoint stores them (a Workload's
    `quantization` when no dtype is asked for): its safetensors headers' sum
    (kvcalc.model_source), None when it has no safetensors files; the config's
    quantization (or why it cannot be read) is the cross-check, and the count when the
    headers do not apply."""

    checkpoint: object  # kvcalc.model_source.safetensors.CheckpointBytes, or None
    described: tuple  # kvcalc.spec.architecture() of the model the headers were read for
    quantization: object = None  # kvcalc.quant's Quantization from quantization_config
    quantization_problem: str = ""
    # The headers' own name for weights no quantization_config describes ("" otherwise)
    header_label: str = ""

    def applies(self, spec: ModelSpec) -> bool:
        """Whether the headers describe `spec` (not a variant of it, --kv-heads say)."""
        return self.checkpoint is not None and architecture(spec) == self.described

    @property
    def quantized(self) -> bool:
        """Whether the headers hold quantized element types (fp8, packed ints...)."""
        return self.checkpoint is not None and bool(
            set(self.checkpoint.elements_by_dtype) - FLOAT_TYPES)

    @property
    def weights_label(self) -> str:
        """The weights' name: the config's format, else the headers' ("" for plain)."""
        q = self.quantization
        if q is not None and q.from_config:
            return q.dtype_label
        return self.header_label


def header_label(checkpoint) -> str:
    """'as stored (F8_E4M3)': the quantized element types of a checkpoint whose config
    names no format, most elements first; "" for float tensors only."""
    quantized = {k: n for k, n in checkpoint.elements_by_dtype.items() if k not in FLOAT_TYPES}
    if not quantized:
        return ""
    return f"as stored ({', '.join(sorted(quantized, key=lambda k: (-quantized[k], k)))})"


def stored_weights(spec: ModelSpec, quantization, tp: int) -> StoredWeights | None:
    """Bytes of quantized weights as stored, in all and on one of `tp` devices; for
    AsStored, the headers' sum when they describe this very model."""
    if isinstance(quantization, AsStored):
        if quantization.applies(spec):
            return _from_headers(spec, quantization, tp)
        quantization = quantization.quantization
    if quantization is None:
        return None
    from kvcalc.quant.weights import weight_bytes, weight_bytes_per_device

    wb = weight_bytes(spec, quantization)
    return StoredWeights(total=wb.total, breakdown=dict(wb.breakdown),
                         per_device=weight_bytes_per_device(spec, quantization, tp),
                         tp=tp, label=quantization.label)


def _from_headers(spec: ModelSpec, stored: AsStored, tp: int) -> StoredWeights:
    from kvcalc.quant.weights import checkpoint_weights

    ck, q = stored.checkpoint, stored.quantization
    cw = checkpoint_weights(spec, q, ck.total_bytes, ck.elements_by_dtype, tp)
    config = f"the config's {q.label}" if q is not None else f"the config in {cw.model_dtype}"
    differ = ck.total_bytes - cw.config_total
    if stored.quantization_problem:
        check = f"its quantization_config is not read ({stored.quantization_problem})"
    elif differ:
        check = (f"{config} gives {cw.config_total:,} B, {abs(differ):,} B "
                 f"{'less' if differ > 0 else 'more'}")
    else:
        check = f"{config} agrees"
    return StoredWeights(total=cw.total, breakdown=cw.breakdown, per_device=cw.per_device,
                         tp=tp, label=q.label if q is not None else stored.header_label,
                         source=f"{ck.where}, {ck.total_bytes:,} B; {check}", towers=cw.towers)


def engine_surplus_bytes(spec: ModelSpec, stored: AsStored, tp: int,
                         config_per_device: int) -> int:
    """Bytes per device a quantized checkpoint's headers hold beyond the config's count
    for one of `tp` devices (`config_per_device`: the language model as the engine
    prices it from the config, no RoPE cache), which the engine loads too (negative:
    less). 0 when the headers do not describe `spec` or hold float tensors only (the
    engine casts those to its dtype)."""
    if not (stored.applies(spec) and stored.quantized):
        return 0
    from kvcalc.quant.weights import checkpoint_weights

    ck = stored.checkpoint
    cw = checkpoint_weights(spec, stored.quantization, ck.total_bytes, ck.elements_by_dtype, tp)
    return cw.per_device - config_per_device


def weights_as(spec: ModelSpec, weight_dtype, group_size: int | None = None):
    """The quantization weights are stored with: the config's own when no dtype is given,
    else `weight_dtype` (with `group_size`) for every matrix; None for plain weights.
    A model read from a folder or the Hub with no dtype given: AsStored (its headers)."""
    if weight_dtype is None:
        if group_size is not None:
            raise ParameterError("{group_size} needs a quantized {weight_dtype} (int4, int8, "
                                 "fp8, awq, gptq, mxfp4 or nvfp4)", "group_size", "weight_dtype")
        if "checkpoint" in spec.extra:
            return _as_stored(spec)
        if not (spec.extra.get("quantization") or spec.extra.get("quantization_error")):
            return None  # unquantized: no need to load kvcalc.quant at start-up
    from kvcalc.quant.formats import adhoc, quantization_of

    if weight_dtype is None:
        return quantization_of(spec)
    name = getattr(weight_dtype, "name", None) or str(weight_dtype)
    return adhoc(name, group_size)


def _as_stored(spec: ModelSpec) -> AsStored:
    quantization, problem = None, ""
    if spec.extra.get("quantization") or spec.extra.get("quantization_error"):
        from kvcalc.quant.formats import quantization_of

        try:
            quantization = quantization_of(spec)
        except KvcalcError as e:
            if spec.extra["checkpoint"] is None:
                raise  # no headers to count instead
            problem = str(e)
    checkpoint = spec.extra["checkpoint"]
    described = architecture(spec) == spec.extra["checkpoint_of"]  # not a variant of it
    label = header_label(checkpoint) if (checkpoint is not None and quantization is None
                                         and described) else ""
    return AsStored(checkpoint=checkpoint, described=spec.extra["checkpoint_of"],
                    quantization=quantization, quantization_problem=problem,
                    header_label=label)
