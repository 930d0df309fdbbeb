"""Pure integer math: KV-cache bytes, parameter counts, decode-step FLOPs and bytes.

Every function takes plain values or a ModelSpec and returns Python ints (ratios
only where a ratio is the point). Units are bytes, elements and FLOPs, where one
multiply-add is 2 FLOPs. Nothing here formats, prints or imports torch.

Sources, cited per function:
- Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"
  (arXiv:1911.02150), sections 2.3-3.1: MHA/MQA einsums and their memory/arithmetic.
- Ainslie et al. 2023, "GQA" (arXiv:2305.13245): kv_heads between 1 and heads.
- DeepSeek-AI 2024, "DeepSeek-V2" (arXiv:2405.04434) section 2.1: MLA caches
  (d_c + d_h^R) elements per token per layer.
- Kaplan et al. 2020 (arXiv:2001.08361) Table 1 / Chinchilla: forward FLOPs about
  2 x parameters per token plus the attention term.
"""

from __future__ import annotations

from dataclasses import field

from kvcalc import _num
from kvcalc._num import linear_params as _linear
from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.dtypes import MAX_BATCH, MAX_SEQ_LEN, MAX_TP, DType, check_size, dtype as _dtype
from kvcalc.spec import ModelSpec


def _as_dtype(d: DType | str) -> DType:
    return d if isinstance(d, DType) else _dtype(d)


# --------------------------------------------------------------------------------
# Tensor parallelism
# --------------------------------------------------------------------------------
def kv_heads_per_device(spec: ModelSpec, tp: int) -> int:
    """K/V heads each of `tp` devices stores (the most any attention layer keeps).

    Megatron-style TP splits heads across devices. When tp divides kv_heads each
    device holds kv_heads/tp; when tp exceeds kv_heads (tp a multiple of it) every
    device still needs one whole K/V head, so heads are replicated tp/kv_heads
    times (vLLM, TensorRT-LLM). MLA's latent is shared by all heads: every device
    holds all of it (DeepSeek-V2 sec. 2.1; replicated under TP in vLLM/SGLang).
    State layers (Mamba, linear attention) hold no K/V heads.
    """
    check_size("tp", tp, MAX_TP)
    per = [layer.mixer.kv_heads_per_device(tp) for layer, _ in spec.groups()
           if layer.mixer.attends]
    return max(per, default=0)


# --------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------
def kv_bytes_per_token_per_layer(
    spec: ModelSpec, kv_dtype: DType | str, scale_bytes: int = 0, kv_heads: int | None = None
) -> int:
    """Bytes one token adds to one layer's cache.

    MHA/GQA/MQA: K is kv_heads x head_dim and V kv_heads x v_head_dim elements
    (Shazeer 2019 sec. 3: MQA keeps one head, h times less; GQA keeps g heads).
    MLA: one latent of kv_lora_rank plus one decoupled RoPE key of qk_rope_head_dim
    elements, shared by all heads (DeepSeek-V2 eq. 9-10 and Table 1).
    `scale_bytes`: a quantization scale stored per token per head for K and for V
    (per token for MLA's single latent), e.g. 2 for an fp16 scale with int8/int4.
    """
    dt = _as_dtype(kv_dtype)
    if scale_bytes < 0:
        raise KvcalcError(f"scale_bytes must be >= 0, got {scale_bytes}")
    if spec.mla is not None:
        return dt.nbytes(spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) + scale_bytes
    g = spec.kv_heads if kv_heads is None else kv_heads
    k_bytes = dt.nbytes(g * spec.head_dim)
    v_bytes = dt.nbytes(g * spec.v_head_dim)
    return k_bytes + v_bytes + 2 * g * scale_bytes


