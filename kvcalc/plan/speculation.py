"""Speculative decoding on or off (`kvcalc plan --speculative-config ...`): the same search
twice, once with the draft (its weights and KV in every layout's count, every served run's
decode steps speculative rounds: kvcalc.served.speculative) and once without, and which
wins at the user's targets, and why.

The winner is the plan whose best layout gives more output tokens/s per GPU among those
meeting --ttft-ms and --tpot-ms (plan's own ranking); only one meeting them wins alone. Why:
the best layout's shape (tp, KV dtype, utilization, step budget, length) run at each
batch from 1 to the most both counts hold, with and without speculation (kvcalc bench's
closed loop, as plan times layouts): the gain in tokens/s per user and in output tokens/s
at each batch, and the first batch where speculation's output tokens/s falls to the
baseline's or under: from there the round (a verification of k + 1 positions a request
and k draft passes) costs more than the E tokens a request it yields. Whether that
round is compute-bound there is read from the served step's own terms
(kvcalc.served.step.StepTimes: its FLOPs' time against its bytes' time).

Pure: no I/O.
"""

from __future__ import annotations

from kvcalc.errors import KvcalcError, ParameterError, as_flags, literal

__all__ = ["engine_on_and_off", "on_and_off"]


def on_and_off(plan_fn, args: dict):
    """kvcalc.plan.plan with `args` (its arguments, --speculative-config among the
    features) searched with speculation on and off: the winner's Plan, its `speculation`
    record saying which and why. Raises NothingFits when neither serves."""
    if args.get("engine") is None:
        raise ParameterError("plan compares speculative decoding on and off on kvcalc bench's "
                             "served times, vLLM's fitted terms: drop {engine} roofline",
                             "engine")
    features = dict(args["features"])
    plain = {k: v for k, v in features.items() if k != "speculative_config"}
    on, off, why_on, why_off = _both(
        lambda: plan_fn(**{**args, "speculation_both": False}),
        lambda: plan_fn(**{**args, "features": plain or None, "acceptance_rate": None,
                           "speculation_both": False}))
    draft = _vllm_draft(args["spec"], on or off, features["speculative_config"])
    record = {"method": draft.method, "num_speculative_tokens": draft.num_speculative_tokens,
              "speculative_config": features["speculative_config"]}
    sides = None
    if on is not None and off is not None:
        sides = _vllm_side(on, on.best, draft), _vllm_side(off, on.best, draft)
    return _decide(on, off, why_on, why_off, sides, record, args)


def engine_on_and_off(plan_fn, args: dict):
    """kvcalc.plan.engines.engine_plan with `args` (the engine's speculative flags in
    `features`) searched with speculation on and off, as `on_and_off`."""
    from kvcalc.estimate import workload_for
    from kvcalc.serving.drafts import draft_of
    from kvcalc.serving.flags import engine_flags
    from kvcalc.serving.vllm.settings import settings_for

    ref, spec, features = args["ref"], args["spec"], dict(args["features"])
    length = args.get("max_model_len") or (
        args["prompt_len"] + args["output_len"] if args.get("prompt_len")
        and args.get("output_len") else spec.max_context)
    length_flag = "context_length" if ref.name == "sglang" else "max_seq_len"
    draft = draft_of(spec, engine_flags(ref, settings_for(workload_for(spec, seq_len=length)),
                                        **{length_flag: length}, **features))
    if draft is None:  # the flags name no speculation (an options file without it)
        return plan_fn(**{**args, "speculation_both": False})
    on, off, why_on, why_off = _both(
        lambda: plan_fn(**{**args, "speculation_both": False}),
        lambda: plan_fn(**{**args, "features": None, "acceptance_rate": None,
                           "speculation_both": False}))
    record = {"method": draft.method, "num_speculative_tokens": draft.num_speculative_tokens,
              "flags": {k: str(v) for k, v in features.items()}}
    sides = None
    if on is not None and off is not None and on.best.pp == 1:
        sides = (_engine_side(on, on.best, draft, args), _engine_side(off, on.best, draft, args))
    return _decide(on, off, why_on, why_off, sides, record, args)


