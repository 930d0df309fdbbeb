"""Does it fit? One answer for every command: whether vLLM starts with requests of one
length and holds a number of them at once, by its own start-up count
(kvcalc.serving.vllm.capacity); and, where it does not, the single changes that make it, each
counted again.

Facts (quoted, not copied code; vLLM 0.32.0 as installed, `vllm/v1/core/kv_cache_utils.py`):

* the engine refuses to start when one max_model_len request needs more KV bytes than
  are available (`check_enough_kv_cache_memory`), or when max_model_len is over the
  model's context (`_get_and_verify_max_len`) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN;
* once started it holds num_blocks / (blocks one request takes, summed over the KV
  cache groups) requests of max_model_len at once
  (`get_max_concurrency_for_kv_cache_config`), and never more than max_num_seqs;
* `--max-model-len auto` (or -1, `human_readable_int_or_auto` in
  `vllm/utils/argparse_utils.py`): the largest length whose one request fits the
  memory profiled at the model's context, at most that context
  (`_auto_fit_max_model_len`, a binary search as `estimate_max_model_len`);
* a model with state layers (Mamba, gated delta net...) refuses to start when
  max_num_seqs exceeds the blocks of its shared pool, since every decoding sequence
  holds one state block and full CUDA graphs are captured up to max_num_seqs
  (`CompilationConfig`, vllm/config/compilation.py: "max_num_seqs (...) exceeds
  available Mamba cache blocks (...)"). vLLM PR #38270 (merged 2026-03-26) turned
  the earlier silent cap into this error; 0.19.0 (2026-04-03) is the first release
  after it, so kvcalc applies it from 0.19, and never with --enforce-eager (no graphs).

A count becomes a `Room` (kvcalc.serving.room) for requests of one length, to which
every command applies the one rule, `serves`; `auto_max_model_len` is the one longest
length.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.serving.vllm.blocks import blocks_per_request, request_bytes
from kvcalc.serving.room import Room, largest_batch, serves
from kvcalc.serving.vllm.settings import EngineSettings, default_batch_limits
from kvcalc.serving.vllm.capacity import Capacity, cannot_hold_weights, serving_capacity
from kvcalc.ground.dtypes import dtype, weight_dtype
from kvcalc.errors import KvcalcError, ParameterError
from kvcalc.formulas.cache import valid_tps
from kvcalc.formulas.params import param_counts
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["AUTO", "Fix", "Verdict", "auto_max_model_len", "engine_verdict", "fixes",
           "fit_fields", "layout_fields", "memory_fields", "room_of", "rooms", "smallest_tp",
           "utilization"]

AUTO = -1  # --max-model-len auto (or -1), as vLLM spells it
MAX_UTILIZATION_PERCENT = 98  # the highest --gpu-memory-utilization a fix proposes
WEIGHT_FIXES = ("fp8", "int4")  # quantized weight dtypes a fix tries, the gentler first


@record
class Fix:
    """One change that makes the engine start and serve the batch, counted again."""

    setting: str  # tp, max_model_len, gpu_memory_utilization, kv_dtype, weight_dtype
    value: object
    verdict: "Verdict"


@record
class Verdict:
    """The engine's answer for `batch` requests of max_model_len tokens."""

    settings: EngineSettings
    batch: int
    capacity: Capacity
    room: Room
    serves: bool
    refusal: str  # why not ("" when it serves)
    fixes: tuple[Fix, ...] = ()

    @property
    def starts(self) -> bool:
        return self.room.starts and not self.room.seqs_over_pool

    @property
    def kv_needed_bytes(self) -> int:
        """KV bytes the batch's requests take: their blocks, or one request's bytes."""
        r = self.room
        return max(r.request_bytes, self.batch * r.blocks_per_request * r.block_bytes)

    @property
    def shortfall_bytes(self) -> int:
        """Bytes the KV cache lacks for the batch (0 when it serves)."""
        return 0 if self.serves else max(0, self.kv_needed_bytes - self.room.kv_cache_bytes)

    def as_dict(self) -> dict:
        """The verdict as JSON: the count's terms (bytes per device), and the fixes."""
        s, cap = self.settings, self.capacity
        return {
            "serves": self.serves, "starts": self.starts, "batch": self.batch,
            "vllm_version": s.vllm_version, "max_model_len": s.max_model_len,
            "gpu_memory_utilization": utilization(s),
            "kv_cache_tokens": cap.kv_cache_tokens, "num_gpu_blocks": cap.num_gpu_blocks,
            "max_concurrency": cap.max_concurrency, "max_num_seqs": cap.max_num_seqs,
            **memory_fields(cap), "kv_needed_bytes": self.kv_needed_bytes,
            "shortfall_bytes": self.shortfall_bytes, "refusal": self.refusal,
            "fixes": [{"setting": f.setting,
                       "value": (float(f.value) if f.setting == "gpu_memory_utilization"
                                 else f.value),
                       "max_concurrency": f.verdict.capacity.max_concurrency}
                      for f in self.fixes],
            **layout_fields(s, cap),
        }


