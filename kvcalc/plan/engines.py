"""Layouts under SGLang's and TensorRT-LLM's own start-up counts, and each engine's launch
line: `plan --engine sglang`, and the engine comparison of `plan --engine any`.

The same search as kvcalc.plan's for vLLM, over each engine's knobs: tensor x pipeline
parallel x replicas, the KV cache dtype (the model's, fp8), and the requests each
replica runs (powers of two up to what the engine's pool and running-request limit
hold at the request length); the memory fraction stays the engine's default. Whether a
setting starts and how many requests it holds is the engine's count
(kvcalc.serving); the times are `kvcalc bench --engine NAME`'s (kvcalc.served.bench,
as kvcalc.plan's for vLLM): one replica's closed loop of its batch of requests
(num_prompts 3 x the batch, no warm-up) under the launch line's flags (--tp-size,
--context-length, --max-running-requests, --kv-cache-dtype; trtllm-serve's --tp_size,
--max_seq_len, --max_batch_size), its mean TTFT and mean TPOT; tokens/s per GPU its
output throughput x requests / batch / GPUs, tokens/s per user 1 / mean TPOT. pp > 1
layouts (bench has no pipeline model) are timed on the single-step model
(kvcalc.speed.latency with the engine's fitted terms, presets/engines) and ranked only when no
pp = 1 layout serves. Ranked by output tokens/s per GPU among the layouts meeting the
latency targets.

Launch lines use only flags each engine's parser takes (tests/test_plan_engines.py
checks them against SGLang's own argument parser and TensorRT-LLM's `trtllm-serve`
options as its source declares them).
"""

from __future__ import annotations

import shlex

from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, as_flags, literal
from kvcalc.model_source import hub_id
from kvcalc.plan import DEFAULT_OUTPUT_LEN, NothingFits, pp_sizes, tp_sizes
from kvcalc.plan.search import SERVED, SERVED_PROMPTS, SINGLE_STEP

__all__ = ["EngineLayout", "EnginePlan", "engine_plan", "launch_line"]

KV_CHOICES = {"sglang": ("auto", "fp8_e4m3"), "tensorrt-llm": ("auto",)}


@record
class EngineLayout:
    tp: int
    pp: int
    replicas: int
    requests: int  # in flight across the replicas
    batch: int  # per replica: --max-running-requests / --max_batch_size
    kv_dtype: str
    context_len: int
    kv_cache_tokens: int
    ttft_s: float  # mean time to first token (timing: served), else single-step's
    tpot_s: float  # mean time per output token (timing: served), else single-step's
    tokens_per_s: float  # output tokens/s of all replicas together
    timing: str = SERVED  # kvcalc.plan.search's SERVED or SINGLE_STEP

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1 / self.tpot_s

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "replicas": self.replicas, "gpus": self.gpus,
                "requests": self.requests, "batch": self.batch, "kv_cache_dtype": self.kv_dtype,
                "context_len": self.context_len, "kv_cache_tokens": self.kv_cache_tokens,
                "timing": self.timing, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tokens_per_s_per_user": self.tokens_per_s_per_user}


@record
class EnginePlan:
    engine: object  # kvcalc.serving.EngineRef
    model: str
    gpu: str
    gpus: int
    best: EngineLayout
    command: str
    searched: int
    kept: int
    # With a speculative flag: on or off, and why (kvcalc.plan.speculation; JSON)
    speculation: dict | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Not JSON: the served run of (tp, kv, batch) and the batch each (tp, pp, kv) holds
    timer: object = field(default=None, repr=False, compare=False)
    holds: dict = field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict:
        return {"engine": self.engine.name, "engine_release": self.engine.release,
                "model": self.model, "gpu": self.gpu, "gpus": self.gpus,
                "searched": self.searched, "kept": self.kept,
                "best": {**self.best.as_dict(), "command": self.command},
                **({"speculation": self.speculation} if self.speculation else {}),
                "notes": list(self.notes)}


# The speculative flags each launch line spells (kvcalc.serving.flags' names), in order
SPECULATIVE = {"sglang": ("speculative_algorithm", "speculative_draft_model_path",
                          "speculative_num_steps", "speculative_eagle_topk",
                          "speculative_num_draft_tokens"),
               "tensorrt-llm": ("extra_llm_api_options",)}


def launch_line(engine: str, model: str, x: EngineLayout, features: dict | None = None) -> str:
    """The engine's own command for layout `x`, with the speculative flags in `features`
    (by parameter name) spelled as its parser takes them."""
    extra = []
    for name in SPECULATIVE.get(engine, ()):
        if (features or {}).get(name) is not None:
            flag = "--" + (name if engine == "tensorrt-llm" else name.replace("_", "-"))
            extra += [flag, shlex.quote(str(features[name]))]
    return " ".join([_line(engine, model, x), *extra])


