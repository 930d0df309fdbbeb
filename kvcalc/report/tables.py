"""The analytical commands' tables: an Estimate (and a capacity) as `Tab`s and
sentences, with every figure formatted by kvcalc.ground.units.

Plain data only: drawing them is kvcalc.report.render's job.
"""

from __future__ import annotations

from kvcalc.report.render import Tab, wrap
from kvcalc.ground.units import (count_words, exact_bytes, human_bytes, human_count,
                                 human_rate, human_seconds)
from kvcalc.estimate import weights_source
from kvcalc.spec import base_name


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3g}x" if b else "-"


def _on_device(est) -> str:
    return f"{est.tp} x {est.hardware.name}" if est.tp > 1 else est.hardware.name


def _not_fit_words(est) -> str:
    m = est.min_tp_that_fits
    return ("does not fit at any tp" if m is None else f"does not fit (smallest tp that fits: {m})")


def engine_name(v) -> str:
    return f"vLLM {v.settings.vllm_version}"


def verdict_words(v) -> str:
    """The engine's answer in a clause: 'vLLM 0.33 starts: 2.35 requests of 32,768 tokens
    at once', or why it does not, with the bytes the KV cache lacks."""
    s, cap = v.settings, v.capacity
    at_once = (f"{cap.max_concurrency:,.2f} requests of {s.max_model_len:,} tokens at once"
               if cap.max_concurrency is not None else
               f"requests of {s.max_model_len:,} tokens (how many at once is not modelled)")
    if v.serves:
        return f"{engine_name(v)} starts: {at_once}"
    short = f"KV short by {human_bytes(v.shortfall_bytes)}" if v.shortfall_bytes else v.refusal
    if not v.starts:
        return f"{engine_name(v)} does not start ({short})"
    return f"{engine_name(v)} starts but holds {at_once}, not {v.batch:,} ({short})"


# The flag each fix sets, by command: estimate takes the length as --seq-len.
FIX_FLAGS = {"tp": "--tp", "max_model_len": "--max-model-len",
             "gpu_memory_utilization": "--gpu-memory-utilization", "kv_dtype": "--kv-dtype",
             "weight_dtype": "--weight-dtype", "max_num_seqs": "--max-num-seqs"}


def fixes_words(v, length_flag: str = "--max-model-len") -> list[str]:
    """Each fix as the flag that makes it, and what the engine then holds."""
    out = []
    for f in v.fixes:
        flag = length_flag if f.setting == "max_model_len" else FIX_FLAGS[f.setting]
        out.append(f"{flag} {f.value}: " + verdict_words(f.verdict).split(": ", 1)[1])
    return out


HEADLINE_WIDTH, HEADLINE_LINES = 80, 2  # the answer fits two lines of 80 columns


def headline(est, width: int = HEADLINE_WIDTH, lines: int = HEADLINE_LINES) -> str:
    """The answer in one sentence that wraps to at most `lines` lines of `width` columns:
    what the model needs (context x batch, KV cache, parameters), then what the device
    says (whether it fits, how many requests at once, time per token). Too long, it loses
    its least needed clauses, in a fixed order, till it fits; each is in the table below
    (a model name longer than a line still wraps)."""
    clauses = _need_clauses(est)
    if est.roofline is not None:
        clauses += _device_clauses(est)
    clauses.append((".", 0))

    def fits(kept: set[int]) -> bool:
        text = "".join(t for i, (t, _) in enumerate(clauses) if i in kept)
        return len(wrap(text, width)) <= lines

    kept = set(range(len(clauses)))
    for rank in sorted({r for _, r in clauses if r > 0}, reverse=True):
        if fits(kept):
            break
        kept -= {i for i, (_, r) in enumerate(clauses) if r == rank}
    # A clause dropped with its rank may fit again beside what went after it.
    for i in sorted(set(range(len(clauses))) - kept, key=lambda i: clauses[i][1]):
        if fits(kept | {i}):
            kept.add(i)
    return "".join(t for i, (t, _) in enumerate(clauses) if i in kept)


