"""Lara Mini: Qwen3.5's Gated DeltaNet beside Qwen3's attention.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, flat_fields, required_window, with_runs
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Attention, Layer, MoE
from kvcalc.layers.state import LaraGatedDeltaNet


def lara_mini(c: Config) -> dict:
    """Lara Mini: Qwen3.5's Gated DeltaNet on two of every five layers, Qwen3's attention
    (q/k norms, no output gate) sliding on two and global without RoPE on one; routed
    experts beside an ungated shared expert on every layer."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    pattern = ("linear", "sliding", "linear", "full", "sliding")  # LaraMiniConfig's period 5
    kinds = layer_kinds(c, layers, {"full_attention": "full", "sliding_attention": "sliding",
                                    "linear_attention": "linear"},
                        lambda: [pattern[i % 5] for i in range(layers)])
    window = required_window(c) if "sliding" in kinds else 0
    linear = LaraGatedDeltaNet(k_heads=c.req_dim("linear_num_key_heads"),
                               v_heads=c.req_dim("linear_num_value_heads"),
                               k_dim=c.req_dim("linear_key_head_dim"),
                               v_dim=c.req_dim("linear_value_head_dim"),
                               conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)
    bias = c.opt_bool("attention_bias", False)
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    d_ff = c.req_dim("moe_intermediate_size")
    moe = MoE(experts=c.req_dim("num_experts"), active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=d_ff, shared_experts=1 if shared_ff else 0, shared_d_ff=shared_ff)

    def mixer(kind: str):
        if kind == "linear":
            return linear
        return Attention(heads, kv_heads, head_dim, kind=kind,
                         window=window if kind == "sliding" else 0, qkv_bias=bias,
                         out_bias=bias, qk_norm=2 * head_dim)

    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; sliding layers keep their window, global ones every "
                                "token; vLLM serves no Lara Mini (no engine count)"])
    return with_runs(fields, [Layer(mixer(k), moe, 2) for k in kinds])


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "lara_mini": lara_mini,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "lara_mini": {"head_dim": 128, "num_key_value_heads": 4, "sliding_window": 512,
                  "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                  "linear_num_key_heads": 8, "linear_num_value_heads": 16,
                  "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
                  "num_experts": 128, "num_experts_per_tok": 4},
}
