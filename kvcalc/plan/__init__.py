"""Serving layouts for N devices, searched under vLLM's start-up count and latency
targets, and the `vllm serve` line of the best one (`kvcalc plan`).

Pure: no I/O. The search, from the outside in:

* shapes: tensor-parallel x pipeline-parallel ranks of one replica (tp x pp <= N),
  tp as vLLM accepts it: it divides the attention heads
  (`ModelConfig.verify_with_parallel_config`, vllm/config/model.py: "Total number of
  attention heads (...) must be divisible by tensor parallel size") and the K/V heads
  divide it or it divides them (QKVParallelLinear's asserts, vllm/model_executor/
  layers/linear.py); pp up to the layer count;
* per shape: KV dtype (auto, fp8), --max-num-batched-tokens (the engine default and
  2048), --gpu-memory-utilization (0.9, then higher ones only while the cache, not
  --max-num-seqs, is what limits the batch): each counted by
  kvcalc.serving.vllm.capacity.serving_capacity; the ones vLLM would refuse are dropped;
* per counted setting: --max-num-seqs, powers of two up to the batch the cache holds
  (and --concurrency), which is the batch each replica runs; replicas
  (--data-parallel-size; tp x pp x replicas <= N): all the devices take, or with
  --concurrency the fewest that carry it at that batch.

Time: the served-load model, `kvcalc bench`'s (kvcalc.served.bench), for every layout of
one pipeline stage timed with vLLM's fitted terms. A layout's batch B is one replica's
closed loop of B requests of prompt + output tokens (num_prompts 3 x B, no warm-up
request) under the layout's own engine flags (--gpu-memory-utilization, --max-num-seqs
B, --max-num-batched-tokens where the line gives it, --max-model-len, --kv-cache-dtype,
the release): its mean TTFT and mean TPOT are the layout's, tokens/s per user is
1 / mean TPOT, and output tokens/s of all replicas is the run's output throughput x
requests / B (x replicas when every replica runs B). Runs are cached by (layout, batch);
a setting's batches stop at the first that misses --ttft-ms or --tpot-ms (times grow
with the batch), and a higher --gpu-memory-utilization adds only the batches a lower one
could not hold (the same batch is the same run with a larger, unused pool).

bench has no pipeline model, so pp > 1 layouts (and every layout under --engine
roofline, or terms other than vLLM's own) are timed on the single-step model instead
(kvcalc.speed.latency: the decode step at the full length, the batch as pp micro-batches
through every stage; TTFT for the prompts one scheduler step takes), labelled
`timing: single-step`. The two models do not compare, so a front never mixes them:
the pp > 1 layouts are ranked only when no served (pp = 1) layout starts and meets the
targets, and a note says so either way.

Whether a setting starts and how many requests it holds is kvcalc.serving.vllm.verdict's
one rule (`serves`, `largest_batch`; a hybrid model's --max-num-seqs never over its
state pool), and --max-model-len auto its one longest length (`auto_max_model_len`).

A calibration file (`kvcalc check LOG -o FILE`, kvcalc.serving.vllm.calibration) puts the
terms vLLM measured (weights, activation peak, non-torch memory, CUDA graphs, sampler)
in place of kvcalc's models for the layouts of the tp and pp its log ran, and only
those: the terms are per device of that layout. The GPU's driver-visible memory it
read holds for every layout; its release is the default --vllm-version.

With --speculative-config the whole search runs with speculation on and off and the
winner at the targets is kept (kvcalc.plan.speculation).

The count is run per (tp, pp, KV dtype, tokens, utilization) and the served run per
(layout, batch): thousands of layouts (replicas of each) share a few hundred runs.
"""

from __future__ import annotations

from dataclasses import field, replace