@record
class CacheGroup:
    """Decoder layers that cache alike: the unit a serving engine pages by.

    `kind`: "full", "sliding", "chunked", "mla", "state" or "cross". Bytes are on
    one of `tp` devices, for ONE layer of the group: `token_bytes` per cached token
    (0 for state kinds), `state_bytes` per sequence whatever its length (0 for
    attention kinds). `window` is the sliding window or attention chunk in tokens
    (0 where every token stays); cross-attention holds the encoder's tokens.
    `name` says which state mixer a state group is (mamba, linear attention, ...).
    """

    kind: str
    layers: int
    token_bytes: int
    state_bytes: int = 0
    window: int = 0
    name: str = ""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return f"{self.kind} {self.window:,}" if self.window else self.kind

    def tokens_held(self, seq_len, encoder_seq_len=None):
        """Tokens one layer of the group keeps for a sequence at `seq_len` (int or array)."""
        if self.kind == "state":
            return 0 * seq_len
        if self.kind == "cross":
            return seq_len if encoder_seq_len is None else encoder_seq_len
        return _num.minimum(seq_len, self.window) if self.window else seq_len

    def bytes_per_sequence(self, seq_len, encoder_seq_len=None):
        """All layers of the group, one sequence (int or array)."""
        return self.layers * (self.token_bytes * self.tokens_held(seq_len, encoder_seq_len)
                              + self.state_bytes)


def cache_groups(spec: ModelSpec, kv_dtype: DType | str = "bf16", tp: int = 1,
                 scale_bytes: int = 0, state_dtype: DType | str = "fp32") -> tuple[CacheGroup, ...]:
    """The model's decoder layers grouped by how they cache, with per-device bytes.

    Layers that differ only in their MLP cache alike and share a group.
    Recurrent states are held in `state_dtype` (transformers keeps them fp32 in a
    bf16 model); convolution states in the cache dtype. Cross-attention
    (encoder-decoder) is its own group: every decoder layer holds the encoder's
    K/V besides its own self-attention cache.
    """
    dt, sdt = _as_dtype(kv_dtype), _as_dtype(state_dtype)
    check_size("tp", tp, MAX_TP)
    merged: dict[tuple, int] = {}
    for layer, n in spec.groups():
        mx = layer.mixer
        kind = mx.cache_kind
        if kind == "none":
            continue  # holds nothing: no group for an engine to page
        key = (kind, mx.token_bytes(dt, tp, scale_bytes), mx.state_bytes(dt, sdt, tp),
               getattr(mx, "window", 0), mx.label if kind == "state" else "")
        merged[key] = merged.get(key, 0) + n
    groups = [CacheGroup(kind, n, token, state, window, name)
              for (kind, token, state, window, name), n in merged.items()]
    if spec.encoder_layers:
        token = kv_bytes_per_token_per_layer(spec, dt, scale_bytes,
                                             kv_heads=kv_heads_per_device(spec, tp))
        groups.append(CacheGroup("cross", spec.layers, token))
    return tuple(groups)


@record
class KVCache:
    """The KV cache of `batch` sequences at `seq_len` tokens (bytes, exact ints)."""

    seq_len: int
    batch: int
    tp: int
    kv_dtype: str
    bytes_per_token_per_layer: int  # one attention layer of the model's heads, all K/V heads
    bytes_per_token: int  # one token in every attention layer, no window applied
    bytes_per_sequence: int  # window-aware self-attention + cross-attention + states
    bytes_per_sequence_full: int  # as if no layer had a window
    cross_attention_bytes_per_sequence: int  # encoder-decoder only
    bytes: int  # the whole batch, window-aware, the model's own heads (no TP replication)
    bytes_full: int  # the whole batch, ignoring sliding windows
    kv_heads_per_device: int
    bytes_per_device: int  # one TP device's share for the whole batch
    bytes_all_devices: int  # bytes_per_device x tp (>= bytes when heads are replicated)
    state_bytes_per_sequence: int = 0  # constant state of the state layers, one sequence
    bytes_by_kind: dict = field(default_factory=dict)  # group label -> whole batch bytes
    layers_by_kind: dict = field(default_factory=dict)  # group label -> decoder layers
    state_dtype: str = "fp32"


def _check_axes(seq_len, batch) -> None:
    """Validate scalar axes here; arrays (a sweep) are validated once, at its edge."""
    if isinstance(seq_len, int):
        check_size("seq_len", seq_len, MAX_SEQ_LEN)
    if isinstance(batch, int):
        check_size("batch", batch, MAX_BATCH)


