"""Timing: CUDA events on a GPU, perf_counter on a CPU; warm-up, median and spread.

Each repetition is timed on its own (no averaging over a loop), so the spread
(p10/p90) is real. Calls rotate over `fns` (one per distinct K/V buffer) so a
repetition does not find the previous one's data in L2; or `flush` runs before
each repetition, outside the timed region (Triton's do_bench does the same).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

from kvcalc.ground.record import record

QUEUE_FILL_MIN_CYCLES = 2_000_000  # about 1 ms at 2 GHz
QUEUE_FILL_MAX_S = 2.0  # never spin the GPU longer than this before a timed loop
QUEUE_FILL_MARGIN = 1.5  # cover the host's whole launch loop, with room to spare


@record
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    samples: int
    min_s: float
    timer: str  # "cuda-events" or "perf_counter"
    cuda_graphs: bool
    # CUDA: the host's time to queue one call (flush, events, launch), timed loop only.
    # Above median_s the step is launch-bound: the GPU outruns the host.
    host_s_per_call: float | None = None
    values_s: tuple[float, ...] = ()  # every repetition, in the order timed

    @property
    def spread(self) -> float:
        """(p90 - p10) / median."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s else 0.0


def summarise(samples_s: Sequence[float], timer: str, cuda_graphs: bool = False,
              host_s_per_call: float | None = None) -> Timing:
    s = sorted(samples_s)
    if len(s) == 1:
        p10 = p90 = s[0]
    else:
        q = statistics.quantiles(s, n=10, method="inclusive")
        p10, p90 = q[0], q[-1]
    return Timing(median_s=statistics.median(s), p10_s=p10, p90_s=p90, samples=len(s),
                  min_s=s[0], timer=timer, cuda_graphs=cuda_graphs, host_s_per_call=host_s_per_call,
                  values_s=tuple(samples_s))


def queue_fill_cycles(host_s_per_call: float, iters: int, clock_hz: float) -> int:
    """GPU cycles to spin before the timed loop so the host queues all of it first.

    While the GPU spins, the host enqueues every timed call; then the GPU runs them
    back to back and the events time kernels, not the host's launch rate. Sized
    from the host's measured launch time, at least ~1 ms, at most QUEUE_FILL_MAX_S.
    """
    want = host_s_per_call * iters * QUEUE_FILL_MARGIN * clock_hz
    return int(min(max(want, QUEUE_FILL_MIN_CYCLES), QUEUE_FILL_MAX_S * clock_hz))


def _clock_hz(device) -> float:
    import torch

    khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or 2_000_000
    return khz * 1e3


def time_calls(fns: Sequence[Callable[[], object]], *, device, warmup: int, iters: int,
               flush: Callable[[], object] | None = None, cuda_graphs: bool = False) -> Timing:
    """Time `iters` calls, call i running fns[i % len(fns)], after `warmup` untimed calls.

    CUDA: an event pair around each call on the current stream, read after one
    synchronize at the end (no host sync inside the loop, so launches queue as in
    serving). With `cuda_graphs` each fn is captured once into a CUDA graph and
    replayed, taking Python and launch gaps out of the figure.
    CPU: perf_counter around each call; torch CPU ops return when done.
    """
    import torch

    if iters <= 0:
        raise ValueError("iters must be positive")
    is_cuda = getattr(device, "type", str(device)) == "cuda"
    calls = list(fns)
    if cuda_graphs:
        if not is_cuda:
            raise ValueError("CUDA graphs need a CUDA device")
        calls = _capture(calls)
    n = len(calls)
    launch_s = []
    for i in range(warmup):
        t0 = time.perf_counter()
        if flush is not None:
            flush()
        calls[i % n]()
        launch_s.append(time.perf_counter() - t0)
    # The timed loop carries on the rotation where warm-up stopped, so no repetition
    # follows a call on the same buffer (which would find it in L2).
    order = [(warmup + i) % n for i in range(iters)]
    if is_cuda:
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        if hasattr(torch.cuda, "_sleep"):
            # Warm-up launches are asynchronous: their host time is the launch cost
            # (the first may include lazy initialisation, so take the median).
            host_estimate = statistics.median(launch_s) if launch_s else 0.0
            torch.cuda._sleep(queue_fill_cycles(host_estimate, iters, _clock_hz(device)))
        t0 = time.perf_counter()
        for i, j in enumerate(order):
            if flush is not None:
                flush()
            starts[i].record()
            calls[j]()
            ends[i].record()
        host_s_per_call = (time.perf_counter() - t0) / iters
        torch.cuda.synchronize(device)
        samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
        return summarise(samples, "cuda-events", cuda_graphs, host_s_per_call)
    samples = []
    for j in order:
        if flush is not None:
            flush()
        fn = calls[j]
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return summarise(samples, "perf_counter", False)


def time_calls_within(fns: Sequence[Callable[[], object]], *, device, warmup: int, iters: int,
                      budget_s: float, min_iters: int = 3) -> Timing:
    """time_calls, stopping after at least `min_iters` repetitions once the timed ones
    have taken `budget_s`: a call the device emulates (fp16 on a CPU without it, 10-100x a
    native call) must not spin for minutes, while a native one keeps all `iters`.

    CPU: the repetitions are timed one by one, as time_calls does, and the count is
    decided as they go (a slow first call cannot cut the count of fast ones). CUDA: one
    timed call after one untimed one sizes the count, then time_calls queues them as
    usual (the warm-up shortened by those two calls)."""
    if iters <= 0:
        raise ValueError("iters must be positive")
    is_cuda = getattr(device, "type", str(device)) == "cuda"
    calls = list(fns)
    n = len(calls)
    if is_cuda:
        first = time_calls(calls, device=device, warmup=1, iters=1).median_s
        count = max(min_iters, min(iters, int(budget_s / max(first, 1e-9))))
        return time_calls(calls, device=device, warmup=max(0, warmup - 2), iters=count)
    for i in range(warmup):
        calls[i % n]()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < iters and (len(samples) < min_iters or spent < budget_s):
        fn = calls[(warmup + len(samples)) % n]
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        spent += samples[-1]
    return summarise(samples, "perf_counter", False)


def _capture(fns: Sequence[Callable[[], object]]) -> list[Callable[[], object]]:
    """One CUDA graph per fn; returns their replay methods.

    Warm-up on a side stream first, as torch.cuda.graph's documentation asks
    (lazy cuBLAS/cuDNN initialisation must not happen during capture).
    """
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            for _ in range(2):
                fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs = []
    for fn in fns:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs.append(g)
    torch.cuda.synchronize()
    return [g.replay for g in graphs]
