"""Speed as served: many requests at once under continuous batching, predicted the way
`vllm bench serve` (and SGLang's `bench_serving`) measures it (`kvcalc bench`).

The engine's scheduler is simulated step by step over the benchmark's requests:

* arrivals as the client sends them: all at once (`--request-rate inf`, no concurrency
  cap), a closed loop of `concurrency` requests (each completion sends the next), or a
  Poisson stream of `request_rate` requests a second (seeded: the same run each time);
  the client's warm-up request leaves the first prompt in the prefix cache;
* admission by the engine's own rule at its release (kvcalc.serving.schedule_for): vLLM
  admits a prompt whose KV fits now and preempts the newest running request when
  decoding outgrows the pool (it is computed again when it resumes), SGLang reserves a
  decaying share of the outputs to come (new_token_ratio) and retracts likewise,
  TensorRT-LLM reserves every request's whole length; always within the pool and the
  running-request limit of that engine's start-up count (kvcalc.serving);
* each step carries one token of every decoding request and prompt tokens up to the
  engine's per-step token budget (vLLM's max_num_batched_tokens and TensorRT-LLM's
  max_num_tokens are shared with the decode tokens; SGLang runs a prefill step of up to
  chunked_prefill_size prompt tokens whenever a prompt waits, decode steps otherwise);
* a step's time is kvcalc.served.step's: the weights the step's tokens route to, each
  device's own K/V and the activations at the engine's bandwidth shares, the FLOPs of
  decode and prompt tokens (routed experts at the MoE share), per-layer GPU time and
  all-reduces, and host time per step and per running request, which overlaps the GPU's
  where the release's scheduler overlaps it and adds to it where not; a request reaches
  the scheduler the engine's per-request host time after it is sent (HTTP, tokenizing).

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

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.served.lengths import random_lengths, sharegpt_lengths
from kvcalc.served.stats import stats as _stats
from kvcalc.served.step import (ServedTerms, StepTimes, _bucket, held_out_error, held_out_note,
                                 prefix_setup, regime, served_terms, shared_prefix)

__all__ = ["BenchResult", "Load", "ServedTerms", "bench", "random_lengths", "served_terms",
           "sharegpt_lengths", "METRICS"]

# vllm bench serve's JSON names, in its order
METRICS = ("request_throughput", "output_throughput", "total_token_throughput",
           "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
           "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
           "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
MAX_STEPS = 2_000_000  # a run longer than this is refused as saturated
WARM_BLOCK = 16  # the prefix cache keeps whole blocks (vLLM's default block size)


@record
class Load:
    """What the client sends: `num_prompts` requests of `input_len` prompt and
    `output_len` output tokens; `concurrency` (closed loop, at most this many in flight)
    or `request_rate` (Poisson, requests/s; inf: all at once); `prefix_hit`: the share
    of each prompt already cached (its prefill skipped, its KV still held); `warmup`:
    the client sent the first prompt once before the run (vllm bench serve's initial
    test run and bench_serving's warmup do), so the prefix cache holds it."""

    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int | None = None
    request_rate: float = math.inf
    prefix_hit: float = 0.0
    seed: int = 0
    warmup: bool = True
    # each request's own (prompt, output) tokens, in the order sent (random_lengths: the
    # clients' --random-range-ratio); empty: every request input_len + output_len
    lengths: tuple = ()
    # the engine's prefix caching (kvcalc.serving.prefix): off, no prompt is found
    # cached (nor the warm-up's); prefix_block > 0: a hit is whole blocks of it
    # (split_prefix), and `host_hit` more of each prompt is fetched from a host KV tier
    # at `fetch_s` a token (0: the hit is the old rounding, the warm-up's whole blocks)
    prefix_caching: bool = True
    prefix_block: int = 0
    host_hit: float = 0.0
    # the cached part is one prefix every request shares (a system prompt, the clients'
    # --random-prefix-len): the pool holds it once (kvcalc.served.step.shared_prefix)
    prefix_shared: bool = False
    # the vision encoder's FLOPs for one request's images (kvcalc.served.images), run in
    # the step that carries its first prompt chunk; the image tokens are in input_len
    encode_flops: int = 0

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
        if self.lengths:
            if len(self.lengths) != self.num_prompts:
                raise KvcalcError(f"lengths gives {len(self.lengths):,} requests, "
                                  f"num_prompts {self.num_prompts:,}")
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                   for pair in self.lengths for v in pair):
                raise KvcalcError("lengths must be (prompt, output) pairs of positive whole "
                                  "numbers")
        if not isinstance(self.warmup, bool):
            raise KvcalcError(f"warmup must be true or false, got {self.warmup!r}")
        if not 0 <= self.prefix_hit < 1:
            raise KvcalcError(f"prefix_hit must be in [0, 1), got {self.prefix_hit!r}")
        if not 0 <= self.host_hit < 1 - self.prefix_hit or (self.host_hit
                                                            and not self.prefix_block):
            raise KvcalcError(f"host_hit must be in [0, 1 - prefix_hit) with a prefix_block, "
                              f"got {self.host_hit!r}")


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
    peak_kv_tokens: int  # the most KV tokens held (or reserved) at once
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    kv_cache_tokens: int
    step_budget: int  # prompt (and decode) tokens per step
    notes: tuple[str, ...] = field(default_factory=tuple)
    extra: dict = field(default_factory=dict)  # prefix cache, host tier (when asked)

    def as_dict(self) -> dict:
        load = self.load
        return {"engine": self.engine.name, "engine_release": self.engine.release,
                "model": self.model, "gpu": self.gpu, "tp": self.tp,
                "num_prompts": load.num_prompts, "input_len": load.input_len,
                "output_len": load.output_len, "max_concurrency": load.concurrency,
                "request_rate": "inf" if math.isinf(load.request_rate) else load.request_rate,
                "prefix_hit": load.prefix_hit, "completed": self.completed,
                "duration": self.duration_s,
                "total_input_tokens": self.total_input_tokens,
                "total_output_tokens": self.total_output_tokens,
                **self.metrics, "max_running": self.max_running,
                "running_limit": self.running_limit, "peak_kv_tokens": self.peak_kv_tokens,
                "kv_cache_tokens": self.kv_cache_tokens,
                "step_budget": self.step_budget, "prediction": True,
                **self.extra, "notes": list(self.notes)}


