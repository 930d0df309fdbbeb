"""What an adapter returns: ModelSpec's keyword fields, and for a model described layer
by layer the runs too.

A family read into flat fields alone (windows, MLA and experts as ModelSpec.uniform takes
them) has its layers built by ModelSpec.uniform, and a flag may reshape it later; one whose
layers differ lists them, and `with_runs` compresses them.
"""

from __future__ import annotations

from kvcalc.layers import Attention, Latent, Layer
from kvcalc.spec import compress


def flat_fields(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                d_ff: int, vocab: int, **kw) -> dict:
    """ModelSpec's flat fields under its own names, plus any others given by keyword."""
    return dict(layers=layers, d_model=hidden, heads=heads, kv_heads=kv_heads,
                head_dim=head_dim, d_ff=d_ff, vocab=vocab, **kw)


def latent_fields(c, mla: Latent, hidden: int, layers: int, d_ff: int, vocab: int, bias: bool,
                  context: int, **kw) -> dict:
    """An MLA model's flat fields: each query head its own K/V head, q/k as wide as the
    no-RoPE and RoPE parts, v its own width, one bias switch for q/k/v and the output,
    untied embeddings unless the config ties them, and max_position_embeddings (`context`
    its class default) read from the config `c`."""
    return flat_fields(hidden, layers, mla.heads, mla.heads, mla.nope_dim + mla.rope_dim, d_ff,
                       vocab, v_head_dim=mla.v_dim, qkv_bias=bias, out_bias=bias,
                       tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                       max_context=c.opt_int("max_position_embeddings", context) or 0, **kw)


def with_runs(fields: dict, layers: list[Layer]) -> dict:
    """The flat fields plus the runs: the runs are the model; the flat fields describe its
    attention and MLP shape for the encoder, the single-layer questions and the display."""
    return {**fields, "runs": compress(layers)}


def attention(kind: str, window: int, **kw) -> Attention:
    """Attention of `kind` ("full", "sliding" or "chunked"); a full layer keeps no window."""
    return Attention(kind=kind, window=window if kind != "full" else 0, **kw)