def utilization(s) -> float:
    """gpu_memory_utilization as a JSON number (exact as a fraction inside the count)."""
    num, den = s.utilization
    return num / den


def memory_fields(cap) -> dict:
    """The count's memory terms as JSON, bytes per device, none negative: where the terms
    before it exceed the budget, the KV cache has 0 and kv_cache_shortfall_bytes says by how
    much they exceed it (0 when the cache has room)."""
    memory = dict(cap.memory)
    short = max(0, -memory.get("kv_cache", 0))
    if "kv_cache" in memory:
        memory["kv_cache"] = max(0, memory["kv_cache"])
    return {"memory": memory, "kv_cache_shortfall_bytes": short}


def layout_fields(s, cap) -> dict:
    """vLLM's data-parallel and expert-parallel flags, the layout (kvcalc.serving.layout)
    and the whole deployment's figures from one pool's count (every replica's pool and
    requests on the layout's GPUs, as ServingCount.deployment gives them); {} for one
    replica without expert parallelism, so that JSON is as it was."""
    if s.dp == 1 and not s.enable_expert_parallel:
        return {}
    n = s.layout.kv_pools
    return {"data_parallel_size": s.dp, "enable_expert_parallel": s.enable_expert_parallel,
            "layout": s.layout.as_dict(),
            "deployment": {
                "gpus": s.layout.gpus, "kv_pools": n,
                "kv_cache_tokens": None if cap.kv_cache_tokens is None
                else n * cap.kv_cache_tokens,
                "max_running_requests": n * cap.max_num_seqs,
                "max_concurrency": None if cap.max_concurrency is None
                else n * cap.max_concurrency}}