def kv_cache(
    spec: ModelSpec,
    seq_len: int,
    batch: int = 1,
    kv_dtype: DType | str = "bf16",
    tp: int = 1,
    scale_bytes: int = 0,
    encoder_seq_len: int | None = None,
    state_dtype: DType | str = "fp32",
) -> KVCache:
    """KV cache (and constant layer state) for a batch, per TP device and in total.

    Example (GPT-3 175B, 2048 tokens, fp16, batch 1):
    2 (K,V) x 96 layers x 96 heads x 128 x 2048 x 2 bytes = 9,663,676,416 bytes.
    Each layer group holds what its kind keeps (layers.py): every token, a window,
    a chunk, or a constant state. Encoder-decoder models also cache the encoder's
    K/V for cross-attention in every decoder layer: encoder_seq_len tokens
    (default seq_len), computed once.
    """
    _check_axes(seq_len, batch)
    enc_len = None
    if spec.encoder_layers:
        enc_len = seq_len if encoder_seq_len is None else check_size(
            "encoder_seq_len", encoder_seq_len, MAX_SEQ_LEN)
    dt, sdt = _as_dtype(kv_dtype), _as_dtype(state_dtype)
    per_dev_heads = kv_heads_per_device(spec, tp)
    own = cache_groups(spec, dt, 1, scale_bytes, sdt)
    dev = cache_groups(spec, dt, tp, scale_bytes, sdt) if tp > 1 else own

    per_seq = sum(g.bytes_per_sequence(seq_len, enc_len) for g in own)
    per_seq_dev = sum(g.bytes_per_sequence(seq_len, enc_len) for g in dev)
    cross = sum(g.bytes_per_sequence(seq_len, enc_len) for g in own if g.kind == "cross")
    state = sum(g.layers * g.state_bytes for g in own)
    per_token = sum(g.layers * g.token_bytes for g in own if g.kind != "cross")
    per_seq_full = per_token * seq_len + cross + state
    by_kind: dict[str, int] = {}
    layers_by_kind: dict[str, int] = {}
    for g in own:
        by_kind[g.label] = by_kind.get(g.label, 0) + g.bytes_per_sequence(seq_len, enc_len) * batch
        layers_by_kind[g.label] = layers_by_kind.get(g.label, 0) + g.layers
    return KVCache(
        seq_len=seq_len,
        batch=batch,
        tp=tp,
        kv_dtype=dt.name,
        bytes_per_token_per_layer=kv_bytes_per_token_per_layer(spec, dt, scale_bytes),
        bytes_per_token=per_token,
        bytes_per_sequence=per_seq,
        bytes_per_sequence_full=per_seq_full,
        cross_attention_bytes_per_sequence=cross,
        bytes=per_seq * batch,
        bytes_full=per_seq_full * batch,
        kv_heads_per_device=per_dev_heads,
        bytes_per_device=per_seq_dev * batch,
        bytes_all_devices=per_seq_dev * batch * tp,
        state_bytes_per_sequence=state,
        bytes_by_kind=by_kind,
        layers_by_kind=layers_by_kind,
        state_dtype=sdt.name,
    )


# --------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------
def norm_params(spec: ModelSpec, width: int | None = None) -> int:
    """RMSNorm has a weight; LayerNorm a weight and (unless bias-free) a bias."""
    w = spec.d_model if width is None else width
    return 2 * w if spec.norm == "layernorm" and spec.norm_bias else w


