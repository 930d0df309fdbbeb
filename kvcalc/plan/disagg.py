"""Disaggregated prefill and decode (`kvcalc plan --disaggregated`): x prefill instances of
tp GPUs that only prefill and y decode instances of tp' GPUs that only decode (xPyD, as
aiconfigurator, llm-d and vLLM's P/D connectors run them), each request's KV moved from
a prefill to a decode instance, set beside the co-located plan's best layout.

Every time is kvcalc.served.step.StepTimes' (the served run's step on vLLM's fitted and
served terms); every pool vLLM's start-up count (the plan's Search.count and held):

* prefill instance: steps of prompt tokens only, the engine's --max-num-batched-tokens
  each (several whole prompts a step where they fit, else one prompt in chunks): its
  service time S and the prompts/s it sustains, mu. At an offered rate lambda a prompt
  waits as in an M/D/1 queue, rho S / (2 (1 - rho)) with rho = lambda / mu; the largest
  lambda whose TTFT meets --ttft-ms is the instance's rate;
* TTFT = the request's host time + that wait + S + the KV transfer + one decode step;
* KV transfer: the prompt's KV on one prefill rank (kvcalc.formulas.cache.kv_cache's
  bytes_per_device: the exact per-layer cache, windows and MLA included, as the prefill
  layout shards it), every rank sending its shard at once over its own link: the GPU
  preset's interconnect (NVLink within a node) or --transfer-bandwidth (RDMA between
  nodes);
* decode instance: the largest batch B its pool holds whose step at the mean context
  (prompt + output / 2) meets --tpot-ms: B / TPOT tokens/s, B / (output x TPOT)
  requests/s.

x:y is chosen on at most --gpus GPUs for the most output tokens/s per GPU, the rate of
the pair min(x lambda, y requests/s of a decode instance); `prefill_per_decode` is the
balanced ratio (prefill instances one decode instance keeps busy). Both sides share the
KV cache dtype (a connector moves the cache as stored).

The record carries the split's launch lines in vLLM's spelling, prefill and decode, with
the proxy vLLM's docs run between them (kvcalc.plan.disagg_launch).

The co-located best is timed by kvcalc bench's closed loop (a different clock from this
open-loop queue): the comparison is of tokens/s per GPU at the same targets.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.plan.disagg_launch import launch

__all__ = ["disaggregated", "prefill_side", "decode_side", "transfer_bytes", "with_disaggregated"]

UTILIZATION = "0.9"  # vLLM's default --gpu-memory-utilization on both sides
NO_TTFT_RHO = 0.9  # without --ttft-ms, a prefill instance is loaded to this share


def transfer_bytes(spec, prompt_len: int, kv_dtype: str, tp: int) -> int:
    """Bytes of one request's KV one prefill rank sends: the prompt's cache on one device
    of a tp layout (kvcalc.formulas.cache.kv_cache, batch 1)."""
    from kvcalc.formulas.cache import kv_cache

    return kv_cache(spec, seq_len=prompt_len, batch=1, kv_dtype=kv_dtype, tp=tp).bytes_per_device


def _kv(search, kv: str) -> str:
    return search.base.model_dtype if kv == "auto" else kv


def _steps(search, tp: int, kv: str, length: int):
    """StepTimes of a tp layout (the served run's step, vLLM's terms)."""
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.served.step import StepTimes, served_terms
    from kvcalc.serving import schedule_for

    w = workload_for(search.spec, seq_len=length, batch=1, tp=tp, kv_dtype=_kv(search, kv))
    schedule = schedule_for(search.ref)
    return StepTimes(search.spec, search.hw, search.engine, w,
                     stored_weights(search.spec, w.quantization, tp),
                     served_terms(search.ref.name, schedule.host_path), schedule)


def _counted(search, tp: int, kv: str, length: int):
    """vLLM's count of a tp, pp 1 instance at the default profile; None: it does not start."""
    try:
        cap = search.count(tp, 1, kv, UTILIZATION, None, length)
    except KvcalcError:
        return None
    return cap if search.held(cap) >= 1 else None


def prefill_side(search, tp: int, kv: str, prompt: int, length: int) -> dict | None:
    """A prefill-only instance of tp GPUs: its step budget, service time S (s) and the
    prompts/s it sustains (mu); None when vLLM does not start it."""
    cap = _counted(search, tp, kv, length)
    if cap is None:
        return None
    steps, budget = _steps(search, tp, kv, length), cap.max_num_batched_tokens
    if prompt <= budget:  # whole prompts a step, their causal attention each
        k = budget // prompt
        service = steps.time(0, 0.0, ((0, prompt),) * k, k)
        mu = k / service
    else:  # one prompt in chunks of the budget, each attending to all before it
        service, done = 0.0, 0
        while done < prompt:
            c = min(budget, prompt - done)
            service += steps.time(0, 0.0, ((done, c),), 1)
            done += c
        mu = 1 / service
    return {"tp": tp, "kv_cache_dtype": kv, "max_num_batched_tokens": budget,
            "service_s": service, "prompts_per_s": mu, "request_s": steps.terms.request_s}