def _both(run_on, run_off):
    """(on, off, why on failed, why off failed): each plan, or None and its reason."""
    from kvcalc.plan.refusals import NothingFits

    out = []
    for run in (run_on, run_off):
        try:
            out.append((run(), ""))
        except NothingFits as e:
            out.append((None, " ".join(as_flags(e).split())))  # the JSON's words
    (on, why_on), (off, why_off) = out
    if on is None and off is None:
        raise NothingFits(literal(f"with speculative decoding: {why_on}; without: {why_off}"))
    return on, off, why_on, why_off


class _Side:
    """One plan's view of the best speculative layout's shape: its served run at a batch,
    the batch its count holds, and (speculative side) whether a verify step is
    compute-bound."""

    def __init__(self, timer, held: int, bound=None):
        self.timer, self.held, self.bound = timer, held, bound


def _vllm_draft(spec, p, config: str):
    from kvcalc.serving.vllm.capacity import speculative_draft

    return speculative_draft(spec, p.search.base.replace(speculative_config=config))


def _vllm_side(p, x, draft) -> _Side:
    """vLLM plan `p`'s view of layout `x`'s shape (its search caches the runs)."""
    sr = p.search
    s = sr.base.replace(
        tp=x.tp, pp=x.pp, kv_dtype=x.kv_dtype, gpu_memory_utilization=x.gpu_memory_utilization,
        max_num_batched_tokens=x.max_num_batched_tokens if x.batched_tokens_given else None,
        max_model_len=x.max_model_len)
    held = sr.held(sr.count(x.tp, x.pp, x.kv_dtype, x.gpu_memory_utilization,
                            s.max_num_batched_tokens, x.max_model_len))
    kv = sr.base.model_dtype if x.kv_dtype == "auto" else x.kv_dtype
    context = sr.prompt(x.max_model_len) + sr.output_len // 2
    return _Side(lambda b: sr.served_times(s, b), held,
                 lambda b: _bound(sr.spec, sr.hw, sr.engine, "vllm", kv, x.tp, x.max_model_len,
                                  context, draft.num_speculative_tokens, b))


def _engine_side(p, x, draft, args) -> _Side:
    """Engine plan `p`'s view of layout `x`'s shape."""
    from kvcalc.engines import load_engine

    out = args.get("output_len") or 128
    kv = "fp8" if x.kv_dtype != "auto" else "auto"
    context = (args.get("prompt_len") or x.context_len - out) + out // 2
    return _Side(lambda b: p.timer(x.tp, x.kv_dtype, b)[:3],
                 p.holds.get((x.tp, x.pp, x.kv_dtype), 0),
                 lambda b: _bound(args["spec"], args["hw"], load_engine(p.engine.name)[0],
                                  p.engine.name, kv, x.tp, x.context_len, context,
                                  draft.num_speculative_tokens, b))


def _decide(on, off, why_on, why_off, sides, record, args):
    """The winner, its record filled in: which, why, each batch on and off."""
    from dataclasses import replace

    if on is None or off is None:
        won, side = (on, "on") if on is not None else (off, "off")
        why = (f"speculation {side}: only it meets the targets (the other: "
               f"{why_off if on is not None else why_on})")
        record.update(winner=side, why=why, on=_summary(on), off=_summary(off))
        return replace(won, speculation=record, notes=(*won.notes, why))
    won = on if on.best.tokens_per_s_per_gpu > off.best.tokens_per_s_per_gpu else off
    side = "on" if won is on else "off"
    record.update(winner=side, on=_summary(on), off=_summary(off))
    rows, stops, top = [], None, 0
    if sides is not None:
        rows, stops, top = _by_batch(*sides, args.get("concurrency"))
        x = on.best
        record.update(shape={"tp": x.tp, "kv_cache_dtype": x.kv_dtype, "largest_batch": top},
                      stops_paying_from_batch=stops, by_batch=rows)
    record["why"] = _why(side, on, off, rows, stops, top, record, sides, args)
    return replace(won, speculation=record, notes=(*won.notes, record["why"]))


def _summary(p) -> dict | None:
    """A plan's best layout in a few figures (None: no layout meets the targets)."""
    if p is None:
        return None
    b = p.best
    return {"tokens_per_s_per_gpu": b.tokens_per_s_per_gpu,
            "tokens_per_s_per_user": b.tokens_per_s_per_user, "tpot_s": b.tpot_s,
            "ttft_s": b.ttft_s, "max_num_seqs": _batch(b), "tp": b.tp,
            "replicas": b.replicas, "command": p.command}