def attention_params(spec: ModelSpec, kv_heads: int | None = None) -> dict[str, int]:
    """One self-attention block by matrix: q, k, v, o (and qk-norm weights).

    q: d_model -> heads*head_dim; k: d_model -> kv_heads*head_dim;
    v: d_model -> kv_heads*v_head_dim; o: heads*v_head_dim -> d_model.
    MQA/GQA shrink k and v only (Shazeer 2019 sec. 3; Ainslie et al. 2023 sec. 2.2).
    MLA (DeepSeek-V2 sec. 2.1): q_a, q_a_norm, q_b (or full q), kv_a (latent +
    shared RoPE key), kv_a_norm, kv_b (latent -> per-head k_nope and v), o.
    """
    d = spec.d_model
    if spec.mla is not None:
        m = spec.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        out: dict[str, int] = {}
        if m.q_lora_rank:
            out["q_a"] = d * m.q_lora_rank
            out["q_a_norm"] = m.q_lora_rank  # RMSNorm
            out["q_b"] = m.q_lora_rank * spec.heads * qk_head
        else:
            out["q"] = d * spec.heads * qk_head
        out["kv_a"] = d * (m.kv_lora_rank + m.qk_rope_head_dim)
        out["kv_a_norm"] = m.kv_lora_rank
        out["kv_b"] = m.kv_lora_rank * spec.heads * (m.qk_nope_head_dim + m.v_head_dim)
        out["o"] = spec.heads * m.v_head_dim * d
        return out
    g = spec.kv_heads if kv_heads is None else kv_heads
    out = {
        "q": _linear(d, spec.heads * spec.head_dim, spec.qkv_bias),
        "k": _linear(d, g * spec.head_dim, spec.qkv_bias),
        "v": _linear(d, g * spec.v_head_dim, spec.qkv_bias),
        "o": _linear(spec.heads * spec.v_head_dim, d, spec.out_bias),
    }
    if spec.qk_norm:
        out["qk_norm"] = 2 * spec.head_dim
    return out


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


# --------------------------------------------------------------------------------
# One decode step
# --------------------------------------------------------------------------------
def attention_flops_per_token(spec: ModelSpec, context: int, absorbed: bool = True) -> int:
    """FLOPs of one query token attending over `context` cached tokens in one layer.

    Scores q.K^T: 2*heads*head_dim*context; weighted sum of V: 2*heads*v_head_dim*context.
    MLA, weights absorbed (DeepSeek-V2 sec. 2.1.3, the decode form): scores over
    kv_lora_rank + qk_rope_head_dim, values over kv_lora_rank, for every head.
    MLA with `absorbed=False` (prefill, where K and V are decompressed once per
    token): scores over qk_nope + qk_rope, values over v_head_dim.
    Softmax and scaling (about 5 FLOPs per score) are not counted.
    """
    if spec.mla is not None:
        m = spec.mla
        if absorbed:
            return 2 * spec.heads * context * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        return 2 * spec.heads * context * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
    return 2 * spec.heads * context * (spec.head_dim + spec.v_head_dim)


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


def layer_matmuls(spec: ModelSpec) -> list[tuple[int, int, int]]:
    """(fan_in, fan_out, count) of every matmul one token runs in one decoder layer.

    Used for FLOPs (2 x fan_in x fan_out) and for activation traffic (each matmul
    reads its input and writes its output once). Norms, residual adds and the MLP
    activation are assumed fused into neighbouring kernels.
    """
    d = spec.d_model
    mm: list[tuple[int, int, int]] = []
    if spec.mla is not None:
        m = spec.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            mm += [(d, m.q_lora_rank, 1), (m.q_lora_rank, spec.heads * qk_head, 1)]
        else:
            mm.append((d, spec.heads * qk_head, 1))
        mm.append((d, m.kv_lora_rank + m.qk_rope_head_dim, 1))
        mm.append((m.kv_lora_rank, spec.heads * (m.qk_nope_head_dim + m.v_head_dim), 1))
        mm.append((spec.heads * m.v_head_dim, d, 1))
    else:
        kv_out = spec.kv_heads * (spec.head_dim + spec.v_head_dim)
        mm.append((d, spec.heads * spec.head_dim + kv_out, 1))  # fused qkv
        mm.append((spec.heads * spec.v_head_dim, d, 1))
    return mm


def _mlp_matmuls(spec: ModelSpec, width: int, count: int) -> list[tuple[int, int, int]]:
    d = spec.d_model
    up = 2 * width if spec.mlp == "gated" else width
    return [(d, up, count), (width, d, count)]


def token_matmuls(spec: ModelSpec) -> list[tuple[int, int, int]]:
    """(fan_in, fan_out, count) of every matmul one decoder token runs, lm_head aside.

    Each layer's mixer projections and its MLP; MoE layers run the router,
    `active` routed and every shared expert; encoder-decoder layers also run the
    cross-attention q and o (its K/V come from the encoder, computed once).
    """
    d = spec.d_model
    mm = []
    for layer, n in spec.groups():
        mm += [(i, o, n) for i, o in layer.mixer.matmuls(d)]
        if layer.mlp is not None:
            mm += [(i, o, n) for i, o in layer.mlp.matmuls(d)]
    if spec.encoder_layers:
        mm += [(d, spec.heads * spec.head_dim, spec.layers),
               (spec.heads * spec.v_head_dim, d, spec.layers)]
    return mm


