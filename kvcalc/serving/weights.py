"""What every engine loads before its cache, counted once for all of them: the weights one
device of a pipeline stage holds, and the activations of one forward pass.

Physics, not policy: the same checkpoint takes the same bytes under any engine (each
loads the config's tensors in the model dtype, or as its quantized format stores them,
with the RoPE cos/sin cache). Written once here, with its sources; each wing hands it
the weights' description (`Weights`) and its layout, without an engine's flags.

The forward pass's peak was read in vLLM's profile run (kvcalc.serving.vllm.memory,
whose module docstring gives the logs it is checked on): tokens x model dtype x
(FWD_MLP_COPIES x MLP width / tp + FWD_HIDDEN_COPIES x d_model), the gate_up output
(2 x d_ff) and the activation's output (1 x d_ff) alive together beside the residual,
the normed input and the layer output.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import dtype, weight_dtype as _weight_dtype
from kvcalc.formulas.params import param_counts, weight_params_per_device
from kvcalc.layers import MoE
from kvcalc.serving.layout import pipeline_layers
from kvcalc.spec import ModelSpec

__all__ = ["FWD_HIDDEN_COPIES", "FWD_MLP_COPIES", "Weights", "forward_activation",
           "stage_layers", "stage_weights"]

FWD_MLP_COPIES = 3  # gate_up output (2 x d_ff) + activation output (1 x d_ff)
FWD_HIDDEN_COPIES = 3  # residual, normed hidden, attention/MLP output


@record
class Weights:
    """How the checkpoint is stored and loaded: kvcalc.serving.vllm.settings.EngineSettings'
    fields of the same names (the model dtype, a weight dtype or quantization, a measured
    figure in place of the count)."""

    model_dtype: str = "bf16"
    weight_dtype: str | None = None
    group_size: int | None = None
    weight_quantization: object = None
    weights_bytes: int | None = None  # measured per device: replaces the count


def stage_layers(spec: ModelSpec, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline stage (the split vLLM and SGLang share)."""
    return pipeline_layers(spec.layers, pp)


def stage_weights(spec: ModelSpec, weights: Weights, *, tp: int, pp: int = 1,
                  stage: int = 0, expert_split: int = 0, whole_experts: bool = False,
                  ends: bool = True) -> int:
    """Bytes of weights one device of pipeline stage `stage` holds (tp-way sharded), exact.

    `expert_split`: the GPUs a MoE model's routed experts are spread over where that is
    not tp (vLLM with data parallelism: tp x dp; 0: tp); `whole_experts` (expert
    parallelism): each of them holds cdiv(experts, expert_split) whole experts (the
    busiest device) instead of a 1/expert_split slice of every expert.

    Parameters per device come from formulas.weight_params_per_device (K/V projections
    replicated like the cache when tp > kv_heads); the input embedding sits on the
    first stage and the lm_head (a copy even when tied, if pp > 1) on the last.
    `weight_dtype` applies to every matrix but the embedding and lm_head. Engines also
    keep a RoPE cos/sin cache of max_position x head_dim in the model dtype, counted
    on every stage. `weights_bytes` (measured) replaces all of this. `ends=False`: the
    decoder layers alone, without the embedding, the lm_head, the RoPE cache and towers
    (a speculative head's layers, which use the target's: kvcalc.serving.speculative).
    """
    if weights.weights_bytes is not None:
        return weights.weights_bytes
    split = _ExpertSplit(spec, tp, expert_split or tp, whole_experts)
    if not ends:
        return _language_model_bytes(spec, weights, tp, pp, stage, split, ends=False)
    return (_language_model_bytes(spec, weights, tp, pp, stage, split)
            + _tower_bytes(spec, weights, tp, stage))


