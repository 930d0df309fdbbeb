"""Mixture of attention heads (JetMoE's MoA, arXiv:2404.07413 sec. 2.2): K and V come from
one projection shared by every expert; a router picks `top_k` of `experts` attention
experts per token, each a query projection to `kv_heads` heads and an output projection
back. The cache is the shared K/V, `kv_heads x head_dim` each per token; the token's
`kv_heads x top_k` query heads attend to it (JetMoeAttention repeats the K/V block once
per chosen expert, after the cache).

No vLLM release has a JetMoE model. Its Transformers backend pages `num_key_value_heads`
heads as grouped-query attention, query head h reading K/V head h // top_k, while
JetMoE hands its attention call the K/V already repeated (query head h reads h mod
kv_heads): no engine page for it (vLLM's table, kvcalc.serving.vllm.support).
"""

from __future__ import annotations

from kvcalc.ground.num import Linear, params_by_name
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_WIDTH, check_size
from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention


@record
class MixtureOfAttention(Attention):
    """Attention whose query and output projections are routed experts (`top_k` of
    `experts` a token); `heads` is kv_heads x top_k, the heads one token runs."""

    experts: int = 8
    top_k: int = 2

    module = "self_attention"
    label = "moa"

    def __post_init__(self) -> None:
        check_size("attention experts", self.experts, MAX_WIDTH)
        if not 1 <= self.top_k <= self.experts:
            raise KvcalcError(f"attention top_k must be 1..experts ({self.experts}), "
                              f"got {self.top_k}")
        if self.heads != self.kv_heads * self.top_k:
            raise KvcalcError(f"a mixture of attention heads runs kv_heads x top_k = "
                              f"{self.kv_heads * self.top_k} query heads, got {self.heads}")
        super().__post_init__()


    @property
    def expert_width(self) -> int:
        """One expert's query (and output) width: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, e, w = d_model, self.experts, self.expert_width
        return {
            # JetMoeMoA's experts are stacked (experts x out x in): one matrix of e x out rows
            "q_experts": Linear(d, e * w, module="experts.input_linear"),
            "o_experts": Linear(e * w, d, module="experts.output_linear"),
            "bias": d,  # experts.bias, added to the output
            "router": Linear(d, e, module="experts.router.layer"),
            "kv": Linear(d, 2 * w, module="kv_proj", kv=True),
        }

    def params(self, d_model: int) -> dict[str, int]:
        return params_by_name(self.tensors(d_model))

    def inactive_params(self, d_model: int) -> int:
        """The query and output experts a token's router does not pick."""
        return (self.experts - self.top_k) * 2 * d_model * self.expert_width

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        """One token: the router, the shared K/V, and its top_k experts' q and o."""
        d, w = d_model, self.expert_width
        return ([(d, self.experts), (d, 2 * w)]
                + [(d, w)] * self.top_k + [(w, d)] * self.top_k)

    def with_kv_heads(self, kv_heads: int) -> "MixtureOfAttention":
        raise KvcalcError("a mixture of attention heads has its K/V heads fixed by its "
                          "experts' width")