# Each clause is (text, rank): rank 0 is always said; the higher the rank, the sooner
# the clause goes when the sentence is too long (the figures are in the table below).
def _need_clauses(est) -> list[tuple[str, float]]:
    s, c, p = est.spec, est.cache, est.params
    seqs = "sequence" if est.batch == 1 else "sequences"
    out = [(f"{s.name}, {est.seq_len:,} tokens x {est.batch}", 0), (f" {seqs}", 2), (": ", 0)]
    if s.attention_free:  # Mamba: no K/V at all
        out += [(f"state {human_bytes(c.bytes)}", 0), (" (constant per sequence)", 6)]
    else:
        out += [(f"KV cache {human_bytes(c.bytes)}", 0), (f" ({c.bytes_per_token:,} B/token)", 6)]
    if est.tp > 1:
        out.append((f", {human_bytes(c.bytes_per_device)} per device", 4))
    out.append((f"; {count_words(p.total)} parameters", 0))
    if p.active != p.total:
        out.append((f" ({count_words(p.active)} active)", 1))
    return out


def _device_clauses(est) -> list[tuple[str, float]]:
    r, lat, v = est.roofline, est.latency, est.verdict
    rate = lat.tokens_per_s if lat is not None else r.tokens_per_s
    speed = [(f"{human_seconds(lat.tpot_s if lat is not None else r.time_s)}/token", 0),
             (f", {rate:,.{0 if rate >= 100 else 1}f} tokens/s", 3)]
    if lat is not None and lat.engine_name:
        speed.insert(0, (f"with {lat.engine_name} ", 0))  # whose time it is
    elif lat is not None and lat.calibration:
        speed.insert(0, ("from its calibration ", 0))
    else:
        speed.append((f" ({r.bound}-bound)", 5))
    out = [(f"; on {_on_device(est)}", 0)]
    if est.fits:
        c = est.serving if est.serving is not None else v.capacity
        title = c.engine.title if est.serving is not None else engine_name(v)
        held = ("" if c.max_concurrency is None else
                f" {c.max_concurrency:,.2f} requests at once")
        return out + [(" it fits", 0), (held, 1.5), (f" ({title})", 5), (", ", 0), *speed]
    why = (_serving_words(est.serving) if est.serving is not None else _short_verdict(v))
    m = est.min_tp_that_fits
    return out + [(" it does not fit", 0), (f" ({why})", 3.5),
                  ("; fits at no tp" if m is None else f"; fits at tp {m}", 1.5),
                  ("; if it ran: " + "".join(t for t, q in speed if q == 0), 7)]


def _short_verdict(v) -> str:
    """Why vLLM does not serve, in a clause: 'KV short by 287 GB / 268 GiB' (the table
    below names the engine and its count)."""
    short = f"KV short by {human_bytes(v.shortfall_bytes)}" if v.shortfall_bytes else v.refusal
    if v.starts and v.capacity.max_concurrency is not None:
        short = f"{v.capacity.max_concurrency:,.2f} requests at once, not {v.batch:,}; {short}"
    return short


