"""`kvcalc plan` drawn: one line, the front of layouts as a table, the command."""

from __future__ import annotations

from kvcalc.report.render import Tab, Verbatim


def _layout_words(x) -> str:
    shape = f"tp {x.tp} x pp {x.pp}"
    return shape + (f" x {x.replicas} replicas" if x.replicas > 1 else "")


def plan_table(p) -> Tab:
    """The front: fastest per user first; the best layout in bold."""
    rows, bold = [], set()
    for i, x in enumerate(p.front):
        if x is p.best:
            bold.add(i)
        rows.append([_layout_words(x), f"{x.gpus}", x.kv_dtype, x.gpu_memory_utilization,
                     f"{x.max_num_batched_tokens:,}", f"{x.max_num_seqs:,}",
                     f"{x.max_model_len:,}", f"{x.ttft_s * 1000:,.0f}",
                     f"{x.tpot_s * 1000:,.1f}", f"{x.tokens_per_s_per_user:,.1f}",
                     f"{x.tokens_per_s_per_gpu:,.0f}"])
    served = p.best.timing == "served"
    how = (f"times: kvcalc bench's closed loop of max seqs requests per replica on {p.engine}'s "
           f"fitted and served terms, mean TTFT and mean TPOT; tok/s/GPU its output "
           f"throughput x replicas / GPUs, tok/s/user 1 / mean TPOT." if served else
           f"times on {p.engine}'s terms, one step (single-step model): TPOT at the full "
           f"length, TTFT for the prompts of one scheduler step.")
    caption = (f"{p.kept:,} of {p.searched:,} layouts start under vLLM {p.vllm_version}'s count "
               f"and meet the targets; shown: the front of tokens/s per GPU against "
               f"tokens/s per user. Requests of {p.prompt_len:,} + {p.output_len:,} tokens; "
               f"{how}")
    ttft, tpot = ("mean TTFT ms", "mean TPOT ms") if served else ("TTFT ms", "TPOT ms")
    return Tab(f"{p.model} on up to {p.gpus} x {p.gpu}",
               ["layout", "GPUs", "KV", "util", "batched tok", "max seqs", "max len",
                ttft, tpot, "tok/s/user", "tok/s/GPU"], rows,
               caption=caption, bold=bold)


def plan_items(p) -> list:
    b = p.best
    head = (f"{p.model} (weights {p.weight_dtype}) on {b.gpus} x {p.gpu}: best "
            f"{_layout_words(b)}, "
            f"{b.tokens_per_s_per_gpu:,.0f} output tokens/s per GPU at {b.max_num_seqs:,} "
            f"requests per replica ({b.tokens_per_s_per_user:,.1f} tokens/s each)")
    items = [head, plan_table(p), Verbatim(p.command)]
    if p.speculation and p.speculation.get("by_batch"):
        items.append(speculation_table(p.speculation))
    d = getattr(p, "disaggregated", None)
    if d and d.get("xpyd"):
        items.append(disaggregated_table(d))
    items += [f"note: {n}" for n in p.notes]
    if d and d.get("launch"):
        items += disaggregated_launch(d)
    return items


def disaggregated_launch(d: dict) -> list:
    """The split's vLLM lines (kvcalc.plan.disagg_launch), the winner's or, where the
    co-located layout wins, the split's should it run anyway; then what runs between."""
    x, run = d["xpyd"], d["launch"]
    won = d["winner"] == "disaggregated"
    head = (f"{'disaggregated' if won else 'co-located wins; should the split run anyway,'}"
            f" {x['name']} in vLLM ({run['connector']})")
    return [f"{head}: prefill, {run['prefill_instances']} x tp {run['prefill_tp']}:",
            Verbatim(run["prefill"]),
            f"decode, {run['decode_instances']} x tp {run['decode_tp']}:",
            Verbatim(run["decode"]), f"note: {run['between']}"]


