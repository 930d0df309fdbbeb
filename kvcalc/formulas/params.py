"""Parameter counts, matrix by matrix and layer group by layer group, and the share one
tensor-parallel device holds.

Sources, cited per function:
- Shazeer 2019 (arXiv:1911.02150) section 3 and Ainslie et al. 2023, "GQA"
  (arXiv:2305.13245) section 2.2: MQA/GQA shrink the K and V projections only.
- DeepSeek-AI 2024, "DeepSeek-V2" (arXiv:2405.04434) section 2.1: MLA's projections.
"""

from __future__ import annotations

import dataclasses

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_TP, check_size
from kvcalc.spec import ModelSpec


def norm_params(spec: ModelSpec, width: int | None = None) -> int:
    """RMSNorm has a weight; LayerNorm a weight and (unless bias-free) a bias."""
    w = spec.d_model if width is None else width
    return 2 * w if spec.norm == "layernorm" and spec.norm_bias else w


@record
class ParamCounts:
    """Parameters by name, summed over layers. `total` counts every stored weight."""

    breakdown: dict[str, int]
    total: int
    attention: int  # all attention projections (self and cross), every layer
    active: int  # used for one token: MoE counts only the routed experts it visits
    embedding: int  # input tables + learned positions (+ T5 relative bias)
    per_layer: int  # one dense decoder layer (the first), attention + MLP + norms

    @property
    def non_embedding(self) -> int:
        """Total less the input/position tables (an untied lm_head stays in)."""
        return self.total - self.embedding


def _layer_params(add, layer, count: int, d: int, norm: int, stack: str = "") -> int:
    """One group of `count` alike layers into the breakdown (keys under `stack`); returns
    the routed-expert parameters a token does not visit. A pass over an earlier layer's
    weights adds none (they are that layer's)."""
    if not layer.owns_weights:
        return 0
    for mixer in layer.mixers:
        for key, n in mixer.params(d).items():
            add(f"{stack}{mixer.param_key}/{key}", n * count)
    if layer.mlp is not None:
        for key, n in layer.mlp.param_breakdown(d).items():
            add(f"{stack}{key}", n * count)
    add(f"{stack}norms", layer.norms * norm * count)
    # routed weights a token skips: the MLP's experts, and a mixture of attention heads'
    # (JetMoE) unpicked query and output experts
    skipped = sum(mx.inactive_params(d) for mx in layer.mixers if hasattr(mx, "inactive_params"))
    return (skipped + (0 if layer.mlp is None else layer.mlp.inactive_params(d))) * count


def _cross_beside_encoder(b: dict[str, int]) -> dict[str, int]:
    """The breakdown with each cross-attention matrix listed right after the encoder's
    attention matrix of the same name: the order kvcalc's reports have always had."""
    cross = {k: n for k, n in b.items() if k.startswith("cross_attention/")}
    out: dict[str, int] = {}
    for key, n in b.items():
        if key in cross:
            continue
        out[key] = n
        twin = "cross_attention/" + key.removeprefix("encoder/attention/")
        if key.startswith("encoder/attention/") and twin in cross:
            out[twin] = cross.pop(twin)
    return {**out, **cross}