def summary_table(est) -> Tab:
    """The compact table under the headline: one row per figure a person asks for."""
    s, d, p = est.spec, est.decode, est.params
    rows: list[list[str]] = []
    rows += _cache_rows(est)
    rows.append(["parameters", f"{p.total:,} ({count_words(p.total)})"])
    if p.active != p.total:
        rows.append(["active per token (MoE)", f"{p.active:,} ({count_words(p.active)})"])
    rows.append([f"weights ({est.weight_label})", exact_bytes(est.weight_bytes)])
    source = weights_source(est)
    if source is not None:
        rows.append(["  weights from", source])
    rows.append(["decode step: bytes", exact_bytes(d.bytes)])
    rows.append(["decode step: FLOPs", f"{d.flops:,} ({human_count(d.flops, 'FLOP')})"])
    rows.append(["FLOPs per byte", f"{d.arithmetic_intensity:.3g}"
                 + (f" (ridge {est.roofline.ridge_flops_per_byte:.0f})" if est.roofline else "")])
    if est.roofline is not None:
        r, f = est.roofline, est.fit
        caveat = "" if est.fits else " if it ran"
        rows.append([f"time per token{caveat}", f"{human_seconds(r.time_s)} ({r.bound}-bound)"])
        rows.append([f"tokens/s{caveat}", f"{r.tokens_per_s:,.1f}"])
        if est.latency is not None:
            lat = est.latency
            rows.append([f"first token, {lat.prompt_len:,}-token prompt{caveat}",
                         f"{human_seconds(lat.ttft_s)} ({lat.prefill_bound}-bound)"])
            rows.append([f"per output token{caveat}",
                         f"{human_seconds(lat.tpot_s)} ({lat.tokens_per_s:,.0f} tokens/s)"])
        rows += engine_rows(est)
        rows.append(["floor (weights + KV only)", floor_words(est)])
        m = est.min_tp_that_fits
        fits = "yes" if est.fits else f"no; {'at no tp' if m is None else f'smallest tp: {m}'}"
        rows.append([f"fits on {_on_device(est)}", fits])
    approx = "approximate; " if s.extra.get("approximate") else ""
    title = (f"{s.name} ({approx}{s.mixing}, {s.layers} layers), KV {est.kv_dtype.name}"
             + (f", tp {est.tp}" if est.tp > 1 else ""))
    caption = "`--detail` for every breakdown, `--format json` for all of it"
    if est.latency is not None and est.latency.calibration:
        lat = est.latency
        how = "overlapping" if lat.overhead_overlaps else "plus"
        caption = (f"time per token: datasheet roofline; first/per output token from terms "
                   f"measured by --calibrate ({lat.calibration}): data movement {how} "
                   f"{human_seconds(lat.decode_overhead_s)} of fixed costs per step. " + caption)
    elif est.latency is not None and est.latency.engine:
        lat = est.latency
        # The engine's terms take the lines: the usual hint shortened (24 lines in all).
        caption = (f"time per token: datasheet roofline; first/per output token on {lat.engine}, "
                   f"host {human_seconds(lat.decode_overhead_s)} per step (presets/engines); "
                   f"more: `--detail`, `--format json`")
    elif est.latency is not None:
        caption = (f"time per token: datasheet roofline; first/per output token at "
                   f"{est.latency.mfu:.0%} MFU and {est.latency.bandwidth_efficiency:.0%} of "
                   f"bandwidth (--mfu, --bandwidth-efficiency). " + caption)
    return Tab(title, ["", ""], rows, header=False, caption=caption)


def _cache_rows(est) -> list[list[str]]:
    """KV-cache rows of the compact table (one place to add per-kind rows)."""
    c = est.cache
    rows = [["KV cache per token", exact_bytes(c.bytes_per_token)],
            [f"KV cache, {est.seq_len:,} x {est.batch}", exact_bytes(c.bytes)]]
    if len(c.bytes_by_kind) > 1 or c.state_bytes_per_sequence:
        for label, nbytes in c.bytes_by_kind.items():  # e.g. "  52 x sliding 1,024"
            rows.append([f"  {c.layers_by_kind[label]} x {label}", exact_bytes(nbytes)])
    if c.bytes_full != c.bytes:
        rows.append(["  without windows", exact_bytes(c.bytes_full)])
    if c.state_bytes_per_sequence:
        rows.append(["  constant state per sequence", exact_bytes(c.state_bytes_per_sequence)])
    if est.tp > 1:
        rows.append(["  per device", exact_bytes(c.bytes_per_device)])
    return rows


def engine_rows(est) -> list[list[str]]:
    """The memory engine's answer as table rows: vLLM's verdict, or another engine's count."""
    c = est.serving
    if c is None:
        return verdict_rows(est.verdict, "--seq-len")
    words = _serving_words(c)
    return [[f"{c.engine.title} at {c.context_len:,} tokens",
             words.split(" ", 2)[2] if c.starts else words]]


def _serving_words(c) -> str:
    from kvcalc.report.serving import serving_words  # another engine's count: rarely asked

    return serving_words(c)