def _alike_steps(to_finish: int, to_full: int, context: float, dt: float, now: float,
                 next_arrival: float | None, grow: float = 1) -> int:
    """How many decode steps from now run alike (at least 1): up to the step a request
    finishes on (`to_finish` steps), the KV pool's room (`to_full` steps of growth), the
    last step starting before `next_arrival`, and the last at the same context bucket
    (the context grows `grow` tokens a step)."""
    k = max(1, min(to_finish, to_full))
    if next_arrival is not None:
        k = min(k, max(1, math.ceil((next_arrival - now) / dt)) if dt > 0 else 1)
    if k > 1:  # the context grows a token a step: stay within its bucket
        c = int(context)
        bucket = _bucket(c)
        lo, hi = 1, k  # _bucket is non-decreasing: the same bucket is a prefix
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _bucket(c + (mid - 1) * grow) == bucket:
                lo = mid
            else:
                hi = mid - 1
        k = lo
    return k


def _simulate(steps: StepTimes, load: Load, *, limit: int, pool: int, budget: int,
              schedule, request_s: float, fetch_s: float = 0.0, encode_s: float = 0.0) -> dict:
    """The run, step by step (module docstring). Returns the raw per-request times.
    `fetch_s`: seconds a token of `load.host_hit` takes to come from the host tier, and
    `encode_s` the seconds a request's images take in the vision encoder, added to the
    step that carries its request's first prompt chunk."""
    from kvcalc.serving.prefix import split_prefix

    shared = shared_prefix(load)
    pool -= shared  # held once, whoever runs
    own: dict[int, int] = {}  # request -> its tokens of the shared prefix, not its own
    n = load.num_prompts
    pairs_of = load.lengths or ((load.input_len, load.output_len),) * n
    ins = [p for p, _ in pairs_of]
    outs = [o for _, o in pairs_of]
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
    greedy, ratio_mode = schedule.admission == "greedy", schedule.admission == "ratio"
    # waiting and prefilling: [rid, arrival, start position, tokens to prefill, generated]
    waiting: deque[list] = deque()
    prefilling: deque[list] = deque()
    # decoding requests: rid -> (joined at decode step, generated then, tokens held
    # then, epoch, context then); their tokens held, outputs left and contexts, in sums
    decoding: dict[int, tuple] = {}
    grows = greedy or ratio_mode  # a running request holds one more token a step
    held_base = 0  # sum of (held then - joined at), or of the whole reservations
    left_base = 0  # sum of (output left then + joined at)
    context_base = 0.0  # sum of (context then - joined at)
    prefill_held = 0  # tokens the prefilling requests hold
    prefill_left = 0  # their outputs still to come
    finish: list[tuple[int, int, int]] = []  # (decode step it finishes at, id, epoch)
    newest: list[tuple[int, int, int]] = []  # (-admission order, id, epoch)
    epoch: dict[int, int] = {}
    first_token: dict[int, float] = {}
    arrived_at: dict[int, float] = {}
    done_at: dict[int, float] = {}
    gaps: list[float] = []  # a decode step's time ...
    counts: list[int] = []  # ... and how many requests it gave a token
    preempted = peak = 0
    fetching: dict[int, float] = {}  # request -> seconds its host-tier tokens take
    now, decode_steps, next_id, most, order = 0.0, 0, 0, 0, 0
    # Speculative decoding: a decode step emits g tokens a request on average and
    # verifies `width` positions of each out of the step's token budget (1 and 1 without)
    g, width = steps.emitted, steps.width

    def rounds(tokens: int) -> int:  # the steps `tokens` outputs take
        return tokens if g == 1 else math.ceil(tokens / g)

    ratio = schedule.reserve_ratio
    fall = ((schedule.reserve_ratio - schedule.reserve_floor) / schedule.reserve_decay_steps
            if schedule.reserve_decay_steps else 0.0)

    def used() -> int:
        return prefill_held + held_base + (len(decoding) * decode_steps * g if grows else 0)

    def fits(item) -> bool:
        rest = outs[item[0]] - item[4]  # outputs still to come
        if greedy:
            return used() + mine(item) <= pool
        if ratio_mode:
            left = prefill_left + left_base - len(decoding) * decode_steps * g
            return used() + mine(item) + min(rest, 4096) + ratio * left <= pool
        return used() + mine(item) + rest <= pool  # reserve: every request's whole length

    def mine(item) -> int:  # the tokens it holds of its own (not of a shared prefix)
        return item[2] - own.get(item[0], 0)

    def admitted_tokens(item) -> int:
        # reserve holds the whole request from the start; the others their prompt
        return mine(item) + (0 if grows else outs[item[0]] - item[4])

    for _ in range(MAX_STEPS):
        while arrivals and arrivals[0] + request_s <= now:
            rid = next_id
            inp = ins[rid]
            fetched = 0
            if not load.prefix_caching:
                cached = 0
            elif load.prefix_block:
                cached, fetched = split_prefix(inp, load.prefix_hit, load.host_hit,
                                               load.prefix_block)
                if rid == 0 and load.warmup:  # the warm-up's prompt: its whole blocks
                    cached = max(cached + fetched, split_prefix(inp, 1.0, 0.0,
                                                                load.prefix_block)[0])
                    fetched = 0
                if fetched:
                    fetching[rid] = fetched * fetch_s
            else:
                cached = min(inp - 1, round(inp * load.prefix_hit))
                if rid == 0 and load.warmup:  # the warm-up's prompt: its whole blocks cached
                    cached = max(cached, (inp - 1) // WARM_BLOCK * WARM_BLOCK)
            if encode_s:
                fetching[rid] = fetching.get(rid, 0.0) + encode_s
            fill = inp - cached - fetched
            if shared:
                own[rid] = min(cached, shared)
            waiting.append([rid, arrivals.popleft(), inp, max(fill, 1), 0])  # sent at
            arrived_at[rid] = waiting[-1][1]
            next_id += 1
        while (waiting and len(prefilling) + len(decoding) < limit and fits(waiting[0])):
            item = waiting.popleft()
            prefilling.append(item)
            prefill_held += admitted_tokens(item)
            prefill_left += outs[item[0]] - item[4]
        most = max(most, len(prefilling) + len(decoding))
        peak = max(peak, used())
        if not prefilling and not decoding:
            if not arrivals:
                if waiting:
                    raise KvcalcError("a request is never admitted: it does not fit the "
                                      "KV pool beside nothing")
                break
            now = max(now, arrivals[0] + request_s)
            continue
        # what this step carries
        run_decode = len(decoding) if (schedule.mixed or not prefilling) else 0
        room = ((budget - run_decode * width) if schedule.mixed
                else (budget if prefilling else 0))
        chunks, spans, tokens = [], [], 0
        for item in prefilling:
            if room <= 0 or (not schedule.chunks_prompts and item[3] > room):
                break  # unchunked: a prompt waits, whole, and those behind it too
            take = min(room, item[3])
            chunks.append((item, take))
            spans.append((item[2] - item[3], take))
            tokens += take
            room -= take
        context = ((context_base + len(decoding) * decode_steps * g) / len(decoding)
                   if decoding else 0.0)
        dt = steps.time(run_decode, context, spans, len(prefilling) + len(decoding))
        if fetching:  # host-tier KV and images' encoding, before the first chunk's forward
            dt += sum(fetching.pop(item[0], 0.0) for item, _ in chunks)
        # Steps that nothing tells apart run as one: decode only (no prompt tokens: none
        # waits, or an unchunked prompt waits for room it will not have before a request
        # finishes), no request to admit or arriving, none finishing or preempted, the
        # step time's context bucket unchanged (StepTimes keys on it), so the run is the
        # same as step by step.
        alike = 1
        if run_decode and not tokens and not (waiting and ratio_mode):
            alike = _alike_steps(
                finish[0][0] - decode_steps if finish else MAX_STEPS,
                int((pool - used()) // (run_decode * g)) if grows else MAX_STEPS,
                context, dt, now,
                arrivals[0] + request_s if arrivals else None, g)
        now += dt * alike
        for item, take in chunks:
            item[3] -= take
        while prefilling and prefilling[0][3] <= 0:
            rid, arrival, held, _, generated = prefilling.popleft()
            prefill_held -= admitted_tokens([rid, arrival, held, 0, generated])
            out = outs[rid]
            prefill_left -= out - generated
            generated += 1  # the prefill's own token
            if rid not in first_token:
                first_token[rid] = now
            if generated >= out:
                done_at[rid] = first_token[rid] if out == 1 else now
                if load.concurrency is not None and sent < n:
                    arrivals.append(now)
                    sent += 1
                continue
            e = epoch.get(rid, 0)
            held_now = held - own.get(rid, 0) + 1 + (0 if grows else out - generated)
            decoding[rid] = (decode_steps, generated, held_now, e, held + 1)
            held_base += held_now - (decode_steps * g if grows else 0)
            left_base += (out - generated) + decode_steps * g
            context_base += held + 1 - decode_steps * g
            heapq.heappush(finish, (decode_steps + rounds(out - generated), rid, e))
            heapq.heappush(newest, (-order, rid, e))
            order += 1
        if run_decode:
            decode_steps += alike
            gaps.append(dt)
            counts.append(run_decode * alike)
            ratio = max(schedule.reserve_floor, ratio - fall * alike)
            while finish and finish[0][0] <= decode_steps:
                _, rid, e = heapq.heappop(finish)
                got = decoding.get(rid)
                if got is None or got[3] != e:
                    continue  # preempted since: its later entry counts
                joined, generated, held, _, context = decoding.pop(rid)
                held_base -= held - (joined * g if grows else 0)
                left_base -= (outs[rid] - generated) + joined * g
                context_base -= context - joined * g
                done_at[rid] = now
                if load.concurrency is not None and sent < n:
                    arrivals.append(now)
                    sent += 1
            # a pool that the decode tokens outgrew: the newest running requests go
            # back to wait, their KV freed (greedy and ratio admission only)
            while (greedy or ratio_mode) and decoding and used() > pool:
                while newest and (newest[0][1] not in decoding
                                  or decoding[newest[0][1]][3] != newest[0][2]):
                    heapq.heappop(newest)
                _, rid, e = heapq.heappop(newest)
                joined, generated, held, _, context = decoding.pop(rid)
                held_base -= held - joined * g
                left_base -= (outs[rid] - generated) + joined * g
                context_base -= context - joined * g
                generated = min(outs[rid] - 1, generated + int((decode_steps - joined) * g))
                epoch[rid] = e + 1
                # computed again from its first token: prompt and output so far (but
                # a shared prefix, still cached)
                waiting.appendleft([rid, arrived_at[rid], ins[rid] + generated,
                                    ins[rid] + generated - own.get(rid, 0), generated])
                preempted += 1
                if ratio_mode:
                    ratio = schedule.reserve_ratio
            peak = max(peak, used())
    else:
        raise KvcalcError("the run does not finish within two million steps: the load "
                          "saturates the engine")
    return {"first_token": first_token, "arrived": arrived_at, "done": done_at,
            "gaps": gaps, "counts": counts, "end": max(done_at.values(), default=0.0),
            "most": most, "preempted": preempted, "peak": peak}


def bench(spec, hw, load: Load, *, engine=None, tp: int = 1, kv_dtype: str = "bf16",
          weight_dtype=None, group_size: int | None = None,
          max_model_len: int | None = None, engine_flags: dict | None = None,
          terms: ServedTerms | None = None, past_saturation: bool = False,
          acceptance_rate: float | None = None) -> BenchResult:
    """A benchmark run of `load` against `spec` served on `tp` devices like `hw` by
    `engine` (kvcalc.serving.EngineRef; default vLLM's release), predicted.
    `engine_flags`: the engine's own flags by their parameter names (kvcalc.serving.flags:
    gpu_memory_utilization, max_num_seqs, mem_fraction_static, ...). `terms`: the served
    terms to time with (default: the engine's fitted ones, served_terms).
    `past_saturation`: a Poisson rate over what the engine sustains runs the finite
    run anyway (its queue grows throughout; a note says so) instead of being refused.
    With the engine's speculative flag in `engine_flags` every decode step is a
    speculative round at `acceptance_rate` per drafted token (kvcalc.served.speculative)."""
    from kvcalc.serving.vllm.settings import settings_for
    from kvcalc.engines import load_engine
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.serving import count, engine_ref, schedule_for
    from kvcalc.serving.flags import engine_flags as flags_for

    ref = engine or engine_ref(None)
    longest = max((p + o for p, o in load.lengths),
                  default=load.input_len + load.output_len)
    length = max_model_len or spec.max_context or longest
    if longest > length:
        raise KvcalcError(f"input_len + output_len ({longest:,}) is over max_model_len "
                          f"{length:,}: the engine refuses such requests")
    w = workload_for(spec, seq_len=length, batch=1, kv_dtype=kv_dtype,
                     weight_dtype=weight_dtype, tp=tp, group_size=group_size)
    length_flag = {"vllm": "max_model_len", "sglang": "context_length",
                   "tensorrt-llm": "max_seq_len"}[ref.name]
    given = {length_flag: length, **(engine_flags or {})}
    engine_flags_ = flags_for(ref, settings_for(w), **given)
    counted = count(spec, hw, engine_flags_)
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
    schedule = schedule_for(ref, {**flags, **given})
    terms = terms or served_terms(ref.name, schedule.host_path)
    longest_prompt = max((p for p, _ in load.lengths), default=load.input_len)
    if not schedule.chunks_prompts and longest_prompt > budget:
        raise KvcalcError(f"{ref.title} refuses a {longest_prompt:,}-token prompt: without "
                          f"chunked prefill a prompt must fit one step's {budget:,} tokens "
                          f"(raise max_num_tokens, or enable_chunked_prefill)")
    stored = stored_weights(spec, w.quantization, tp)
    steps = StepTimes(spec, hw, timing, w, stored, terms, schedule)
    request_s = terms.request_s
    load, fetch_s, extra, notes = prefix_setup(spec, hw, counted, load, given, steps)
    if given.get("enable_lora"):  # the adapters' kernels in every step
        from kvcalc.served.lora import lora_time

        steps.lora, note = lora_time(spec, steps, given, ref.name)
        extra["lora_time"] = steps.lora.as_dict()
        notes.append(note)
    from kvcalc.serving.drafts import draft_of

    draft = draft_of(spec, engine_flags_)
    if draft is not None:
        from kvcalc.served.speculative import speculate

        extra["speculative"], note = speculate(spec, steps, draft, acceptance_rate, ref.name)
        notes.append(note)
    elif acceptance_rate is not None:
        raise ParameterError("{acceptance_rate} times speculative decoding: give the engine's "
                             "speculative flag ({speculative_config}, {speculative_algorithm}, "
                             "{extra_llm_api_options})", "acceptance_rate", "speculative_config",
                             "speculative_algorithm", "extra_llm_api_options")
    encode_s = load.encode_flops / (tp * steps.peak * steps.mfu) if load.encode_flops else 0.0
    shared = shared_prefix(load)  # held once in the pool, not by each request
    holds = min(limit, (pool - shared) // (per_request - shared))
    if load.concurrency is not None and load.concurrency > holds:
        notes.append(f"saturated: {ref.title} runs at most {holds:,} requests of "
                     f"{per_request:,} tokens at once ({'its KV pool' if pool // per_request < limit else 'its running-request limit'}); "
                     f"the other {load.concurrency - holds:,} wait")
    if not math.isinf(load.request_rate):
        # what the engine sustains: a closed loop at what it holds
        top = _simulate(steps, Load(input_len=load.input_len, output_len=load.output_len,
                                    num_prompts=max(3 * holds, 8), concurrency=holds,
                                    prefix_hit=load.prefix_hit, warmup=False,
                                    prefix_caching=load.prefix_caching,
                                    prefix_block=load.prefix_block, host_hit=load.host_hit,
                                    prefix_shared=load.prefix_shared),
                        limit=limit, pool=pool, budget=budget, schedule=schedule,
                        request_s=request_s, fetch_s=fetch_s, encode_s=encode_s)
        capacity = len(top["done"]) / top["end"] if top["end"] else math.inf
        if load.request_rate > capacity and past_saturation:
            notes.append(f"past saturation: {load.request_rate:g} requests/s is over the "
                         f"{capacity:.3g} it sustains, so the queue grows through the run: "
                         f"these are the times of {load.num_prompts:,} prompts, not a "
                         "steady state")
        elif load.request_rate > capacity:
            raise ParameterError("{request_rate} " + literal(
                f"{load.request_rate:g} is over what {tp} x {hw.name} serves with {ref.title}: "
                f"it saturates at {capacity:.3g} requests/s of {load.input_len:,} + "
                f"{load.output_len:,} tokens (queues then grow without bound)"), "request_rate")
    raw = _simulate(steps, load, limit=limit, pool=pool, budget=budget, schedule=schedule,
                    request_s=request_s, fetch_s=fetch_s, encode_s=encode_s)
    if raw["preempted"]:
        notes.append(f"{raw['preempted']:,} preemptions: the running requests outgrew the "
                     f"{pool:,}-token KV pool and the newest were computed again")
    done = raw["done"]
    lengths = load.lengths or ((load.input_len, load.output_len),) * load.num_prompts
    ttft = [raw["first_token"][r] - raw["arrived"][r] for r in done]
    e2el = [done[r] - raw["arrived"][r] for r in done]
    tpot = [(done[r] - raw["first_token"][r]) / (lengths[r][1] - 1) for r in done
            if lengths[r][1] > 1]
    duration = raw["end"]
    completed = len(done)
    total_in = sum(lengths[r][0] for r in done)
    total_out = sum(lengths[r][1] for r in done)
    metrics = {
        "request_throughput": completed / duration if duration else 0.0,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
        **_stats("ttft", ttft), **_stats("tpot", tpot),
        **_stats("itl", raw["gaps"], raw["counts"]), **_stats("e2el", e2el)}
    if not schedule.mixed:
        notes.append(f"{ref.title}'s default scheduler: a prefill step whenever a prompt "
                     "waits (no mixed chunks)")
    if terms.extrapolated:
        notes.append(f"served terms for {ref.name} extrapolated: fitted on fewer than three "
                     "publishers' runs (presets/served/terms.yaml)")
    error = held_out_error(regime(load.concurrency, load.request_rate, load.num_prompts))
    if error:  # how far off such figures came on runs the terms never saw
        extra["held_out_error"] = error
        notes.append(held_out_note(error))
    return BenchResult(engine=ref, model=spec.name, gpu=hw.name, tp=tp, load=load,
                       metrics=metrics, completed=completed, duration_s=duration,
                       max_running=raw["most"], running_limit=holds,
                       peak_kv_tokens=math.ceil(raw["peak"]), total_input_tokens=total_in,
                       total_output_tokens=total_out,
                       kv_cache_tokens=pool, step_budget=budget, notes=tuple(notes),
                       extra=extra)
