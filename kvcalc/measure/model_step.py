"""A whole decode step of a dense decoder, run with torch eager ops: what `estimate`
predicts, measured.

Every layer: RMSNorm, the fused qkv projection, the new token's K/V written into a
preallocated cache at its last position, SDPA over the whole cache (GQA natively, no
repeated K/V), the output projection and residual, RMSNorm, the MLP (gated: one fused
gate+up projection, SiLU x up; plain: up, GELU) and residual. Then the final norm, the
lm_head and the argmax of the logits (the next token). Weights are random (no
checkpoint is read): a step's time depends on the shapes, not the values. Rotary
embeddings and biases are left out (a few elementwise kernels per layer; `estimate`
counts neither).

Only models whose every layer is full attention with a dense MLP run here; others are
refused by name (their extra kernels are not this step's).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from kvcalc.measure.dense import check_dense  # noqa: F401 (torch-free, for the CLI)
from kvcalc.spec import ModelSpec


def step_bytes(spec: ModelSpec, batch: int, seq_len: int, element_bytes: int) -> int:
    """Bytes the step's buffers hold: weights, caches and the logits (the memory guard)."""
    total = spec.vocab * spec.d_model * (1 if spec.tied_embeddings else 2)
    for layer, n in spec.groups():
        a, mlp = layer.mixer, layer.mlp
        qkv = (a.heads + 2 * a.kv_heads) * a.head_dim * spec.d_model
        mlp_w = sum(i * o for i, o in mlp.matmuls(spec.d_model))
        cache = 2 * batch * a.kv_heads * seq_len * a.head_dim
        total += n * (qkv + a.heads * a.head_dim * spec.d_model + mlp_w + cache)
    return element_bytes * (total + batch * spec.vocab)


class DecodeModel:
    """Random weights and preallocated caches of `spec` on `device`; `step()` runs one
    decode step for `batch` sequences at `seq_len` cached tokens."""

    def __init__(self, spec: ModelSpec, batch: int, seq_len: int, device, dtype,
                 generator: torch.Generator | None = None):
        check_dense(spec)
        d = spec.d_model
        g = generator

        def weight(out: int, inp: int) -> torch.Tensor:
            w = torch.empty(out, inp, device=device, dtype=dtype)
            return w.normal_(0.0, inp ** -0.5, generator=g)

        self.embed = weight(spec.vocab, d)
        self.lm_head = self.embed if spec.tied_embeddings else weight(spec.vocab, d)
        self.final_norm = torch.ones(d, device=device, dtype=dtype)
        self.layers = []
        for layer in spec.layer_list():
            a, mlp = layer.mixer, layer.mlp
            (_, up_out), (d_ff, _) = mlp.matmuls(d)
            k = torch.empty(batch, a.kv_heads, seq_len, a.head_dim, device=device, dtype=dtype)
            self.layers.append(dict(
                attn=a, gated=mlp.gated, d_ff=d_ff,
                norm1=torch.ones(d, device=device, dtype=dtype),
                norm2=torch.ones(d, device=device, dtype=dtype),
                w_qkv=weight((a.heads + 2 * a.kv_heads) * a.head_dim, d),
                w_o=weight(d, a.heads * a.head_dim),
                w_up=weight(up_out, d), w_down=weight(d, d_ff),
                k=k.normal_(generator=g), v=torch.empty_like(k).normal_(generator=g)))
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.eps = 1e-5

    def step(self) -> torch.Tensor:
        x = F.embedding(self.tokens, self.embed)  # (batch, d_model)
        b, d = x.shape
        for p in self.layers:
            a = p["attn"]
            q, k_new, v_new = self.qkv(x, p)
            k_cache, v_cache = p["k"], p["v"]
            pos = k_cache.shape[2] - 1  # a steady step at seq_len: the newest position
            k_cache[:, :, pos, :].copy_(k_new.view(b, a.kv_heads, a.head_dim))
            v_cache[:, :, pos, :].copy_(v_new.view(b, a.kv_heads, a.head_dim))
            o = F.scaled_dot_product_attention(q.view(b, a.heads, 1, a.head_dim), k_cache,
                                               v_cache, enable_gqa=a.kv_heads != a.heads)
            x = x + F.linear(o.reshape(b, a.heads * a.head_dim), p["w_o"])
            x = x + self.mlp(x, p)
        logits = F.linear(F.rms_norm(x, (d,), self.final_norm, self.eps), self.lm_head)
        return logits.argmax(dim=-1)


    def qkv(self, x, p: dict):
        """One layer's query, key and value projections of the residual `x` (its norm
        first)."""
        a = p["attn"]
        hd, kvd = a.heads * a.head_dim, a.kv_heads * a.head_dim
        h = F.rms_norm(x, (x.shape[-1],), p["norm1"], self.eps)
        return F.linear(h, p["w_qkv"]).split([hd, kvd, kvd], dim=-1)

    def mlp(self, x, p: dict):
        """One layer's MLP on the residual `x` (its norm first), gated or plain."""
        h = F.rms_norm(x, (x.shape[-1],), p["norm2"], self.eps)
        up = F.linear(h, p["w_up"])
        if p["gated"]:
            gate, up = up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(up)
        return F.linear(act, p["w_down"])


def decode_call(spec: ModelSpec, batch: int, seq_len: int, device, dtype,
                seed: int = 0) -> Callable[[], torch.Tensor]:
    """One decode step of `spec` as a call (buffers built once, outside the timing)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    with torch.no_grad():
        model = DecodeModel(spec, batch, seq_len, device, dtype, g)

    def call() -> torch.Tensor:
        with torch.no_grad():
            return model.step()

    return call