def verdict_rows(v, length_flag: str) -> list[list[str]]:
    """The engine's answer as table rows: the concurrency and its KV cache memory, or
    why it does not serve and the fixes."""
    s, cap = v.settings, v.capacity
    kv = cap.deciding.kv_cache
    memory = f"KV cache {human_bytes(kv)}" if kv >= 0 else "no KV cache memory"
    at_once = ("how many at once not modelled" if cap.max_concurrency is None
               else f"{cap.max_concurrency:,.2f} requests at once")
    rows = [[f"{engine_name(v)} at {s.max_model_len:,} tokens",
             f"{at_once} ({memory})" if v.serves
             else verdict_words(v)[len(engine_name(v)) + 1:]]]
    words = fixes_words(v, length_flag)
    if not v.serves and not words:
        words = ["no single change (tp, length, utilization, KV or weight dtype) makes it start"]
    for i, text in enumerate(words):
        rows.append(["  would start with" if i == 0 else "", text])
    return rows


def floor_words(est) -> str:
    """The floor's answer in a cell: fits, with its largest batch and context."""
    f = est.fit
    if f.free_for_kv_bytes < 0:
        return f"does not fit: weights exceed memory by {human_bytes(-f.free_for_kv_bytes)}"
    return (f"{'fits' if f.fits else 'does not fit'}: max batch {f.max_batch:,}, max "
            f"context {max_context_words(est)}")


def max_context_words(est) -> str:
    """The longest context at the batch: a number, or why memory does not bound it."""
    f, s = est.fit, est.spec
    if not f.max_seq_len_unbounded:
        return f"{f.max_seq_len:,}"
    if s.max_context:
        return f"{f.max_seq_len:,} (model limit; cache stops growing)"
    if s.attention_free:
        return "unbounded (a constant state, no attention)"
    return "unbounded (the cache stops growing)"


def weights_label(est) -> str:
    if est.stored is not None and est.stored.source and not est.stored.label:
        return "as stored"  # every tensor by its own dtype, from the checkpoint's headers
    return est.weight_label


