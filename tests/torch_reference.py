"""Reference transformers built from torch.nn modules on the meta device.

Written from the architectures' own descriptions (Hugging Face modeling files:
LlamaDecoderLayer, GPT2Block, FalconDecoderLayer, MixtralSparseMoeBlock,
DeepseekV2Attention/MoE, T5Block), not from kvcalc.formulas, so that counting
their parameters with `p.numel()` is an independent check of the formulas.
Nothing is allocated: the meta device only records shapes.
"""

from __future__ import annotations

import torch
from torch import nn

from kvcalc.layers import MoE as MoELayer
from kvcalc.spec import ModelSpec


def _norm(spec: ModelSpec, width: int) -> nn.Module:
    if spec.norm == "layernorm":
        return nn.LayerNorm(width, bias=spec.norm_bias)
    return nn.RMSNorm(width)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        d, h, g = spec.d_model, spec.heads, spec.kv_heads
        self.q_proj = nn.Linear(d, h * spec.head_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(d, g * spec.head_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(d, g * spec.v_head_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(h * spec.v_head_dim, d, bias=spec.out_bias)
        if spec.qk_norm:  # Qwen3: RMSNorm over head_dim for q and for k
            self.q_norm = nn.RMSNorm(spec.head_dim)
            self.k_norm = nn.RMSNorm(spec.head_dim)


class MLAttention(nn.Module):
    """DeepseekV2Attention's parameters."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        m, d, h = spec.mla, spec.d_model, spec.heads  # kvcalc.layers.Latent's widths
        q_head = m.nope_dim + m.rope_dim
        if m.q_lora_rank:
            self.q_a_proj = nn.Linear(d, m.q_lora_rank, bias=False)
            self.q_a_layernorm = nn.RMSNorm(m.q_lora_rank)
            self.q_b_proj = nn.Linear(m.q_lora_rank, h * q_head, bias=False)
        else:
            self.q_proj = nn.Linear(d, h * q_head, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, m.kv_lora_rank + m.rope_dim, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(m.kv_lora_rank)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank, h * (m.nope_dim + m.v_dim), bias=False)
        self.o_proj = nn.Linear(h * m.v_dim, d, bias=False)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, width: int, bias: bool | None = None):
        super().__init__()
        bias = spec.mlp_bias if bias is None else bias
        if spec.mlp == "gated":
            self.gate_proj = nn.Linear(spec.d_model, width, bias=bias)
        self.up_proj = nn.Linear(spec.d_model, width, bias=bias)
        self.down_proj = nn.Linear(width, spec.d_model, bias=bias)


class MoE(nn.Module):
    """Mixtral/DeepSeek sparse block: router, routed experts, shared experts."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        m = _experts(spec)
        self.gate = nn.Linear(spec.d_model, m.experts, bias=False)
        if m.router_bias:  # DeepSeek-V3 e_score_correction_bias
            self.e_score_correction_bias = nn.Parameter(torch.empty(m.experts))
        self.experts = nn.ModuleList(MLP(spec, m.expert_d_ff) for _ in range(m.experts))
        if m.shared_experts:
            # DeepSeek fuses shared experts into one MLP of width shared x expert width.
            self.shared_experts = MLP(spec, m.shared_experts * m.expert_d_ff)


def _experts(spec: ModelSpec):
    """The experts of the spec's MoE layers (kvcalc.layers.MoE), or None."""
    return next((layer.mlp for layer in spec.layer_list() if isinstance(layer.mlp, MoELayer)), None)


def dense_layers(spec: ModelSpec) -> int:
    """Leading layers with a dense MLP (DeepSeek's first_k_dense_replace)."""
    return next(i for i, layer in enumerate(spec.layer_list()) if isinstance(layer.mlp, MoELayer))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, index: int, cross_attention: bool = False, moe_ok=True):
        super().__init__()
        self.self_attn = MLAttention(spec) if spec.mla is not None else Attention(spec)
        if cross_attention:
            self.cross_attn = Attention(spec)
            self.cross_norm = _norm(spec, spec.d_model)
        dense = _experts(spec) is None or index < dense_layers(spec) or not moe_ok
        self.mlp = MLP(spec, spec.d_ff) if dense else MoE(spec)
        self.norms = nn.ModuleList(_norm(spec, spec.d_model) for _ in range(spec.norms_per_layer))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab, spec.d_model)
        if spec.learned_pos:
            self.wpe = nn.Embedding(spec.learned_pos, spec.d_model)
        stacks = 2 if spec.encoder_layers else 1
        if spec.relative_attention_buckets:
            # T5: one relative_attention_bias Embedding(buckets, heads) in each stack's first block.
            self.relative_bias = nn.ModuleList(
                nn.Embedding(spec.relative_attention_buckets, spec.heads) for _ in range(stacks))
        if spec.encoder_layers:
            self.encoder = nn.ModuleList(Block(spec, i, moe_ok=False) for i in range(spec.encoder_layers))
            self.encoder_norm = _norm(spec, spec.d_model)
        self.layers = nn.ModuleList(
            Block(spec, i, cross_attention=bool(spec.encoder_layers)) for i in range(spec.layers))
        if spec.final_norm:
            self.norm = _norm(spec, spec.d_model)
        if not spec.tied_embeddings:
            self.lm_head = nn.Linear(spec.d_model, spec.vocab, bias=False)


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def build(spec: ModelSpec) -> nn.Module:
    with torch.device("meta"):
        return Transformer(spec)


def build_one_layer(spec: ModelSpec) -> nn.Module:
    """One decoder block: cheap even for 400B models (counts per layer)."""
    with torch.device("meta"):
        return Block(spec, 0)


def attention_params(spec: ModelSpec) -> int:
    with torch.device("meta"):
        return count(MLAttention(spec) if spec.mla is not None else Attention(spec))
