"""Which models measure's whole-step runs (`--step model`, `--step mixed`) can build:
checked without torch, so that the command refuses one before it imports torch."""

from __future__ import annotations

from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention, Dense
from kvcalc.spec import ModelSpec


def check_dense(spec: ModelSpec, step: str = "--step model") -> None:
    """Refuse a model this step (`step`, as the message names it) does not run, naming
    what it has."""
    for layer, _ in spec.groups():
        mixer, mlp = layer.mixer, layer.mlp
        if (type(mixer) is not Attention or mixer.kind != "full" or layer.cross is not None
                or mixer.gated or mixer.sinks or mixer.v_head_dim != mixer.head_dim):
            raise KvcalcError(f"{step} runs dense decoders with full attention in every "
                              f"layer; {spec.name} has {layer.label} layers")
        if not isinstance(mlp, Dense):
            raise KvcalcError(f"{step} runs dense MLPs; {spec.name} has {layer.label} layers")