def estimate_tables(est) -> list:
    """Every breakdown for one `Estimate` (kvcalc.estimate): the `--detail` view."""
    s, c, d, p = est.spec, est.cache, est.decode, est.params
    src = f"source: {s.source}" if s.source else ""
    a = s.attention_shape
    shape = (f"{s.mixing}: " if s.attention_free else
             f"{s.attention_kind}: {a.heads} query heads, "
             f"{a.kv_heads if s.mla is None else '-'} K/V heads, head_dim {a.head_dim}, ")
    approx = "(approximate) " if s.extra.get("approximate") else ""
    head = (f"{s.name}  {approx}{shape}{s.layers} layers, d_model {s.d_model}\n"
            f"seq_len {est.seq_len:,}, batch {est.batch}, KV {est.kv_dtype.name}, "
            f"weights {weights_label(est)}"
            f", tp {est.tp}"
            + (f", {est.hardware.name}" if est.hardware else "") + (f"\n{src}" if src else ""))
    out: list = [head]

    per_layer = ([["per token per layer", exact_bytes(c.bytes_per_token_per_layer)]]
                 if c.bytes_per_token_per_layer is not None else
                 [[f"per token per layer, {kind}", exact_bytes(b)]
                  for kind, b in c.bytes_per_token_per_layer_by_kind.items()])
    rows = [*per_layer,
            ["per token (all layers)", exact_bytes(c.bytes_per_token)],
            ["per sequence", exact_bytes(c.bytes_per_sequence)],
            [f"batch of {est.batch} (kv_cache_bytes)", exact_bytes(c.bytes)]]
    if c.bytes_full != c.bytes:
        rows.append(["without sliding window", exact_bytes(c.bytes_full)])
    if c.cross_attention_bytes_per_sequence:
        rows.append(["cross-attention, per sequence", exact_bytes(c.cross_attention_bytes_per_sequence)])
    if est.tp > 1:
        share = ("the whole latent, replicated" if s.mla is not None
                 else f"{c.kv_heads_per_device} K/V head{'s' if c.kv_heads_per_device > 1 else ''} each")
        rows.append([f"per device ({share})", exact_bytes(c.bytes_per_device)])
        rows.append([f"all {est.tp} devices", exact_bytes(c.bytes_all_devices)])
    out.append(Tab("KV cache", ["", "bytes"], rows))

    prow = [[name, f"{n:,}", f"{n / p.total:.1%}"] for name, n in p.breakdown.items()]
    bold = {len(prow)}
    prow.append([f"total ({human_count(p.total)})", f"{p.total:,}", "100%"])
    prow.append(["attention (all projections)", f"{p.attention:,}", f"{p.attention / p.total:.1%}"])
    if p.active != p.total:
        prow.append([f"active per token, MoE ({human_count(p.active)})", f"{p.active:,}",
                     f"{p.active / p.total:.1%}"])
    from_headers = est.stored is not None and est.stored.source
    prow.append([f"weights ({weights_label(est)})" if from_headers else
                 f"weights in {weights_label(est)}", exact_bytes(est.weight_bytes), ""])
    source = weights_source(est)
    out.append(Tab("Parameters", ["", "count", "share"], prow, bold=bold,
                   caption=None if source is None else f"weights from {source}"))

    drow = [["FLOPs", f"{d.flops:,}", human_count(d.flops, "FLOP")]]
    for name, n in d.bytes_breakdown.items():
        drow.append([f"bytes: {name}", f"{n:,}", human_bytes(n)])
    bold = {len(drow)}
    drow.append(["bytes moved", f"{d.bytes:,}", human_bytes(d.bytes)])
    drow.append(["arithmetic intensity (step)", f"{d.arithmetic_intensity:.4g}", "FLOP/byte"])
    drow.append(["arithmetic intensity (attention)", f"{d.attention_intensity:.4g}", "FLOP/byte"])
    drow.append([f"prefill FLOPs ({est.seq_len:,} tokens)", f"{d.prefill_flops:,}",
                 human_count(d.prefill_flops, "FLOP")])
    out.append(Tab("One decode step (one token per sequence)", ["", "exact", ""], drow,
                   caption="; ".join(d.notes) or None, bold=bold))

    if est.shazeer is not None:
        sz = est.shazeer
        srow = [[name, f"{v:.4g}", "<- dominates" if name == sz.dominant_term else ""]
                for name, v in sz.terms.items()]
        srow.append(["exact ratio (memory / arithmetic)", f"{sz.ratio:.4g}", ""])
        bz = est.shazeer_batched
        srow.append(["batched (whole prompt at once):", "", ""])
        srow += [[f"  {name}", f"{v:.4g}", "<- dominates" if name == bz.dominant_term else ""]
                 for name, v in bz.terms.items()]
        srow.append(["  exact ratio (memory / arithmetic)", f"{bz.ratio:.4g}", ""])
        out.append(Tab("Shazeer (2019) memory-to-arithmetic ratio, incremental decoding (and batched)",
                       ["term", "value", ""], srow,
                       caption=f"b={est.batch}, n={sz.n}, d={s.d_model}, h={a.heads}, "
                               f"g={a.kv_heads}, k={a.head_dim}; n*g/(d*h) is the K/V reload term"
                               + ("; n is the tokens a layer attends over on average "
                                  "(sliding windows), not seq_len" if sz.n != est.seq_len else "")))
    if est.roofline is not None:
        r, f = est.roofline, est.fit
        hw = est.hardware
        per_dev = f"one of {est.tp} devices' " if est.tp > 1 else ""
        caveat = "" if est.fits else f" -- {_not_fit_words(est)}, so only if it ran"
        rrow = []
        if est.tp > 1:
            rrow += [["bytes per device", f"{d.per_device_bytes:,} ({human_bytes(d.per_device_bytes)})"],
                     ["FLOPs per device", human_count(d.per_device_flops, "FLOP")]]
        rrow += [[f"memory time ({per_dev}bytes / bandwidth)", human_seconds(r.memory_s)],
                 [f"compute time ({per_dev}FLOPs / dense peak)", human_seconds(r.compute_s)],
                 ["bound", f"{r.bound} (ridge {r.ridge_flops_per_byte:.0f} FLOP/byte)"],
                 ["time per token (per step)", human_seconds(r.time_s)],
                 ["tokens/s (whole batch)", f"{r.tokens_per_s:,.1f}"]]
        out.append(Tab(f"Roofline on {_on_device(est)} ({human_rate(hw.memory_bandwidth_bytes_per_s)}, "
                       f"{human_count(r.peak_flops_per_s, 'FLOP/s')} dense){caveat}",
                       ["", "lower bound"], rrow, caption=f"datasheet figures: {hw.source}",
                       bold={len(rrow) - 3}))
        frow = engine_rows(est) + [
                ["floor: device memory usable", exact_bytes(f.usable_bytes)],
                ["floor: weights per device", exact_bytes(f.weight_bytes)],
                ["floor: free for KV cache per device", exact_bytes(f.free_for_kv_bytes)],
                [f"floor: max batch at {est.seq_len:,} tokens", f"{f.max_batch:,}"],
                [f"floor: max context at batch {est.batch}",
                 max_context_words(est)],
                ["floor: weights + KV only", "fits" if f.fits else "does not fit"],
                ["fits as asked", "yes" if est.fits else "NO"]]
        if est.min_tp_that_fits != est.tp:
            frow.append(["smallest tp that fits",
                         "none" if est.min_tp_that_fits is None else str(est.min_tp_that_fits)])
        out.append(Tab(f"Fit on {est.tp} x {hw.name}", ["", ""], frow))
    return out


