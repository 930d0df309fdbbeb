"""What a model's caches hold: K/V heads per TP device, bytes per token, layer groups that
cache alike, and the KV cache (with constant layer state) of a batch.

Sources, cited per function:
- Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"
  (arXiv:1911.02150), section 3: MQA keeps one K/V head.
- Ainslie et al. 2023, "GQA" (arXiv:2305.13245): kv_heads between 1 and heads.
- DeepSeek-AI 2024, "DeepSeek-V2" (arXiv:2405.04434) section 2.1: MLA caches
  (d_c + d_h^R) elements per token per layer.
"""

from __future__ import annotations

import functools

from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import MAX_BATCH, MAX_SEQ_LEN, MAX_TP, DType, check_size, dtype as _dtype
from kvcalc.spec import ModelSpec


def as_dtype(d: DType | str) -> DType:
    """A DType as given, or the one its name stands for."""
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
def kv_bytes_per_token_by_kind(
    spec: ModelSpec, kv_dtype: DType | str, scale_bytes: int = 0, kv_heads: int | None = None
) -> dict[str, int]:
    """Bytes one token adds to one layer's cache, per kind of attention layer that caches
    the tokens it sees ({cache group label: bytes}; {} without such layers).

    MHA/GQA/MQA: K is kv_heads x head_dim and V kv_heads x v_head_dim elements
    (Shazeer 2019 sec. 3: MQA keeps one head, h times less; GQA keeps g heads).
    MLA: one latent of kv_lora_rank plus one decoupled RoPE key of qk_rope_head_dim
    elements, shared by all heads (DeepSeek-V2 eq. 9-10 and Table 1).
    `scale_bytes`: a quantization scale stored per token per head for K and for V
    (per token for MLA's single latent), e.g. 2 for an fp16 scale with int8/int4.
    `kv_heads`: as the model's variant with that many K/V heads (ModelSpec.with_kv_heads).
    """
    if scale_bytes < 0:
        raise KvcalcError(f"scale_bytes must be >= 0, got {scale_bytes}")
    if kv_heads is not None and spec.mla is None:
        spec = spec.with_kv_heads(kv_heads)
    return {g.label: g.token_bytes for g in cache_groups(spec, kv_dtype, 1, scale_bytes)
            if g.mixer.attends and g.mixer.tokens_written and g.token_bytes}


def kv_bytes_per_token_per_layer(
    spec: ModelSpec, kv_dtype: DType | str, scale_bytes: int = 0, kv_heads: int | None = None
) -> int | None:
    """Bytes one token adds to one attention layer's cache, when every attention layer
    that caches its tokens adds the same (0 without such layers); None when they differ
    (Gemma 4's 512-wide full layers beside its 256-wide sliding ones): then
    `kv_bytes_per_token_by_kind` gives each. See it for the formulas."""
    sizes = set(kv_bytes_per_token_by_kind(spec, kv_dtype, scale_bytes, kv_heads).values())
    return (sizes.pop() if sizes else 0) if len(sizes) <= 1 else None


@record
class CacheGroup:
    """Decoder layers that cache alike: the unit a serving engine pages by.

    `mixer`: the layer kind they share (kvcalc.layers), which says what a layer keeps
    (every token, a window, a chunk, the encoder's tokens, or a constant state). Bytes
    are on one of `tp` devices, for ONE layer of the group: `token_bytes` per cached
    token (0 for state kinds), `state_bytes` per sequence whatever its length (0 for
    attention kinds).
    """

    mixer: object
    layers: int
    token_bytes: int
    state_bytes: int = 0

    @property
    def label(self) -> str:
        return self.mixer.label

    def tokens_held(self, seq_len, encoder_seq_len=None):
        """Tokens one layer of the group keeps for a sequence at `seq_len` (int or array)."""
        return self.mixer.tokens_held(seq_len, encoder_seq_len)

    def bytes_per_sequence(self, seq_len, encoder_seq_len=None):
        """All layers of the group, one sequence (int or array)."""
        return self.layers * (self.token_bytes * self.tokens_held(seq_len, encoder_seq_len)
                              + self.state_bytes)


