"""One scheduler step's time under load (kvcalc.served's clock): the decode of the
running requests and the prompt tokens carried with it, on the engine's single-stream
terms (kvcalc.speed.latency, presets/engines) and the served terms fitted on published serving
runs (presets/served/terms.yaml, benchmarks/fit_served.py)."""

from __future__ import annotations

import functools
import math

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["ServedTerms", "StepTimes", "held_out_error", "prefix_setup", "regime", "served_terms",
           "shared_prefix"]


@record
class ServedTerms:
    """What a step under load costs beyond the engine's single-stream terms
    (presets/engines): fitted on published serving runs by benchmarks/fit_served.py,
    leave one publisher out (presets/served/terms.yaml). `request_s`: host time a
    request pays before its first token (HTTP, tokenizing, admitting, returning the
    token); `running_s`: host time per running request per step (preparing its inputs,
    sampling, streaming its token), overlapping the GPU's work where the engine's
    scheduler overlaps it (kvcalc.serving.schedule); `moe_share`: the MoE grouped
    GEMMs' share of the dense 16-bit prefill rate (few tokens per expert, a skinny matrix
    per expert under tp), for 8-bit experts too: block-scaled fp8 grouped GEMMs are
    timed at the 16-bit tensor-core rate, not twice it (StepTimes._prefill_rates);
    `eager_layer_s`: the host time a layer's kernels take to launch from Python in a
    step that replays no CUDA graph (kvcalc.serving.record.Schedule.graphed: a batch
    over the engine's captured sizes, a prefill where the engine has no prefill
    graphs), which such a step takes at least; `kv_share`: the share of bandwidth the decode attention kernel
    reads K/V at with many requests at once; `moe_half_tokens`: the tokens a step routes
    to each expert at which the grouped GEMMs run at half of `moe_share` (a GEMM of few
    rows is a skinny one: its share grows as M / (M + moe_half_tokens); 0: the same share
    at any M). `extrapolated`: fitted on fewer than three publishers (or not at all)."""

    request_s: float
    running_s: float
    moe_share: float
    kv_share: float
    eager_layer_s: float = 0.0
    moe_half_tokens: float = 0.0
    publishers: int = 0
    source: str = ""

    @property
    def extrapolated(self) -> bool:
        return self.publishers < 3


@functools.lru_cache(maxsize=8)  # the file never changes within a run
def served_terms(engine: str, host_path: str = "") -> ServedTerms:
    """`engine`'s fitted terms (kvcalc.serving's canonical name), on its release's host
    path (kvcalc.serving.record.Schedule.host_path: its own host time per request and
    per running request where the file has that path's, else the engine's)."""
    from kvcalc.presets import read_preset

    data = read_preset("served", "terms")
    shared = data["shared"]
    own = data["engines"].get(engine)
    if own is None:
        raise KvcalcError(f"presets/served/terms.yaml has no terms for {engine}")
    own = {**own, **((own.get("paths") or {}).get(host_path) or {})} if host_path else own
    return ServedTerms(request_s=float(own["request_s"]), running_s=float(own["running_s"]),
                       moe_share=float(own.get("moe_share", shared["moe_share"])),
                       kv_share=float(shared["kv_share"]),
                       eager_layer_s=float(shared.get("eager_layer_s", 0.0)),
                       moe_half_tokens=float(shared.get("moe_half_tokens", 0.0)),
                       publishers=int(own.get("publishers", 0)),
                       source=str(data.get("source", "")))


def regime(concurrency: int | None, request_rate: float, num_prompts: int) -> str:
    """"batch 1" (one request at a time) or "under load", as benchmarks/fit_served.py
    scores the published runs by regime."""
    if concurrency is not None:
        return "batch 1" if concurrency == 1 else "under load"
    return "batch 1" if math.isinf(request_rate) and num_prompts == 1 else "under load"