def disaggregated_table(d: dict) -> Tab:
    """`plan --disaggregated`: the best xPyD beside the best co-located layout."""
    x, c = d["xpyd"], d["co_located"]
    pre, dec, t = x["prefill"], x["decode"], x["transfer"]
    rows = [[f"{x['name']}: {pre['instances']} x prefill tp {pre['tp']} + "
             f"{dec['instances']} x decode tp {dec['tp']}", f"{x['gpus']}",
             x["kv_cache_dtype"], f"{dec['batch']:,}", f"{x['ttft_s'] * 1000:,.0f}",
             f"{x['tpot_s'] * 1000:,.1f}", f"{t['seconds'] * 1000:,.2f}",
             f"{x['tokens_per_s_per_gpu']:,.0f}"],
            [f"co-located: tp {c['tp']} x {c['replicas']} replicas", f"{c['gpus']}", "",
             f"{c['batch']:,}", f"{c['ttft_s'] * 1000:,.0f}", f"{c['tpot_s'] * 1000:,.1f}",
             "", f"{c['tokens_per_s_per_gpu']:,.0f}"]]
    return Tab(f"disaggregated prefill and decode against co-located: {d['winner']} wins",
               ["layout", "GPUs", "KV", "decode batch", "TTFT ms", "TPOT ms",
                "KV transfer ms", "tok/s/GPU"], rows,
               bold={0 if d["winner"] == "disaggregated" else 1},
               caption=f"xPyD: StepTimes' prefill-only steps (M/D/1 queue at "
               f"{x['requests_per_s']:,.1f} requests/s) and decode-only steps at the mean "
               f"context; KV {t['bytes_per_request_per_rank'] / 2**20:,.1f} MiB a request "
               f"a rank over {t['link']}; balanced at {x['prefill_per_decode']:.2f} prefill "
               f"instances per decode instance. Co-located: kvcalc bench's closed loop.")


def speculation_table(s: dict):
    """`plan --speculative-config`: the best speculative layout's shape at each batch,
    with and without speculation."""
    shape = s["shape"]
    rows = [[f"{r['batch']:,}", f"{r['tpot_s_on'] * 1000:,.2f}", f"{r['tpot_s_off'] * 1000:,.2f}",
             f"{r['tokens_per_s_per_user_gain']:.2f}", f"{r['tokens_per_s_on']:,.0f}",
             f"{r['tokens_per_s_off']:,.0f}", f"{r['tokens_per_s_gain']:.2f}"]
            for r in s["by_batch"]]
    return Tab(f"speculative decoding ({s['method']}, {s['num_speculative_tokens']} draft "
               f"tokens) on and off, tp={shape['tp']} {shape['kv_cache_dtype']} KV, one "
               f"replica: {s['winner']} wins", ["batch", "TPOT ms on", "TPOT ms off",
                                                "tok/s/user x", "tok/s on", "tok/s off",
                                                "tok/s x"], rows,
               caption="kvcalc bench's closed loop of each batch (as plan times layouts); "
               "x: on over off")


def engines_items(plans: list) -> list:
    """`plan --engine any`: each engine's best layout side by side (the winner by output
    tokens/s per GPU first), then each engine's own launch line."""
    rows = []
    for p in plans:
        x, name = p.best, _engine_title(p)
        rows.append([name, _layout_words(x), x.kv_dtype, f"{x.requests:,}",
                     f"{x.ttft_s * 1000:,.0f}", f"{x.tpot_s * 1000:,.1f}",
                     f"{x.tokens_per_s_per_user:,.1f}", f"{x.tokens_per_s_per_gpu:,.0f}"])
    first = plans[0]
    table = Tab(f"{first.model} on up to {first.gpus} x {first.gpu}: each engine's best layout "
                f"by output tokens/s per GPU, as each engine counts its memory",
                ["engine", "layout", "KV", "requests", "mean TTFT ms", "mean TPOT ms",
                 "tok/s/user", "tok/s/GPU"], rows, bold={0},
                caption="times: kvcalc bench's closed loop of each layout's batch per replica "
                "(mean TTFT and TPOT) on each engine's fitted and served terms; pp > 1 "
                "layouts, ranked only where no pp = 1 one serves, on the single-step model; "
                "the memory, pool and running-request limits by each engine's start-up count")
    items = [table]
    for p in plans:
        items += [f"{_engine_title(p)}:", Verbatim(p.command)]
        s = getattr(p, "speculation", None)
        if s and s.get("by_batch"):
            items.append(speculation_table(s))
        items += [f"note: {n}" for n in getattr(p, "notes", ()) if s and n == s["why"]]
    return items


def _engine_title(p) -> str:
    ref = getattr(p, "engine", None)
    if hasattr(ref, "release"):  # an EngineRef (vLLM's Plan names its timing terms)
        return ref.title
    return f"vLLM {p.vllm_version}"
