"""Inkling's decoder layer (thinkingmachines/Inkling, transformers' `inkling_text`):
attention with q/k RMSNorms and a learned relative-position bias (r_proj mixes `d_rel`
profiles over `rel_extent` distances; the window's own on sliding layers), whose K and V
each pass a depthwise causal convolution of `conv_kernel` taps after their projections,
and two more convolutions of d_model channels around it in the layer (after attention,
after the MLP).

Cache per layer: K/V as plain attention (all tokens, or the window on sliding layers)
plus the four convolutions' last `conv_kernel` inputs, in fp32 whatever the model's dtype
(InklingShortConvolution runs in float32; transformers' LinearAttentionAndFullAttention
cache layers keep them so). vLLM 0.32 serves Inkling with a paging of its own (its
convolution history as an attention-like spec, models/inkling/amd/sconv_swa_attn.py)
that kvcalc does not model: vLLM's table (kvcalc.serving.vllm.support) leaves it unpaged.

The MLP side: Inkling's dense MLP and its routed experts' router each carry one learned
global scale; the router scores the shared experts too (one row each).
"""

from __future__ import annotations

from kvcalc.ground.num import Linear, linear_params
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_WIDTH, DType, check_size
from kvcalc.layers import Attention, Dense, MoE

_FP32_BYTES = 4


@record
class ConvAttention(Attention):
    """Inkling's attention: relative-position logits and K/V short convolutions, plus
    the layer's two d_model-wide convolutions (`block_conv_width` channels together)."""

    d_rel: int = 16
    rel_extent: int = 1024
    conv_kernel: int = 4
    block_conv_width: int = 0

    def __post_init__(self) -> None:
        for name in ("d_rel", "rel_extent", "conv_kernel", "block_conv_width"):
            check_size(f"attention {name}", getattr(self, name), MAX_WIDTH)
        super().__post_init__()

    @property
    def label(self) -> str:
        return f"{super().label} + conv"

    @property
    def conv_taps(self) -> int:
        return self.conv_kernel


    def conv_channels(self, tp: int = 1) -> int:
        """Channels of the four convolutions: K's and V's, and the layer's two."""
        return 2 * self.kv_heads_per_device(tp) * self.head_dim + self.block_conv_width

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return _FP32_BYTES * self.conv_channels(tp) * (conv_len or self.conv_kernel)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = super().tensors(d_model)
        out["r"] = Linear(d_model, self.heads * self.d_rel, module="r_proj")
        out["rel_logits"] = self.d_rel * self.rel_extent
        out["kv_sconv"] = 2 * self.kv_heads * self.head_dim * self.conv_kernel
        out["block_sconv"] = self.block_conv_width * self.conv_kernel
        return out

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [*super().matmuls(d_model), (d_model, self.heads * self.d_rel)]


@record
class ScaledDense(Dense):
    """A dense MLP whose output is multiplied by one learned scale (InklingMLP)."""

    def params(self, d_model: int) -> int:
        return super().params(d_model) + 1


@record
class SharedScoredMoE(MoE):
    """Routed experts whose router scores the shared experts too (one row each) and
    carries one learned global scale (InklingTopkRouter)."""

    def breakdown(self, d_model: int) -> dict[str, int]:
        out = super().breakdown(d_model)
        out["router"] += linear_params(d_model, self.shared_experts, False) + 1
        return out


@record
class GatedConvAttention(ConvAttention):
    """Inkling 2's attention (transformers' `inkling2_text`, `inkling2_loop_text`): each
    projection a module of its own (q, k and v `.linear`, each query and relative-state
    head with a learned scale), the output gated by a sigmoid of the layer's input
    (o_proj.gate_proj) and one attention sink a head from the input (sink_proj); K/V short
    convolutions as Inkling's, on full layers dynamic (`dynamic_conv`: static taps plus
    per-token taps, one set a K/V head, from weight_proj). The layer's block-attention
    residual queries (`block_queries` d_model-wide vectors: attention_input's one or three,
    mlp_input's one) are counted here, beside its two d_model-wide convolutions.

    Inkling 2 Loop's loop layers (run loop_num_passes times with the same weights: the
    later passes are `Layer(..., owns_weights=False)`) each hold four message gates
    (`loop_gate_rank`), which the passes after the first run."""

    dynamic_conv: bool = False
    block_queries: int = 2
    loop_gate_rank: int = 0

    def _message_gates(self, d_model: int) -> dict[str, Linear]:
        """Four gates (q, k, v, mlp), each down from hidden state and message (2 x d_model)
        to the rank, then up to a forget gate and a message gate."""
        r = self.loop_gate_rank
        out: dict[str, Linear] = {}
        for name in ("q", "k", "v", "mlp"):
            gate = f"{name}_message_gate"
            out[f"{gate}_down"] = Linear(2 * d_model, r, module=f"{gate}.down_proj")
            out[f"{gate}_forget"] = Linear(r, d_model, module=f"{gate}.forget_gate_proj")
            out[f"{gate}_message"] = Linear(r, d_model, module=f"{gate}.message_gate_proj")
        return out

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, h, g, hd, k = d_model, self.heads, self.kv_heads, self.head_dim, self.conv_kernel
        out: dict[str, Linear | int] = {
            "q": Linear(d, h * hd, module="q_proj.linear"),
            "k": Linear(d, g * hd, module="k_proj.linear", kv=True),
            "v": Linear(d, g * hd, module="v_proj.linear", kv=True),
            "o": Linear(h * hd, d, module="o_proj.linear"),
            "o_gate": Linear(d, h * hd, module="o_proj.gate_proj"),
            "sinks": Linear(d, h, module="sink_proj"),
            "qk_norm": self.qk_norm,
            "r": Linear(d, h * self.d_rel, module="relative_position_bias.linear"),
            "r_norm": h * self.d_rel,
            "rel_logits": self.d_rel * self.rel_extent,
            "kv_sconv": 2 * g * hd * k,
        }
        if self.dynamic_conv:
            out["k_conv_taps"] = Linear(d, g * k, module="k_proj.sconv.weight_proj")
            out["v_conv_taps"] = Linear(d, g * k, module="v_proj.sconv.weight_proj")
        out["block_sconv"] = self.block_conv_width * k
        out["block_queries"] = self.block_queries * d
        if self.loop_gate_rank:
            out.update(self._message_gates(d))
        return out

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        """q/k/v, o, the relative states, the output gate, the sinks, any dynamic taps and
        any message gates (a loop's first pass skips them: 16 x d_model x rank
        multiply-adds a layer counted that it does not run)."""
        d, h, g, hd, r = d_model, self.heads, self.kv_heads, self.head_dim, self.loop_gate_rank
        mm = [(d, (h + 2 * g) * hd), (h * hd, d), (d, h * self.d_rel), (d, h * hd), (d, h)]
        if self.dynamic_conv:
            mm += [(d, g * self.conv_kernel)] * 2
        if r:
            mm += [(2 * d, r), (r, d), (r, d)] * 4
        return mm