def held_out_error(regime_name: str) -> dict:
    """How far off kvcalc bench's figures came on published runs it never saw, for
    `regime_name`: each publisher's rows predicted with the terms fitted on the others
    (presets/served/terms.yaml held_out_error, benchmarks/fit_served.py), the error of
    a row max(predicted / measured, measured / predicted) - 1; half of the rows (p50)
    and 80% (p80) were within these. {} where the file has none."""
    table = _held_out_table()  # read once; each answer gets dicts of its own
    key = regime_name.replace(" ", "_")
    out = {kind: {k: table[f"{name}_{key}"][k] for k in ("p50", "p80", "rows")}
           for kind, name in (("TPOT_and_throughput", "TPOT_tput"), ("TTFT", "TTFT"))
           if f"{name}_{key}" in table}
    return {"regime": regime_name, **out} if out else {}


@functools.lru_cache(maxsize=1)  # the file never changes within a run
def _held_out_table() -> dict:
    from kvcalc.presets import read_preset

    return read_preset("served", "terms").get("held_out_error") or {}


def held_out_note(error: dict) -> str:
    """bench's line for held_out_error's figures."""
    def off(e: float) -> str:  # within 15%, or 2.1x off
        return f"{e:.0%}" if e < 1 else f"{1 + e:.1f}x"

    tp, ft = error["TPOT_and_throughput"], error["TTFT"]
    return (f"accuracy, {error['regime']}, on published runs held out by publisher "
            f"(presets/served/terms.yaml): TPOT and output throughput half of them within "
            f"{off(tp['p50'])}, 80% within {off(tp['p80'])} ({tp['rows']} rows); TTFT "
            f"{off(ft['p50'])} and {off(ft['p80'])} ({ft['rows']} rows)")


# (spec, workload, unstored) -> the figures of its steps, shared by every run of one
# model and workload (a plan times hundreds of runs): {(batch, context, k): DecodeCost,
# "prefill": its prompt FLOPs}. `stored` is spec and w's own checkpoint bytes (or None),
# so it is not part of the key.
_SHARED: dict = {}


def _shared(spec, w, unstored: bool) -> dict:
    key = (spec, w, unstored)
    got = _SHARED.get(key)
    if got is None:
        if len(_SHARED) > 64:  # bounded: a long session's sweeps
            _SHARED.clear()
        got = _SHARED[key] = {}
    return got


