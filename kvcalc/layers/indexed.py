"""Attention whose keys a lightning indexer picks, the indexer keeping a key cache of its
own: DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) over MLA, and MiniMax-M3's block
selection over GQA (`IndexedAttention`, at the end).

DeepSeek Sparse Attention: per token and layer the indexer caches one key of
`index_head_dim` elements, shared by its `index_heads` query heads. A serving engine
stores it as fp8 with one fp32 scale per 128 elements, whatever the KV cache's dtype
(vLLM's `DeepseekV32IndexerCache`: head size `index_head_dim + index_head_dim // 128 * 4`
bytes of uint8, one "head", never split over TP; model_executor/models/deepseek_v2.py).
transformers keeps it in the model's dtype (`DynamicIndexedLayer.indexer_keys`);
tests/test_hf_truth.py accounts for that. Attention itself reads only `index_topk` of the
cached tokens, but every token stays.
"""

from __future__ import annotations

from kvcalc.ground import num as _num
from kvcalc.ground.num import Linear, params_by_name
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import DType
from kvcalc.layers import Attention, Latent

INDEXER_SCALE_BLOCK = 128  # elements per fp32 scale in the engine's fp8 indexer cache
_SCALE_BYTES = 4


@record
class IndexedLatent(Latent):
    """MLA plus DeepSeek Sparse Attention's lightning indexer and its key cache."""

    index_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 2048

    label = "mla + indexer"

    def index_token_bytes(self) -> int:
        """The indexer's cached key for one token: fp8 values and their fp32 scales."""
        return self.index_head_dim + self.index_head_dim // INDEXER_SCALE_BLOCK * _SCALE_BYTES

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        return super().token_bytes(dt, tp, scale_bytes) + self.index_token_bytes()

    def decode_flops(self, context):
        """The indexer scores every cached token; the latent attention reads the
        `index_topk` it picks (all of them while the context is shorter)."""
        picked = _num.minimum(context, self.index_topk)
        return (super().decode_flops(picked)
                + 2 * self.index_heads * context * self.index_head_dim)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = dict(super().tensors(d_model))
        # DeepseekV32Indexer: wq_b from the query LoRA, wk from the hidden state, a
        # LayerNorm (weight and bias) on the key, a per-head weight projection.
        out["indexer_q"] = Linear(self.q_lora_rank or d_model,
                                  self.index_heads * self.index_head_dim, module="indexer.wq_b")
        out["indexer_k"] = Linear(d_model, self.index_head_dim, module="indexer.wk")
        out["indexer_k_norm"] = 2 * self.index_head_dim
        out["indexer_weights"] = Linear(d_model, self.index_heads, module="indexer.weights_proj")
        return out

    def params(self, d_model: int) -> dict[str, int]:
        return params_by_name(self.tensors(d_model))

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return super().matmuls(d_model) + [
            (self.q_lora_rank or d_model, self.index_heads * self.index_head_dim),
            (d_model, self.index_head_dim + self.index_heads)]


@record
class IndexedAttention(Attention):
    """GQA whose keys a lightning indexer picks by blocks (MiniMax-M3's sparse layers):
    the indexer caches one key of `index_head_dim` elements per token beside K and V, and
    each query attends to the `index_topk_blocks` blocks of `index_block_size` tokens it
    scores highest plus the `index_local_blocks` blocks before it. The indexer's key is
    bf16 in both transformers (the model's dtype) and vLLM 0.32 (`indexer_kv_dtype` auto:
    bf16; models/minimax_m3/amd/model.py), whatever the K/V cache's dtype."""

    index_heads: int = 4
    index_head_dim: int = 128
    index_block_size: int = 128
    index_topk_blocks: int = 16
    index_local_blocks: int = 1

    label = "attention + indexer"
    module = "self_attn"

    def index_token_bytes(self) -> int:
        return 2 * self.index_head_dim  # bf16

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        return super().token_bytes(dt, tp, scale_bytes) + self.index_token_bytes()

    def decode_flops(self, context):
        """The indexer scores every cached token; attention reads the blocks it picks
        (every token while the context is shorter)."""
        picked = _num.minimum(context, (self.index_topk_blocks + self.index_local_blocks)
                              * self.index_block_size)
        return (super().decode_flops(picked)
                + 2 * self.index_heads * context * self.index_head_dim)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = dict(super().tensors(d_model))
        # MiniMaxM3VLIndexer: its own q and k projections, an RMSNorm on each
        out["indexer_q"] = Linear(d_model, self.index_heads * self.index_head_dim,
                                  module="indexer.q_proj")
        out["indexer_k"] = Linear(d_model, self.index_head_dim, module="indexer.k_proj")
        out["indexer_qk_norm"] = 2 * self.index_head_dim
        return out

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return super().matmuls(d_model) + [
            (d_model, self.index_heads * self.index_head_dim + self.index_head_dim)]


@record
class QSAAttention(IndexedAttention):
    """Qwen4-Exp's gated GQA whose tokens its QSA indexer picks: the indexer caches one
    raw key of `index_head_dim` per token (Qwen4ExpTextQSAIndexer, one key head), scores
    blocks of `index_compress_ratio` tokens (their keys averaged) with `index_heads` query
    heads, and attention reads the `index_budget` tokens of the blocks it picks plus the
    incomplete last block. Its q and k come from one fused projection (index_qk_proj).

    vLLM 0.32 serves Qwen4-Exp with cache layouts of its own (vllm/models/qwen4_exp: the
    indexer's compressed block states beside the K/V pages), which kvcalc does not model:
    vLLM's table (kvcalc.serving.vllm.support) leaves it unpaged and serving counts are withheld."""

    index_budget: int = 2048
    index_compress_ratio: int = 4
    label = "attention + QSA indexer"


    def decode_flops(self, context):
        """The indexer scores the complete blocks; attention reads the tokens it picks."""
        ratio = self.index_compress_ratio
        picked = _num.minimum(context, self.index_budget + ratio - 1)
        return (Attention.decode_flops(self, picked)
                + 2 * self.index_heads * (context // ratio) * self.index_head_dim)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = dict(Attention.tensors(self, d_model))
        out["indexer_qk"] = Linear(d_model, (self.index_heads + 1) * self.index_head_dim,
                                   module="indexer.index_qk_proj")
        out["indexer_qk_norm"] = 2 * self.index_head_dim  # q_layernorm, k_layernorm
        return out