from kvcalc.ground.record import record
from kvcalc.serving.vllm.calibration import Calibration
from kvcalc.serving.vllm.settings import GiB, EngineSettings, default_batch_limits
from kvcalc.serving.vllm.capacity import Capacity, serving_capacity
from kvcalc.serving.room import serves
from kvcalc.serving.vllm.verdict import auto_max_model_len, room_of
from kvcalc.errors import KvcalcError, ParameterError, as_flags, literal
from kvcalc.model_source import hub_id
from kvcalc.plan.search import MISSES, REFUSED, SERVED, TIMING, served_ref, timing_notes, walk
from kvcalc.plan.search import batches as _batches, start_length as _length
from kvcalc.plan.refusals import NothingFits, nothing_meets, nothing_starts
from kvcalc.plan.launch import serve_command
from kvcalc.plan.search import Search as _Search
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["Layout", "NothingFits", "Plan", "plan", "serve_command"]

UTILIZATIONS = ("0.9", "0.92", "0.95")  # vLLM's default first, then a little more
KV_DTYPES = ("auto", "fp8")  # --kv-cache-dtype: the model's dtype, or fp8 (e4m3)
SMALL_BATCHED_TOKENS = 2048  # a smaller profiling pass: more cache, smaller prefills
DEFAULT_OUTPUT_LEN = 128  # output tokens per request when not given (vllm bench's)
MAX_FRONT = 12  # rows of the printed front


@record
class Layout:
    """One way to serve the model on the devices, and what it gives."""

    tp: int
    pp: int
    replicas: int  # engines side by side (--data-parallel-size)
    requests: int  # in flight across the replicas: replicas x batch, at most --concurrency
    kv_dtype: str  # --kv-cache-dtype: "auto" or "fp8"
    gpu_memory_utilization: str
    max_num_batched_tokens: int  # the engine's value (its default, or the one given)
    batched_tokens_given: bool  # the line must say --max-num-batched-tokens
    max_num_seqs: int  # = the batch each replica runs
    max_model_len: int
    max_concurrency: float  # vLLM's "Maximum concurrency" for its own command
    kv_cache_tokens: int
    num_gpu_blocks: int
    ttft_s: float  # mean time to first token (timing: served), else single-step's
    tpot_s: float  # mean time per output token (timing: served), else single-step's
    output_tokens_per_s: float  # all replicas together
    timing: str = SERVED  # SERVED (kvcalc bench's run) or SINGLE_STEP (kvcalc.speed.latency)
    calibrated: bool = False  # counted with a calibration file's measured terms
    expert_parallel: bool = False  # --enable-expert-parallel (a MoE model's whole experts)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def tokens_per_s(self) -> float:
        """Output tokens/s of all replicas together."""
        return self.output_tokens_per_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1 / self.tpot_s

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "replicas": self.replicas, "gpus": self.gpus,
                "requests": self.requests,
                "kv_cache_dtype": self.kv_dtype,
                "gpu_memory_utilization": float(self.gpu_memory_utilization),
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs, "max_model_len": self.max_model_len,
                "max_concurrency": self.max_concurrency,
                "kv_cache_tokens": self.kv_cache_tokens, "num_gpu_blocks": self.num_gpu_blocks,
                "timing": self.timing, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tokens_per_s_per_user": self.tokens_per_s_per_user,
                "calibrated": self.calibrated,
                **({"enable_expert_parallel": True} if self.expert_parallel else {})}


@record
class Plan:
    """The searched layouts: the front of tokens/s per GPU against tokens/s per user
    (fastest per user first), the best by tokens/s per GPU, and its `vllm serve` line."""

    model: str
    gpu: str
    gpus: int
    prompt_len: int
    output_len: int
    engine: str  # whose latency terms
    vllm_version: str  # whose start-up count
    searched: int  # layouts looked at
    kept: int  # of them, the ones that start and meet the targets
    weight_dtype: str  # the weights' name, as estimate, fit and sweep give it
    weight_bytes: int  # the language model's weights, as stored (as estimate counts them)
    front: tuple[Layout, ...]
    best: Layout
    command: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    # (tokens/s per user, tokens/s per GPU) of every kept layout, for the plot
    cloud: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    # With a calibration file: what it was and which kept layouts it priced (JSON)
    calibration: dict | None = None
    # With --speculative-config: on or off, and why (kvcalc.plan.speculation; JSON)
    speculation: dict | None = None
    disaggregated: dict | None = None  # --disaggregated: xPyD against this (plan.disagg)
    search: object = field(default=None, repr=False, compare=False)  # its runs, not JSON

    def as_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "gpus": self.gpus,
                "prompt_len": self.prompt_len, "output_len": self.output_len,
                "engine": self.engine, "vllm_version": self.vllm_version,
                "searched": self.searched, "kept": self.kept,
                "weight_dtype": self.weight_dtype, "weight_bytes": self.weight_bytes,
                "layouts": [x.as_dict() for x in self.front],
                "best": {**self.best.as_dict(), "command": self.command},
                "timing": {k: v for k, v in TIMING.items()
                           if any(x.timing == k for x in self.front)},
                "notes": list(self.notes),
                **({"calibration": self.calibration} if self.calibration else {}),
                **({"speculation": self.speculation} if self.speculation else {}),
                **({"disaggregated": self.disaggregated} if self.disaggregated else {})}


