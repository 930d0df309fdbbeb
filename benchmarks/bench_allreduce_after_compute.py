"""A gloo all-reduce between two CPU ranks, idle and right after a burst of compute.

    python3 benchmarks/bench_allreduce_after_compute.py

Two ranks (torch.multiprocessing, gloo, one torch thread each) time an all-reduce of
1 element, 64 KiB and 8 MiB, each repetition starting from a barrier, either at once
(as `kvcalc measure --tp` probes latency and bus bandwidth) or after 30 ms of streaming
a 64 MiB buffer (as the step reaches its all-reduce). The time is from the later rank's
arrival to each rank's return, median of 20. Needs torch.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import timedelta

COMPUTE_MS = 30
CASES = (("1 element", 1, False), ("64 KiB", 16384, False), ("8 MiB", 2 << 20, False),
         ("1 element after compute", 1, True), ("64 KiB after compute", 16384, True))


def rank(r: int, init: str, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=r, world_size=2,
                            timeout=timedelta(seconds=60))
    buffer = torch.randn(64 << 20 >> 2)
    times = {}
    for name, elements, compute in CASES:
        msg = torch.zeros(elements)
        marks = []
        for i in range(23):
            dist.barrier()
            if compute:
                start = time.perf_counter()
                while time.perf_counter() - start < COMPUTE_MS / 1e3:
                    buffer.sum()
            arrived = time.perf_counter()
            dist.all_reduce(msg)
            if i >= 3:
                marks.append((arrived, time.perf_counter()))
        times[name] = marks
    queue.put((r, times))
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=rank, args=(r, f"file://{tmp}/store", queue)) for r in (0, 1)]
        for p in procs:
            p.start()
        got = dict(queue.get() for _ in procs)
        for p in procs:
            p.join()
    for name, _, _ in CASES:
        a, b = got[0][name], got[1][name]
        # one host, one monotonic clock: the collective starts when the later rank arrives
        each = [statistics.median(max(0.0, m[i][1] - max(a[i][0], b[i][0])) for i in range(len(a)))
                for m in (a, b)]
        print(f"{name:26s} rank 0 {each[0] * 1e6:7.0f} us   rank 1 {each[1] * 1e6:7.0f} us")


if __name__ == "__main__":
    main()