def _line(engine: str, model: str, x: EngineLayout) -> str:
    q = shlex.quote(model)
    if engine == "sglang":
        parts = ["python", "-m", "sglang.launch_server", "--model-path", q,
                 "--tp-size", str(x.tp)]
        if x.pp > 1:
            parts += ["--pp-size", str(x.pp)]
        if x.replicas > 1:
            parts += ["--dp-size", str(x.replicas)]
        # --max-running-requests is each replica's scheduler's own (no DP attention)
        parts += ["--context-length", str(x.context_len),
                  "--max-running-requests", str(x.batch)]
        if x.kv_dtype != "auto":
            parts += ["--kv-cache-dtype", x.kv_dtype]
        return " ".join(parts)
    if engine == "tensorrt-llm":
        parts = ["trtllm-serve", q, "--backend", "pytorch", "--tp_size", str(x.tp)]
        if x.pp > 1:
            parts += ["--pp_size", str(x.pp)]
        parts += ["--max_batch_size", str(x.batch), "--max_seq_len", str(x.context_len)]
        return " ".join(parts)
    raise KvcalcError(f"no launch line for {engine}")


def engine_plan(spec, hw, ref, *, gpus: int = 1, max_model_len: int | None = None,
                concurrency: int | None = None, prompt_len: int | None = None,
                output_len: int | None = None, ttft_s: float | None = None,
                tpot_s: float | None = None, model: str | None = None,
                features: dict | None = None, acceptance_rate: float | None = None,
                speculation_both: bool = True) -> EnginePlan:
    """The best layout of up to `gpus` devices like `hw` for `spec` under engine `ref`'s
    count (SGLang or TensorRT-LLM), and its launch line. `features`: the engine's own
    speculative flags by parameter name (SPECULATIVE), each drafted token accepted at
    `acceptance_rate`: searched with speculation on and off, the winner kept
    (kvcalc.plan.speculation). Raises NothingFits."""
    if speculation_both and features:
        args = dict(locals())  # the arguments alone
        from kvcalc.plan.speculation import engine_on_and_off
        return engine_on_and_off(engine_plan, args)
    from kvcalc.ground.dtypes import check_size
    from kvcalc.engines import load_engine
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.speed.latency import latency
    from kvcalc.plan import _batches
    from kvcalc.served import Load, bench, served_terms
    from kvcalc.serving import count, schedule_for
    from kvcalc.serving.flags import engine_flags
    from kvcalc.serving.vllm.settings import settings_for

    check_size("gpus", gpus, 4096)
    length = max_model_len or (prompt_len + output_len if prompt_len and output_len
                               else spec.max_context)
    if not length:
        raise ParameterError(literal(spec.name) + " states no context length: give "
                             "{max_model_len}", "max_model_len")
    out_len = output_len if output_len is not None else min(DEFAULT_OUTPUT_LEN, length - 1)
    p_len = prompt_len if prompt_len is not None else length - out_len
    if p_len < 1 or p_len + out_len > length:
        raise ParameterError(f"{{prompt_len}} + {{output_len}} ({p_len + out_len:,} tokens) do "
                             f"not fit max_model_len {length:,}", "prompt_len", "output_len")
    timing = load_engine(ref.name)[0]
    length_flag = "context_length" if ref.name == "sglang" else "max_seq_len"
    batch_flag = "max_running_requests" if ref.name == "sglang" else "max_batch_size"
    w = workload_for(spec, seq_len=length, batch=1)
    base = settings_for(w)
    searched = 0
    refusals: list[str] = []
    times: dict = {}
    runs: dict = {}
    terms = served_terms(ref.name, schedule_for(ref).host_path)
    own = dict(features or {})  # the engine's speculative flags
    draft = None
    if own:  # the draft and its rate now, not one refusal per layout
        from kvcalc.serving.drafts import draft_of
        from kvcalc.serving.speculative_time import acceptance_of

        draft = draft_of(spec, engine_flags(ref, base, **{length_flag: length}, **own))
        if draft is not None:
            acceptance_of(draft, acceptance_rate)
    if draft is None and acceptance_rate is not None:
        raise ParameterError("{acceptance_rate} times speculative decoding: give the "
                             "engine's speculative flag", "acceptance_rate")

    def single_step(tp: int, kv: str, batch: int, prompts: int) -> tuple:
        """kvcalc.speed.latency's step of `batch` requests: (TTFT of `prompts` prompts s, TPOT at
        the full length s)."""
        key = (tp, kv, batch, prompts)
        if key not in times:
            kv_name = "auto" if kv == "auto" else "fp8"
            wl = workload_for(spec, seq_len=p_len + out_len, batch=batch, prompt_len=p_len,
                              kv_dtype=base.model_dtype if kv_name == "auto" else kv_name, tp=tp)
            lat = latency(spec, wl, hardware=hw, engine=timing,
                          stored=stored_weights(spec, wl.quantization, tp))
            first = latency(spec, workload_for(
                spec, seq_len=p_len + out_len, batch=prompts, prompt_len=p_len,
                kv_dtype=base.model_dtype if kv_name == "auto" else kv_name, tp=tp),
                hardware=hw, engine=timing, stored=stored_weights(spec, wl.quantization, tp))
            times[key] = (first.ttft_s, lat.tpot_s)
        return times[key]

    def served(tp: int, kv: str, batch: int) -> tuple:
        """bench's closed loop of `batch` requests on one replica with the launch line's
        flags: (mean TTFT s, mean TPOT s, output tokens/s, SERVED)."""
        key = (tp, kv, batch)
        if key not in runs:
            load = Load(input_len=p_len, output_len=out_len, num_prompts=SERVED_PROMPTS * batch,
                        concurrency=batch, warmup=False)
            r = bench(spec, hw, load, engine=ref, tp=tp,
                      kv_dtype=base.model_dtype if kv == "auto" else "fp8",
                      max_model_len=length, engine_flags={batch_flag: batch, **own},
                      terms=terms, acceptance_rate=acceptance_rate)
            m = r.metrics
            tpot_ms = m["mean_tpot_ms"] if out_len > 1 else m["mean_e2el_ms"]
            runs[key] = (m["mean_ttft_ms"] / 1000, tpot_ms / 1000, m["output_throughput"],
                         SERVED)
        return runs[key]

    shapes = []  # (tp, pp, kv, count, held, step) of the settings the engine starts
    for tp in tp_sizes(spec, gpus):
        for pp in pp_sizes(spec, gpus // tp):
            for kv in KV_CHOICES[ref.name]:
                settings = base.replace(tp=tp, pp=pp,
                                        kv_dtype="auto" if kv == "auto" else "fp8")
                try:
                    flags = engine_flags(ref, settings, **{length_flag: length}, **own)
                    c = count(spec, hw, flags)
                except KvcalcError as e:
                    refusals.append(as_flags(e))
                    continue
                if not c.starts or not c.kv_cache_tokens:
                    refusals.append(c.refusal or "; ".join(c.notes))
                    continue
                held = min(c.max_running_requests or 0, c.kv_cache_tokens // length)
                if held < 1:
                    refusals.append(f"tp={tp} pp={pp}: {c.kv_cache_tokens:,} KV tokens hold "
                                    f"no request of {length:,}")
                    continue
                step = dict(c.flags).get("chunked_prefill_size") or dict(c.flags).get(
                    "max_num_tokens") or 8192
                shapes.append((tp, pp, kv, c, held, step))

    def layouts(chosen) -> list[EngineLayout]:
        nonlocal searched
        out = []
        for tp, pp, kv, c, held, step in chosen:
            most = gpus // (tp * pp)
            top = held if concurrency is None else min(held, concurrency)
            for batch in _batches(top):
                searched += 1
                replicas = most if concurrency is None else min(most, -(-concurrency // batch))
                requests = replicas * batch if concurrency is None else min(
                    concurrency, replicas * batch)
                if pp > 1:  # pp micro-batches, each token through every stage
                    ttft, tpot = single_step(tp, kv, -(-batch // pp),
                                             max(1, min(batch, step // p_len)))
                    rate, how = batch / tpot, SINGLE_STEP
                else:
                    try:
                        ttft, tpot, rate, how = served(tp, kv, batch)
                    except KvcalcError as e:  # bench's own count refuses this batch
                        refusals.append(as_flags(e))
                        continue
                if (ttft_s is not None and ttft > ttft_s) or (
                        tpot_s is not None and tpot > tpot_s):
                    break  # both times grow with the batch
                out.append(EngineLayout(
                    tp=tp, pp=pp, replicas=replicas, requests=requests, batch=batch,
                    kv_dtype=kv, context_len=length, kv_cache_tokens=c.kv_cache_tokens,
                    ttft_s=ttft, tpot_s=tpot, tokens_per_s=rate * (requests / batch),
                    timing=how))
        return out

    # bench has no pipeline model: the pp > 1 layouts only where no pp = 1 one serves
    kept = layouts([x for x in shapes if x[1] == 1]) or layouts(
        [x for x in shapes if x[1] > 1])
    if not kept:
        why = refusals[0] if refusals else "no layout meets the latency targets"
        raise NothingFits(literal(f"{ref.title}: no layout of up to {gpus} x {hw.name} "
                                  f"serves {spec.name} at {length:,} tokens: {why}"))
    best = min(kept, key=lambda x: (-x.tokens_per_s_per_gpu, -x.tokens_per_s_per_user,
                                    x.kv_dtype != "auto", x.tp * x.pp))
    name = model or hub_id(spec) or spec.name
    return EnginePlan(engine=ref, model=spec.name, gpu=hw.name, gpus=gpus, best=best,
                      command=launch_line(ref.name, name, best, own), searched=searched,
                      kept=len(kept), timer=served,
                      holds={(tp, pp, kv): held for tp, pp, kv, _, held, _ in shapes})
