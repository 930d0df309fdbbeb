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

from dataclasses import replace

from kvcalc.errors import KvcalcError

__all__ = ["on_and_off"]


def on_and_off(plan_fn, args: dict):
    """kvcalc.plan.plan with `args` (its arguments, --speculative-config among the
    features) searched with speculation on and off: the winner's Plan, its `speculation`
    record saying which and why. Raises NothingFits when neither serves."""
    from kvcalc.plan.refusals import NothingFits

    if args.get("engine") is None:
        raise KvcalcError("plan compares speculative decoding on and off on kvcalc bench's "
                          "served times, vLLM's fitted terms: drop --engine roofline")
    features = dict(args["features"])
    plain = {k: v for k, v in features.items() if k != "speculative_config"}
    on = off = None
    why_on = why_off = ""
    try:
        on = plan_fn(**{**args, "speculation_both": False})
    except NothingFits as e:
        why_on = " ".join(str(e).split())
    try:
        off = plan_fn(**{**args, "features": plain or None, "acceptance_rate": None,
                         "speculation_both": False})
    except NothingFits as e:
        why_off = " ".join(str(e).split())
    if on is None and off is None:
        raise NothingFits(f"with speculative decoding: {why_on}; without: {why_off}")
    draft = _draft(args["spec"], on or off, features)
    record = {"method": draft.method, "num_speculative_tokens": draft.num_speculative_tokens,
              "speculative_config": features["speculative_config"]}
    if on is None or off is None:
        won = on or off
        side = "on" if on is not None else "off"
        why = (f"speculation {side}: only it meets the targets (the other: "
               f"{why_off if on is not None else why_on})")
        record.update(winner=side, why=why, on=_summary(on), off=_summary(off))
        return replace(won, speculation=record, notes=(*won.notes, why))
    by_batch, rows = _by_batch(on, off, args)
    won = on if on.best.tokens_per_s_per_gpu > off.best.tokens_per_s_per_gpu else off
    side = "on" if won is on else "off"
    record.update(winner=side, on=_summary(on), off=_summary(off), **by_batch,
                  by_batch=rows)
    record["why"] = _why(side, on, off, by_batch, rows, args)
    return replace(won, speculation=record, notes=(*won.notes, record["why"]))


def _draft(spec, p, features):
    from kvcalc.serving.vllm.capacity import speculative_draft

    return speculative_draft(spec, p.search.base.replace(
        speculative_config=features["speculative_config"]))


def _summary(p) -> dict | None:
    """A plan's best layout in a few figures (None: no layout meets the targets)."""
    if p is None:
        return None
    b = p.best
    return {"tokens_per_s_per_gpu": b.tokens_per_s_per_gpu,
            "tokens_per_s_per_user": b.tokens_per_s_per_user, "tpot_s": b.tpot_s,
            "ttft_s": b.ttft_s, "max_num_seqs": b.max_num_seqs, "tp": b.tp,
            "replicas": b.replicas, "command": p.command}


def _settings(p, x):
    """The EngineSettings of layout `x` under plan `p`'s search (its features)."""
    return p.search.base.replace(
        tp=x.tp, pp=x.pp, kv_dtype=x.kv_dtype, gpu_memory_utilization=x.gpu_memory_utilization,
        max_num_batched_tokens=x.max_num_batched_tokens if x.batched_tokens_given else None,
        max_model_len=x.max_model_len)


def _by_batch(on, off, args) -> tuple[dict, list[dict]]:
    """The best speculative layout's shape at each batch both counts hold, with and
    without speculation: ({"shape", "stops_paying_from_batch"}, rows). The runs plan
    made are reused (each search caches them by layout and batch)."""
    from kvcalc.plan.search import batches

    x = on.best
    s_on, s_off = _settings(on, x), _settings(off, x)
    holds = []
    for p, s in ((on, s_on), (off, s_off)):
        cap = p.search.count(x.tp, x.pp, x.kv_dtype, x.gpu_memory_utilization,
                             s.max_num_batched_tokens, x.max_model_len)
        holds.append(p.search.held(cap))
    top = min(holds)
    if args.get("concurrency"):
        top = min(top, args["concurrency"])
    rows, stops = [], None
    for batch in batches(top):
        try:
            t_on = on.search.served_times(s_on, batch)
            t_off = off.search.served_times(s_off, batch)
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
    shape = {"tp": x.tp, "kv_cache_dtype": x.kv_dtype,
             "gpu_memory_utilization": float(x.gpu_memory_utilization),
             "max_model_len": x.max_model_len, "largest_batch": top}
    return {"shape": shape, "stops_paying_from_batch": stops}, rows


