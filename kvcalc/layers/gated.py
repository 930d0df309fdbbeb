"""Attention with an output gate of its own projection: the attention output is
multiplied by sigmoid(x W_g) before o_proj, W_g a separate Linear(d_model, heads x
gate_width) beside q/k/v (AFMoE's and Beam's `gate_proj`, one gate per element:
gate_width = head_dim; Laguna's `g_proj`, one per element or one per head). Beam adds
one bias per head, broadcast over the head's elements (`gate_bias`).

The cache is plain attention's: the gate is computed from the token's own hidden state,
never cached. (Qwen3-Next's gate rides in q_proj instead: `Attention.gated`.)
"""

from __future__ import annotations

from kvcalc.ground.num import Linear
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_WIDTH, check_size
from kvcalc.layers import Attention


@record
class OutputGatedAttention(Attention):
    """Attention whose output is gated by a separate projection, `gate_width` gates per
    head (head_dim: one per element; 1: one per head)."""

    gate_width: int = 1
    gate_bias: bool = False  # Beam: one learned bias per head
    gate_module: str = "gate_proj"  # its attribute name in transformers (Laguna: g_proj)

    def __post_init__(self) -> None:
        check_size("attention gate_width", self.gate_width, MAX_WIDTH)
        super().__post_init__()

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = super().tensors(d_model)
        out["gate"] = Linear(d_model, self.heads * self.gate_width, module=self.gate_module)
        if self.gate_bias:
            out["gate_bias"] = self.heads
        return out

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [*super().matmuls(d_model), (d_model, self.heads * self.gate_width)]


@record
class NormalizedGatedAttention(OutputGatedAttention):
    """Dory's nGPT attention (arXiv:2410.01131): AFMoE's per-element output gate, q and k
    projected onto the unit sphere (weightless L2 norms), and two learned per-channel
    scales of heads x head_dim each (`sqk` on the queries, `s_gate` inside the gate).

    No vLLM release serves Dory (0.32's model registry has none, and its per-loop caches,
    one per pass over the recurrent layers, are no layout an engine pages): kvcalc gives
    no engine page for it (vLLM's table, kvcalc.serving.vllm.support) and serving counts are withheld."""

    @property
    def label(self) -> str:
        return f"{super().label} nGPT"


    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = super().tensors(d_model)
        out["scales"] = 2 * self.heads * self.head_dim  # sqk and s_gate
        return out