@record
class StoredWeights:
    """Weights as a (quantized) checkpoint stores them: bytes in all, by param_counts key,
    and on one of `tp` devices (kvcalc.quant computes them)."""

    total: int
    breakdown: dict
    per_device: int
    tp: int = 1
    label: str = ""


@record
class DecodeCost:
    """One decode step: one new token for each of `batch` sequences at `seq_len`.

    The step attends over seq_len positions (the new token's K/V included),
    reads the cache at its current length and writes one token's K/V. Bytes are
    what must cross the memory bus at least once: weights read once per step,
    KV cache read, new K/V written, activations in and out of each matmul.
    """

    seq_len: int
    batch: int
    flops: int
    bytes: int
    flops_breakdown: dict[str, int]
    bytes_breakdown: dict[str, int]
    attention_flops: int  # score and value products over the context only
    attention_bytes: int  # K/V read + new K/V written + q in + attention output out
    prefill_flops: int  # processing a seq_len-token prompt for each sequence
    experts_read_per_layer: int = 0  # MoE: distinct routed experts a step touches (bound)
    per_device_bytes: int = 0  # with TP: one device's share
    per_device_flops: int = 0
    tp: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved for the whole step."""
        return self.flops / self.bytes

    @property
    def attention_intensity(self) -> float:
        return self.attention_flops / self.attention_bytes


def decode_step(
    spec: ModelSpec,
    seq_len: int,
    batch: int = 1,
    weight_dtype: DType | str = "bf16",
    kv_dtype: DType | str = "bf16",
    act_dtype: DType | str = "bf16",
    tp: int = 1,
    scale_bytes: int = 0,
    encoder_seq_len: int | None = None,
    prefill: bool = True,
    stored=None,
) -> DecodeCost:
    """FLOPs and minimum bytes moved by one decode step of the whole model.

    FLOPs: 2 x fan_in x fan_out for every matmul the token runs (projections,
    MLP or its active experts, lm_head) plus the attention over the context
    (Kaplan et al. 2020 Table 1: 2N + 2 n_layer n_ctx d_attn per token).
    Bytes: weights once per step (the embedding table only for the batch's rows
    unless tied to the lm_head; MoE: at most min(experts, batch x active) routed
    experts per layer), the KV cache at its current length (window-aware), one
    new token's K/V, and activations (each matmul reads its input, writes its output).

    seq_len and batch may be ints (exact) or equal-shape numpy arrays (a sweep: int64,
    object or float64); `prefill=False` skips the prompt FLOPs a sweep row does not show.
    `stored`: the weights as a quantized checkpoint stores them (quant.weights.weight_bytes and
    its per-device figure, `.total`, `.breakdown`, `.per_device`); the step then reads
    those bytes less the rows and experts it does not touch, instead of `weight_dtype`.
    """
    _check_axes(seq_len, batch)
    wdt, kdt, adt = _as_dtype(weight_dtype), _as_dtype(kv_dtype), _as_dtype(act_dtype)
    d = spec.d_model
    params = param_counts(spec)
    cache = kv_cache(spec, seq_len, batch, kdt, tp, scale_bytes, encoder_seq_len)
    notes: list[str] = []

    # --- matmuls one token runs ---
    mm = token_matmuls(spec)
    experts_touched = 0
    unread_expert_params = 0
    unread_expert_slots = 0  # routed experts x layers the step does not read
    expert_slots = 0
    for layer, n in spec.groups():
        m = layer.mlp
        if m is not None and m.kind == "moe":
            touched = _num.minimum(batch * m.active, m.experts)
            experts_touched = _num.maximum(experts_touched, touched)
            unread_expert_params += (m.experts - touched) * m.expert.params(d) * n
            unread_expert_slots += (m.experts - touched) * n
            expert_slots += m.experts * n
            if isinstance(touched, int):
                note = (f"MoE weights: up to {touched} of {m.experts} routed experts read per "
                        f"layer (min(experts, batch x active), an upper bound)")
                if note not in notes:
                    notes.append(note)
    mm.append((d, spec.vocab, 1))  # lm_head

    proj_flops_per_token = sum(2 * i * o * c for i, o, c in mm)
    attn_flops_per_token = 0
    for layer, n in spec.groups():
        mx = layer.mixer
        attn_flops_per_token += n * mx.decode_flops(mx.tokens_read(seq_len))
        if not mx.attends:
            attn_flops_per_token += n * mx.recurrent_flops()
    if spec.encoder_layers:
        enc_len = seq_len if encoder_seq_len is None else encoder_seq_len
        attn_flops_per_token += spec.layers * attention_flops_per_token(spec, enc_len)

    flops_breakdown = {
        "projections_and_mlp": proj_flops_per_token * batch,
        "attention": attn_flops_per_token * batch,
    }
    flops = sum(flops_breakdown.values())

    # --- weights read once per step ---
    read_params = params.total
    if not spec.tied_embeddings:
        # Untied input table: only the rows of this step's tokens are read.
        read_params = read_params - spec.vocab * d + _num.minimum(batch, spec.vocab) * d
    if spec.learned_pos:
        read_params = (read_params - spec.learned_pos * d
                       + _num.minimum(batch, spec.learned_pos) * d)
    if spec.encoder_layers:
        # The encoder ran at prefill; cross-attention K/V projections ran then too.
        read_params -= sum(n for k, n in params.breakdown.items() if k.startswith("encoder/"))
        read_params -= params.breakdown.get("cross_attention/k", 0)
        read_params -= params.breakdown.get("cross_attention/v", 0)
    read_params -= unread_expert_params
    if stored is None:
        weight_bytes = wdt.nbytes(read_params)
        weight_bytes_dev = wdt.nbytes(weight_params_per_device(spec, read_params, tp, params))
    else:
        # The same rows and experts left unread, in the bytes the checkpoint stores them.
        by_key = stored.breakdown
        unread_bytes = 0
        if not spec.tied_embeddings:
            unread_bytes += (spec.vocab - _num.minimum(batch, spec.vocab)) * (
                by_key.get("embedding", 0) // spec.vocab)
        if spec.learned_pos:
            unread_bytes += (spec.learned_pos - _num.minimum(batch, spec.learned_pos)) * (
                by_key.get("position_embedding", 0) // spec.learned_pos)
        if spec.encoder_layers:
            unread_bytes += sum(n for k, n in by_key.items() if k.startswith("encoder/"))
            unread_bytes += by_key.get("cross_attention/k", 0) + by_key.get("cross_attention/v", 0)
        if expert_slots:
            unread_bytes += unread_expert_slots * (by_key.get("moe/experts", 0) // expert_slots)
        weight_bytes = stored.total - unread_bytes
        weight_bytes_dev = stored.per_device - -(-unread_bytes // tp)

    # Caches are read at their current length (state layers: the whole state), one
    # token's K/V is written per attention layer and each state is written back.
    kv_read = cache.bytes
    state_batch = cache.state_bytes_per_sequence * batch
    kv_write = cache.bytes_per_token * batch + state_batch
    act_elems = sum((i + o) * c for i, o, c in mm) * batch
    # Attention reads q and writes its output for every layer (K/V counted above).
    qo_elems = sum(n * layer.mixer.decode_act_elements() for layer, n in spec.groups())
    if spec.encoder_layers:
        qo_elems += spec.layers * spec.heads * (spec.head_dim + spec.v_head_dim)
    attn_act_bytes = adt.nbytes(qo_elems * batch)
    act_bytes = adt.nbytes(act_elems) + attn_act_bytes

    bytes_breakdown = {
        "weights": weight_bytes,
        "kv_read": kv_read,
        "kv_write": kv_write,
        "activations": act_bytes,
    }
    total_bytes = sum(bytes_breakdown.values())

    # Per device under TP: weights and activations split evenly, K/V as stored per device.
    kv_write_dev = batch * sum(
        g.layers * (g.token_bytes + g.state_bytes)
        for g in cache_groups(spec, kdt, tp, scale_bytes, cache.state_dtype) if g.kind != "cross")
    per_device_bytes = weight_bytes_dev + cache.bytes_per_device + kv_write_dev + -(-act_bytes // tp)

    prefill_total = prefill_flops(spec, seq_len, encoder_seq_len) * batch if prefill else 0

    return DecodeCost(
        seq_len=seq_len,
        batch=batch,
        flops=flops,
        bytes=total_bytes,
        flops_breakdown=flops_breakdown,
        bytes_breakdown=bytes_breakdown,
        attention_flops=attn_flops_per_token * batch,
        attention_bytes=kv_read + kv_write + attn_act_bytes,
        prefill_flops=prefill_total,
        experts_read_per_layer=experts_touched,
        per_device_bytes=per_device_bytes,
        per_device_flops=-(-flops // tp),
        tp=tp,
        notes=tuple(notes),
    )


def prefill_flops(spec: ModelSpec, seq_len: int, encoder_seq_len: int | None = None) -> int:
    """FLOPs to process one `seq_len`-token prompt (one sequence).

    Every matmul a token runs, for every prompt token, except the lm_head, which
    runs for the last position only (logits for the next token); plus causal
    attention, sum_i min(i, window) positions per layer (MLA in its decompressed
    form). Encoder-decoder: also the encoder over `encoder_seq_len` tokens
    (bidirectional attention), the cross-attention K/V projections of its output
    in every decoder layer, and each prompt token's cross-attention over it.
    """
    d = spec.d_model
    mm = token_matmuls(spec)
    per_token = sum(2 * i * o * c for i, o, c in mm)
    lm_head = 2 * d * spec.vocab

    attn = 0
    for layer, n in spec.groups():
        mx = layer.mixer
        if not mx.attends:
            attn += n * mx.recurrent_flops() * seq_len
            continue
        # MLA decompresses K and V once per token in prefill: per-head dims.
        per_position = (mx.prefill_flops_per_position() if mx.cache_kind == "mla"
                        else mx.decode_flops(1))
        attn += n * per_position * mx.prefill_positions(seq_len)
    total = per_token * seq_len + lm_head + attn

    if spec.encoder_layers:
        enc_len = seq_len if encoder_seq_len is None else encoder_seq_len
        enc_mm = layer_matmuls(spec) + _mlp_matmuls(spec, spec.d_ff, 1)
        total += spec.encoder_layers * enc_len * sum(2 * i * o * c for i, o, c in enc_mm)
        total += spec.encoder_layers * enc_len * attention_flops_per_token(spec, enc_len)
        kv_out = spec.kv_heads * (spec.head_dim + spec.v_head_dim)
        total += spec.layers * enc_len * 2 * d * kv_out  # cross K/V of the encoder output
        total += spec.layers * seq_len * attention_flops_per_token(spec, enc_len)
    return total


# --------------------------------------------------------------------------------
# The bare attention step kvcalc measure times
# --------------------------------------------------------------------------------
@record
class AttentionStepCost:
    """One decode-attention call: `batch` query tokens, `heads` query heads, over a
    cache of `seq_len` tokens with `kv_heads` K/V heads (no projections)."""

    flops: int
    kv_bytes: int  # K and V at the current length, read once
    q_bytes: int
    o_bytes: int

    @property
    def bytes(self) -> int:
        return self.kv_bytes + self.q_bytes + self.o_bytes

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes


def attention_step(
    batch: int, seq_len: int, heads: int, kv_heads: int, head_dim: int,
    dtype: DType | str = "bf16", v_head_dim: int | None = None,
) -> AttentionStepCost:
    """Minimum traffic and FLOPs of one decode-attention call.

    A kernel that reads each K/V head once (grouped queries, flash-decoding) moves
    batch x seq_len x kv_heads x (head_dim + v_head_dim) elements of cache plus q
    and o; the FLOPs do not depend on kv_heads: 2 x batch x heads x seq_len x
    (head_dim + v_head_dim). Hence intensity about 2 x heads/kv_heads FLOPs per
    element (Shazeer 2019 sec. 3.1).
    """
    spec = ModelSpec(name="attention", layers=1, d_model=heads * head_dim, heads=heads,
                     kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim or head_dim,
                     d_ff=1, vocab=1)
    dt = _as_dtype(dtype)
    check_size("seq_len", seq_len, MAX_SEQ_LEN)
    check_size("batch", batch, MAX_BATCH)
    return AttentionStepCost(
        flops=batch * attention_flops_per_token(spec, seq_len),
        kv_bytes=batch * seq_len * kv_bytes_per_token_per_layer(spec, dt),
        q_bytes=dt.nbytes(batch * heads * head_dim),
        o_bytes=dt.nbytes(batch * heads * spec.v_head_dim),
    )


# --------------------------------------------------------------------------------
# Shazeer's memory-to-arithmetic ratio
# --------------------------------------------------------------------------------
@record
class ShazeerRatio:
    """Memory accesses (elements) over arithmetic operations (multiply-adds)."""

    mode: str  # "batched" or "incremental"
    n: int  # the sequence length the counts use
    memory_elements: int
    arithmetic_ops: int
    terms: dict[str, float]  # Shazeer's asymptotic terms, for which one dominates

    @property
    def ratio(self) -> float:
        return self.memory_elements / self.arithmetic_ops

    @property
    def dominant_term(self) -> str:
        return max(self.terms, key=self.terms.__getitem__)


def shazeer_ratio(mode: str, b: int, n: int, d: int, h: int, g: int, k: int,
                  v: int | None = None) -> ShazeerRatio:
    """Exact counts of Shazeer's einsum programs, generalised to g K/V heads.

    b batch, n tokens (sequence length), d model width, h query heads, g K/V
    heads (h: MHA, 1: MQA, between: GQA), k key and v value head dims.

    batched (sec. 2.3, all n positions at once; self-attention, m = n):
      memory X, M: 2bnd; P_q, P_o: 2dhk; P_k, P_v: 2dgk; Q, O: 2bhnk; K, V: 2bgnk;
      logits and weights: 2bhn^2; Y: bnd.
      arithmetic: bnd*hk (Q) + 2 bnd*gk (K,V) + 2 bhn^2 k (logits, O) + bnhk*d (Y).
      Shazeer: ratio O(1/k + 1/(bn)).
    incremental (sec. 2.4 and 3.1, n calls, call i reads a cache of i tokens):
      per call x, y: 2bd; q, o: 2bhk; new k, v: 2bgk; weights: 2dhk + 2dgk;
      K, V read: 2bgk*i. arithmetic per call: bd(hk + 2gk + hk) + 2bhk*i.
      Shazeer: MHA ratio Theta(n/d + 1/b); MQA Theta(1/d + n/(dh) + 1/b); with g
      heads the middle term is n g/(d h).
    """
    v = k if v is None else v
    for name, val in (("b", b), ("n", n), ("d", d), ("h", h), ("g", g), ("k", k), ("v", v)):
        check_size(name, val, MAX_SEQ_LEN)
    if h % g:
        raise KvcalcError(f"h ({h}) must be divisible by g ({g})")
    if mode == "batched":
        memory = (3 * b * n * d + d * h * (k + v) + d * g * (k + v) + b * h * n * (k + v)
                  + b * g * n * (k + v) + 2 * b * h * n * n)
        arith = b * n * d * h * k + b * n * d * g * (k + v) + b * h * n * n * (k + v) + b * n * h * v * d
        terms = {"1/k": 1 / k, "1/(b*n)": 1 / (b * n)}
    elif mode == "incremental":
        tri = n * (n + 1) // 2  # sum of cache lengths over the n calls
        memory = (n * (2 * b * d + b * h * (k + v) + b * g * (k + v))
                  + n * d * (h * (k + v) + g * (k + v)) + b * g * (k + v) * tri)
        arith = n * b * d * (h * k + g * (k + v) + h * v) + b * h * (k + v) * tri
        terms = {"1/d": 1 / d, "n*g/(d*h)": n * g / (d * h), "1/b": 1 / b}
    else:
        raise KvcalcError(f"mode must be 'batched' or 'incremental', got {mode!r}")
    return ShazeerRatio(mode=mode, n=n, memory_elements=memory, arithmetic_ops=arith, terms=terms)