def _bucket(n: int) -> int:
    """`n` rounded down to 1/32 of itself (the step-time caches' key)."""
    n = max(int(n), 1)
    b = max(n // 32, 1)
    return n // b * b


class StepTimes:
    """One scheduler step's time: the decode of `decoding` requests at their mean
    context and the prompt tokens carried with it, on the engine's terms
    (kvcalc.speed.latency) and the served terms (ServedTerms), cached by the decode batch and
    context (to 1/32 of themselves)."""

    def __init__(self, spec, hw, timing, w, stored, terms: ServedTerms, schedule):
        from kvcalc.engines import check_runs, weight_family
        from kvcalc.speed.roofline import compute_dtype_for

        self.spec, self.hw, self.e, self.w, self.stored = spec, hw, timing, w, stored
        self.terms, self.schedule, self.overlaps = terms, schedule, schedule.overlaps_host
        self.family = weight_family(w.weight_dtype.name, w.quantization)
        check_runs(timing, self.family)
        self.cdt = compute_dtype_for(w.weight_dtype)
        self.cache: dict = {}
        self.weights_cache: dict = {}
        self.shared = _shared(spec, w, stored is None)
        self.peak = timing.peak_flops(hw, self.cdt)
        self.mfu = timing.mfu(self.family)[0]
        self.bw = hw.memory_bandwidth_bytes_per_s
        self.e_w = timing.efficiency(self.family)[0]
        self.e_float = float(timing.bandwidth_efficiency.get("float", self.e_w))
        self.moe = any(layer.mlp is not None and layer.mlp.experts for layer, _ in spec.groups())
        self.matmul_s_per_token, self.routed_s_per_token, self.attention_flops_per_s = (
            self._prefill_rates())
        # a step's tokens each expert receives per step token (its layers' top-k over
        # their experts, the most of any MoE layer): every rank holds every expert's
        # slice under tensor parallelism, so its grouped GEMMs have rows = tokens x this
        self.rows_per_token = max((layer.mlp.active / layer.mlp.experts
                                   for layer, _ in spec.groups()
                                   if layer.mlp is not None and layer.mlp.experts),
                                  default=0.0)
        # every layer's token mixers with their layer counts: a prompt chunk's attention
        # is what each mixer's causal prefill adds from its start to its end (a window's
        # or a recurrence's linear growth, full attention's quadratic one)
        self.mixers = tuple((n, mx) for layer, n in spec.groups() for mx in layer.mixers)
        self.chunk_cache: dict = {}
        self.comm_s_per_token = 0.0
        if w.tp > 1 and hw.interconnect_bandwidth_bytes_per_s:
            from kvcalc.speed.comm import decode_allreduce
            from kvcalc.speed.roofline import exchanged_dtype_for

            self.comm_s_per_token = decode_allreduce(
                spec, 1024, w.tp, exchanged_dtype_for(w.weight_dtype),
                hw.interconnect_bandwidth_bytes_per_s).bandwidth_s / 1024
        layers = spec.layers
        self.serial_s = (layers * timing.layer_s(hw, self.family)
                         + (2 * layers * timing.allreduce_s if w.tp > 1 else 0.0))
        self.eager_s = layers * terms.eager_layer_s  # a step's launches without a graph
        self.host_s = (timing.host_step_s + layers * timing.host_layer_s
                       + (w.tp - 1) * timing.host_rank_s)
        # Speculative decoding (speculate): k drafted tokens a request a step, each step
        # verifying k + 1 positions a request (`width`) and emitting `emitted` tokens on
        # average; 0, 1, 1 without it.
        self.k, self.width, self.emitted, self.draft = 0, 1, 1, None
        self.lora = None  # with LoRA adapters: their kernels' time (kvcalc.served.lora)
        # tokens of a prefix every running request shares whose K/V a decode step reads
        # once, not once a request (vLLM's cascade attention: cascade_setup)
        self.cascade = 0

    def speculate(self, k: int, emitted: float, draft: "StepTimes | None") -> None:
        """Time every decode step as a speculative round: the target's verification of
        k + 1 positions a request (kvcalc.serving.speculative_time.verify_step) and `k`
        forward passes of `draft` (the draft's own StepTimes; None: drafted on the host,
        ngram), emitting `emitted` tokens a request on average."""
        self.k, self.width, self.emitted, self.draft = k, k + 1, emitted, draft
        self.cache.clear()
        self.draft_cache: dict = {}

    def _prefill_rates(self) -> tuple[float, float, float]:
        """Seconds a prompt token's matmuls take on one device, from the prefill FLOPs
        of a 1,024- and a 2,048-token prompt: those outside the routed experts, and the
        routed experts' at the MoE share of the rate (moe_s scales them by the step's
        rows an expert); and the FLOPs/s the prompts' attention runs at."""
        from dataclasses import replace

        from kvcalc.speed.latency import step_figures

        def flops(n: int):
            f = step_figures(self.spec, replace(self.w, seq_len=n, batch=1, prompt_len=n),
                             stored=self.stored)
            return f.prefill_flops - f.prefill_attention_flops

        if "prefill" not in self.shared:
            self.shared["prefill"] = (flops(1024), flops(2048))
        m1, m2 = self.shared["prefill"]
        matmul = (m2 - m1) / 1024  # per prompt token, on one device
        d = self.spec.d_model
        routed = sum(2 * n * layer.mlp.active * layer.mlp.expert_params(d)
                     for layer, n in self.spec.groups()
                     if layer.mlp is not None and layer.mlp.experts) / self.w.tp
        routed = min(routed, matmul)
        attention_share = self.e.attention_mfu or self.mfu
        rate = self.peak * self.mfu
        # Routed experts at the 16-bit rate whatever their dtype: fitted on the published
        # serving runs, DeepSeek-R1's fp8 experts (128x128 block scales) want half the
        # share of Qwen3-235B's bf16 ones when timed at the fp8 peak, and the same share
        # at the 16-bit peak (benchmarks/fit_served.py: 115 against 95 of 238 MoE rows
        # within 15%, one share for both). FlashInfer's DeepSeek MoE bench on B200 has
        # its MXFP8 experts 1.7x its BF16 ones at 512 tokens, not 2x
        # (flashinfer-ai/flashinfer#5301).
        routed_rate = min(self.peak, self.e.peak_flops(self.hw, "bf16")) * self.mfu
        return ((matmul - routed) / rate, routed / (routed_rate * self.terms.moe_share),
                self.peak * attention_share)

    def moe_s(self, prompt_tokens: int, step_tokens: int) -> float:
        """Seconds of the routed experts' matmuls for `prompt_tokens` prompt tokens in a
        step of `step_tokens` tokens: at moe_share of the rate, slower by
        (M + moe_half_tokens) / M where M, the rows each expert's GEMM gets, is few."""
        if not self.routed_s_per_token or not prompt_tokens:
            return 0.0
        half = self.terms.moe_half_tokens
        rows = max(step_tokens, prompt_tokens, 1) * self.rows_per_token
        return prompt_tokens * self.routed_s_per_token * (1 + half / rows if half else 1)

    def chunk_attention_s(self, start: int, take: int) -> float:
        """Seconds of the attention of `take` prompt tokens after `start` already in
        the cache, on one device: each layer's mixer as it grows (full attention over
        every earlier position, a sliding window over at most its window, a linear-
        attention or SSM layer a fixed cost a token)."""
        key = (start, take)
        got = self.chunk_cache.get(key)
        if got is None:
            end = start + take
            flops = sum(n * (mx.prefill_flops(end) - mx.prefill_flops(start))
                        for n, mx in self.mixers) if take else 0
            if len(self.chunk_cache) > 65536:  # bounded: spread lengths make many keys
                self.chunk_cache.clear()
            got = self.chunk_cache[key] = flops / self.w.tp / self.attention_flops_per_s
        return got

    def prompt_s(self, spans, step_tokens: int = 0) -> float:
        """Seconds of the prompt chunks `spans`, (start, take) each, on one device, in a
        step of `step_tokens` tokens (0: the chunks alone): their matmuls and their
        attention."""
        tokens = sum(take for _, take in spans)
        return (tokens * self.matmul_s_per_token + self.moe_s(tokens, step_tokens)
                + sum(self.chunk_attention_s(start, take) for start, take in spans))

    def _decode(self, b: int, c: int, k: int = 0) -> tuple:
        """(weights s, K/V s, activations s a token, FLOPs s) of `b` requests at context
        `c`, each verifying k + 1 positions (k = 0: a plain decode step)."""
        key = (b, c, k)
        terms = self.cache.get(key)
        if terms is None:
            step = self.shared.get(key)
            if step is None:
                from kvcalc.serving.speculative_time import verify_step

                # the decode step of its b x (k + 1) tokens, shared with plain steps
                n = b * (k + 1)
                plain = self.shared.get((n, c, 0))
                if plain is None:
                    plain = self.shared[(n, c, 0)] = verify_step(
                        self.spec, self.w, 0, n, c, stored=self.stored, prefill=False)
                step = self.shared[key] = verify_step(self.spec, self.w, k, b, c,
                                                      plain=plain)
            dev = step.per_device_breakdown
            kv_s = dev["kv"] / (self.bw * (self.terms.kv_share or self.e.kv_share(self.e_float)))
            terms = (dev["weights"] / (self.bw * self.e_w), kv_s,
                     dev["activations"] / (self.bw * self.e_float) / (b * (k + 1)),
                     step.per_device_flops / (self.peak * self.mfu))
            self.cache[key] = terms
        return terms

    def _weights_s(self, tokens: int) -> float:
        """The weights a step of `tokens` tokens reads (an MoE step: the experts they
        route to), in seconds."""
        t = _bucket(tokens)
        got = self.weights_cache.get(t)
        if got is None:
            got = self._decode(t, 1)[0]
            self.weights_cache[t] = got
        return got

    def gpu_s(self, decoding: int, context: float, spans=()) -> float:
        """The GPU's seconds of one step (`time` without the host): the target's pass,
        and with speculation the draft's passes."""
        prompt_tokens = sum(take for _, take in spans)
        b = max(decoding, 1)
        weights_s, kv_s, act_s, compute_s = self._decode(_bucket(b), _bucket(context),
                                                         self.k)
        if self.cascade and decoding >= self.schedule.cascade_requests:  # prefix read once
            kv_s = self._decode(_bucket(b), _bucket(context - self.cascade * (1 - 1 / b)),
                                self.k)[1]
        if decoding == 0:
            kv_s, compute_s = 0.0, 0.0
        tokens = decoding * self.width  # each request's k + 1 verified positions
        if prompt_tokens and self.moe:
            weights_s = self._weights_s(tokens + prompt_tokens)
        memory_s = weights_s + kv_s + act_s * (tokens + prompt_tokens)
        compute_s += self.prompt_s(spans, tokens + prompt_tokens)
        # every token of the step crosses the all-reduces, a decode's as a prompt's
        out = (max(memory_s, compute_s) + self.serial_s
               + (tokens + prompt_tokens) * self.comm_s_per_token)
        if self.lora is not None:  # the adapters' shrink and expand kernels
            out += self.lora.step_s(tokens + prompt_tokens, decoding + len(spans),
                                    self.peak * self.mfu, self.bw * self.e_w)
        if self.draft is not None:  # its first pass covers the prompt tokens too
            again = 0.0
            if decoding:  # the draft's pass over the decodes: exact by (batch, bucket)
                key = (decoding, _bucket(context))
                again = self.draft_cache.get(key)
                if again is None:
                    again = self.draft_cache[key] = self.draft.gpu_s(decoding, context)
            out += ((self.draft.gpu_s(decoding, context, spans)
                     if prompt_tokens else again) + (self.k - 1) * again)
        return out

    def time(self, decoding: int, context: float, spans, running: int) -> float:
        """Seconds of one step: `decoding` requests at mean `context`, and the prompt
        chunks `spans` ((start, take): `take` prompt tokens after `start` already
        cached), with `running` requests in the engine (its host work per request)."""
        gpu_s = self.gpu_s(decoding, context, spans)
        if self.eager_s and not self.schedule.graphed(
                decoding, sum(take for _, take in spans)):
            gpu_s = max(gpu_s, self.eager_s)  # the GPU waits on Python's launches
        per_request_s = running * self.terms.running_s
        if self.overlaps:
            return max(gpu_s, self.host_s + per_request_s)
        return max(gpu_s, self.host_s) + per_request_s


def cascade_setup(steps: "StepTimes", load) -> str:
    """Time the decode steps' attention with the shared prefix's K/V read once a step
    where the engine's scheduler does (kvcalc.serving.record.Schedule cascade_prefix and
    cascade_requests: vLLM V1's cascade attention, its wing's schedule) and every request
    shares a prefix that long (shared_prefix). Returns the note (empty: not taken)."""
    shared, rule = shared_prefix(load), steps.schedule
    if not rule.cascade_prefix or shared < rule.cascade_prefix:
        return ""
    steps.cascade = shared
    return (f"vLLM's cascade attention: the {shared:,}-token prefix every request shares "
            f"is read once a decode step of {rule.cascade_requests} requests or more")


def shared_prefix(load) -> int:
    """Tokens of the one prefix every request shares (`load.prefix_shared`: a system
    prompt, vllm bench serve's --random-prefix-len, whose client puts one random prefix
    before every prompt), held once in the KV pool while the engine's prefix caching is
    on: a prompt of the mean length's hit, cut as split_prefix cuts it. A hit's blocks
    are the pool's, not the request's: vLLM's KVCacheManager.allocate_slots (v1/core/
    kv_cache_manager.py, main of 2026, commit 003df296) allocates blocks only for the
    tokens to compute and appends the hit's cached blocks to the request with their
    ref_cnt raised, so requests that share a prefix share its blocks. 0 otherwise: each
    request's hit is its own (a conversation's history), held by it."""
    from kvcalc.serving.prefix import split_prefix

    if not (load.prefix_shared and load.prefix_caching and load.prefix_hit):
        return 0
    return split_prefix(load.input_len, load.prefix_hit, 0.0, max(load.prefix_block, 1))[0]


def prefix_setup(spec, hw, counted, load, given: dict, steps: "StepTimes"):
    """The load as the engine's prefix caching and host tier take it, when any of their
    flags (kvcalc.serving.flags SIDE) or a host hit is given; else the load unchanged.
    Returns (load, seconds a host-tier token takes to fetch, the JSON's extra fields,
    notes). A fetched token's KV (the pool's bytes per token on one rank; every rank
    fetches its own shard over its own link at once) crosses the GPU's host link instead
    of being computed again, at the rate a published pinned host-to-device copy achieves
    on that GPU (presets/hardware host_link_copy_bytes_per_s), else at the link's
    datasheet rate (host_link_bandwidth_bytes_per_s), the note and JSON saying which: the
    engines fetch it (vLLM's offloading connector, SGLang's hierarchical cache,
    TensorRT-LLM's secondary pool), and the note sets the transfer beside the prefill it
    replaces."""
    from dataclasses import replace

    from kvcalc.serving.flags import SIDE
    from kvcalc.serving.offload import host_tier
    from kvcalc.serving.prefix import prefix_cache, split_prefix

    side = {k: v for k, v in given.items() if k in SIDE and v is not None}
    if not side and not load.host_hit:
        note = cascade_setup(steps, load)
        return load, 0.0, {}, [note] if note else []
    prefix = prefix_cache(spec, counted, side)
    tier = host_tier(counted, side, mla=spec.mla is not None)
    load = replace(load, prefix_caching=prefix.on, prefix_block=prefix.block)
    extra = {"prefix_cache": prefix.as_dict()}
    notes = [f"prefix caching {prefix.switch}" + (f": {prefix.note}" if prefix.note else "")]
    cascade = cascade_setup(steps, load)
    if cascade:
        notes.append(cascade)
    if tier is not None:
        extra["host_tier"] = tier.as_dict()
        if tier.refusal:
            raise KvcalcError(f"{counted.engine.title} does not start: {tier.refusal}")
    gpu, host = split_prefix(load.input_len, load.prefix_hit, load.host_hit, prefix.block)
    if prefix.on and gpu:  # the hit's blocks, referenced and so not evictable while used
        blocks = gpu // prefix.block
        extra["prefix_cache"]["pinned"] = {
            "blocks": blocks, "tokens": blocks * prefix.block,
            "bytes_per_device": blocks * prefix.block * counted.bytes_per_token,
            "held": "once, for every request" if load.prefix_shared
            else "by each running request"}
    if prefix.on and load.prefix_hit:
        notes.append(f"a prefix hit of {load.prefix_hit:g} is {gpu:,} of {load.input_len:,} "
                     f"prompt tokens: whole blocks of {prefix.block}, the last token computed"
                     + (", one prefix every request shares, held once in the KV pool"
                        if load.prefix_shared else ""))
    if not load.host_hit:
        return load, 0.0, extra, notes
    if tier is None or not tier.tokens:
        raise ParameterError("{host_hit} is the share fetched from a host KV tier: give the "
                             "engine's ({kv_offloading_size}, {enable_hierarchical_cache}, "
                             "{host_cache_size})", "host_hit", "kv_offloading_size",
                             "enable_hierarchical_cache", "host_cache_size")
    if not prefix.on:
        raise ParameterError("{host_hit} needs " + literal(counted.engine.title)
                             + "'s prefix caching on", "host_hit")
    rate = hw.host_fetch_bytes_per_s
    if not rate:
        raise KvcalcError(f"{hw.name} has no host link bandwidth in its preset "
                          "(host_link_bandwidth_bytes_per_s): a fetch cannot be timed")
    if host > tier.tokens:
        raise KvcalcError(f"a request's {host:,} host-tier tokens are over the "
                          f"{tier.tokens:,} the host tier holds")
    fetch_s = counted.bytes_per_token / rate
    redo_s = steps.prompt_s(((gpu, host),))
    measured = bool(hw.host_link_copy_bytes_per_s)
    basis = ("a published pinned host-to-device copy's rate (presets/hardware "
             "host_link_copy_source)" if measured else
             "its datasheet rate one way: no published copy measurement for this GPU")
    notes.append(f"{host:,} prompt tokens a request fetched from the host tier over "
                 f"{hw.host_link or 'the host link'} at {rate / 1e9:g} GB/s, {basis}: "
                 f"{host * fetch_s * 1e3:.2f} ms, against {redo_s * 1e3:.2f} ms computing them "
                 "again (the engine fetches)")
    extra["host_fetch"] = {"tokens": host, "fetch_ms": host * fetch_s * 1e3,
                           "recompute_ms": redo_s * 1e3, "link_bytes_per_s": rate,
                           "link_rate": "published copy" if measured else "datasheet"}
    return load, fetch_s, extra, notes