def estimate_notes(est) -> list[str]:
    return [n for n in est.notes() if n not in est.decode.notes]


def compare_table(estimates: list) -> Tab:
    """MHA / GQA / MQA side by side with reduction factors against the first (MHA)."""
    base = estimates[0]
    cols = [""] + [f"{e.spec.attention_kind} ({e.spec.attention_shape.kv_heads} KV)"
                   for e in estimates]
    cols += [f"{e.spec.attention_kind} vs MHA" for e in estimates[1:]]

    def line(label, get, fmt, reduce=True, gain=False):
        vals = [get(e) for e in estimates]
        cells = [fmt(v) for v in vals]
        if reduce:  # "4x less" for costs, "1.13x more" for intensity and throughput
            cells += [f"{_ratio(v, vals[0])} more" if gain else f"{_ratio(vals[0], v)} less"
                      for v in vals[1:]]
        else:
            cells += ["" for _ in vals[1:]]
        return [label] + cells

    rows = [
        line("KV bytes per token", lambda e: e.cache.bytes_per_token, lambda v: f"{v:,}"),
        line("kv_cache_bytes", lambda e: e.cache.bytes, human_bytes),
        *([line(f"KV cache per device (tp {base.tp})", lambda e: e.cache.bytes_per_device,
                human_bytes)] if base.tp > 1 else []),
        line("params total", lambda e: e.params.total, lambda v: f"{v:,}"),
        line("params attention", lambda e: e.params.attention, lambda v: f"{v:,}"),
        line("decode bytes", lambda e: e.decode.bytes, human_bytes),
        line("decode FLOPs", lambda e: e.decode.flops, lambda v: human_count(v, "FLOP")),
        line("arithmetic intensity", lambda e: e.decode.arithmetic_intensity, lambda v: f"{v:.4g}",
             gain=True),
        line("attention intensity", lambda e: e.decode.attention_intensity, lambda v: f"{v:.4g}",
             gain=True),
    ]
    caption = "X vs MHA: how many times less (costs) or more (intensity, tokens/s) X gives"
    if base.roofline is not None:
        rows.append(line("roofline time per step", lambda e: e.roofline.time_s, human_seconds))
        rows.append(line("tokens/s", lambda e: e.roofline.tokens_per_s, lambda v: f"{v:,.0f}",
                         gain=True))
        rows.append(line("bound", lambda e: e.roofline.bound, str, reduce=False))
        rows.append(line("max batch (fit)", lambda e: e.fit.max_batch, lambda v: f"{v:,}", reduce=False))
        rows.append(line(f"fits on {_on_device(base)}", lambda e: e, lambda e: "yes" if e.fits else (
            "no" if e.min_tp_that_fits is None else f"no (tp {e.min_tp_that_fits})"), reduce=False))
        if not all(e.fits for e in estimates):
            caption += "; a variant that does not fit shows the time it would take if it did"
    where = (f", tp {base.tp}" if base.tp > 1 else "") + (
        f", on {base.hardware.name}" if base.hardware else "")
    if base.tp > 1 and any(e.cache.bytes_all_devices > e.cache.bytes for e in estimates):
        caption += "; with tp > kv_heads, K/V heads are replicated, so per-device savings shrink"
    return Tab(f"{base_name(base.spec.name)}: MHA vs GQA vs MQA at seq_len "
               f"{base.seq_len:,}, batch {base.batch}{where}", cols, rows, caption=caption)


