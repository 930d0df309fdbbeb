"""The all-reduce probe the tensor-parallel runs and `measure --calibrate --tp` share:
its tensors, its timing (every rank at once, behind a barrier) and the (latency, bus
bandwidth) it reads off them."""

from __future__ import annotations

import statistics
import time

ALLREDUCE_SMALL_ELEMS = 1  # latency probe
ALLREDUCE_LARGE_BYTES = 8 * 2**20  # bandwidth probe
ALLREDUCE_ITERS = (3, 20)


def timed(fn, device, warmup: int, iters: int, barrier: bool = False) -> list[float]:
    import torch
    import torch.distributed as dist

    out = []
    for i in range(warmup + iters):
        if barrier:
            dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return out


def allreduce_buffers(device, tdtype):
    """The probes' tensors: one element (latency) and ALLREDUCE_LARGE_BYTES (bandwidth)."""
    import torch

    small = torch.zeros(ALLREDUCE_SMALL_ELEMS, device=device, dtype=tdtype)
    large = torch.zeros(ALLREDUCE_LARGE_BYTES // small.element_size(), device=device,
                        dtype=tdtype)
    return small, large


def allreduce_rates(small, large, tp: int, device) -> tuple[float, float]:
    """(latency, bus bandwidth) of this backend now, every rank at once: the medians of
    all-reducing `small` and `large`; the bus rate is the ring's 2(N-1)/N x bytes over the
    time beyond the latency (0 for one rank)."""
    import torch.distributed as dist

    dist.barrier()
    lat = statistics.median(timed(lambda: dist.all_reduce(small), device, *ALLREDUCE_ITERS,
                                  barrier=True))
    big = statistics.median(timed(lambda: dist.all_reduce(large), device, *ALLREDUCE_ITERS,
                                  barrier=True))
    nbytes = large.numel() * large.element_size()
    return lat, (2 * (tp - 1) / tp * nbytes / max(big - lat, 1e-9) if tp > 1 else 0.0)