# The models counted lately, by identity (kept alive here): one estimate asks for the
# same model's count a dozen times (the figures, then each engine count's weights).
_COUNTED: list[tuple[ModelSpec, ParamCounts]] = []
_COUNTED_MAX = 8


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Exact parameter count of the architecture, matrix by matrix, layer group by group.

    Equals sum(p.numel() for p in model.parameters()) of the reference PyTorch
    implementation (tests build transformers' models on the meta device).
    Conventions: a tied lm_head is the embedding (counted once); biases and norm
    weights are counted; T5's relative-position bias is buckets x heads per stack.
    The result is shared between callers: read it, never change its breakdown.
    """
    for counted, counts in _COUNTED:
        if counted is spec:
            return counts
    counts = _count_params(spec)
    _COUNTED.append((spec, counts))
    del _COUNTED[:-_COUNTED_MAX]
    return counts


def _count_params(spec: ModelSpec) -> ParamCounts:
    d = spec.d_model
    b: dict[str, int] = {}

    def add(key: str, n: int) -> None:
        if n:
            b[key] = b.get(key, 0) + n

    norm = norm_params(spec)
    inactive = sum(_layer_params(add, layer, n, d, norm) for layer, n in spec.groups())
    for run in spec.encoder_runs:  # an encoder-decoder's encoder stack, then its final norm
        _layer_params(add, run.layer, run.count, d, norm, "encoder/")
    if spec.encoder_runs:
        add("encoder/norms", norm)
        b = _cross_beside_encoder(b)
    if spec.final_norm:
        add("norms", norm)
    if spec.embedding_norm:
        add("norms", norm)

    add("embedding", spec.vocab * d)
    add("per_layer_embedding", spec.per_layer_rows * spec.per_layer_width)
    add("position_embedding", spec.learned_pos * d)
    stacks = 2 if spec.encoder_runs else 1
    a = spec.attention_shape  # T5: a bias per bucket per head of its attention
    add("relative_position_bias", spec.relative_attention_buckets * (a.heads if a else 0) * stacks)
    if not spec.tied_embeddings:
        add("lm_head", spec.vocab * d)
    if spec.hyper_connections is not None:
        add("hyper_connections", spec.hyper_connections.params(d, spec.layers))
    add("other", spec.extra_params)

    total = sum(b.values())
    attention = sum(n for k, n in b.items() if "attention/" in k)
    embedding = (b.get("embedding", 0) + b.get("position_embedding", 0)
                 + b.get("relative_position_bias", 0) + b.get("per_layer_embedding", 0))
    first = spec.runs[0].layer
    first_mlp = first.mlp.params(d) if first.mlp is not None and not first.mlp.experts else 0
    per_layer = (sum(sum(mx.params(d).values()) for mx in first.mixers) + first_mlp
                 + first.norms * norm)
    return ParamCounts(
        breakdown=b,
        total=total,
        attention=attention,
        active=total - inactive,
        embedding=embedding,
        per_layer=per_layer,
    )


def weight_params_per_device(spec: ModelSpec, params: int, tp: int,
                             counts: ParamCounts | None = None) -> int:
    """Of `params` weights (all devices), those one of `tp` devices holds.

    Everything splits evenly (rounded up) except the self-attention K/V
    projections, which follow their heads: when tp exceeds kv_heads each device
    holds a whole head's k and v weights, replicated like the cache (vLLM's
    QKVParallelLinear). Norms and biases are small and counted as split.
    """
    check_size("tp", tp, MAX_TP)  # the fit asks this before any cache formula does
    d = spec.d_model
    kv_all = kv_dev = 0
    for layer, n in spec.groups():
        mx = layer.mixer
        kv = mx.kv_projection_params(d) * n * layer.owns_weights
        if kv:
            kv_all += kv
            kv_dev += kv * mx.kv_heads_per_device(tp) // mx.kv_heads
    return -(-(params - kv_all) // tp) + kv_dev


def repeated_pass_params(spec: ModelSpec, tp: int = 1) -> int:
    """Weights the passes over earlier layers' weights read again (a looped model runs
    its shared layers once per pass, each pass streaming their weights anew), those one
    of `tp` devices reads (K/V projections following their heads, as above); 0 for a
    model that runs each layer once."""
    d, total = spec.d_model, 0
    for layer, n in spec.groups():
        if layer.owns_weights:
            continue
        b: dict[str, int] = {}
        _layer_params(lambda k, v: b.__setitem__(k, b.get(k, 0) + v),
                      dataclasses.replace(layer, owns_weights=True), n, d, norm_params(spec))
        mx = layer.mixer
        kv = mx.kv_projection_params(d) * n
        kv_dev = kv * mx.kv_heads_per_device(tp) // mx.kv_heads if kv else 0
        total += -(-(sum(b.values()) - kv) // tp) + kv_dev
    return total
