"""Attention shared across layers: the K/V of another layer (Gemma 4), or the weights of
a block that several layers run (Zamba, Zamba2).

Gemma 4's `num_kv_shared_layers`:

The last `num_kv_shared_layers` layers of a Gemma 4 model project only queries: each
attends over the keys and values the last earlier layer of its own kind (sliding or
full) cached, and keeps no cache of its own. transformers gives such a layer a
`DummyLayer` in its cache (no tensors: cache_utils.get_layer_types_and_kwargs turns the
"reuse" layers of `kv_sharing_modes` into "dummy"); vLLM 0.32 gives it no KV cache spec
at all (`kv_sharing_target_layer_name`: gpu_model_runner.get_kv_cache_spec skips it, "so
that KV cache management logic will act as this layer does not exist").

What it reads per decode step is what its kind reads (the producer's window or every
token), so its attention FLOPs are an ordinary layer's; what it adds to the cache is none.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.ground.num import Linear
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import DType
from kvcalc.layers import Attention


@record
class SharedKV(Attention):
    """Queries over the K/V an earlier layer of the same kind cached: q and o projections
    (and the q norm) only, nothing cached."""

    tokens_written = 0  # the producer layer wrote this step's K/V

    @property
    def label(self) -> str:
        return f"{self._keeps.label(self.window)} (shared K/V)"

    @property
    def cache_kind(self) -> str:
        return "shared"

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        self.kv_heads_per_device(tp)  # the split is still checked
        return 0

    def tokens_held(self, seq_len, encoder_len=None):
        return 0 * seq_len  # an int, or zeros shaped like a sweep's lengths

    def kv_cache_spec(self, specs):
        return 0  # no spec: vLLM skips the layer (it is never asked: it holds no bytes)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = dict(super().tensors(d_model))
        del out["k"]
        out.pop("v", None)
        return out

    def kv_projection_params(self, d_model: int) -> int:
        return 0

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        q_out = self.heads * self.head_dim
        return [(d_model, q_out), (self.heads * self.v_head_dim, d_model)]

    def with_kv_heads(self, kv_heads: int) -> "SharedKV":
        return replace(self, kv_heads=kv_heads)


@record
class SharedBlock(Attention):
    """Zamba's shared transformer block, run by every hybrid layer beside its Mamba mixer:
    attention over the concatenated hidden state and embedding (2 x d_model wide in; heads
    of 2 x d_model / heads) and a gated MLP, whose weights `num_mem_blocks` blocks hold
    (`owner`: this use's layer is one of them; the other uses are tied to it, transformers'
    `_tied_weights_keys`). Each use caches its own K/V and has its own d x d output linear
    and, in Zamba2, its own LoRA-like adapters on the MLP's gate/up (and on q, k, v with
    `use_shared_attention_adapter`)."""

    d_ff: int = 0
    mlp_bias: bool = False
    attn_in: int = 0  # attention's input width; 0: 2 x d_model (Zamba's attention_hidden_size)
    owner: bool = True
    adapter_rank: int = 0  # 0: no adapters (Zamba)
    attention_adapters: bool = False

    module = "shared_transformer"
    param_key = "shared_block"

    @property
    def label(self) -> str:
        return "full (shared block)"

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, h, g, r = d_model, self.heads, self.kv_heads, self.adapter_rank
        wide = self.attn_in or 2 * d_model
        out: dict[str, Linear | int] = {}
        if self.owner:
            out.update({
                "q": Linear(wide, h * self.head_dim, module="self_attn.q_proj"),
                "k": Linear(wide, g * self.head_dim, module="self_attn.k_proj", kv=True),
                "v": Linear(wide, g * self.v_head_dim, module="self_attn.v_proj", kv=True),
                "o": Linear(h * self.v_head_dim, d, module="self_attn.o_proj"),
                "gate_up": Linear(d, 2 * self.d_ff, self.mlp_bias, "feed_forward.gate_up_proj"),
                "down": Linear(self.d_ff, d, self.mlp_bias, "feed_forward.down_proj"),
                "norms": wide + d,  # input_layernorm (2d) and pre_ff_layernorm (d)
            })
        if r:
            out["mlp_adapter_in"] = Linear(d, r, module="feed_forward.adapter.0")
            out["mlp_adapter_out"] = Linear(r, 2 * self.d_ff, module="feed_forward.adapter.1")
            if self.attention_adapters:
                for name in ("q", "k", "v"):
                    out[f"{name}_adapter_in"] = Linear(wide, r, module=f"self_attn.{name}_adapter.0")
                    out[f"{name}_adapter_out"] = Linear(r, wide, module=f"self_attn.{name}_adapter.1")
        out["linear"] = Linear(d, d, module="linear")  # the hybrid layer's own, after the block
        return out

    def kv_projection_params(self, d_model: int) -> int:
        if not self.owner:
            return 0
        return 2 * d_model * self.kv_heads * (self.head_dim + self.v_head_dim)

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        """Every use runs the whole block (tied weights are weights all the same)."""
        d, wide = d_model, self.attn_in or 2 * d_model
        mm = [(wide, (self.heads + 2 * self.kv_heads) * self.head_dim),
              (self.heads * self.v_head_dim, d), (d, 2 * self.d_ff), (self.d_ff, d), (d, d)]
        mm += [(t.fan_in, t.fan_out) for k, t in self.tensors(d).items() if "adapter" in k]
        return mm