def decode_side(search, tp: int, kv: str, prompt: int, output: int, length: int,
                tpot_s: float | None) -> dict | None:
    """A decode-only instance of tp GPUs: the largest batch its pool holds whose step at
    the mean context meets `tpot_s`; None when none does or vLLM does not start it."""
    from kvcalc.plan.search import batches

    cap = _counted(search, tp, kv, length)
    if cap is None:
        return None
    steps, best = _steps(search, tp, kv, length), None
    context = prompt + output / 2
    for b in batches(search.held(cap)):
        tpot = steps.time(b, context, (), b)
        if tpot_s is not None and tpot > tpot_s:
            break  # a step grows with the batch
        best = {"tp": tp, "kv_cache_dtype": kv, "batch": b, "held": search.held(cap),
                "kv_cache_tokens": cap.kv_cache_tokens, "tpot_s": tpot,
                "tokens_per_s": b / tpot, "requests_per_s": b / (output * tpot)}
    return best


def _rate(p: dict, fixed_s: float, ttft_s: float | None) -> float:
    """Prompts/s a prefill instance takes with TTFT at most `ttft_s`: M/D/1's wait
    rho S / (2 (1 - rho)) within the slack the fixed terms leave."""
    if ttft_s is None:
        return NO_TTFT_RHO * p["prompts_per_s"]
    slack = ttft_s - fixed_s
    if slack <= 0:
        return 0.0
    s = p["service_s"]
    return min(1.0, 2 * slack / (s + 2 * slack)) * p["prompts_per_s"]


def _ttft(p: dict, fixed_s: float, rate: float) -> float:
    rho = min(rate / p["prompts_per_s"], 0.999999)
    return fixed_s + rho * p["service_s"] / (2 * (1 - rho))


def disaggregated(search, *, gpus: int, prompt: int, output: int, length: int,
                  ttft_s: float | None, tpot_s: float | None, kv_dtypes=("auto", "fp8"),
                  transfer_bandwidth_bytes_per_s: float | None = None) -> dict | None:
    """The best xPyD on at most `gpus` GPUs (module docstring), as a JSON-ready dict;
    None when no pair meets the targets."""
    from kvcalc.plan import tp_sizes

    if search.ref is None:
        raise ParameterError("{disaggregated} times prefill and decode on kvcalc bench's "
                             "served step, vLLM's fitted terms: drop {engine} roofline",
                             "disaggregated", "engine")
    if gpus < 2:
        raise ParameterError("{disaggregated} needs a prefill and a decode instance: {gpus} 2 "
                             "at least", "disaggregated", "gpus")
    bw = transfer_bandwidth_bytes_per_s or search.hw.interconnect_bandwidth_bytes_per_s
    link = "--transfer-bandwidth" if transfer_bandwidth_bytes_per_s else (
        search.hw.interconnect or "the GPU's interconnect")
    if not bw:
        raise ParameterError(literal(search.hw.name) + " has no interconnect bandwidth in its "
                             "preset: give {transfer_bandwidth_gb_per_s}",
                             "transfer_bandwidth_gb_per_s")
    tps = tp_sizes(search.spec, gpus - 1)
    best = None
    for kv in kv_dtypes:
        pre = [x for x in (prefill_side(search, tp, kv, prompt, length) for tp in tps) if x]
        dec = [x for x in (decode_side(search, tp, kv, prompt, output, length, tpot_s)
                           for tp in tps) if x]
        for d in dec:
            for p in pre:
                moved = transfer_bytes(search.spec, prompt, _kv(search, kv), p["tp"])
                transfer = moved / bw
                fixed = p["request_s"] + p["service_s"] + transfer + d["tpot_s"]
                lam = _rate(p, fixed, ttft_s)
                if lam <= 0:
                    continue
                got = _pair(p, d, lam, gpus, output)
                if got is None:
                    continue
                x, y, rate = got
                row = {"prefill": {**p, "instances": x, "prompts_per_s_at_target": lam},
                       "decode": {**d, "instances": y}, "gpus": x * p["tp"] + y * d["tp"],
                       "kv_cache_dtype": kv, "requests_per_s": rate,
                       "tokens_per_s": rate * output,
                       "tokens_per_s_per_gpu": rate * output / (x * p["tp"] + y * d["tp"]),
                       "prefill_per_decode": d["requests_per_s"] / lam,
                       "ttft_s": _ttft(p, fixed, rate / x), "tpot_s": d["tpot_s"],
                       "transfer": {"bytes_per_request_per_rank": moved,
                                    "bandwidth_bytes_per_s": bw, "link": link,
                                    "seconds": transfer}}
                if best is None or (row["tokens_per_s_per_gpu"], row["tokens_per_s"]) > (
                        best["tokens_per_s_per_gpu"], best["tokens_per_s"]):
                    best = row
    if best is not None:
        best["name"] = f"{best['prefill']['instances']}P{best['decode']['instances']}D"
    return best