class _ExpertSplit:
    """How a MoE model's routed experts (the breakdown's "moe/experts") lie over the
    devices when not as the rest of the weights (over tp): over `over` devices, in slices
    or whole. `moves` is False where they lie as the rest do (the plain count stands)."""

    def __init__(self, spec: ModelSpec, tp: int, over: int, whole: bool):
        self.tp, self.over, self.whole, self.experts = tp, over, False, 0
        self.moves = False
        if over == tp and not whole:
            return
        experts = {layer.mlp.experts for layer, _ in spec.groups()
                   if isinstance(layer.mlp, MoE)}
        self.whole, self.experts = whole and bool(experts), max(experts, default=0)
        self.moves = bool(experts)

    def on_device(self, routed: int) -> int:
        """Of `routed` (all devices: parameters or bytes), what the busiest device holds."""
        if self.whole:
            return routed * -(-self.experts // self.over) // self.experts
        return -(-routed // self.over)

    def rebase(self, routed: int) -> int:
        """What to add to a tp-way count for the experts to lie so instead."""
        return self.on_device(routed) - -(-routed // self.tp)


def _tower_bytes(spec: ModelSpec, w: Weights, tp: int, stage: int) -> int:
    """A multimodal model's vision tower and projector: loaded with the language model, on
    the first pipeline stage, in the model dtype, sharded by tp (as the plain fit counts
    them, kvcalc.floor)."""
    towers = sum(spec.extra.get("towers", {}).values())
    if stage != 0 or not towers:
        return 0
    return dtype(w.model_dtype).nbytes(-(-towers // tp))


def _language_model_bytes(spec: ModelSpec, w: Weights, tp: int, pp: int, stage: int,
                          split: _ExpertSplit, ends: bool = True) -> int:
    """The config's count (kvcalc.quant for quantized weights); for a checkpoint read
    from a folder or the Hub (AsStored), plus what its quantized headers hold beyond that
    count, shared per device as estimate shares it and split over stages by layers."""
    q = w.weight_quantization
    if q is None and not w.weight_dtype and not (spec.extra.get("quantization")
                                                 or spec.extra.get("quantization_error")):
        return _config_bytes(spec, w, tp, pp, stage, None, split, ends)  # plain: no kvcalc.quant
    from kvcalc.quant.checkpoint import AsStored, engine_surplus_bytes
    from kvcalc.quant.formats import adhoc, quantization_of

    if isinstance(q, AsStored):
        stored, q = q, q.quantization
        total = _config_bytes(spec, w, tp, pp, stage, q, split, ends)
        if not (stored.quantized and stored.applies(spec)) or not ends:
            return total  # float tensors only: loaded in the engine's dtype
        whole = _config_bytes(spec, w, tp, 1, 0, q, split) - _rope_cache_bytes(spec, w)
        surplus = engine_surplus_bytes(spec, stored, tp, whole)
        if pp > 1:
            surplus = surplus * pipeline_layers(spec.layers, pp)[stage] // spec.layers
        return total + surplus
    if q is None:
        q = adhoc(w.weight_dtype, w.group_size) if w.weight_dtype else quantization_of(spec)
    return _config_bytes(spec, w, tp, pp, stage, q, split, ends)


def _rope_cache_bytes(spec: ModelSpec, w: Weights) -> int:
    """The RoPE cos/sin cache: max_position x the rotated width in the model dtype, for
    the attention most layers have (none for MLA). vLLM keeps one cache per rotary shape
    and base, so a model whose layers rotate differently (Gemma 4's full layers: a 512
    head with partial_rotary_factor 0.25 and their own base) holds more; the layer model
    does not yet record the rotated share, so those are not counted."""
    shape = spec.attention_shape
    if not spec.max_context or spec.mla is not None or shape is None:
        return 0
    return dtype(w.model_dtype).nbytes(spec.max_context * shape.head_dim)


def _config_bytes(spec: ModelSpec, w: Weights, tp: int, pp: int, stage: int, q,
                  split: _ExpertSplit, ends: bool = True) -> int:
    """One stage's weights on one device from the config, quantized by `q` (None: the
    model dtype, or w.weight_dtype for every matrix), the routed experts as `split` lays
    them; `ends=False`: the decoder layers alone."""
    if q is not None:
        from kvcalc.quant.weights import weight_bytes, weight_bytes_per_device

        # Quantized as stored (kvcalc.quant): values, scales and zeros matrix by matrix.
        # The stage share splits the body by layers, with the embedding and lm_head (in
        # the model dtype) on the first and last stage, as below.
        wb = weight_bytes(spec, q, w.model_dtype)
        dev = weight_bytes_per_device(spec, q, tp, w.model_dtype)
        emb_dev = -(-(wb.breakdown.get("embedding", 0) + wb.breakdown.get("position_embedding", 0))
                    // tp)
        head_dev = -(-wb.breakdown.get("lm_head", 0) // tp)
        body_dev = dev - emb_dev - head_dev
        if split.moves:
            body_dev += split.rebase(wb.breakdown.get("moe/experts", 0))
        sizes = pipeline_layers(spec.layers, pp)
        total = body_dev * sizes[stage] // spec.layers if pp > 1 else body_dev
        if not ends:
            return total
        if stage == 0:
            total += emb_dev
        if stage == pp - 1:
            # A tied lm_head is a copy of its own on the last stage when pp > 1.
            tied_copy = dtype(w.model_dtype).nbytes(-(-spec.vocab * spec.d_model // tp))
            total += head_dev if head_dev or pp == 1 else tied_copy
        return total + _rope_cache_bytes(spec, w)
    counts = param_counts(spec)
    b = counts.breakdown
    emb = b.get("embedding", 0) + b.get("position_embedding", 0)
    head = b.get("lm_head", 0)
    if spec.tied_embeddings and pp > 1:
        head = spec.vocab * spec.d_model
    body = counts.total - emb - b.get("lm_head", 0)
    if split.moves:  # the experts apart: each split its own way
        routed = b.get("moe/experts", 0)
        body_dev = (weight_params_per_device(spec, body + emb - routed, tp, counts)
                    - (-(-emb // tp)) + split.on_device(routed))
    else:
        body_dev = weight_params_per_device(spec, body + emb, tp, counts) - (-(-emb // tp))
    sizes = pipeline_layers(spec.layers, pp)
    body_stage = body_dev * sizes[stage] // spec.layers if pp > 1 else body_dev
    model_dt = dtype(w.model_dtype)
    weight_dt = _weight_dtype(w.weight_dtype) if w.weight_dtype else model_dt
    total = weight_dt.nbytes(body_stage)
    if not ends:
        return total
    if stage == 0:
        total += model_dt.nbytes(-(-emb // tp))
    if stage == pp - 1:
        total += model_dt.nbytes(-(-head // tp))
    return total + _rope_cache_bytes(spec, w)


def _mlp_width(spec: ModelSpec) -> int:
    """Intermediate width one token's MLP materialises, in the widest layer: a dense MLP's
    d_ff, a MoE layer's routed experts it visits plus its shared experts. A model whose
    layers have no MLP (Mamba) materialises its mixers' inner width (d_model without one)."""
    widths = [m.active * m.expert_d_ff + m.shared_experts * m.shared.d_ff
              if isinstance(m, MoE) else m.d_ff
              for m in (layer.mlp for layer, _ in spec.groups()) if m is not None]
    inner = [mx.d_inner for layer, _ in spec.groups() for mx in layer.mixers
             if hasattr(mx, "d_inner")]
    return max(widths, default=max(inner, default=spec.d_model))


def forward_activation(spec: ModelSpec, weights: Weights, *, tokens: int, tp: int) -> int:
    """Peak activation bytes of one forward pass over `tokens` tokens on one TP rank
    (modelled): tokens x dtype x (FWD_MLP_COPIES x MLP width / tp + FWD_HIDDEN_COPIES x
    d_model)."""
    per = FWD_MLP_COPIES * -(-_mlp_width(spec) // tp) + FWD_HIDDEN_COPIES * spec.d_model
    return dtype(weights.model_dtype).nbytes(tokens * per)