def tp_sizes(spec: ModelSpec, gpus: int) -> list[int]:
    """Tensor-parallel sizes vLLM accepts for `spec` on at most `gpus` devices: those
    every attention layer splits its heads over (kvcalc.formulas.cache.valid_tps)."""
    from kvcalc.formulas.cache import valid_tps

    return [tp for tp in valid_tps(spec, gpus) if tp <= gpus]


def pp_sizes(spec: ModelSpec, devices: int) -> list[int]:
    """Pipeline stages to try on `devices` devices: powers of two up to the layer count
    (vLLM takes any; stages that split the layers unevenly only leave devices idle)."""
    return [1 << i for i in range(devices.bit_length()) if (1 << i) <= min(devices, spec.layers)]


def plan(spec: ModelSpec, hw: Hardware, *, gpus: int = 1, max_model_len: int | str | None = None,
         concurrency: int | None = None, prompt_len: int | None = None,
         output_len: int | None = None, ttft_s: float | None = None,
         tpot_s: float | None = None, engine=None, model: str | None = None,
         vllm_version: str | None = None, allow_long_max_model_len: bool = False,
         kv_dtypes: tuple[str, ...] = KV_DTYPES,
         utilizations: tuple[str, ...] = UTILIZATIONS,
         calibration: Calibration | None = None, features: dict | None = None,
         data_parallel_size: int | None = None,
         enable_expert_parallel: bool = False, acceptance_rate: float | None = None,
         speculation_both: bool = True) -> Plan:
    """The layouts of up to `gpus` devices like `hw` that start `spec` under vLLM's count
    and meet the targets, best first by output tokens/s per GPU.

    `max_model_len`: tokens per request the engine accepts; "auto": the longest each
    layout fits (the model's context at most); None: prompt + output when both are
    given, else the model's context. Requests are `prompt_len` + `output_len` tokens
    (defaults: 128 output tokens, the prompt filling max_model_len). `model`: the name
    the `vllm serve` line gives (default: the preset's Hub id, else its name).
    `vllm_version`: whose count (default: the calibration's release, else 0.33).
    `calibration`: measured terms for the layouts of its tp and pp (module docstring);
    a file learnt on another GPU or model is refused. `features`: EngineSettings'
    speculative_config and LoRA fields, counted in every layout (pp 1 only) and written
    into the launch line.
    `data_parallel_size`: every layout's replicas, each counted as vLLM's data-parallel
    ranks are (a MoE model's experts over tp x dp GPUs; None: as many replicas as the
    GPUs take, each counted as one engine); `enable_expert_parallel`: whole experts
    (vLLM's --enable-expert-parallel), in the count and the line.
    With --speculative-config in `features`, every layout is searched with speculation
    on (each drafted token accepted at `acceptance_rate`) and off, and the plan is the one
    that wins at the targets, its `speculation` saying why (kvcalc.plan.speculation;
    `speculation_both` False: the one search with `features` as given).
    Raises NothingFits when no layout starts or none meets the targets.
    """
    if speculation_both and (features or {}).get("speculative_config") is not None:
        args = dict(locals())  # the arguments alone, before any other name is bound
        from kvcalc.plan.speculation import on_and_off
        return on_and_off(plan, args)
    from kvcalc.serving.vllm.state import unpaged_kinds, why_unpaged
    from kvcalc.ground.dtypes import check_size
    from kvcalc.formulas.cache import cache_groups
    from kvcalc.formulas.params import param_counts

    check_size("gpus", gpus, 4096)
    if data_parallel_size is not None:
        check_size("data_parallel_size", data_parallel_size, 4096)
        if data_parallel_size > gpus:
            raise ParameterError(f"{{data_parallel_size}} {data_parallel_size} replicas need "
                                 f"at least as many GPUs; {{gpus}} is {gpus}",
                                 "data_parallel_size", "gpus")
    if calibration is not None:
        calibration.check_for(spec, hw, calibration.source)
        if calibration.visible_memory_bytes:  # the driver's total, the GPU's own
            hw = replace(hw, visible_memory_bytes=calibration.visible_memory_bytes)
    if vllm_version is None:
        from kvcalc.serving.releases import DEFAULT_RELEASE

        vllm_version = (calibration.vllm_version if calibration is not None
                        else DEFAULT_RELEASE["vllm"])
    unpaged = unpaged_kinds(cache_groups(spec))
    if unpaged:  # no engine count to search over (serving_capacity withholds it)
        raise KvcalcError(f"{why_unpaged(cache_groups(spec))}: plan has no layout to count")
    for name, v in (("concurrency", concurrency), ("prompt_len", prompt_len),
                    ("output_len", output_len)):
        if v is not None:
            check_size(name, v, 1 << 40)
    for name, v in (("ttft_ms", ttft_s), ("tpot_ms", tpot_s)):
        if v is not None and not v > 0:
            raise ParameterError("{" + name + "} must be a positive number of milliseconds", name)
    from kvcalc.serving.vllm import release_settings

    if release_settings(vllm_version)["engine"] == "v0":  # V0 took other flags, counted otherwise
        raise ParameterError("plan follows vLLM's V1 engine (0.8 and later); {vllm_version} "
                             + literal(vllm_version) + " is older", "vllm_version")
    auto = max_model_len == "auto"
    length = _length(spec, max_model_len, prompt_len, output_len, allow_long_max_model_len)
    out_len = output_len if output_len is not None else min(DEFAULT_OUTPUT_LEN, length - 1)
    if not 0 < out_len < length and prompt_len is None:
        raise ParameterError(f"{{output_len}} {out_len:,} leaves no prompt in max_model_len "
                             f"{length:,}", "output_len")
    p_len = prompt_len if prompt_len is not None else length - out_len
    if not auto and p_len + out_len > length:
        raise ParameterError(f"{{prompt_len}} + {{output_len}} ({p_len + out_len:,} tokens) is "
                             f"over {{max_model_len}} {length:,}: the engine would refuse such "
                             "requests",
                             "prompt_len", "output_len", "max_model_len")
    from kvcalc.estimate import stored_weights, workload_for

    # The weights as estimate stores them (a folder's or Hub checkpoint's headers, else its
    # config's format): one set of bytes and one name for every command.
    w = workload_for(spec, seq_len=length, batch=1)
    stored = stored_weights(spec, w.quantization, 1)
    base = EngineSettings(max_model_len=length, vllm_version=vllm_version,
                          allow_long_max_model_len=allow_long_max_model_len,
                          weight_quantization=w.quantization, dp=data_parallel_size or 1,
                          enable_expert_parallel=enable_expert_parallel,
                          **(features or {}))
    if features:  # the flags' own errors now, not one per layout searched
        from kvcalc.serving.vllm.capacity import lora_weights, speculative_draft

        draft = speculative_draft(spec, base)
        lora_weights(spec, base)
        if draft is not None:  # its rate now, not one refusal per layout timed
            from kvcalc.serving.speculative_time import acceptance_of

            acceptance_of(draft, acceptance_rate)
    if acceptance_rate is not None and base.speculative_config is None:
        raise ParameterError("{acceptance_rate} times speculative decoding: give "
                             "{speculative_config}", "acceptance_rate", "speculative_config")
    search = _Search(spec=spec, hw=hw, prompt_len=prompt_len, output_len=out_len, ttft_s=ttft_s,
                     tpot_s=tpot_s, engine=engine, base=base, calibration=calibration,
                     ref=served_ref(engine, vllm_version), replicas=data_parallel_size,
                     acceptance_rate=acceptance_rate)
    kv_choices = ("auto",) if spec.attention_free else kv_dtypes

    counted, refused = _counted(search, gpus // (data_parallel_size or 1), concurrency,
                                kv_choices, utilizations,
                                least=(prompt_len or 1) + out_len if auto else None)
    if not counted:
        raise NothingFits(literal(nothing_starts(spec, hw, gpus, length, auto, refused)))
    layouts, searched, kept, untimed = _layouts(search, counted, gpus, concurrency)
    if not layouts:
        raise NothingFits(nothing_meets(search, counted), "ttft_ms", "tpot_ms")

    # The search counted each setting once, at the engine's default --max-num-seqs; the
    # printed ones are counted again as printed (a smaller max_num_seqs profiles less,
    # so they should start with room to spare).
    ranked = sorted(layouts, key=_rank)
    best = next(filter(None, (recounted(search, x) for x in ranked)), None)
    if best is None:  # pragma: no cover - the count is monotone in max_num_seqs
        raise NothingFits("no layout starts when counted again with its own max_num_seqs")
    front = [y for y in (best if _same(x, best) else recounted(search, x)
                         for x in _front(ranked)) if y is not None]
    name = model or hub_id(spec) or spec.name
    notes = []
    if model is None and hub_id(spec) is None:
        notes.append(f"{spec.name} names no Hugging Face id: put the model's id or folder "
                     f"in its place in the vllm serve line")
    if best.replicas > 1:
        notes.append(f"{best.replicas} replicas of {best.tp * best.pp} GPUs each "
                     f"(--data-parallel-size): --max-num-seqs is per replica")
        if data_parallel_size is None and any(getattr(layer.mlp, "experts", 0)
                                              for layer, _ in spec.groups()):
            notes.append("each replica counted as one engine: vLLM spreads a MoE model's "
                         "experts over tp x replicas GPUs, fewer bytes a GPU than counted "
                         "(give --data-parallel-size to count them so)")
    notes += timing_notes(search, best, untimed)
    summary = None
    if calibration is not None:
        summary = calibration.summary([x.calibrated for x in layouts],
                                      [x.calibrated for x in front])
        notes.append(summary["note"])
    return Plan(model=spec.name, gpu=hw.name, gpus=gpus,
                prompt_len=search.prompt(best.max_model_len), output_len=out_len,
                engine=getattr(engine, "name", "") or "datasheet roofline",
                vllm_version=vllm_version, searched=searched, kept=kept,
                weight_dtype=w.weight_label,
                weight_bytes=stored.total if stored is not None else
                w.weight_dtype.nbytes(param_counts(spec).total),
                front=tuple(front), best=best,
                command=serve_command(name, best, features),
                notes=tuple(notes),
                cloud=tuple(sorted({(x.tokens_per_s_per_user, x.tokens_per_s_per_gpu)
                                    for x in layouts})),
                calibration=summary, search=search)


