"""Tensor-parallel communication: all-reduce bytes per decode step and ring time. Pure.

Megatron-style TP (Shoeybi et al. 2019 sec. 3) splits each attention block
column- then row-parallel and each MLP the same way, so every block ends in an
all-reduce (sum) of its (tokens x d_model) output: two per transformer layer, one
for a layer with only a mixer or only an MLP. One decode step has one token per
sequence, so each message is batch x d_model activations.

A ring all-reduce (reduce-scatter then all-gather, Patarasuk & Yuan 2009) sends
2(N-1)/N of the message over each device's link and takes 2(N-1) steps:

    t = 2(N-1) x latency + 2(N-1)/N x bytes / link bandwidth

`ring_allreduce_s(..., latency_s)` takes the latency of the whole collective (what
a measured small all-reduce gives) rather than per step.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import DType, dtype as _dtype
from kvcalc.spec import ModelSpec


def allreduces_per_layer(layer, d_model: int) -> int:
    """All-reduces one decoder layer pays under TP: one per block (mixer, MLP) it has;
    a block ends in its row-parallel output projection (a mixer without projections,
    an MLP-only layer's, runs none)."""
    mixers = (layer.mixer,) if layer.beside is None else (layer.mixer, layer.beside)
    mixer = sum(1 for mx in mixers if mx.matmuls(d_model))
    return mixer + (0 if layer.mlp is None else 1)


def allreduces_per_step(spec: ModelSpec) -> int:
    """All-reduces in one decode step of the whole model (decoder layers)."""
    return sum(n * allreduces_per_layer(layer, spec.d_model) for layer, n in spec.groups())


def allreduce_message_bytes(spec: ModelSpec, batch: int, act_dtype: DType | str) -> int:
    """One all-reduce's message: batch tokens x d_model activations."""
    dt = act_dtype if isinstance(act_dtype, DType) else _dtype(act_dtype)
    return dt.nbytes(batch * spec.d_model)


def ring_allreduce_s(message_bytes: int, tp: int, link_bytes_per_s: float,
                     latency_s: float = 0.0) -> float:
    """Seconds for one ring all-reduce of `message_bytes` over `tp` devices (0 for tp 1)."""
    if tp < 1:
        raise KvcalcError(f"tp must be >= 1, got {tp}")
    if tp == 1:
        return 0.0
    if link_bytes_per_s <= 0:
        raise KvcalcError("all-reduce needs a positive link bandwidth")
    return latency_s + 2 * (tp - 1) / tp * message_bytes / link_bytes_per_s


@record
class AllReduceCost:
    """The all-reduces of one decode step on one device."""

    tp: int
    count: int  # all-reduces per step
    message_bytes: int  # each
    bytes_on_link: int  # per device per step: count x 2(N-1)/N x message (rounded up)
    link_bytes_per_s: int
    interconnect: str
    time_s: float  # count x (latency + ring bandwidth term)
    latency_s: float = 0.0  # each all-reduce's fixed cost; 0: the preset has no figure
    bandwidth_s: float = 0.0  # the bandwidth terms alone, all of them

    def as_dict(self) -> dict:
        model = "ring: latency + 2(N-1)/N x message / link bandwidth, per all-reduce"
        if not self.latency_s:
            model += "; latency not included (the hardware preset has no figure)"
        return {"tp": self.tp, "count": self.count, "message_bytes": self.message_bytes,
                "bytes_on_link": self.bytes_on_link, "link_bytes_per_s": self.link_bytes_per_s,
                "interconnect": self.interconnect, "latency_s": self.latency_s,
                "bandwidth_s": self.bandwidth_s, "time_s": self.time_s, "model": model}


def decode_allreduce(spec: ModelSpec, batch: int, tp: int, act_dtype: DType | str,
                     link_bytes_per_s: int, interconnect: str = "",
                     latency_s: float = 0.0) -> AllReduceCost:
    """The all-reduce term of one TP decode step: each all-reduce's latency plus its
    ring bandwidth term (latency_s 0 where the hardware preset has no figure)."""
    count = allreduces_per_step(spec) if tp > 1 else 0
    msg = allreduce_message_bytes(spec, batch, act_dtype)
    on_link = -(-count * 2 * (tp - 1) * msg // tp) if tp > 1 else 0
    bandwidth_s = count * ring_allreduce_s(msg, tp, link_bytes_per_s) if tp > 1 else 0.0
    time_s = bandwidth_s + count * latency_s if tp > 1 else 0.0
    return AllReduceCost(tp, count, msg, on_link, link_bytes_per_s, interconnect, time_s,
                         latency_s if tp > 1 else 0.0, bandwidth_s)
