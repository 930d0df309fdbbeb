"""The device and its measured ceilings: copy and read bandwidth, matmul FLOP/s.

The denominators for "% of peak" are measured in the same run, not taken from a
datasheet: a device-to-device copy counted as 2N bytes (read + write), a
read-only reduction (sum) counted as N, and a square matmul of the run's dtype.
Sizes sit far above the last-level cache: >= 1 GiB on a GPU (L2 is 40-60 MB),
256 MiB on a CPU (LLC a few tens of MiB) to keep the CPU ceilings near a second.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

from kvcalc.errors import KvcalcError, ParameterError, literal

CEILING_BYTES = {"cuda": 2**30, "cpu": 256 * 2**20}  # per buffer; the copy moves 2x this
MATMUL_N = {("cuda", "fp32"): 4096, ("cuda", "bf16"): 8192, ("cuda", "fp16"): 8192,
            ("cpu", "fp32"): 1024, ("cpu", "bf16"): 1024, ("cpu", "fp16"): 1024}
CEILING_ITERS = {"cuda": (3, 20), "cpu": (3, 20)}  # (warm-up, repetitions)
# In a dtype the device emulates (dtype_check), the square matmul is sized to a time
# budget: one call about MATMUL_CALL_BUDGET_S at most, its repetitions together about
# MATMUL_TOTAL_BUDGET_S. On this project's 2-core VM a 1024^3 fp16 matmul took ~10 s
# (fp32: ~50 ms), and its 23 calls kept `kvcalc measure --dtype fp16` silent for minutes.
# A native dtype keeps MATMUL_N: a size found by timing small calls would follow the
# host's load (a 128^3 fp32 call took 31 ms, not 0.1, while other jobs ran).
MATMUL_CALL_BUDGET_S = 0.2
MATMUL_TOTAL_BUDGET_S = 2.0
MATMUL_MIN_N = 64
PILOT_MIN_S = 0.02  # matmul_size's pilot doubles n until one call takes at least this
# A half-precision dtype whose matmuls run this many times slower than fp32's has no
# native arithmetic on the device (this project's 2-core AVX2 EPYC, 256x256: fp16 and bf16
# ~140x slower); a native one is as fast or faster.
SLOW_DTYPE_FACTOR = 4.0
DTYPE_CHECK_N = 256
DTYPE_CHECK_CALLS = 3  # each dtype's fastest of these, the dtypes' calls interleaved
CPU_LLC_FALLBACK = 32 * 2**20  # when sysfs does not say


def torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


# --------------------------------------------------------------------------------
# The device
# --------------------------------------------------------------------------------
def resolve_device(requested: str):
    """'auto' -> cuda when available, else cpu. A KvcalcError when cuda is asked for but absent."""
    import torch

    if requested == "cuda" or requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if requested == "cuda":
            built = torch.version.cuda
            why = (f"this torch {torch.__version__} is a CPU-only build" if not built
                   else f"torch {torch.__version__} (CUDA {built}) finds no usable GPU")
            raise ParameterError("{device} cuda: no CUDA device available (" + literal(why)
                                 + "); use {device} cpu or auto", "device")
    return torch.device("cpu")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_llc_bytes() -> int:
    """Total last-level cache of the machine from sysfs (0 when unknown).

    The largest cache level, summed over its distinct instances (a multi-CCD EPYC
    has one L3 per CCD: counting cpu0's alone would undersize the rotation).
    """
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}
    levels: dict[int, dict[str, int]] = {}  # level -> {shared_cpu_list: size}
    try:
        for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index*"):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
            level = int((index / "level").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
            levels.setdefault(level, {})[shared] = int(size.rstrip("KMG")) * mult.get(size[-1:], 1)
    except (OSError, ValueError):
        return 0
    if not levels:
        return 0
    return sum(levels[max(levels)].values())


def cpu_available_bytes() -> int:
    """RAM this process can allocate: MemAvailable from /proc/meminfo (what the kernel can
    hand out without swapping), capped by the container's cgroup memory limit, which
    the OOM killer enforces whatever MemAvailable says, and by this process's own limits
    (ulimit -v, ulimit -d), which make an allocation fail outright."""
    return cpu_memory_room()[0]


def cpu_memory_room() -> tuple[int, str]:
    """(bytes this process can still allocate, what bounds it: "" for available RAM, else
    words naming the limit), the tightest of cpu_available_bytes's bounds."""
    room = [(_meminfo_available_bytes(), "")]
    in_cgroup = cgroup_available_bytes()
    if in_cgroup is not None:
        room.append((in_cgroup, "the cgroup's memory limit"))
    room.extend(rlimit_room())
    return min(room, key=lambda r: r[0])


# Address space an intra-op thread reserves when it starts: its stack (8 MiB by default)
# and glibc's per-thread malloc arena (64 MiB). Measured: a 2-thread torch process grew
# by 79 MiB of VmSize at its first parallel op.
THREAD_ADDRESS_SPACE_BYTES = 80 * 2**20
# And the run's own growth besides its planned buffers (modules imported, the progress
# bar's thread, allocator slack). Measured on a 2-thread CPU run of a tiny shape: VmPeak
# was 128 MiB above VmSize at the memory guard plus its planned peak.
PROCESS_ADDRESS_SPACE_BYTES = 64 * 2**20


def rlimit_room(status: str = "/proc/self/status") -> list[tuple[int, str]]:
    """Room left under this process's address-space (RLIMIT_AS, `ulimit -v`) and data
    (RLIMIT_DATA, `ulimit -d`) limits, with words naming each; [] where neither is set.

    Such a limit counts mappings, not pages used: torch alone maps some 600 MB, every
    intra-op thread but the main one maps THREAD_ADDRESS_SPACE_BYTES when it starts (counted
    whether started or not: the process's thread count cannot tell them from others), and
    the run grows by PROCESS_ADDRESS_SPACE_BYTES besides."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a POSIX system
        return []
    fields: dict[str, int] = {}
    try:
        with open(status) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmSize", "VmData"):
                    fields[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return []
    try:
        import torch

        threads = torch.get_num_threads()
    except ImportError:
        threads = os.cpu_count() or 1
    reserve = PROCESS_ADDRESS_SPACE_BYTES + max(0, threads - 1) * THREAD_ADDRESS_SPACE_BYTES
    out = []
    for limit, used, words in ((resource.RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v)"),
                               (getattr(resource, "RLIMIT_DATA", None), "VmData",
                                "the data-segment limit (ulimit -d)")):
        if limit is None or used not in fields:
            continue
        try:
            soft, _hard = resource.getrlimit(limit)
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        out.append((max(0, soft - fields[used] - reserve), words))
    return out


def _meminfo_bytes(key: str) -> int | None:
    """A /proc/meminfo field ("MemAvailable", "MemTotal") in bytes; None where unreadable."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _meminfo_available_bytes() -> int:
    available = _meminfo_bytes("MemAvailable")
    if available is not None:
        return available
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


# (limit file, usage file, reclaimable page-cache key in memory.stat) per cgroup version
_CGROUP_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
_CGROUP_V2 = ("memory.max", "memory.current", "inactive_file")
_NO_LIMIT = 1 << 60  # v1 reports "no limit" as a page-rounded 2**63


def cgroup_available_bytes(proc_cgroup: str = "/proc/self/cgroup",
                           sys_root: str = "/sys/fs/cgroup") -> int | None:
    """The tightest (limit - usage + inactive page cache) over this process's memory
    cgroup and its ancestors, v1 or v2; None where no limit is set or readable.

    Inactive file pages are counted as free because the kernel reclaims them before
    it kills anything (docker stats makes the same correction)."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            layout, roots = _CGROUP_V2, [sys_root, os.path.join(sys_root, "unified")]
        elif "memory" in controllers.split(","):
            layout, roots = _CGROUP_V1, [os.path.join(sys_root, "memory")]
        else:
            continue
        # In a container the cgroup namespace may hide the path: try it and its ancestors
        # under each root; the root's own files are the container's limit.
        segments = [s for s in path.split("/") if s]
        for root in roots:
            for depth in range(len(segments), -1, -1):
                left = _cgroup_room(os.path.join(root, *segments[:depth]), layout)
                if left is not None:
                    found.append(left)
    return max(0, min(found)) if found else None


def _cgroup_room(folder: str, layout: tuple[str, str, str]) -> int | None:
    limit_file, usage_file, inactive_key = layout
    try:
        with open(os.path.join(folder, limit_file)) as f:
            raw = f.read().strip()
        if raw == "max" or int(raw) >= _NO_LIMIT:
            return None
        limit = int(raw)
        with open(os.path.join(folder, usage_file)) as f:
            usage = int(f.read().strip())
    except (OSError, ValueError):
        return None
    inactive = 0
    try:
        with open(os.path.join(folder, "memory.stat")) as f:
            for stat in f:
                key, _, value = stat.partition(" ")
                if key == inactive_key:
                    inactive = int(value)
                    break
    except (OSError, ValueError):
        pass
    return limit - usage + min(inactive, usage)


def free_bytes(device) -> int:
    """Memory this run may still allocate on `device`."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return cpu_available_bytes()


def device_info(device) -> dict[str, Any]:
    """Name, kind, cache size and memory of `device`, for the report."""
    import torch

    info: dict[str, Any] = {"type": device.type, "torch_version": torch.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            name=props.name,
            index=device.index,
            capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            memory_bytes=int(props.total_memory),
            cache_name="L2",
            cache_bytes=int(getattr(props, "L2_cache_size", 0)) or 50 * 10**6,
            cache_source="torch.cuda.get_device_properties().L2_cache_size"
            if getattr(props, "L2_cache_size", 0) else "assumed 50 MB (not reported)",
            cuda=torch.version.cuda,
        )
    else:
        llc = cpu_llc_bytes()
        info.update(
            name=cpu_name(),
            threads=torch.get_num_threads(),
            cpus=os.cpu_count(),
            memory_bytes=_cpu_total_bytes(),
            cache_name="LLC",
            cache_bytes=llc or CPU_LLC_FALLBACK,
            cache_source="/sys/devices/system/cpu/cpu0/cache" if llc
            else "assumed 32 MiB (sysfs silent)",
        )
    return info


def _cpu_total_bytes() -> int:
    return _meminfo_bytes("MemTotal") or 0


# --------------------------------------------------------------------------------
# Ceilings
# --------------------------------------------------------------------------------
def ceiling_workspace_bytes(device_type: str, dtype: str) -> int:
    """Bytes the ceiling measurements allocate at once (for the memory guard)."""
    from kvcalc.ground.dtypes import dtype as _dt

    n = MATMUL_N[(device_type, dtype)]
    return max(2 * CEILING_BYTES[device_type], 3 * _dt(dtype).nbytes(n * n))


def measure_ceilings(device, dtype: str, buffer_bytes: int | None = None,
                     time_budget: bool = False) -> dict[str, Any]:
    """Copy (2N), read (N) and matmul ceilings of `device`, each the median of a few runs.

    Median, like the decode steps they are the denominator for: on a shared or
    throttled host a single fast repetition (seen here: one copy at 1.7x the
    median on a 2-core VM) would make every row look worse than it is. The best
    repetitions are kept beside them (`*_best_*`), STREAM-style.

    `buffer_bytes` overrides the buffer size (tests use a small one; the result
    then says so and is not a memory ceiling). `time_budget` (a dtype the device
    emulates: dtype_check) sizes the matmul to MATMUL_CALL_BUDGET_S a call, and the
    result says so (`matmul_time_budgeted`, `matmul_method`).
    """
    import torch

    from kvcalc.measure.timing import time_calls, time_calls_within

    kind = device.type
    nbytes = buffer_bytes or CEILING_BYTES[kind]
    warmup, iters = CEILING_ITERS[kind]
    t0 = time.perf_counter()
    numel = nbytes // 4
    src = torch.empty(numel, dtype=torch.float32, device=device).fill_(1.0)  # every page touched
    dst = torch.empty_like(src)
    copy = time_calls([lambda: dst.copy_(src)], device=device, warmup=warmup, iters=iters)
    read = time_calls([lambda: src.sum()], device=device, warmup=warmup, iters=iters)
    copy_bytes = 2 * numel * src.element_size()
    read_bytes = numel * src.element_size()
    del src, dst

    full = MATMUL_N[(kind, dtype)]
    tdt = torch_dtype(dtype)
    n, call_s = matmul_size(device, tdt, full) if time_budget else (full, 0.0)
    budget = ""
    if n < full:
        warmup = 1  # warmed by the pilot
        budget = (f"; sized to a {MATMUL_CALL_BUDGET_S:g} s call ({full}x{full} would take "
                  f"~{call_s * (full / n) ** 3:.0f} s in {dtype} here)")
    a = torch.randn(n, n, device=device, dtype=tdt)
    b = torch.randn(n, n, device=device, dtype=tdt)
    out = torch.empty(n, n, device=device, dtype=tdt)
    # Repetitions within MATMUL_TOTAL_BUDGET_S (at least 3), whatever the dtype: a native
    # call (~50 ms on a CPU, ~2 ms on a GPU) keeps all of them.
    mm = time_calls_within([lambda: torch.mm(a, b, out=out)], device=device, warmup=warmup,
                           iters=iters, budget_s=MATMUL_TOTAL_BUDGET_S)
    del a, b, out
    matmul_flops = 2 * n**3
    if kind == "cuda":
        torch.cuda.empty_cache()
    return {
        "copy_bytes_per_s": copy_bytes / copy.median_s,
        "read_bytes_per_s": read_bytes / read.median_s,
        "matmul_flops_per_s": matmul_flops / mm.median_s,
        "dtype": dtype,
        "copy_bytes": copy_bytes,
        "copy_method": f"tensor.copy_ of {numel * 4:,} B, counted read + write = 2N; median of {iters}",
        "read_bytes": read_bytes,
        "read_method": f"tensor.sum over {numel * 4:,} B, counted N; median of {iters}",
        "matmul_n": n,
        "matmul_method": f"{n}x{n} @ {n}x{n} {dtype}, 2n^3 FLOPs; median of {mm.samples}"
        + (" (TF32 off)" if kind == "cuda" and dtype == "fp32"
           and not torch.backends.cuda.matmul.allow_tf32 else "") + budget,
        "matmul_time_budgeted": n < full,
        "copy_best_bytes_per_s": copy_bytes / copy.min_s,
        "read_best_bytes_per_s": read_bytes / read.min_s,
        "matmul_best_flops_per_s": matmul_flops / mm.min_s,
        "timer": copy.timer,
        "seconds_spent": time.perf_counter() - t0,
        "source": "measured" if buffer_bytes is None else f"measured, small {nbytes:,} B buffer",
    }


def _one_call_s(fn, device) -> float:
    """The faster of two timed calls of `fn` after one untimed one."""
    from kvcalc.measure.timing import time_calls

    return time_calls([fn], device=device, warmup=1, iters=2).min_s


def matmul_size(device, tdtype, full: int) -> tuple[int, float]:
    """(n, seconds of one n x n matmul): `full`, or less when a `full` call would take over
    MATMUL_CALL_BUDGET_S. The time is found by a pilot that doubles n from 128 until one
    call takes PILOT_MIN_S, then scaled by n^3; the returned seconds are the pilot's scaled
    to the n returned (an estimate, for the budget only). For a dtype the device emulates
    only: there every call is long enough for the host's load not to decide the size."""
    import torch

    n = min(full, 128)
    while True:
        a = torch.randn(n, n, device=device, dtype=tdtype)
        b = torch.randn(n, n, device=device, dtype=tdtype)
        t = _one_call_s(lambda: torch.mm(a, b), device)
        del a, b
        if t >= PILOT_MIN_S or n >= full:
            break
        n = min(full, 2 * n)
    at_full = t * (full / n) ** 3
    if at_full <= MATMUL_CALL_BUDGET_S:
        return full, at_full
    fit = int(n * (MATMUL_CALL_BUDGET_S / t) ** (1 / 3)) // MATMUL_MIN_N * MATMUL_MIN_N
    fit = max(MATMUL_MIN_N, min(full, fit))
    return fit, t * (fit / n) ** 3


def matmul_rates(device, names=("fp32", "bf16", "fp16"), n: int = DTYPE_CHECK_N,
                 calls: int = DTYPE_CHECK_CALLS) -> dict[str, float]:
    """FLOP/s of an n x n matmul in each dtype of `names` on `device`: the fastest of
    `calls` after one untimed call, the dtypes' calls interleaved (a quick comparison of
    the device's arithmetic, not a ceiling).

    On a CPU on one thread, timed by the thread's own CPU clock: on a shared host a
    two-thread call waits for a descheduled thread (a 256^3 fp32 matmul took 18 ms, not
    0.65, while other jobs ran), which hid a 140x gap to 3x; one thread's CPU time does
    not count the time another process had the core."""
    import torch

    from kvcalc.measure.timing import time_calls

    pairs = {}
    for name in names:
        tdt = torch_dtype(name)
        pairs[name] = (torch.randn(n, n, device=device, dtype=tdt),
                       torch.randn(n, n, device=device, dtype=tdt))
    best = {name: math.inf for name in names}
    on_cpu = device.type == "cpu"
    threads = torch.get_num_threads()
    if on_cpu:
        torch.set_num_threads(1)
    try:
        for i in range(calls + 1):
            for name in names:
                a, b = pairs[name]
                if not on_cpu:
                    t = time_calls([lambda: torch.mm(a, b)], device=device, warmup=0,
                                   iters=1).min_s
                else:
                    t0 = time.thread_time()
                    torch.mm(a, b)
                    t = time.thread_time() - t0
                if i:  # the first round warms up
                    best[name] = min(best[name], t)
    finally:
        if on_cpu:
            torch.set_num_threads(threads)
    return {name: 2 * n**3 / max(t, 1e-9) for name, t in best.items()}


def _gflops(rate: float) -> str:
    g = rate / 1e9
    return f"{g:.2g}" if g < 10 else f"{g:.0f}"


def dtype_check(device, dtype: str) -> dict[str, Any]:
    """Whether `device` computes `dtype` natively: its small-matmul rate beside fp32's
    (matmul_rates). A half-precision dtype more than SLOW_DTYPE_FACTOR times slower than
    fp32 is emulated there: `slow` is True and `notice` says so in one line, naming the
    dtype to use instead (`use`): the other half-precision dtype where the device has that
    one natively, else fp32. fp32 is never called slow (it is what the others are judged
    by) and is not timed."""
    if dtype == "fp32":
        return {"dtype": dtype, "matmul_n": DTYPE_CHECK_N, "flops_per_s": {}, "slow": False,
                "fp32_over_dtype": 1.0, "use": dtype, "notice": None}
    rates = matmul_rates(device, ("fp32", dtype))
    ratio = rates["fp32"] / rates[dtype]
    slow = ratio > SLOW_DTYPE_FACTOR
    use = "fp32"
    if slow:  # the other half-precision dtype, where the device has it natively
        other = "bf16" if dtype == "fp16" else "fp16"
        rates.update(matmul_rates(device, (other,)))
        if rates["fp32"] / rates[other] <= SLOW_DTYPE_FACTOR:
            use = other
    check = {"dtype": dtype, "matmul_n": DTYPE_CHECK_N, "flops_per_s": rates, "slow": slow,
             "fp32_over_dtype": ratio, "use": use if slow else dtype, "notice": None}
    if slow:
        kind = device.type
        check["notice"] = (
            f"this {kind} computes {dtype} about {ratio:.0f}x slower than fp32 "
            f"({_gflops(rates[dtype])} against {_gflops(rates['fp32'])} GFLOP/s, "
            f"{DTYPE_CHECK_N}x{DTYPE_CHECK_N} matmuls on one thread): it has no native {dtype} "
            f"arithmetic, so {dtype} times measure its emulation, slowly; --dtype {use} times "
            f"well on this {kind}")
    return check


# --------------------------------------------------------------------------------
# Optional per-device cache file (only when the user asks)
# --------------------------------------------------------------------------------
def default_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvcalc" / "ceilings.json"


def cache_key(device: dict[str, Any], dtype: str) -> str:
    return f"{device['type']}|{device['name']}|torch {device['torch_version']}|{dtype}"


# Plausible range of each cached ceiling. A hand-edited 5e-324 would make every time
# bound inf (and the JSON report unwritable), `true` or 1e-300 a 0.0 GB/s denominator:
# far outside any real device (a slow CPU core moves ~1e9 B/s, an HBM GPU ~1e13,
# dense tensor-core peaks are ~1e15 FLOP/s), so such an entry is re-measured.
CACHED_CEILING_RANGE = {"copy_bytes_per_s": (1e6, 1e15), "read_bytes_per_s": (1e6, 1e15),
                        "matmul_flops_per_s": (1e6, 1e18)}


def load_cached(path: str | os.PathLike, key: str) -> dict[str, Any] | None:
    """The cached entry under `key`; None (re-measure) when it is absent or unusable."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except RecursionError:  # [[[...]]] nested past the parser's stack
        raise KvcalcError(f"ceilings cache {path} is unreadable (JSON nested too deeply); "
                          "delete it") from None
    except (OSError, ValueError) as e:
        raise KvcalcError(f"ceilings cache {path} is unreadable ({e}); delete it") from None
    entry = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entry, dict):
        return None
    values = {k: _plausible_ceiling(entry.get(k), lo, hi)
              for k, (lo, hi) in CACHED_CEILING_RANGE.items()}
    if None in values.values():
        return None
    return {**entry, **values}


def _plausible_ceiling(value: Any, lo: float, hi: float) -> float | None:
    """`value` as a float when it is a real number in [lo, hi], else None.

    bool is an int subclass (`true` would count as 1). The range test alone rejects
    NaN and inf, and it compares a huge JSON integer exactly (math.isfinite would
    overflow on it), so float() below can neither overflow nor round to inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not lo <= value <= hi:
        return None
    return float(value)


def store_cached(path: str | os.PathLike, key: str, ceilings: dict[str, Any]) -> None:
    from kvcalc.report.csv_json import to_json
    from kvcalc.report.files import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError, RecursionError):  # unreadable: start the cache afresh
        data = {}
    data[key] = {**ceilings, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write(path, to_json(data), force=True)  # a cache: replacing it is the point


def get_ceilings(device, device_meta: dict[str, Any], dtype: str,
                 cache_path: str | os.PathLike | None = None,
                 buffer_bytes: int | None = None, time_budget: bool = False) -> dict[str, Any]:
    """Measured ceilings; with `cache_path`, reused from (or stored into) that file.
    `time_budget`: see measure_ceilings."""
    if cache_path is not None:
        key = cache_key(device_meta, dtype)
        cached = load_cached(cache_path, key)
        if cached is not None and cached.get("dtype") == dtype:  # else: edited by hand, re-measure
            return {**cached, "source": f"cache file {cache_path} ({cached.get('measured_at', '?')})"}
    measured = (measure_ceilings(device, dtype, buffer_bytes, time_budget=True) if time_budget
                else measure_ceilings(device, dtype, buffer_bytes))
    if cache_path is not None and buffer_bytes is None:
        store_cached(cache_path, cache_key(device_meta, dtype), measured)
    return measured