def _room(cap: Capacity, length, context: int, name: str) -> Room:
    """The room of a count made at `length`'s batch limits, for requests of `length`: an
    int (engine_verdict) or an array of lengths that share those limits (the sweep's),
    giving a Room of arrays. Only the blocks a request takes depend on the length; at
    the count's own length its own yes stands (V0's token rule, unpaged state kinds)."""
    s, d = cap.settings, cap.deciding
    own = length == s.max_model_len
    scalar = isinstance(length, int)
    if scalar and own:  # the count's own figures (an unpaged kind has no block size)
        starts, need = cap.fits, cap.request_bytes
        per_request = sum(p.blocks_per_request for p in cap.groups)
    else:
        need = request_bytes(cap.groups, cap.block_size, length, cap.in_flight,
                             s.encoder_len, cap.state)
        per_request = sum(blocks_per_request(p.group, p.block_size or cap.block_size, length,
                                             cap.in_flight, s.encoder_len, cap.state)
                          for p in cap.groups)
        starts = (d.kv_cache > 0) & (need <= d.kv_cache)
        if not scalar:
            starts = _num.where(own, cap.fits, starts)
    held = d.weights + d.non_torch + d.kv_cache
    # No profile to refuse it: the load itself runs out of memory.
    oom = s.kv_cache_memory_bytes is not None and held > d.total
    over = (length > context) if context else False
    starts = starts & ~over if not scalar else starts and not over
    if oom:
        starts = starts & False
    if cap.num_gpu_blocks is None:  # a state kind whose paging is not modelled: whether
        per_request = per_request * 0  # it starts is known, how many its blocks hold is not
    refusal = ""
    if scalar and not starts:
        if oom:
            refusal = (f"weights, non-torch memory and kv_cache_memory_bytes take {held:,} B, "
                       f"over the device's {d.total:,} B: out of memory while loading")
        elif over:
            refusal = (f"max_model_len {length:,} is over {name}'s context of {context:,} "
                       f"tokens (the length its config gives); vLLM refuses it, unless the "
                       f"environment sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
        elif own:
            refusal = cap.refusal
        else:
            refusal = ("No available memory for the cache blocks" if d.kv_cache <= 0 else
                       f"one request of {length:,} tokens needs {need:,} B of KV cache; "
                       f"{d.kv_cache:,} B are available")
    over_pool = (cap.num_gpu_blocks is not None and cap.max_num_seqs > cap.num_gpu_blocks
                 and s.rules.state_pool_refusal() and not s.enforce_eager
                 and any(p.group.state_bytes for p in cap.groups))
    return Room(max_model_len=length, starts=starts, num_blocks=cap.num_gpu_blocks or 0,
                blocks_per_request=per_request, max_num_seqs=cap.max_num_seqs,
                request_bytes=need, block_bytes=d.bytes_per_block,
                kv_cache_bytes=d.kv_cache, refusal=refusal, seqs_over_pool=over_pool)


def room_of(spec: ModelSpec, cap: Capacity) -> Room:
    """The room of a count, for requests of its own max_model_len (plan's counts)."""
    s = cap.settings
    context = 0 if s.allow_long_max_model_len else spec.max_context
    return _room(cap, s.max_model_len, context, spec.name)


# The counts made lately: estimate's verdict, its fixes and its smallest tp ask for the
# same settings again (GPT-3: 19 counts, 10 distinct). Keyed by the model and device
# objects themselves (a ModelSpec's equality leaves `extra` out), which the entries keep
# alive; settings by equality.
_RECENT: list[tuple[ModelSpec, Hardware, EngineSettings, int, tuple]] = []
_RECENT_MAX = 32


def _count(spec: ModelSpec, hw: Hardware, s: EngineSettings, kv_scale_bytes: int):
    """(capacity, context): the count even past the model's context (whose refusal the
    room says), so that a refusal still has its memory terms."""
    length = s.max_model_len  # a search's counts differ by it most often: compared first
    for m, h, settings, k, counted in _RECENT:
        if (m is spec and h is hw and k == kv_scale_bytes and settings.max_model_len == length
                and settings == s):
            return counted
    context = 0 if s.allow_long_max_model_len else spec.max_context
    long = replace(s, allow_long_max_model_len=True) if context and s.max_model_len > context \
        else s
    counted = serving_capacity(spec, hw, long, kv_scale_bytes=kv_scale_bytes), context
    _RECENT.append((spec, hw, s, kv_scale_bytes, counted))
    del _RECENT[:-_RECENT_MAX]
    return counted


def engine_verdict(spec: ModelSpec, hw: Hardware, s: EngineSettings, *, batch: int = 1,
                   kv_scale_bytes: int = 0, with_fixes: bool = False) -> Verdict:
    """The engine's answer for `batch` requests of s.max_model_len tokens, with the
    single changes that make it serve when it does not (`with_fixes`)."""
    cap, context = _count(spec, hw, s, kv_scale_bytes)
    room = _room(cap, s.max_model_len, context, spec.name)
    ok = bool(serves(room, batch))
    refusal = room.refusal
    if room.starts and room.seqs_over_pool:
        refusal = (f"max_num_seqs ({room.max_num_seqs:,}) exceeds available Mamba cache "
                   f"blocks ({room.num_blocks:,}): each decoding sequence holds one, so vLLM "
                   f"cannot capture its CUDA graphs; lower max_num_seqs to at most "
                   f"{room.num_blocks:,} or raise gpu_memory_utilization")
    elif room.starts and not ok:
        refusal = (f"{batch:,} requests of {s.max_model_len:,} tokens are over max_num_seqs "
                   f"({room.max_num_seqs:,})" if batch > room.max_num_seqs else
                   f"{batch:,} requests of {s.max_model_len:,} tokens take "
                   f"{batch * room.blocks_per_request:,} blocks; the engine has "
                   f"{room.num_blocks:,} (maximum concurrency {cap.max_concurrency:.2f})")
    v = Verdict(settings=s, batch=batch, capacity=cap, room=room, serves=ok,
                refusal="" if ok else refusal)
    if with_fixes and not ok:
        v = replace(v, fixes=fixes(spec, hw, s, batch=batch, kv_scale_bytes=kv_scale_bytes))
    return v


def rooms(spec: ModelSpec, hw: Hardware, s: EngineSettings, lengths,
          kv_scale_bytes: int = 0, counts: dict | None = None) -> Room:
    """The room at each of `lengths` (distinct ints, ascending: a sweep's), as one Room of
    object arrays of exact ints aligned with them, each element equal to
    engine_verdict's at that length: the whole count once per distinct batch limits (the
    only way the memory terms depend on the length), then the blocks a request takes for
    all of that count's lengths at once. A model with state layers is counted whole at
    every length (its pages and block size follow max_model_len). `counts`: the counts
    made so far (by batch limits, or by length for state models), kept by the caller
    for the next call (a sweep's chunks)."""
    import numpy as np

    counts = {} if counts is None else counts

    def count(length: int, key) -> tuple[Capacity, int]:
        if key not in counts:
            counts[key] = _count(spec, hw, replace(s, max_model_len=length), kv_scale_bytes)
        return counts[key]

    lengths = [int(n) for n in lengths]
    keys = [default_batch_limits(hw, s, max_model_len=n) for n in lengths]
    parts: list[Room] = []
    first = 0
    for i in range(1, len(lengths) + 1):  # runs of one key: the limits change at few lengths
        if i < len(lengths) and keys[i] == keys[first]:
            continue
        run, key, first = lengths[first:i], keys[first], i
        cap, context = count(run[0], key)
        if any(p.group.state_bytes for p in cap.groups) or cap.num_gpu_blocks is None:
            for n in run:
                cap, context = count(n, ("length", n))
                parts.append(_room(cap, n, context, spec.name))
            continue
        # int64 where the longest request's bytes (the largest figure) cannot overflow
        whole = np.int64 if _room(cap, run[-1], context, spec.name).request_bytes < 2**62 \
            else object
        parts.append(_room(cap, np.array(run, dtype=whole), context, spec.name))

    def column(name: str) -> np.ndarray:
        out = np.empty(len(lengths), dtype=object)
        at = 0
        for r in parts:
            n = 1 if isinstance(r.max_model_len, int) else len(r.max_model_len)
            v = getattr(r, name)
            out[at:at + n] = v.tolist() if isinstance(v, np.ndarray) else v
            at += n
        return out

    # A state model's max_num_seqs over its pool stops the engine: folded into `starts`,
    # as serves() reads seqs_over_pool as one bool
    starts = column("starts").astype(bool) & ~column("seqs_over_pool").astype(bool)
    return Room(max_model_len=np.array(lengths, dtype=object),
                starts=starts, num_blocks=column("num_blocks"),
                blocks_per_request=column("blocks_per_request"),
                max_num_seqs=column("max_num_seqs"), request_bytes=column("request_bytes"),
                block_bytes=column("block_bytes"), kv_cache_bytes=column("kv_cache_bytes"),
                refusal="")


def smallest_tp(spec: ModelSpec, hw: Hardware, s: EngineSettings, *, batch: int = 1,
                kv_scale_bytes: int = 0, above: int = 0) -> Verdict | None:
    """The count at the smallest valid tp (above `above`) that serves, or None."""
    for tp in valid_tps(spec):
        if tp <= above or cannot_hold_weights(spec, hw, replace(s, tp=tp)):
            continue  # (the weights alone: no count needed to say it does not start)
        v = engine_verdict(spec, hw, replace(s, tp=tp), batch=batch,
                           kv_scale_bytes=kv_scale_bytes)
        if v.serves:
            return v
    return None


def auto_max_model_len(spec: ModelSpec, hw: Hardware, s: EngineSettings, *,
                       kv_scale_bytes: int = 0, counted: Capacity | None = None) -> int:
    """vLLM's `--max-model-len auto`: the longest length whose one request fits the
    memory counted at the model's context (0: not one token fits). `counted`: that count
    when the caller has made it already (plan), so it is not made twice."""
    top = spec.max_context or s.max_model_len
    cap = counted
    if cap is None or cap.settings.max_model_len != top:
        cap, _ = _count(spec, hw, replace(s, max_model_len=top), kv_scale_bytes)
    if cap.deciding.kv_cache <= 0 or cap.max_model_len_fit is None:
        return 0
    return min(cap.max_model_len_fit, top)


def fixes(spec: ModelSpec, hw: Hardware, s: EngineSettings, *, batch: int = 1,
          kv_scale_bytes: int = 0) -> tuple[Fix, ...]:
    """Each single change that makes the engine serve `batch` requests, counted again:
    the smallest valid tp above s.tp, the largest max_num_seqs a state model's pool
    takes, the longest max_model_len below s.max_model_len,
    the smallest gpu_memory_utilization up to 0.98, an fp8 KV cache, quantized weights."""
    def verdict(**change) -> Verdict:
        return engine_verdict(spec, hw, replace(s, **change), batch=batch,
                              kv_scale_bytes=kv_scale_bytes)

    out: list[Fix] = []
    v = smallest_tp(spec, hw, s, batch=batch, kv_scale_bytes=kv_scale_bytes, above=s.tp)
    if v is not None:
        out.append(Fix("tp", v.settings.tp, v))

    def serves_at(**change) -> bool:
        return verdict(**change).serves

    # Weights over the budget: no length, KV dtype or max_num_seqs makes it start.
    held = not cannot_hold_weights(spec, hw, s)
    room = verdict().room
    if room.starts and room.seqs_over_pool and batch < room.max_num_seqs \
            and serves_at(max_num_seqs=batch):  # fewer graphs, smaller profile: more blocks
        seqs = _num.largest(lambda n: serves_at(max_num_seqs=n), batch, room.max_num_seqs)
        out.append(Fix("max_num_seqs", seqs, verdict(max_num_seqs=seqs)))

    if held and s.max_model_len > 1 and serves_at(max_model_len=1):
        length = _num.largest(lambda n: serves_at(max_model_len=n), 1, s.max_model_len)
        out.append(Fix("max_model_len", length, verdict(max_model_len=length)))

    def util(percent: int) -> str:
        return f"{percent / 100:.2f}"

    num, den = s.utilization
    low = 100 * num // den  # hundredths at or below the current one: not enough
    top = MAX_UTILIZATION_PERCENT
    if (s.kv_cache_memory_bytes is None and low < top
            and not cannot_hold_weights(spec, hw, replace(s, gpu_memory_utilization=util(top)))
            and serves_at(gpu_memory_utilization=util(top))):
        pct = _num.largest(lambda p: not serves_at(gpu_memory_utilization=util(p)), low,
                           top) + 1
        out.append(Fix("gpu_memory_utilization", util(pct),
                       verdict(gpu_memory_utilization=util(pct))))

    kv = s.model_dtype if s.kv_dtype == "auto" else s.kv_dtype
    if held and dtype(kv).bits > 8:
        v = verdict(kv_dtype="fp8")
        if v.serves:
            out.append(Fix("kv_dtype", "fp8", v))

    now = verdict().capacity.deciding
    params = param_counts(spec).total
    for name in WEIGHT_FIXES:  # the first that serves with lighter weights than now
        if (s.pp == 1 and s.kv_cache_memory_bytes is None
                and params * weight_dtype(name).bits > 8 * s.tp * now.budget):
            # Every weight takes at least `bits` and tp splits each at most tp ways: more
            # than the budget on one device, uncounted (GPT-3 on one H100: 87 GB in int4).
            continue
        v = verdict(weight_dtype=name, group_size=None, weight_quantization=None)
        if v.serves and v.capacity.deciding.weights < now.weights:
            out.append(Fix("weight_dtype", name, v))
            break
    return tuple(out)


def check_length(value: int) -> None:
    """--max-model-len: a positive length, or AUTO."""
    if value != AUTO and value <= 0:
        raise ParameterError(f"{{max_model_len}} must be positive, got {value}", "max_model_len")


def fit_fields(est, cap, approximate: dict) -> dict:
    """fit's JSON of vLLM's count (`cap`, kvcalc.serving.vllm.capacity.Capacity) for the
    estimate `est`: the settings it was counted at, its tokens, blocks, concurrency and
    memory terms, the draft's and the LoRA slots' where they were counted
    (`approximate`: the estimate's fields saying what of the model is approximate)."""

    s = cap.settings
    return {
        "model": est.spec.name, **approximate, "gpu": cap.hardware, "tp": s.tp, "pp": s.pp,
        **layout_fields(s, cap),
        "max_model_len": s.max_model_len, "gpu_memory_utilization": utilization(s),
        "block_size": cap.block_size, "max_num_batched_tokens": cap.max_num_batched_tokens,
        "max_num_seqs": cap.max_num_seqs, "kv_dtype": est.kv_dtype.name,
        "weight_quantization": (est.stored.label or None) if est.stored else None,
        "vllm_version": s.vllm_version, "engine": s.engine,
        "kv_cache_tokens": cap.kv_cache_tokens, "num_gpu_blocks": cap.num_gpu_blocks,
        "max_concurrency": cap.max_concurrency, "max_model_len_fit": cap.max_model_len_fit,
        **memory_fields(cap),
        **({"speculative": cap.draft} if cap.draft else {}),
        **({"lora": {"enable_lora": True, "max_loras": s.max_loras or 1,
                     "max_lora_rank": s.max_lora_rank or 16, "lora_bytes": cap.lora_bytes}}
           if s.enable_lora else {}),
        "notes": list(cap.notes),
    }