def capacity_table(est, slo: int | None = None, length_flag: str = "--max-model-len") -> Tab:
    """`kvcalc fit`: vLLM's start-up arithmetic per device, its verdict for the batch (with
    the fixes when it refuses), then the floor (weights + KV only) beside it."""
    v = est.verdict
    s, cap, m = v.settings, v.capacity, v.capacity.memory
    rows = [["driver-visible memory x utilization", exact_bytes(m["budget"])],
            ["  weights", exact_bytes(m["weights"])],
            ["  activation peak (profiling pass)", exact_bytes(m["activation_peak"])],
            ["  non-torch (CUDA context, NCCL)", exact_bytes(m["non_torch"])],
            ["  CUDA graphs", exact_bytes(m["cuda_graphs"])],
            ["KV cache memory", exact_bytes(m["kv_cache"]) if m["kv_cache"] >= 0 else
             f"none: {exact_bytes(-m['kv_cache'])} short of the terms above"],
            [f"KV blocks of {cap.block_size} tokens" if cap.block_size else "KV blocks",
             _or_unmodelled(cap.num_gpu_blocks, "{:,}")],
            ["KV cache tokens", _or_unmodelled(cap.kv_cache_tokens, "{:,}")],
            [f"max concurrency at {s.max_model_len:,} tokens",
             _or_unmodelled(cap.max_concurrency, "{:.2f}x")],
            [f"KV for {v.batch:,} x {s.max_model_len:,} tokens", exact_bytes(v.kv_needed_bytes)]]
    if s.dp > 1:  # replicas, each with this count and a pool of its own
        rows.insert(-1, [f"all {s.dp} replicas ({s.layout.gpus} GPUs): KV cache tokens",
                         _or_unmodelled(None if cap.kv_cache_tokens is None
                                        else s.dp * cap.kv_cache_tokens, "{:,}")])
    if v.shortfall_bytes:
        rows.append(["shortfall", exact_bytes(v.shortfall_bytes)])
    rows.append(["verdict", "starts" if v.serves else verdict_words(v)[len(engine_name(v)) + 1:]])
    words = fixes_words(v, length_flag)
    if not v.serves and not words:
        words = ["no single change (tp, length, utilization, KV or weight dtype) makes it start"]
    for i, text in enumerate(words):
        rows.append(["  would start with" if i == 0 else "", text])
    if est.min_tp_that_fits != s.tp:
        m = est.min_tp_that_fits
        rows.append(["smallest tp that fits", "none" if m is None else str(m)])
    if slo is not None:
        rows.append([_slo_label(est), f"{slo:,}"])
    f = est.fit
    rows += [["floor: weights + KV only (x fraction, - reserve)", "fits" if f.fits else
              "does not fit"],
             ["floor: free for KV cache per device", exact_bytes(f.free_for_kv_bytes)],
             [f"floor: max batch at {est.seq_len:,} tokens", f"{f.max_batch:,}"]]
    where = f"{s.tp} x {cap.hardware}" + (f", pp {s.pp}" if s.pp > 1 else "")
    if s.dp > 1:
        where += f", dp {s.dp}"
    if s.expert_parallel:
        where += f", expert parallel over {s.tp * s.dp}"
    notes = list(cap.notes) + [n for n in est.notes()
                               if "replicated" in n or n.startswith("approximate:")]
    return Tab(f"{est.spec.name} on {where}, as vLLM {s.vllm_version} counts it "
               f"(utilization {s.gpu_memory_utilization}), weights {weights_label(est)}, "
               f"KV {est.kv_dtype.name}", ["", ""], rows,
               caption="\n".join(f"note: {n}" for n in notes) or None)


def _or_unmodelled(value, form: str) -> str:
    """A capacity count, or "not modelled" where the engine's paging of a kind is not."""
    return "not modelled" if value is None else form.format(value)


def _slo_label(est) -> str:
    lat = est.latency
    engine = lat.engine.split(":")[0] if lat is not None and lat.engine else ""
    return ("largest batch meeting the latency targets"
            + (f" on {engine}" if engine else " (datasheet roofline)"))
