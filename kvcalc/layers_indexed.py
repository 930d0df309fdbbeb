"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): MLA whose keys a lightning indexer
picks, the indexer keeping a cache of its own beside the latent.

Per token and layer the indexer caches one key of `index_head_dim` elements, shared by
its `index_heads` query heads. A serving engine stores it as fp8 with one fp32 scale per
128 elements, whatever the KV cache's dtype (vLLM's `DeepseekV32IndexerCache`: head size
`index_head_dim + index_head_dim // 128 * 4` bytes of uint8, one "head", never split
over TP; model_executor/models/deepseek_v2.py). transformers keeps it in the model's
dtype (`DynamicIndexedLayer.indexer_keys`); tests/test_hf_truth.py accounts for that.
Attention itself reads only `index_topk` of the cached tokens, but every token stays.
"""

from __future__ import annotations

from kvcalc import _num
from kvcalc._num import Linear, params_by_name
from kvcalc._record import record
from kvcalc.dtypes import DType
from kvcalc.layers import Latent

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