def cache_groups(spec: ModelSpec, kv_dtype: DType | str = "bf16", tp: int = 1,
                 scale_bytes: int = 0, state_dtype: DType | str = "fp32") -> tuple[CacheGroup, ...]:
    """The model's decoder layers grouped by how they cache, with per-device bytes
    (remembered: a served run asks for the same model's groups at every step's shape).

    Layers that differ only in their MLP (or in what their cache does not hold) cache
    alike and share a group. Recurrent states are held in `state_dtype` (transformers
    keeps them fp32 in a bf16 model); convolution states in the cache dtype.
    Cross-attention (encoder-decoder) is its own group: every decoder layer holds the
    encoder's K/V besides its own self-attention cache.
    """
    dt, sdt = as_dtype(kv_dtype), as_dtype(state_dtype)
    check_size("tp", tp, MAX_TP)
    # By the model object first: hashing a ModelSpec walks every layer's records, and a
    # served run or an engine's search asks for the same object's groups thousands of
    # times (237,585 hashes, 5 of 65 profiled s in tests/test_sweep_kinds.py).
    held = _BY_SPEC.get(id(spec))
    if held is None or held[0] is not spec:
        held = _BY_SPEC[id(spec)] = (spec, {})  # the entry keeps the object (and its id)
        if len(_BY_SPEC) > _BY_SPEC_MAX:
            del _BY_SPEC[next(iter(_BY_SPEC))]
    key = (dt, tp, scale_bytes, sdt)
    groups = held[1].get(key)
    if groups is None:
        groups = held[1][key] = _cache_groups(spec, dt, tp, scale_bytes, sdt)
    return groups


_BY_SPEC: dict[int, tuple[ModelSpec, dict]] = {}
_BY_SPEC_MAX = 64


@functools.lru_cache(maxsize=256)
def _cache_groups(spec: ModelSpec, dt: DType, tp: int, scale_bytes: int,
                  sdt: DType) -> tuple[CacheGroup, ...]:
    merged: dict[tuple, list] = {}
    for layer, n in spec.groups():
        for mx in layer.mixers:
            token, state = mx.token_bytes(dt, tp, scale_bytes), mx.state_bytes(dt, sdt, tp)
            if not (token or state):
                continue  # holds nothing (an MLP-only block): no group for an engine to page
            # The label names what a layer keeps (kind and window, or the state mixer).
            first = merged.setdefault((mx.label, token, state), [mx, 0])
            first[1] += n
    return tuple(CacheGroup(mx, n, token, state)
                 for (_, token, state), (mx, n) in merged.items())


@record
class KVCache:
    """The KV cache of `batch` sequences at `seq_len` tokens (bytes, exact ints)."""

    seq_len: int
    batch: int
    tp: int
    kv_dtype: str
    # one attention layer, all its K/V heads; None when the attention layers differ
    bytes_per_token_per_layer: int | None
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
    # group label -> bytes one token adds to one layer of it (attention layers that cache)
    bytes_per_token_per_layer_by_kind: dict = field(default_factory=dict)


def check_axes(seq_len, batch) -> None:
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
    check_axes(seq_len, batch)
    enc_len = None
    if spec.cross_attends:
        enc_len = seq_len if encoder_seq_len is None else check_size(
            "encoder_seq_len", encoder_seq_len, MAX_SEQ_LEN)
    dt, sdt = as_dtype(kv_dtype), as_dtype(state_dtype)
    per_dev_heads = kv_heads_per_device(spec, tp)
    own = cache_groups(spec, dt, 1, scale_bytes, sdt)
    dev = cache_groups(spec, dt, tp, scale_bytes, sdt) if tp > 1 else own

    per_seq = sum(g.bytes_per_sequence(seq_len, enc_len) for g in own)
    per_seq_dev = sum(g.bytes_per_sequence(seq_len, enc_len) for g in dev)
    # Cross-attention keeps the encoder's K/V, whatever the decoder's length: a decode
    # step adds none of it (its kind writes no tokens).
    cross = sum(g.bytes_per_sequence(seq_len, enc_len) for g in own
                if g.token_bytes and not g.mixer.tokens_written)
    state = sum(g.layers * g.state_bytes for g in own)
    per_token = sum(g.layers * g.token_bytes * g.mixer.tokens_written for g in own)
    per_seq_full = per_token * seq_len + cross + state
    per_layer = {g.label: g.token_bytes for g in own
                 if g.mixer.attends and g.mixer.tokens_written and g.token_bytes}
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
        bytes_per_token_per_layer=None if len(set(per_layer.values())) > 1 else (
            next(iter(per_layer.values()), 0)),
        bytes_per_token_per_layer_by_kind=per_layer,
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


def valid_tps(spec: ModelSpec, upper: int = 1024) -> list[int]:
    """TP degrees the model can use: those every attention layer (its own, beside, or
    cross) can split its query heads and K/V heads over (Megatron: tp divides the heads;
    K/V heads divided or replicated whole). A model without attention: [1]."""
    mixers = {mx for layer, _ in spec.groups() for mx in layer.mixers if mx.attends}
    if not mixers:
        return [1]
    out = []
    for tp in range(1, min(min(mx.heads for mx in mixers), upper) + 1):
        try:
            for mx in mixers:
                mx.kv_heads_per_device(tp)
        except KvcalcError:
            continue
        out.append(tp)
    return out