def _pair(p: dict, d: dict, lam: float, gpus: int, output: int):
    """(x, y, requests/s) of the most output tokens/s per GPU with x tp-p and y tp-d
    instances on at most `gpus` GPUs; None when no pair fits."""
    best, key = None, None
    for x in range(1, (gpus - d["tp"]) // p["tp"] + 1):
        for y in range(1, (gpus - x * p["tp"]) // d["tp"] + 1):
            rate = min(x * lam, y * d["requests_per_s"])
            k = (rate / (x * p["tp"] + y * d["tp"]), rate)
            if key is None or k > key:
                best, key = (x, y, rate), k
    return best


def with_disaggregated(plan, *, ttft_s: float | None = None, tpot_s: float | None = None,
                       transfer_bandwidth_bytes_per_s: float | None = None):
    """`plan` (kvcalc.plan.plan's Plan) with its `disaggregated` record: the best xPyD on
    its GPUs at the targets, against its best co-located layout, which wins and why, and
    the split's vLLM launch lines (`launch`, kvcalc.plan.disagg_launch; None without a
    split)."""
    search, b = plan.search, plan.best
    kvs = ("auto",) if search.spec.attention_free else ("auto", "fp8")
    d = disaggregated(search, gpus=plan.gpus, prompt=plan.prompt_len,
                      output=plan.output_len, length=b.max_model_len, ttft_s=ttft_s,
                      tpot_s=tpot_s, kv_dtypes=kvs,
                      transfer_bandwidth_bytes_per_s=transfer_bandwidth_bytes_per_s)
    colo = {"tp": b.tp, "replicas": b.replicas, "gpus": b.gpus, "batch": b.max_num_seqs,
            "ttft_s": b.ttft_s, "tpot_s": b.tpot_s,
            "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu}
    record = {"co_located": colo, "xpyd": d}
    record.update(_verdict(d, colo, plan.prompt_len, ttft_s, tpot_s))
    record["launch"] = None if d is None else launch(
        _served(plan.command), d, prompt=plan.prompt_len, length=b.max_model_len,
        util=UTILIZATION, state=search.spec.state_mixers != "no mixer")
    return replace(plan, disaggregated=record, notes=(*plan.notes, record["why"]))


def _served(command: str) -> str:
    """The model as the co-located `vllm serve` line names it (its third word)."""
    import shlex

    return shlex.split(command)[2]


def _verdict(d: dict | None, colo: dict, prompt: int, ttft_s, tpot_s) -> dict:
    targets = [f"{n} {v * 1000:g} ms" for n, v in (("TTFT", ttft_s), ("TPOT", tpot_s))
               if v is not None]
    at = f" at {' / '.join(targets)}" if targets else " with no latency target"
    if d is None:
        return {"winner": "co-located", "ratio": None,
                "why": f"co-located: no prefill/decode split meets the targets{at}"}
    ratio = d["tokens_per_s_per_gpu"] / colo["tokens_per_s_per_gpu"]
    t = d["transfer"]
    moved = (f"the KV transfer of {prompt:,}-token prompts costs {t['seconds'] * 1e3:.1f} ms "
             f"({t['bytes_per_request_per_rank'] / 2**20:,.1f} MiB a rank over {t['link']})")
    if ratio > 1:
        why = (f"disaggregated {d['name']}: {ratio:.2f}x tokens/s per GPU{at}: prefill no "
               f"longer interrupts decode steps (decode batch {d['decode']['batch']:,} at "
               f"TPOT {d['tpot_s'] * 1e3:.1f} ms against the co-located batch "
               f"{colo['batch']:,} at {colo['tpot_s'] * 1e3:.1f} ms); {moved}")
    else:
        why = (f"co-located wins: {1 / ratio:.2f}x the tokens/s per GPU of {d['name']}{at}: "
               f"{moved}, and the {d['prefill']['instances'] * d['prefill']['tp']} prefill "
               f"GPUs produce no output tokens")
    return {"winner": "disaggregated" if ratio > 1 else "co-located", "ratio": ratio,
            "why": why}
