"""The bare decode-attention call kvcalc measure times, and Shazeer's memory-to-arithmetic
ratio of attention's einsum programs.

Source: Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"
(arXiv:1911.02150), sections 2.3-3.1: MHA/MQA einsums and their memory/arithmetic.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import MAX_BATCH, MAX_SEQ_LEN, MAX_WIDTH, DType, check_size
from kvcalc.formulas.cache import as_dtype
from kvcalc.layers import Attention


# --------------------------------------------------------------------------------
# The bare attention step kvcalc measure times
# --------------------------------------------------------------------------------
def attention_layer(heads: int, kv_heads: int, head_dim: int, v_head_dim: int | None = None,
                    d_model: int | None = None) -> Attention:
    """One full-attention layer kind of these heads, its sizes checked as a model's are
    (d_model, heads x head_dim unless given, only checked: attention does not read it)."""
    v = v_head_dim or head_dim
    for name, n in (("d_model", d_model or heads * head_dim), ("heads", heads),
                    ("kv_heads", kv_heads), ("head_dim", head_dim), ("v_head_dim", v)):
        check_size(name, n, MAX_WIDTH)
    if kv_heads > heads:
        raise KvcalcError(f"kv_heads ({kv_heads}) cannot exceed heads ({heads})")
    if heads % kv_heads:
        raise KvcalcError(f"heads ({heads}) must be divisible by kv_heads ({kv_heads})")
    return Attention(heads, kv_heads, head_dim, v)


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
    layer = attention_layer(heads, kv_heads, head_dim, v_head_dim)
    dt = as_dtype(dtype)
    check_size("seq_len", seq_len, MAX_SEQ_LEN)
    check_size("batch", batch, MAX_BATCH)
    return AttentionStepCost(
        flops=batch * layer.decode_flops(seq_len),
        kv_bytes=batch * seq_len * layer.token_bytes(dt),
        q_bytes=dt.nbytes(batch * heads * head_dim),
        o_bytes=dt.nbytes(batch * heads * layer.v_head_dim),
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