def _batch(x) -> int:
    """A layout's requests per replica (vLLM's --max-num-seqs, the engines' batch)."""
    return getattr(x, "max_num_seqs", None) or x.batch


def _by_batch(on: _Side, off: _Side, concurrency) -> tuple[list[dict], int | None, int]:
    """The shape at each batch both counts hold, with and without speculation: (rows, the
    first batch whose output tokens/s with speculation is the baseline's or under, the
    largest batch)."""
    from kvcalc.plan.search import batches

    top = min(on.held, off.held)
    if concurrency:
        top = min(top, concurrency)
    rows, stops = [], None
    for batch in batches(top):
        try:
            t_on, t_off = on.timer(batch), off.timer(batch)
        except KvcalcError:  # bench's own count refuses this batch
            continue
        row = {"batch": batch, "tpot_s_on": t_on[1], "tpot_s_off": t_off[1],
               "ttft_s_on": t_on[0], "ttft_s_off": t_off[0],
               "tokens_per_s_on": t_on[2], "tokens_per_s_off": t_off[2],
               "tokens_per_s_per_user_gain": t_off[1] / t_on[1],
               "tokens_per_s_gain": t_on[2] / t_off[2]}
        rows.append(row)
        if stops is None and row["tokens_per_s_gain"] <= 1:
            stops = batch
    return rows, stops, top


def _bound(spec, hw, timing, engine: str, kv: str, tp: int, length: int, context: int,
           k: int, batch: int) -> str:
    """Whether the verification step of `batch` requests of k + 1 positions at `context`
    is compute-bound on the served step's terms: "compute-bound" or "memory-bound"."""
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.served.step import StepTimes, served_terms
    from kvcalc.serving import engine_ref, schedule_for

    w = workload_for(spec, seq_len=length, batch=1, tp=tp,
                     **({} if kv == "auto" else {"kv_dtype": kv}))
    schedule = schedule_for(engine_ref(engine))
    steps = StepTimes(spec, hw, timing, w, stored_weights(spec, w.quantization, tp),
                      served_terms(engine, schedule.host_path), schedule)
    weights_s, kv_s, act_s, compute_s = steps._decode(batch, context, k)
    memory_s = weights_s + kv_s + act_s * batch * (k + 1)
    return "compute-bound" if compute_s > memory_s else "memory-bound"


def _why(side, on, off, rows, stops, top, record, sides, args) -> str:
    """One line: which wins at the targets, by how much, and where speculation stops
    paying."""
    b_on, b_off = on.best, off.best
    ratio = b_on.tokens_per_s_per_gpu / b_off.tokens_per_s_per_gpu
    targets = [f"{name} {v * 1000:g} ms" for name, v in (("TTFT", args.get("ttft_s")),
                                                          ("TPOT", args.get("tpot_s")))
               if v is not None]
    at = f" at {', '.join(targets)}" if targets else " with no latency target"
    head = (f"speculation {side}{at}: {max(ratio, 1 / ratio):.2f}x the tokens/s per GPU "
            f"({side}'s best at a batch of {_batch(b_on if side == 'on' else b_off)}, "
            f"{b_on.tokens_per_s_per_gpu:,.0f} on against {b_off.tokens_per_s_per_gpu:,.0f} off)")
    if sides is None:  # a pipeline layout: no served runs to set side by side
        return head
    one = "".join(f"; at batch 1 it gives {r['tokens_per_s_per_user_gain']:.2f}x tokens/s "
                  f"per user" for r in rows[:1] if r["batch"] == 1)
    k = record["num_speculative_tokens"]
    if stops is not None:
        return (f"{head}{one}; off from batch {stops} (tp={b_on.tp}): the verify step of "
                f"{stops} x {k + 1} positions is {sides[0].bound(stops)} and costs more "
                f"than the tokens it accepts")
    if side == "on":
        return f"{head}{one}; it pays at every batch up to {top}, the most both hold"
    # off wins though speculation pays batch for batch on on's best setting: off's best
    # is another setting (more memory for the cache, another step budget or KV dtype)
    return (f"{head}{one}; on its best setting (tp={b_on.tp}, {b_on.kv_dtype} KV, up to "
            f"batch {top}) it pays at every batch, but off's best is another: tp={b_off.tp} "
            f"x {b_off.replicas} replicas, {b_off.kv_dtype} KV, a batch of {_batch(b_off):,}")