def _bound(on, x, batch: int) -> str:
    """Whether the verification step of `batch` requests on layout `x` is compute-bound
    on the served step's terms: "compute-bound" or "memory-bound"."""
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.served.step import StepTimes, served_terms
    from kvcalc.serving.speculative_time import acceptance_of

    sr = on.search
    draft = _draft(sr.spec, on, {"speculative_config": sr.base.speculative_config})
    acceptance_of(draft, sr.acceptance_rate)
    kv = sr.base.model_dtype if x.kv_dtype == "auto" else x.kv_dtype
    w = workload_for(sr.spec, seq_len=x.max_model_len, batch=1, kv_dtype=kv, tp=x.tp)
    steps = StepTimes(sr.spec, sr.hw, sr.engine, w, stored_weights(sr.spec, w.quantization, x.tp),
                      sr.terms or served_terms("vllm"), True)
    context = sr.prompt(x.max_model_len) + sr.output_len // 2
    weights_s, kv_s, act_s, compute_s = steps._decode(batch, context,
                                                      draft.num_speculative_tokens)
    memory_s = weights_s + kv_s + act_s * batch * (draft.num_speculative_tokens + 1)
    return "compute-bound" if compute_s > memory_s else "memory-bound"


def _why(side: str, on, off, by_batch: dict, rows: list[dict], args) -> str:
    """One line: which wins at the targets, by how much, and where speculation stops
    paying."""
    b_on, b_off = on.best, off.best
    ratio = b_on.tokens_per_s_per_gpu / b_off.tokens_per_s_per_gpu
    targets = [f"{name} {v * 1000:g} ms" for name, v in (("TTFT", args.get("ttft_s")),
                                                          ("TPOT", args.get("tpot_s")))
               if v is not None]
    at = f" at {', '.join(targets)}" if targets else " with no latency target"
    head = (f"speculation {side}{at}: {max(ratio, 1 / ratio):.2f}x the tokens/s per GPU "
            f"({'on' if side == 'on' else 'off'}'s best at --max-num-seqs "
            f"{(b_on if side == 'on' else b_off).max_num_seqs}, "
            f"{b_on.tokens_per_s_per_gpu:,.0f} on against {b_off.tokens_per_s_per_gpu:,.0f} off)")
    stops = by_batch["stops_paying_from_batch"]
    largest = by_batch["shape"]["largest_batch"]
    one = "".join(f"; at batch 1 it gives {r['tokens_per_s_per_user_gain']:.2f}x tokens/s "
                  f"per user" for r in rows[:1] if r["batch"] == 1)
    if stops is not None:
        return (f"{head}{one}; off from batch {stops} (tp={b_on.tp}): the verify step of "
                f"{stops} x {_k(on) + 1} positions is {_bound(on, b_on, stops)} and costs "
                f"more than the tokens it accepts")
    if side == "on":
        return f"{head}{one}; it pays at every batch up to {largest}, the most both hold"
    # off wins though speculation pays batch for batch on on's best setting: off's best
    # is another setting (more memory for the cache, another step budget or KV dtype)
    return (f"{head}{one}; on its best setting (tp={b_on.tp}, {b_on.kv_dtype} KV, up to "
            f"batch {largest}) it pays at every batch, but off's best is another: "
            f"{_words(b_off)}")


def _words(x) -> str:
    return (f"tp={x.tp} x {x.replicas} replicas, {x.kv_dtype} KV, "
            f"--gpu-memory-utilization {x.gpu_memory_utilization}, --max-num-batched-tokens "
            f"{x.max_num_batched_tokens:,}, --max-num-seqs {x.max_num_seqs:,}")

def _k(on) -> int:
    return _draft(on.search.spec, on, {
        "speculative_config": on.search.base.speculative_config}).num_speculative_tokens

