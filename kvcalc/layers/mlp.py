"""The MLP kinds a layer runs after its mixers: a dense MLP (gated or plain) and routed
experts with shared ones (MoE), each answering the same questions (tensors, parameters by
part, the matmuls one token runs). kvcalc.layers holds the layer that carries one."""

from __future__ import annotations

from typing import Union

from kvcalc.ground.num import Linear, linear_params as _linear
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_WIDTH, check_size
from kvcalc.errors import KvcalcError

__all__ = ["Dense", "MLP", "MoE"]


# --------------------------------------------------------------------------------
# MLPs
# --------------------------------------------------------------------------------
@record
class Dense:
    """A dense MLP: gated (gate, up, down: SwiGLU/GeGLU) or plain (up, down)."""

    d_ff: int
    gated: bool = True
    bias: bool = False

    kind = "dense"
    experts = 0  # routes to none: every weight runs for every token

    def tensors(self, d_model: int) -> dict[str, Linear]:
        d, f, b = d_model, self.d_ff, self.bias
        ups = ("gate_proj", "up_proj") if self.gated else ("up_proj",)
        return {**{name: Linear(d, f, b) for name in ups}, "down_proj": Linear(f, d, b)}

    def params(self, d_model: int) -> int:
        return sum(t.params for t in self.tensors(d_model).values())

    def param_breakdown(self, d_model: int) -> dict[str, int]:
        return {"mlp": self.params(d_model)}

    def inactive_params(self, d_model: int) -> int:
        return 0

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [(d_model, (2 if self.gated else 1) * self.d_ff), (self.d_ff, d_model)]


@record
class MoE:
    """Routed experts (`active` of `experts` per token) plus always-on shared experts."""

    experts: int
    active: int
    expert_d_ff: int
    shared_experts: int = 0
    shared_d_ff: int = 0  # 0: expert_d_ff (DeepSeek, Llama 4); Qwen MoE: its own width
    shared_gate: bool = False  # Qwen2-MoE/Qwen3-Next: sigmoid gate Linear(d, 1) on the shared expert
    router_bias: bool = False
    router_scales: bool = False  # Gemma 4: the router's input scale (d) and per-expert scales
    expert_bias: bool = False  # gpt-oss: biases in every expert's projections
    gated: bool = True
    # LongCat-Flash: identity experts the router may pick too; a pick of one computes
    # nothing, so `active` counts the routed experts a token runs at most
    zero_experts: int = 0
    router_width: int = 0  # 0: one logit an expert; Doge's product-key router: 2 x sqrt(experts)
    gated_shared: bool = False  # Doge: a SwiGLU shared expert beside plain routed ones
    # Nemotron 3 Super/Ultra's LatentMoE (transformers' NemotronHMoE with moe_latent_size):
    # routed experts run in a `latent`-wide space, entered through fc1_latent_proj
    # (d -> latent) and left through fc2_latent_proj (latent -> d), each with a bias when
    # `latent_bias` (mlp_bias); the router and shared experts stay d wide. 0: no latent.
    latent: int = 0
    latent_bias: bool = False

    kind = "moe"

    def __post_init__(self) -> None:
        check_size("moe experts", self.experts, MAX_WIDTH)
        check_size("moe expert_d_ff", self.expert_d_ff, MAX_WIDTH)
        if not 1 <= self.active <= self.experts:
            raise KvcalcError(f"moe active must be 1..experts ({self.experts}), got {self.active}")
        if not 0 <= self.shared_experts <= MAX_WIDTH:
            raise KvcalcError(f"moe shared_experts must be 0..{MAX_WIDTH}, got {self.shared_experts}")
        if not 0 <= self.zero_experts <= MAX_WIDTH:
            raise KvcalcError(f"moe zero_experts must be 0..{MAX_WIDTH}, got {self.zero_experts}")
        if not 0 <= self.latent <= MAX_WIDTH:
            raise KvcalcError(f"moe latent must be 0..{MAX_WIDTH}, got {self.latent}")

    @property
    def router_logits(self) -> int:
        return self.router_width or self.experts + self.zero_experts

    @property
    def expert(self) -> Dense:
        return Dense(self.expert_d_ff, self.gated, self.expert_bias)

    @property
    def shared(self) -> Dense:
        return Dense(self.shared_d_ff or self.expert_d_ff, self.gated or self.gated_shared, False)

    def expert_width(self, d_model: int) -> int:
        """The width routed experts read and write: the latent, else d_model."""
        return self.latent or d_model

    def expert_params(self, d_model: int) -> int:
        """One routed expert's parameters (in the latent when there is one)."""
        return self.expert.params(self.expert_width(d_model))

    def latent_tensors(self, d_model: int) -> dict[str, Linear]:
        """fc1_latent_proj and fc2_latent_proj (none without a latent)."""
        if not self.latent:
            return {}
        return {"fc1_latent_proj": Linear(d_model, self.latent, self.latent_bias),
                "fc2_latent_proj": Linear(self.latent, d_model, self.latent_bias)}

    def breakdown(self, d_model: int) -> dict[str, int]:
        out = {
            "router": (_linear(d_model, self.router_logits, self.router_bias)
                       + (d_model + self.experts if self.router_scales else 0)),
            "experts": self.experts * self.expert_params(d_model),
        }
        if self.latent:
            out["latent_proj"] = sum(t.params for t in self.latent_tensors(d_model).values())
        if self.shared_experts:
            out["shared_experts"] = self.shared_experts * self.shared.params(d_model)
            if self.shared_gate:
                out["shared_gate"] = d_model
        return out

    def params(self, d_model: int) -> int:
        return sum(self.breakdown(d_model).values())

    def param_breakdown(self, d_model: int) -> dict[str, int]:
        return {f"moe/{key}": n for key, n in self.breakdown(d_model).items()}

    def inactive_params(self, d_model: int) -> int:
        return (self.experts - self.active) * self.expert_params(d_model)

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        """One token: the router, `active` routed experts (in and out of the latent
        first) and every shared expert."""
        mm = [(d_model, self.router_logits)]
        if self.latent:
            mm += [(d_model, self.latent), (self.latent, d_model)]
        mm += self.expert.matmuls(self.expert_width(d_model)) * self.active
        mm += self.shared.matmuls(d_model) * self.shared_experts
        if self.shared_gate and self.shared_experts:
            mm.append((d_model, 1))
        return mm


MLP = Union[Dense, MoE]
