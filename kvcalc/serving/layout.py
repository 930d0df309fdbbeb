"""How a deployment spreads one model over GPUs, as every engine means it.

`tp` splits each layer's heads and matrices, `pp` its layers into stages, `dp` runs
data-parallel ranks, each with a KV pool of its own: replicas of tp x pp GPUs (vLLM's
--data-parallel-size, SGLang's --dp-size), or, with `dp_attention` (SGLang's
--enable-dp-attention), `dp` attention groups within the `tp` GPUs of one replica,
tp / dp GPUs each: the attention tensor-parallel size is then tp / dp, which is what
divides K/V heads (an MLA latent is whole on every rank either way). `ep` is the GPUs
a MoE model's experts are spread over whole (expert parallelism; 1: none, each expert
sliced as the engine slices it).

The figures an engine's count gives are per GPU and per KV pool (`ServingCount`); the
deployment holds `dp` pools on `gpus` GPUs.
"""

from __future__ import annotations

import dataclasses

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import check_size
from kvcalc.errors import KvcalcError

__all__ = ["Layout", "groups_on_stage", "pipeline_layers"]


@record
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "ep"):
            check_size(name, getattr(self, name), 4096)
        if self.dp_attention and self.tp % self.dp:
            raise KvcalcError(f"with DP attention the data-parallel size ({self.dp}) must "
                              f"divide the tensor-parallel size ({self.tp})")

    @property
    def attention_tp(self) -> int:
        """GPUs one attention layer's heads are split over."""
        return self.tp // self.dp if self.dp_attention else self.tp

    @property
    def kv_pools(self) -> int:
        """KV pools the deployment holds: one per data-parallel rank."""
        return self.dp

    @property
    def gpus(self) -> int:
        """GPUs the deployment occupies."""
        return self.tp * self.pp * (1 if self.dp_attention else self.dp)

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "dp_attention": self.dp_attention,
                "ep": self.ep, "attention_tp": self.attention_tp, "gpus": self.gpus}


def pipeline_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per stage as vLLM's get_pp_indices splits them: layers // pp each, the
    remainder added one by one to the second-to-last stage, then the one before it..."""
    if pp > layers:
        raise KvcalcError(f"pp={pp} exceeds the model's {layers} layers")
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def groups_on_stage(groups: tuple[CacheGroup, ...], layers: int, stage_layers: int,
                    stage: int, sizes: tuple[int, ...]) -> tuple[CacheGroup, ...]:
    """The groups' layers on one stage, splitting each kind in proportion (layer order
    is not known at this level; exact for uniform models and regular interleaves)."""
    if len(sizes) == 1:
        return groups
    start = sum(sizes[:stage])
    out = []
    for g in groups:
        # layers of this kind among [start, start + stage_layers), spread evenly
        lo = g.layers * start // layers
        hi = g.layers * (start + stage_layers) // layers
        out.append(dataclasses.replace(g, layers=hi - lo))
    return tuple(out)