def _counted(search: _Search, gpus: int, concurrency: int | None,
             kv_choices: tuple[str, ...], utilizations: tuple[str, ...],
             least: int | None) -> tuple[list[Capacity], list[tuple]]:
    """The settings vLLM starts, counted (Capacity, whose settings say which), and the
    refused ones as (tp, pp, kv, util, Capacity or None, reason). `least`: with
    --max-model-len auto, the shortest length worth starting."""
    spec, hw = search.spec, search.hw
    counted, refused = [], []
    shapes = [(tp, kv, tokens) for tp in tp_sizes(spec, gpus) for kv in kv_choices
              for tokens in _profiles(hw, search.base.replace(tp=tp))]
    for tp, kv, tokens in shapes:
        for pp in pp_sizes(spec, gpus // tp):
            enough = False  # a replica holds all the batch it may run: more stages only cost
            for util in utilizations:
                try:
                    cap = search.count(tp, pp, kv, util, tokens, search.base.max_model_len)
                    if least is not None and not cap.fits:
                        cap = _longest(search, cap, least)
                except KvcalcError as e:  # a shape vLLM refuses before counting
                    refused.append((tp, pp, kv, util, None, as_flags(e)))
                    break
                held = search.held(cap)
                if held < 1:
                    refused.append((tp, pp, kv, util, cap, cap.refusal))
                    continue
                counted.append(cap)
                if held >= min(cap.max_num_seqs, concurrency or cap.max_num_seqs):
                    enough = True
                    break  # more memory buys no larger batch
            if enough:
                break
    return counted, refused


def _layouts(search: _Search, counted: list[Capacity], gpus: int,
             concurrency: int | None) -> tuple[list[Layout], int, int, int]:
    """The served layouts (module docstring), or where none is kept the single-step ones:
    (the layouts timed and kept, how many were looked at, how many meet the targets,
    and how many were set aside untimed: the pp > 1 ones, beside kept served layouts)."""
    served = [c for c in counted if search.served(c.settings.pp)]
    single = [c for c in counted if not search.served(c.settings.pp)]
    layouts, searched, kept = _timed(search, served, gpus, concurrency)
    if layouts:
        aside = sum(len(_batches(_top(search, c, concurrency))) for c in single)
        return layouts, searched + aside, kept, aside
    more, looked, kept = _timed(search, single, gpus, concurrency)
    return more, searched + looked, kept, 0


def _top(search: _Search, cap: Capacity, concurrency: int | None) -> int:
    """The largest batch a replica of `cap` runs: what it holds, at most --concurrency."""
    held = search.held(cap)
    return held if concurrency is None else min(held, concurrency)


def _timed(search: _Search, counted: list[Capacity], gpus: int,
           concurrency: int | None) -> tuple[list[Layout], int, int]:
    """Every counted setting at each batch (--max-num-seqs) and its replicas, kept when
    it meets the latency targets: (the layouts timed and kept, how many were looked at,
    how many meet the targets, each utilization's counted). A higher utilization of the
    same shape only adds the batches the lower ones do not hold (the same batch is the
    same run, in a larger, unused pool); which batches are timed:
    kvcalc.plan.search.walk."""
    rows: dict[tuple, list[tuple[int, Capacity]]] = {}  # shape -> [(batch, its count)]
    same: dict[tuple, int] = {}  # (shape, batch) -> layouts of it (one per utilization)
    for cap in counted:
        s = cap.settings
        shape = (s.tp, s.pp, s.kv_dtype, s.max_num_batched_tokens, s.max_model_len)
        have = rows.setdefault(shape, [])
        for batch in _batches(_top(search, cap, concurrency)):
            same[shape, batch] = same.get((shape, batch), 0) + 1
            if not have or batch > have[-1][0]:
                have.append((batch, cap))
    timed: dict[tuple, Layout | str] = {}

    def at(shape: tuple, i: int) -> Layout | str:
        if (shape, i) not in timed:
            batch, cap = rows[shape][i]
            timed[shape, i] = _layout(search, cap, batch, gpus, concurrency)
        return timed[shape, i]

    walk(rows, at)
    done = [(k, x) for k, x in timed.items() if isinstance(x, Layout)]
    return ([x for _, x in done], sum(same.values()),
            sum(same[shape, rows[shape][i][0]] for (shape, i), _ in done))


def _layout(search: _Search, cap: Capacity, batch: int, gpus: int,
            concurrency: int | None) -> Layout | str:
    """Setting `cap` at `batch` requests per replica, timed; MISSES when it misses the
    targets, REFUSED when bench's own count refuses its --max-num-seqs."""
    s = cap.settings
    most = search.replicas or gpus // (s.tp * s.pp)
    # All the replicas the devices take (those --data-parallel-size names); with
    # --concurrency, the fewest that carry it at this batch each (more would only run
    # emptier).
    replicas = most if concurrency is None or search.replicas else min(
        most, -(-concurrency // batch))
    requests = replicas * batch if concurrency is None else min(concurrency, replicas * batch)
    # The engine's step at this max_num_seqs (its default shrinks to seqs x length).
    step = default_batch_limits(search.hw, s.replace(max_num_seqs=batch))[0]
    try:
        ttft, tpot, rate, timing = search.times(s, batch, step)
    except KvcalcError:
        return REFUSED
    if not search.meets(ttft, tpot):
        return MISSES
    return Layout(
        tp=s.tp, pp=s.pp, replicas=replicas, requests=requests, kv_dtype=s.kv_dtype,
        gpu_memory_utilization=str(s.gpu_memory_utilization), max_num_batched_tokens=step,
        batched_tokens_given=s.max_num_batched_tokens is not None, max_num_seqs=batch,
        max_model_len=s.max_model_len, max_concurrency=cap.max_concurrency,
        kv_cache_tokens=cap.kv_cache_tokens, num_gpu_blocks=cap.num_gpu_blocks,
        ttft_s=ttft, tpot_s=tpot, output_tokens_per_s=rate * (requests / batch),
        timing=timing, calibrated=search.calibrated(s.tp, s.pp),
        expert_parallel=s.expert_parallel)


def recounted(search: _Search, x: Layout) -> Layout | None:
    """`x` with the figures of the count of its own command; None unless vLLM starts it
    and holds its --max-num-seqs."""
    cap = search.count(x.tp, x.pp, x.kv_dtype, x.gpu_memory_utilization,
                       x.max_num_batched_tokens if x.batched_tokens_given else None,
                       x.max_model_len, seqs=x.max_num_seqs)
    if not serves(room_of(search.spec, cap), x.max_num_seqs):
        return None
    return replace(x, max_num_batched_tokens=cap.max_num_batched_tokens,
                   max_concurrency=cap.max_concurrency, kv_cache_tokens=cap.kv_cache_tokens,
                   num_gpu_blocks=cap.num_gpu_blocks)


def _same(a: Layout, b: Layout) -> bool:
    """The same command (b's figures may be the recount's)."""
    return _command_key(a) == _command_key(b)


def _command_key(x: Layout) -> tuple:
    return (x.tp, x.pp, x.replicas, x.kv_dtype, x.gpu_memory_utilization, x.max_num_seqs,
            x.batched_tokens_given, x.max_model_len)


def _profiles(hw: Hardware, s: EngineSettings) -> tuple[int | None, ...]:
    """--max-num-batched-tokens to try: the engine's default (None), and a smaller
    profiling pass where the default is larger."""
    default = default_batch_limits(hw, s)[0]
    return (None,) + ((SMALL_BATCHED_TOKENS,) if SMALL_BATCHED_TOKENS < default else ())


def _longest(search: _Search, cap: Capacity, least: int) -> Capacity:
    """--max-model-len auto: `cap` (counted at the model's context, refused) counted again
    at the longest length vLLM's auto-fit gives this setting (verdict's
    auto_max_model_len); still refused when it is under `least` tokens."""
    longest = auto_max_model_len(search.spec, search.hw, cap.settings, counted=cap)
    if longest < least or longest >= cap.settings.max_model_len:
        return cap  # refused: nothing long enough starts
    return serving_capacity(search.spec, search.hw, cap.settings.replace(max_model_len=longest))


def _rank(x: Layout):
    """Best first: tokens/s per GPU, then per user, then all together; ties to the
    safer settings (lower utilization, the model's KV dtype, the default profile)."""
    return (-x.tokens_per_s_per_gpu, -x.tokens_per_s_per_user, -x.tokens_per_s,
            float(x.gpu_memory_utilization), x.kv_dtype != "auto", x.batched_tokens_given,
            x.tp * x.pp)


def _front(ranked: list[Layout]) -> list[Layout]:
    """The Pareto front of (tokens/s per GPU, tokens/s per user), fastest per user
    first; at most MAX_FRONT rows, spread evenly, the best always among them."""
    front: list[Layout] = []
    best_user = -1.0
    for x in ranked:  # by tokens/s per GPU, descending
        if x.tokens_per_s_per_user > best_user:
            front.append(x)
            best_user = x.tokens_per_s_per_user
    front.reverse()
    if len(front) > MAX_FRONT:
        step = (len(front) - 1) / (MAX_FRONT - 1)
        front = [front[round(i * step)] for i in range(MAX_FRONT)]
    return front
