"""Compressed convolutional attention (ZAYA1's CCA, arXiv:2510.04476), as transformers 5.24
`models/zaya` builds it: grouped-query attention whose queries and keys pass through two
causal convolutions over time (a depthwise one of `conv_time0` taps, then one grouped per
head of `conv_time1` taps) with residual paths, and whose values are half this token's
projection, half the previous token's.

Its cache holds, beside every token's K and V (`kv_heads x head_dim` each), two constant
states a sequence: the convolution's last (conv_time0 - 1) + (conv_time1 - 1) inputs over
the query and key channels, and the previous token's delayed half-value projection, both
in the model's dtype (ZayaCCAProjection: `update_conv_state`, `update_recurrent_state`).

No vLLM release serves ZAYA (0.32's registry has none, and its Transformers backend takes
no convolution state): no engine page for it (vLLM's table, kvcalc.serving.vllm.support).
"""

from __future__ import annotations

from kvcalc.ground.num import Linear, split as _split
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import DType
from kvcalc.layers import Attention


@record
class ConvolvedAttention(Attention):
    """Attention with CCA's q/k convolutions and delayed values (ZAYA1)."""

    conv_time0: int = 2  # cca_time0: taps of the depthwise convolution
    conv_time1: int = 2  # cca_time1: taps of the per-head grouped convolution

    conv_taps = 0  # no engine keeps its state (unpaged): the state is the one transformers holds

    @property
    def label(self) -> str:
        return f"cca {self._keeps.label(self.window)}"

    @property
    def qk_channels(self) -> int:
        return (self.heads + self.kv_heads) * self.head_dim


    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        taps = (self.conv_time0 - 1) + (self.conv_time1 - 1)
        delayed = self.kv_heads * self.head_dim // 2
        return conv_dt.nbytes(_split(self.qk_channels, tp) * taps + _split(delayed, tp))

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, h, g, hd, b = d_model, self.heads, self.kv_heads, self.head_dim, self.qkv_bias
        ch = self.qk_channels
        return {
            "q": Linear(d, h * hd, b, "qkv_proj.q_proj"),
            "k": Linear(d, g * hd, b, "qkv_proj.k_proj", kv=True),
            "v_current": Linear(d, g * hd // 2, b, "qkv_proj.v_proj_current", kv=True),
            "v_delayed": Linear(d, g * hd // 2, b, "qkv_proj.v_proj_delayed", kv=True),
            # nn.Conv1d's bias is on: depthwise (one filter a channel), then grouped per
            # head (head_dim inputs a channel)
            "conv_qk": ch * self.conv_time0 + ch + ch * hd * self.conv_time1 + ch,
            "o": Linear(h * hd, d, self.out_bias, "o_proj"),
            "qk_norm": g,  # ZayaQKNorm's learned key scale per K/V head (q, k L2-normed)
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        hd = self.head_dim
        return [(d_model, (self.heads + 2 * self.kv_heads) * hd), (self.heads * hd, d_model)]
