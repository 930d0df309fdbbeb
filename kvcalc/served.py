"""Speed as served: many requests at once under continuous batching, predicted the way
`vllm bench serve` (and SGLang's `bench_serving`) measures it (`kvcalc bench`).

The engine's scheduler is simulated step by step over the benchmark's requests:

* arrivals as the client sends them: all at once (`--request-rate inf`, no concurrency
  cap), a closed loop of `concurrency` requests (each completion sends the next), or a
  Poisson stream of `request_rate` requests a second (seeded: the same run each time);
* admission while the engine's running-request limit and its KV pool allow (the pool's
  tokens and limit from that engine's own start-up count, kvcalc.serving; a request is
  admitted when its whole prompt + output fits, so nothing is preempted);
* each step carries one token of every decoding request and prompt tokens up to the
  engine's per-step token budget (vLLM's max_num_batched_tokens and TensorRT-LLM's
  max_num_tokens are shared with the decode tokens; SGLang runs a prefill step of up to
  chunked_prefill_size prompt tokens whenever a prompt waits, decode steps otherwise:
  its default, without --enable-mixed-chunk);
* a step's time is the engine's decode step at the batch and the decoding requests'
  mean context (kvcalc.latency's terms: weights and K/V at the engine's bandwidth shares,
  FLOPs at its compute share, per-layer GPU time and all-reduces, host time overlapping
  the GPU's) plus the prompt tokens' FLOPs (matmuls and causal attention at their
  positions) and, under tp, their all-reduces; a request's first token also pays the
  engine's per-request host time.

The metrics are computed as vllm bench serve defines them: TTFT from sending to the first
token; TPOT per request as (latency - TTFT) / (output tokens - 1); ITL every gap between
two tokens of a request; throughputs over the whole run (the first send to the last
token). Medians and the 99th percentile as numpy's default (linear) percentile.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import field

from kvcalc._record import record
from kvcalc.errors import KvcalcError

__all__ = ["BenchResult", "Load", "bench", "METRICS"]

# vllm bench serve's JSON names, in its order
METRICS = ("request_throughput", "output_throughput", "total_token_throughput",
           "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
           "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
           "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
MAX_STEPS = 2_000_000  # a run longer than this is refused as saturated


@record
class Load:
    """What the client sends: `num_prompts` requests of `input_len` prompt and
    `output_len` output tokens; `concurrency` (closed loop, at most this many in flight)
    or `request_rate` (Poisson, requests/s; inf: all at once); `prefix_hit`: the share
    of each prompt already cached (its prefill skipped, its KV still held)."""

    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int | None = None
    request_rate: float = math.inf
    prefix_hit: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "num_prompts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise KvcalcError(f"{name} must be a positive whole number, got {v!r}")
        if self.concurrency is not None and (isinstance(self.concurrency, bool)
                                             or not isinstance(self.concurrency, int)
                                             or self.concurrency < 1):
            raise KvcalcError(f"concurrency must be a positive whole number, got "
                              f"{self.concurrency!r}")
        if not self.request_rate > 0:
            raise KvcalcError(f"request_rate must be positive (inf: all at once), got "
                              f"{self.request_rate!r}")
        if not 0 <= self.prefix_hit < 1:
            raise KvcalcError(f"prefix_hit must be in [0, 1), got {self.prefix_hit!r}")


@record
class BenchResult:
    """A predicted benchmark run: the metrics under vllm bench serve's names, and what
    decided them."""

    engine: object  # kvcalc.serving.EngineRef
    model: str
    gpu: str
    tp: int
    load: Load
    metrics: dict
    completed: int
    duration_s: float
    max_running: int  # the most requests the engine ran at once
    running_limit: int  # what its count allows: running-request limit and pool
    kv_cache_tokens: int
    step_budget: int  # prompt (and decode) tokens per step
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        load = self.load
        return {"engine": self.engine.name, "engine_release": self.engine.release,
                "model": self.model, "gpu": self.gpu, "tp": self.tp,
                "num_prompts": load.num_prompts, "input_len": load.input_len,
                "output_len": load.output_len, "max_concurrency": load.concurrency,
                "request_rate": "inf" if math.isinf(load.request_rate) else load.request_rate,
                "prefix_hit": load.prefix_hit, "completed": self.completed,
                "duration": self.duration_s,
                "total_input_tokens": self.completed * load.input_len,
                "total_output_tokens": self.completed * load.output_len,
                **self.metrics, "max_running": self.max_running,
                "running_limit": self.running_limit, "kv_cache_tokens": self.kv_cache_tokens,
                "step_budget": self.step_budget, "prediction": True,
                "notes": list(self.notes)}


class _Steps:
    """One scheduler step's time from the engine's terms (kvcalc.latency), cached by the
    decode batch and its mean context (to 1/32 of itself)."""

    def __init__(self, spec, hw, timing, w, stored):
        from kvcalc.engines import check_runs, weight_family
        from kvcalc.roofline import compute_dtype_for

        self.spec, self.hw, self.e, self.w, self.stored = spec, hw, timing, w, stored
        self.family = weight_family(w.weight_dtype.name, w.quantization)
        check_runs(timing, self.family)
        self.cdt = compute_dtype_for(w.weight_dtype)
        self.cache: dict = {}
        peak = timing.peak_flops(hw, self.cdt)
        mfu = timing.mfu(self.family)[0]
        self.matmul_s_per_token, self.attention_s_per_pair = self._prefill_rates(peak, mfu)
        self.comm_s_per_token = 0.0
        if w.tp > 1 and hw.interconnect_bandwidth_bytes_per_s:
            from kvcalc.comm import decode_allreduce

            self.comm_s_per_token = decode_allreduce(
                spec, 1024, w.tp, self.cdt, hw.interconnect_bandwidth_bytes_per_s).bandwidth_s / 1024

    def _prefill_rates(self, peak: float, mfu: float) -> tuple[float, float]:
        """Seconds of prompt matmuls per token and of causal attention per (query, key)
        pair on one device, from the prefill FLOPs of a 1,024- and a 2,048-token prompt."""
        from dataclasses import replace

        from kvcalc.latency import step_figures

        def flops(n: int):
            f = step_figures(self.spec, replace(self.w, seq_len=n, batch=1, prompt_len=n),
                             stored=self.stored)
            return f.prefill_flops - f.prefill_attention_flops, f.prefill_attention_flops

        (m1, a1), (m2, a2) = flops(1024), flops(2048)
        matmul = (m2 - m1) / 1024  # per prompt token
        pairs = (2048 * 2049 - 1024 * 1025) / 2
        attention = (a2 - a1) / pairs if pairs else 0.0
        attention_share = self.e.attention_mfu or mfu
        return matmul / (peak * mfu), attention / (peak * attention_share)

    def time(self, decoding: int, context: float, prompt_tokens: int, pairs: float) -> float:
        """Seconds of one step: `decoding` requests at mean `context`, and `prompt_tokens`
        prompt tokens whose causal attention covers `pairs` (query, key) pairs."""
        from kvcalc.formulas.step import decode_step
        from kvcalc.latency import engine_decode_terms

        b = max(decoding, 1)
        c = max(int(context), 1)
        bucket = max(c // 32, 1)
        key = (b, c // bucket * bucket)
        terms = self.cache.get(key)
        if terms is None:
            w = self.w
            step = decode_step(self.spec, key[1], b, w.weight_dtype, w.kv_dtype, self.cdt, w.tp,
                               w.kv_scale_bytes, w.encoder_seq_len, prefill=False,
                               stored=self.stored)
            terms = engine_decode_terms(self.e, self.family, self.hw, step, self.spec.layers,
                                        w.tp, self.cdt)
            self.cache[key] = terms
        memory_s, compute_s, serial_s, host_s = terms
        if decoding == 0:
            compute_s = 0.0
        compute_s += prompt_tokens * self.matmul_s_per_token + pairs * self.attention_s_per_pair
        gpu_s = max(memory_s, compute_s) + serial_s + prompt_tokens * self.comm_s_per_token
        return max(gpu_s, host_s)


def _percentile(values: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation), as vllm bench serve takes it."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _stats(name: str, values: list[float], weights: list[int] | None = None) -> dict:
    """mean, median and p99 of `values` in ms (`weights`: how many times each counts)."""
    if weights is not None:  # expand step gaps by how many requests saw each
        if not values:
            return {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"p99_{name}_ms": 0.0}
        total = sum(weights)
        mean = sum(v * n for v, n in zip(values, weights)) / total
        pairs = sorted(zip(values, weights))

        def pct(q: float) -> float:
            pos = (total - 1) * q / 100
            lo_i, hi_i = int(pos), min(int(pos) + 1, total - 1)
            out, seen = [], 0
            for v, n in pairs:
                while len(out) < 2 and seen + n > (lo_i if not out else hi_i):
                    out.append(v)
                seen += n
                if len(out) == 2:
                    break
            while len(out) < 2:
                out.append(pairs[-1][0])
            return out[0] + (out[1] - out[0]) * (pos - lo_i)

        return {f"mean_{name}_ms": mean * 1e3, f"median_{name}_ms": pct(50) * 1e3,
                f"p99_{name}_ms": pct(99) * 1e3}
    mean = sum(values) / len(values) if values else 0.0
    return {f"mean_{name}_ms": mean * 1e3, f"median_{name}_ms": _percentile(values, 50) * 1e3,
            f"p99_{name}_ms": _percentile(values, 99) * 1e3}


def _simulate(steps: _Steps, load: Load, *, limit: int, pool: int, budget: int,
              mixed: bool, request_s: float) -> dict:
    """The run, step by step (module docstring). Returns the raw per-request times."""
    n, inp, out = load.num_prompts, load.input_len, load.output_len
    to_fill = max(1, round(inp * (1 - load.prefix_hit)))  # prompt tokens prefilled
    held = inp + out  # tokens one admitted request reserves
    rng = random.Random(load.seed)
    arrivals: deque[float] = deque()
    if load.concurrency is not None:
        arrivals.extend([0.0] * min(load.concurrency, n))
        sent = len(arrivals)
    elif math.isinf(load.request_rate):
        arrivals.extend([0.0] * n)
        sent = n
    else:
        t = 0.0
        for _ in range(n):
            arrivals.append(t)
            t += rng.expovariate(load.request_rate)
        sent = n
    waiting: deque[tuple[float, int]] = deque()  # (arrival, id)
    prefilling: deque[list] = deque()  # [id, arrival, tokens done]
    decoding = 0
    context_sum = 0.0  # of the decoding requests
    finish: list[tuple[int, int]] = []  # (decode step it finishes at, id)
    first_token: dict[int, float] = {}
    arrived_at: dict[int, float] = {}
    done_at: dict[int, float] = {}
    gaps: list[float] = []  # a decode step's time ...
    counts: list[int] = []  # ... and how many requests it gave a token
    now, decode_steps, next_id, reserved, most = 0.0, 0, 0, 0, 0
    for _ in range(MAX_STEPS):
        while arrivals and arrivals[0] <= now:
            waiting.append((arrivals.popleft(), next_id))
            next_id += 1
        while waiting and len(prefilling) + decoding < limit and reserved + held <= pool:
            arrival, rid = waiting.popleft()
            arrived_at[rid] = arrival
            prefilling.append([rid, arrival, 0])
            reserved += held
        most = max(most, len(prefilling) + decoding)
        if not prefilling and not decoding:
            if not arrivals:
                break
            now = max(now, arrivals[0])
            continue
        # what this step carries
        run_decode = decoding if (mixed or not prefilling) else 0
        room = (budget - run_decode) if mixed else (budget if prefilling else 0)
        chunks, pairs, tokens = [], 0.0, 0
        for item in prefilling:
            if room <= 0:
                break
            take = min(room, to_fill - item[2])
            chunks.append((item, take))
            start = item[2] + (inp - to_fill)
            pairs += take * start + take * (take + 1) / 2
            tokens += take
            room -= take
        dt = steps.time(run_decode, context_sum / decoding if decoding else 0.0, tokens, pairs)
        now += dt
        for item, take in chunks:
            item[2] += take
        while prefilling and prefilling[0][2] >= to_fill:
            rid, arrival, _ = prefilling.popleft()
            first_token[rid] = now + request_s
            if out > 1:
                heapq.heappush(finish, (decode_steps + (out - 1), rid))
                decoding += 1
                context_sum += inp + 1
            else:
                done_at[rid] = first_token[rid]
                reserved -= held
        if run_decode:
            decode_steps += 1
            gaps.append(dt)
            counts.append(run_decode)
            context_sum += run_decode
            while finish and finish[0][0] <= decode_steps:
                _, rid = heapq.heappop(finish)
                done_at[rid] = now
                decoding -= 1
                context_sum -= inp + out - 1
                reserved -= held
                if load.concurrency is not None and sent < n:
                    arrivals.append(now)
                    sent += 1
        if load.concurrency is not None and out == 1:
            while sent < n and len(done_at) + load.concurrency > sent:
                arrivals.append(now)
                sent += 1
    else:
        raise KvcalcError("the run does not finish within two million steps: the load "
                          "saturates the engine")
    return {"first_token": first_token, "arrived": arrived_at, "done": done_at,
            "gaps": gaps, "counts": counts, "end": max(done_at.values(), default=0.0),
            "most": most}


def bench(spec, hw, load: Load, *, engine=None, tp: int = 1, kv_dtype: str = "bf16",
          weight_dtype=None, group_size: int | None = None,
          max_model_len: int | None = None, engine_flags: dict | None = None) -> BenchResult:
    """A benchmark run of `load` against `spec` served on `tp` devices like `hw` by
    `engine` (kvcalc.serving.EngineRef; default vLLM's release), predicted.
    `engine_flags`: the engine's own flags by their parameter names (kvcalc.serving.flags:
    gpu_memory_utilization, max_num_seqs, mem_fraction_static, ...)."""
    from kvcalc.serving.vllm.settings import settings_for
    from kvcalc.engines import load_engine
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.serving import count, engine_ref
    from kvcalc.serving.flags import engine_flags as flags_for

    ref = engine or engine_ref(None)
    length = max_model_len or spec.max_context or load.input_len + load.output_len
    if load.input_len + load.output_len > length:
        raise KvcalcError(f"input_len + output_len ({load.input_len + load.output_len:,}) is "
                          f"over max_model_len {length:,}: the engine refuses such requests")
    w = workload_for(spec, seq_len=length, batch=1, kv_dtype=kv_dtype,
                     weight_dtype=weight_dtype, tp=tp, group_size=group_size)
    length_flag = {"vllm": "max_model_len", "sglang": "context_length",
                   "tensorrt-llm": "max_seq_len"}[ref.name]
    given = {length_flag: length, **(engine_flags or {})}
    counted = count(spec, hw, flags_for(ref, settings_for(w), **given))
    if not counted.starts or not counted.kv_cache_tokens:
        raise KvcalcError(f"{ref.title} does not start {spec.name} on {tp} x {hw.name}: "
                          f"{counted.refusal or '; '.join(counted.notes)}")
    flags = dict(counted.flags)
    budget = int(flags.get("max_num_batched_tokens") or flags.get("chunked_prefill_size")
                 or flags.get("max_num_tokens") or 8192)
    if budget < 0:  # SGLang with chunking off: one whole prompt a prefill step
        budget = load.input_len
    pool = counted.kv_cache_tokens
    limit = counted.max_running_requests or pool
    per_request = load.input_len + load.output_len
    if per_request > pool:
        raise KvcalcError(f"one request of {per_request:,} tokens is over the "
                          f"{pool:,}-token KV pool {ref.title} counts: it never runs")
    timing = load_engine(ref.name)[0]
    stored = stored_weights(spec, w.quantization, tp)
    steps = _Steps(spec, hw, timing, w, stored)
    notes = []
    holds = min(limit, pool // per_request)
    if load.concurrency is not None and load.concurrency > holds:
        notes.append(f"saturated: {ref.title} runs at most {holds:,} requests of "
                     f"{per_request:,} tokens at once ({'its KV pool' if pool // per_request < limit else 'its running-request limit'}); "
                     f"the other {load.concurrency - holds:,} wait")
    if not math.isinf(load.request_rate):
        # what the engine sustains: a closed loop at what it holds
        top = _simulate(steps, Load(input_len=load.input_len, output_len=load.output_len,
                                    num_prompts=max(3 * holds, 8), concurrency=holds),
                        limit=limit, pool=pool, budget=budget, mixed=ref.name != "sglang",
                        request_s=timing.request_s)
        capacity = len(top["done"]) / top["end"] if top["end"] else math.inf
        if load.request_rate > capacity:
            raise KvcalcError(f"--request-rate {load.request_rate:g} is over what {tp} x "
                              f"{hw.name} serves with {ref.title}: it saturates at "
                              f"{capacity:.3g} requests/s of {load.input_len:,} + "
                              f"{load.output_len:,} tokens (queues then grow without bound)")
    raw = _simulate(steps, load, limit=limit, pool=pool, budget=budget,
                    mixed=ref.name != "sglang", request_s=timing.request_s)
    done = raw["done"]
    ttft = [raw["first_token"][r] - raw["arrived"][r] for r in done]
    e2el = [done[r] - raw["arrived"][r] for r in done]
    tpot = [(done[r] - raw["first_token"][r]) / (load.output_len - 1) for r in done
            if load.output_len > 1]
    duration = raw["end"]
    completed = len(done)
    metrics = {
        "request_throughput": completed / duration if duration else 0.0,
        "output_throughput": completed * load.output_len / duration if duration else 0.0,
        "total_token_throughput": completed * (load.input_len + load.output_len) / duration
        if duration else 0.0,
        **_stats("ttft", ttft), **_stats("tpot", tpot),
        **_stats("itl", raw["gaps"], raw["counts"]), **_stats("e2el", e2el)}
    if ref.name == "sglang":
        notes.append("SGLang's default scheduler: a prefill step whenever a prompt waits "
                     "(no mixed chunks)")
    return BenchResult(engine=ref, model=spec.name, gpu=hw.name, tp=tp, load=load,
                       metrics=metrics, completed=completed, duration_s=duration,
                       max_running=raw["most"], running_limit=holds,
                       kv_cache_tokens=pool, step_budget=budget, notes=tuple(notes))
