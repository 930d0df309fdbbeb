"""Parameter counts, matrix by matrix and layer group by layer group, and the share one
tensor-parallel device holds.

Sources, cited per function:
- Shazeer 2019 (arXiv:1911.02150) section 3 and Ainslie et al. 2023, "GQA"
  (arXiv:2305.13245) section 2.2: MQA/GQA shrink the K and V projections only.
- DeepSeek-AI 2024, "DeepSeek-V2" (arXiv:2405.04434) section 2.1: MLA's projections.
"""

from __future__ import annotations

from kvcalc._num import linear_params as _linear
from kvcalc._record import record
from kvcalc.spec import ModelSpec


def norm_params(spec: ModelSpec, width: int | None = None) -> int:
    """RMSNorm has a weight; LayerNorm a weight and (unless bias-free) a bias."""
    w = spec.d_model if width is None else width
    return 2 * w if spec.norm == "layernorm" and spec.norm_bias else w


def attention_params(spec: ModelSpec, kv_heads: int | None = None) -> dict[str, int]:
    """One self-attention block by matrix, as the layer kind counts it
    (kvcalc.layers.Attention / Latent: q, k, v, o and qk-norm weights; MLA's q_a,
    q_a_norm, q_b or q, kv_a, kv_a_norm, kv_b, o). MQA/GQA shrink k and v only
    (Shazeer 2019 sec. 3; Ainslie et al. 2023 sec. 2.2). `kv_heads`: another K/V
    head count than the model's (its GQA/MQA/MHA variant)."""
    mixer = spec.attention_mixer
    if kv_heads is not None:
        mixer = mixer.with_kv_heads(kv_heads)
    return mixer.params(spec.d_model)


def mlp_params(spec: ModelSpec, width: int) -> int:
    """Gated (SwiGLU/GeGLU): gate and up d->width, down width->d. Plain: up, down."""
    d = spec.d_model
    if spec.mlp == "gated":
        return 2 * _linear(d, width, spec.mlp_bias) + _linear(width, d, spec.mlp_bias)
    return _linear(d, width, spec.mlp_bias) + _linear(width, d, spec.mlp_bias)


@record
class ParamCounts:
    """Parameters by name, summed over layers. `total` counts every stored weight."""

    breakdown: dict[str, int]
    total: int
    attention: int  # all attention projections (self and cross), every layer
    active: int  # used for one token: MoE counts only the routed experts it visits
    embedding: int  # input table + learned positions (+ T5 relative bias)
    per_layer: int  # one dense decoder layer (the first), attention + MLP + norms

    @property
    def non_embedding(self) -> int:
        """Total less the input/position tables (an untied lm_head stays in)."""
        return self.total - self.embedding


def _mixer_prefix(mixer) -> str:
    return "attention" if mixer.attends else mixer.kind


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Exact parameter count of the architecture, matrix by matrix, layer group by group.

    Equals sum(p.numel() for p in model.parameters()) of the reference PyTorch
    implementation (tests build transformers' models on the meta device).
    Conventions: a tied lm_head is the embedding (counted once); biases and norm
    weights are counted; T5's relative-position bias is buckets x heads per stack.
    """
    d = spec.d_model
    b: dict[str, int] = {}

    def add(key: str, n: int) -> None:
        if n:
            b[key] = b.get(key, 0) + n

    norm = norm_params(spec)
    inactive = 0
    for layer, n in spec.groups():
        prefix = _mixer_prefix(layer.mixer)
        for key, count in layer.mixer.params(d).items():
            add(f"{prefix}/{key}", count * n)
        mlp = layer.mlp
        if mlp is not None and mlp.kind == "moe":
            for key, count in mlp.breakdown(d).items():
                add(f"moe/{key}", count * n)
            inactive += mlp.inactive_params(d) * n
        elif mlp is not None:
            add("mlp", mlp.params(d) * n)
        add("norms", layer.norms * norm * n)

    if spec.encoder_layers:
        # Encoder self-attention, and the decoder's cross-attention (MHA over encoder states).
        for key, n in attention_params(spec).items():
            add(f"encoder/attention/{key}", n * spec.encoder_layers)
            add(f"cross_attention/{key}", n * spec.layers)
        add("encoder/mlp", mlp_params(spec, spec.d_ff) * spec.encoder_layers)
        add("norms", norm * spec.layers)  # the cross-attention block's norm
        add("encoder/norms", spec.norms_per_layer * norm * spec.encoder_layers + norm)
    if spec.final_norm:
        add("norms", norm)
    if spec.embedding_norm:
        add("norms", norm)

    add("embedding", spec.vocab * d)
    add("position_embedding", spec.learned_pos * d)
    stacks = 2 if spec.encoder_layers else 1
    add("relative_position_bias", spec.relative_attention_buckets * spec.heads * stacks)
    if not spec.tied_embeddings:
        add("lm_head", spec.vocab * d)
    add("other", spec.extra_params)

    total = sum(b.values())
    attention = sum(n for k, n in b.items() if "attention/" in k)
    embedding = b.get("embedding", 0) + b.get("position_embedding", 0) + b.get(
        "relative_position_bias", 0)
    first = spec.runs[0].layer
    first_mlp = first.mlp.params(d) if first.mlp is not None and first.mlp.kind == "dense" else 0
    per_layer = sum(first.mixer.params(d).values()) + first_mlp + first.norms * norm
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
    d = spec.d_model
    kv_all = kv_dev = 0
    for layer, n in spec.groups():
        mx = layer.mixer
        kv = mx.kv_projection_params(d) * n
        if kv:
            kv_all += kv
            kv_dev += kv * mx.kv_heads_per_device(tp) // mx.kv_heads
    return -(-(params - kv_all) // tp) + kv_dev
