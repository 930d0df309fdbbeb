"""SGLang's start-up arithmetic: how many tokens its KV pool gets, and how many requests
it runs at once, as its released source counts them (kvcalc.serving.sglang.rules holds
every release comparison).

Facts (quoted, not copied code; paths inside `sglang/srt/` of the PyPI wheels):

* budget (`model_executor/model_runner.py`, `ModelRunner.init_torch_distributed` and
  `profile_max_num_token`, 0.4.0-0.5.4): `pre` is the memory free right after
  torch.distributed starts (CUDA context and NCCL taken; the minimum over ranks);
  `post` is the memory free after the weights load. The pool gets
  `rest = post - pre x (1 - mem_fraction_static)`; tokens = rest / cell_size, floored to
  the page size, capped by --max-total-tokens; the minimum over pipeline ranks. So
  everything loading consumed is charged against the fraction, and the headroom
  `pre x (1 - mem_fraction_static)` holds activations, CUDA graphs and workspaces.
* cell_size (`profile_max_num_token`): one token in every attention layer of this
  pipeline rank on one attention-TP rank: K/V heads max(1, kv_heads / attention_tp) x
  (head_dim + v_head_dim) x dtype bytes; MLA (DeepSeek, Kimi) its latent
  (kv_lora_rank + qk_rope_head_dim), whole on every rank. DeepSeek sparse attention
  (DeepSeek-V3.2) adds its indexer's fp8 key and scale, and SGLang forces its page, cache
  dtype (and in 0.5.3/0.5.4 DP attention) whatever the flags say: the rules' `dsa_*`.
* requests (`ModelRunner.init_memory_pool`, `Scheduler.__init__`): the request pool
  holds min(max(tokens / context_len x 512, 2048), 4096) requests unless
  --max-running-requests is given; the scheduler runs at most min(tokens // 2, that).
* "GB" in SGLang's logs is GiB (`get_available_gpu_memory`: free / 2^30).
* speculative decoding (`--speculative-algorithm`; kvcalc.serving.speculative for the
  draft): the draft worker loads after the target's pool (a second "Load weight" block),
  out of the headroom; before 0.5.14 it keeps a pool of the target's tokens over its own
  layers (`eagle_worker.py`, `draft_runner_cache_size`), from 0.5.14 its layers are in the
  target's cell (`pool_configurator.py`); the reserve, running requests and the pool's
  headroom change by release (the rules' `speculative_*`).
* LoRA (`--enable-lora`; kvcalc.serving.lora): the adapters' buffers are built after the
  weights and before the pool's profile (`ModelRunner.initialize`), so the pool is
  smaller by them, in no log line of their own.
* after the profile (`_window`, read in 0.4.6.post4, 0.5.1.post3 and 0.5.9): the
  request-to-token table and the segments PyTorch's caching allocator takes for the LoRA
  buffers, the table and the K/V buffers (kvcalc.serving.sglang.segments) also leave
  "Memory pool end"'s free memory, out of the headroom.
"""

from __future__ import annotations

import os

from kvcalc.ground.num import exact_ratio
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.serving.layout import Layout
from kvcalc.serving.record import ServingCount
from kvcalc.serving.sglang.rules import KV_DTYPES, GiB, MiB, parse_release, rules_for
from kvcalc.serving.weights import Weights, stage_layers, stage_weights

__all__ = ["SglangFlags", "check_release", "count"]

# What torch.distributed's start takes from every GPU before `pre` is read: the CUDA
# context (and cuBLAS), then NCCL's communicators and, at tp > 1, the custom all-reduce
# buffers. Calibrated on public start-up logs (tests/data/sglang: "Load weight begin.
# avail mem" against the driver-visible total).
CONTEXT_BYTES = 560 * MiB
COMM_BYTES = 300 * MiB  # at tp > 1, on every rank
MAX_PREFILL_TOKENS = 16384  # `ServerArgs.max_prefill_tokens`, every release read
# --speculative-algorithm's choices (`server_args.py`, 0.5.3 on; NGRAM and STANDALONE
# from 0.5.3, NEXTN an alias of EAGLE)
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")



def check_release(text: str) -> None:
    parse_release(text)


@record
class SglangFlags:
    """The flags that decide SGLang's pool, under SGLang's own names (None: its default).

    `mem_fraction_static` and the ratios are decimal texts or numbers, read exactly.
    `gpu_memory_mib`: the card's total as nvidia-smi reports it (SGLang's defaults read
    it); None: the hardware preset's, else its driver-visible total.
    """

    engine: object  # kvcalc.serving.EngineRef
    weights: Weights
    layout: Layout = Layout()
    context_length: int | None = None
    mem_fraction_static: float | str | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    page_size: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    kv_cache_dtype: str = "auto"
    mamba_ssm_dtype: str = "fp32"
    mamba_full_memory_ratio: float | str = "0.9"
    max_mamba_cache_size: int | None = None
    swa_full_tokens_ratio: float | str = "0.8"
    disable_hybrid_swa_memory: bool = False
    # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: a context_length over the model's own
    allow_long_context: bool = False
    kv_scale_bytes: int = 0
    # Measured in place of the model (`kvcalc check`): the memory free when the weights
    # began loading ("Load weight begin. avail mem"), bytes per GPU
    start_free_bytes: int | None = None
    # Speculative decoding (kvcalc.serving.speculative): --speculative-algorithm, the
    # draft (--speculative-draft-model-path; none: the target's MTP layers) and the
    # round's shape (None: SGLang's own choice, `auto_speculative_params`)
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    # LoRA (kvcalc.serving.lora): --enable-lora, --max-loras-per-batch (8),
    # --max-lora-rank and --lora-target-modules (both needed without --lora-paths)
    enable_lora: bool = False
    max_loras_per_batch: int | None = None
    max_lora_rank: int | None = None
    lora_target_modules: str | None = None

    def __post_init__(self) -> None:
        if self.kv_cache_dtype not in KV_DTYPES:
            raise KvcalcError(f"kv_cache_dtype must be one of {', '.join(KV_DTYPES)} for "
                              f"SGLang, got {self.kv_cache_dtype!r}")
        if self.chunked_prefill_size is not None and not isinstance(
                self.chunked_prefill_size, bool) and isinstance(self.chunked_prefill_size, int) \
                and self.chunked_prefill_size <= 0:
            object.__setattr__(self, "chunked_prefill_size", -1)  # SGLang: chunking off
        if self.speculative_algorithm is not None:
            algorithm = str(self.speculative_algorithm).upper()
            if algorithm not in SPECULATIVE_ALGORITHMS:
                raise KvcalcError(f"speculative_algorithm must be one of "
                                  f"{', '.join(SPECULATIVE_ALGORITHMS)}, got "
                                  f"{self.speculative_algorithm!r}")
            object.__setattr__(self, "speculative_algorithm", algorithm)
        else:
            given = [n for n in ("speculative_draft_model_path", "speculative_num_steps",
                                 "speculative_eagle_topk", "speculative_num_draft_tokens")
                     if getattr(self, n) is not None]
            if given:
                raise KvcalcError(f"{given[0]} needs speculative_algorithm (SGLang's "
                                  f"--speculative-algorithm)")
        for name in ("context_length", "max_running_requests", "max_total_tokens",
                     "page_size", "cuda_graph_max_bs", "max_mamba_cache_size",
                     "speculative_num_steps", "speculative_eagle_topk",
                     "speculative_num_draft_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise KvcalcError(f"{name} must be a positive whole number, got {v!r}")
        for name in ("mem_fraction_static", "mamba_full_memory_ratio", "swa_full_tokens_ratio"):
            v = getattr(self, name)
            if v is None:
                continue
            num, den = _ratio(name, v)
            if not 0 < num <= den and name == "mem_fraction_static":
                raise KvcalcError(f"mem_fraction_static must be in (0, 1], got {v}")
            if not 0 < num and name != "mem_fraction_static":
                raise KvcalcError(f"{name} must be positive, got {v}")


def _ratio(name: str, v) -> tuple[int, int]:
    try:
        return exact_ratio(v)
    except (ValueError, ZeroDivisionError):
        raise KvcalcError(f"{name} must be a number, got {v!r}") from None


def allow_long_context_from_env() -> bool:
    """SGLang's switch (`model_config.py`: get_bool_env_var): "1" or "true", any case."""
    return os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "false").strip().lower() \
        in ("1", "true")


def gpu_memory_mib(hw) -> int:
    """The card's total as SGLang's defaults read it (nvidia-smi memory.total, MiB)."""
    smi = getattr(hw, "smi_memory_bytes", 0) or 0
    if smi:
        return smi // MiB
    return _visible(hw) // MiB


def _visible(hw) -> int:
    v = getattr(hw, "visible_memory_bytes", 0) or 0
    return v if v > 0 else hw.memory_bytes


def count(spec, hw, flags: SglangFlags) -> ServingCount:
    """SGLang's start-up for `spec` on devices like `hw` with `flags`. Pure."""
    from kvcalc.serving.sglang.pools import pools

    rules = rules_for(flags.engine.release)
    layout = flags.layout
    notes: list[str] = []
    context = flags.context_length or spec.max_context
    if not context:
        raise ParameterError(literal(spec.name) + "'s config gives no context length: give "
                             "{context_length}", "context_length")
    if (flags.context_length and spec.max_context and flags.context_length > spec.max_context
            and not flags.allow_long_context):
        raise KvcalcError(
            f"context_length {flags.context_length:,} is over {spec.name}'s context of "
            f"{spec.max_context:,} tokens (the length its config gives); SGLang refuses it "
            f"unless the environment sets SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
    draft, rounds = speculative_draft(spec, flags, rules)
    if draft is not None:
        from dataclasses import replace

        running_default = rules.speculative_running_default(flags.speculative_algorithm)
        if flags.max_running_requests is None and running_default is not None:
            flags = replace(flags, max_running_requests=running_default)
            notes.append(f"SGLang {flags.engine.release} sets --max-running-requests "
                         f"{running_default} for speculative decoding")
    gpu_mib = gpu_memory_mib(hw)
    if not getattr(hw, "smi_memory_bytes", 0):
        notes.append(f"{hw.name}: no nvidia-smi total in the preset; SGLang's defaults read "
                     f"from its driver-visible memory")
    attn_tp = layout.attention_tp
    chunked = flags.chunked_prefill_size or rules.default_chunked_prefill_size(gpu_mib,
                                                                              layout.tp)
    if chunked < 0:  # chunking off: the reserve is sized by max_prefill_tokens (16384)
        chunked = MAX_PREFILL_TOKENS
    graphs = None if flags.disable_cuda_graph else (
        flags.cuda_graph_max_bs or rules.default_cuda_graph_max_bs(gpu_mib, layout.tp))
    multimodal = bool(sum(spec.extra.get("towers", {}).values()))
    mla = spec.mla is not None
    if flags.mem_fraction_static is None:
        share = rules.default_mem_fraction_static(
            gpu_mib=gpu_mib, tp=layout.tp, pp=layout.pp, chunked_prefill_size=chunked,
            cuda_graph_max_bs=graphs, dp=layout.dp, dp_attention=layout.dp_attention,
            multimodal=multimodal, mla=mla,
            vision=spec.extra.get("vision_config"), speculative=flags.speculative_algorithm)
        mfs = _ratio("mem_fraction_static", repr(share))
    else:
        mfs = _ratio("mem_fraction_static", flags.mem_fraction_static)
    model_type = spec.extra.get("hf_model_type", "")
    page = flags.page_size or rules.page_size(hw.name, mla, model_type)
    if type(spec.mla).__name__ == "IndexedLatent" and rules.dsa_served():
        flags, layout, page, mfs = _dsa_settings(rules, flags, layout, page, mfs, hw, notes)

    lora, lora_tensors = _lora_bytes(spec, flags, rules, notes)
    total = _visible(hw)
    pre = total - CONTEXT_BYTES - (COMM_BYTES if layout.tp * layout.pp > 1 else 0)
    if flags.start_free_bytes is not None:
        pre = flags.start_free_bytes
    num, den = mfs
    reserved = -(-pre * (den - num) // den)  # the headroom the fraction leaves
    sizes = stage_layers(spec, layout.pp)
    # Every pipeline rank sizes its own pool; the smallest decides (0.5.8 on: the minimum
    # over PP ranks). Weights differ by stage (embedding first, lm_head last).
    best = None
    for stage in range(layout.pp):
        weights = stage_weights(spec, flags.weights, tp=layout.tp, pp=layout.pp, stage=stage)
        post = pre - weights - lora
        rest = post - reserved
        split = pools(spec, flags, rules, rest=rest, attn_tp=attn_tp, stage=stage,
                      sizes=sizes, context=context, page=page, hw_name=hw.name,
                      running=flags.max_running_requests,
                      draft_layers=draft.layers if draft is not None
                      and rules.draft_in_cell() else 0)
        key = split.tokens if split.tokens is not None else 0
        if best is None or key < best[0]:
            best = (key, stage, weights, split, post, rest)
    _, stage, weights, split, post, rest = best
    notes.extend(split.notes)
    if split.stored_bytes and split.stored_bytes != split.cell_bytes:
        notes.append(f"SGLang {flags.engine.release} budgets {split.cell_bytes:,} B a token "
                     f"but its DSA pool stores {split.stored_bytes:,} B (the fp8 latent's "
                     f"scales and bf16 rope, or the indexer's key): the pool takes "
                     f"{split.stored_bytes / split.cell_bytes:.3f} x its budget")
    tokens = split.tokens
    floor = page if rules.pages_pool() else 1
    if draft is not None and rules.speculative_headroom() and tokens is not None \
            and split.profiled > 0 and draft.method != "ngram":
        # The verify and draft tokens of every request beside the pool, past its budget.
        reqs = (flags.max_running_requests if flags.max_running_requests is not None
                else rules.max_num_reqs(split.profiled, context))
        steps, topk, verify = rounds
        tokens = (split.profiled + reqs * steps * topk + reqs * verify + 100) // floor * floor
        split = _grown(split, tokens)
    if flags.max_total_tokens is not None and tokens is not None:
        tokens = min(tokens, flags.max_total_tokens // floor * floor)
    starts = pre > weights and tokens is not None and tokens > 0 and rest > 0
    refusal = ""
    if weights >= pre:
        refusal = (f"CUDA out of memory while loading the weights: {weights / GiB:.2f} GiB per "
                   f"GPU, {pre / GiB:.2f} GiB free")
    elif tokens is not None and (tokens <= 0 or rest <= 0):
        refusal = ("Not enough memory. Please try to increase --mem-fraction-static "
                   f"(after {weights / GiB:.2f} GiB of weights, {rest / GiB:.2f} GiB are left "
                   f"of mem_fraction_static x the {pre / GiB:.2f} GiB free at start)")

    running = concurrency = None
    if tokens is not None and starts:
        running = _running(rules, flags, layout, tokens, split, context)
        concurrency = tokens / context
    kv_bytes = split.kv_bytes if tokens is not None and tokens > 0 else 0
    if tokens is not None and split.tokens and tokens != split.tokens:
        kv_bytes = kv_bytes * tokens // split.tokens  # capped by --max-total-tokens
    window = ()
    if starts and draft is None and not mla and not flags.kv_scale_bytes and split.layer_bytes:
        window = _window(lora, lora_tensors, _request_pool(rules, flags, tokens, split, context),
                         context, tokens, page, split.layer_bytes, kv_bytes)
    terms = (("total", total), ("avail_mem_at_start", pre), ("weights", weights),
             ("avail_mem_after_weights", post + lora),  # as "Load weight end" logs it
             *((("lora_buffers", lora),) if flags.enable_lora else ()),
             ("headroom", reserved),
             ("kv_cache", kv_bytes), *split.state_terms, *window,
             ("avail_mem_after_pool", post - kv_bytes - split.state_bytes
              - sum(b for _, b in window)))
    if draft is not None:
        terms, starts, refusal = _draft_terms(draft, flags, rules, terms, tokens, starts,
                                              refusal, attn_tp, notes)
    flag_values = (("mem_fraction_static", round(num / den, 4)),  # a share, 0-1
                   ("mem_fraction_static_default", flags.mem_fraction_static is None),
                   ("context_length", context), ("page_size", page),
                   ("chunked_prefill_size", chunked), ("cuda_graph_max_bs", graphs or 0),
                   ("kv_cache_dtype", flags.kv_cache_dtype),
                   ("tp_size", layout.tp), ("pp_size", layout.pp), ("dp_size", layout.dp),
                   ("enable_dp_attention", layout.dp_attention),
                   ("gpu_memory_mib", gpu_mib))
    if layout.pp > 1:
        notes.append(f"pipeline rank {stage} holds the fewest tokens and sizes every rank")
    if draft is not None:
        steps, topk, verify = rounds
        flag_values += (("speculative_algorithm", flags.speculative_algorithm),
                        ("speculative_num_steps", steps), ("speculative_eagle_topk", topk),
                        ("speculative_num_draft_tokens", verify))
    return ServingCount(
        engine=flags.engine, hardware=hw.name, layout=layout, context_len=context,
        page_size=page, bytes_per_token=split.cell_bytes,
        kv_cache_tokens=tokens if starts or tokens is None else max(tokens, 0),
        max_running_requests=running, max_concurrency=concurrency, terms=terms,
        flags=flag_values, starts=starts, refusal=refusal, pools=split.pool_figures,
        notes=tuple(notes))


def _dsa_settings(rules, flags, layout, page, mfs, hw, notes):
    """What SGLang sets for DeepSeek sparse attention after the default fraction is
    fixed (`Rules.dsa_forced_settings`), each change noted."""
    from dataclasses import replace

    forced = rules.dsa_forced_settings(hw.name, flags.kv_cache_dtype)
    said = []
    if forced.get("page_size", page) != page:
        said.append(f"page size {forced['page_size']}")
        page = forced["page_size"]
    kv = forced.get("kv_cache_dtype")
    if kv and kv != flags.kv_cache_dtype:
        said.append(f"KV cache {kv}")
        flags = replace(flags, kv_cache_dtype=kv)
    if forced.get("dp_attention") and not (layout.dp_attention and layout.dp == layout.tp):
        said.append(f"DP attention over {layout.tp} ranks")
        layout = replace(layout, dp=layout.tp, dp_attention=True)
        flags = replace(flags, layout=layout)
    if forced.get("mem_fraction_static") and mfs != _ratio("mem_fraction_static",
                                                           forced["mem_fraction_static"]):
        said.append(f"--mem-fraction-static {forced['mem_fraction_static']}")
        mfs = _ratio("mem_fraction_static", forced["mem_fraction_static"])
    if said:
        notes.append(f"SGLang {flags.engine.release} sets for DeepSeek sparse attention: "
                     f"{', '.join(said)}")
    return flags, layout, page, mfs


def _request_pool(rules, flags, tokens: int, split, context: int) -> int:
    """The request pool's slots (`ReqToTokenPool`'s size): --max-running-requests, else
    int(tokens / context x 512) in 2048..4096, a state model's slots // 3 at most, and the
    release's extra slot."""
    pool = (flags.max_running_requests if flags.max_running_requests is not None
            else rules.max_num_reqs(split.profiled or tokens, context))
    if split.slots is not None:
        pool = min(pool, split.slot_cap)
    return pool + rules.req_pool_extra()


def _running(rules, flags, layout, tokens: int, split, context: int) -> int:
    """The most requests the scheduler runs at once (`TpModelWorker.__init__` up to
    0.5.4, `ModelRunner.initialize` 0.5.8, `resolve_max_num_reqs` 0.5.23): the request
    pool (--max-running-requests, else int(tokens / context x 512) in 2048..4096, a
    state model's slots // 3 at most), and tokens // 2; a given value is per DP-attention
    group."""
    dp = layout.dp if layout.dp_attention else 1
    pool = _request_pool(rules, flags, tokens, split, context)
    if flags.max_running_requests is not None:
        return min(max(1, flags.max_running_requests // dp), tokens // 2, pool)
    return min(tokens // 2, pool)


def speculative_draft(spec, flags: SglangFlags, rules):
    """The draft --speculative-algorithm names (kvcalc.serving.speculative.Draft) and the
    round's (steps, topk, draft tokens): the user's, else SGLang's choice for the model
    (`auto_choose_speculative_params`), draft tokens = steps + 1 with topk 1
    ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1")."""
    if flags.speculative_algorithm is None:
        return None, None
    from kvcalc.serving.sglang.rules import auto_speculative_params
    from kvcalc.serving.speculative import sglang_draft

    if not rules.speculative_counted():
        raise ParameterError("{speculative_algorithm}: kvcalc counts SGLang's draft worker "
                             "from 0.4.6; SGLang " + literal(flags.engine.release) + " sizes "
                             "it by a profile of its own, not read", "speculative_algorithm")
    algorithm = flags.speculative_algorithm
    if algorithm == "NGRAM":
        steps, topk, verify = 0, 0, flags.speculative_num_draft_tokens or 0
    else:
        auto = auto_speculative_params(algorithm, spec.extra.get("hf_model_type", ""))
        given = (flags.speculative_num_steps, flags.speculative_eagle_topk,
                 flags.speculative_num_draft_tokens)
        if given[0] is None and not any(given[1:]):
            steps, topk, verify = auto
        else:
            steps = given[0] if given[0] is not None else auto[0]
            topk = given[1] if given[1] is not None else auto[1]
            verify = given[2] if given[2] is not None else auto[2]
        if topk == 1:
            verify = steps + 1
    if flags.layout.pp > 1:
        raise ParameterError("{speculative_algorithm} with {pp} over 1: SGLang's draft worker "
                             "over pipeline ranks is not counted; give {pp} 1",
                             "speculative_algorithm", "pp")
    draft = sglang_draft(spec, algorithm, flags.speculative_draft_model_path,
                         max(steps, 1))
    return draft, (steps, topk, verify)


def _grown(split, tokens: int):
    """The pool at `tokens` (the speculative headroom past the budget), its bytes
    scaled from the budget's."""
    from dataclasses import replace

    if not split.tokens:
        return split
    per = split.kv_bytes // split.tokens
    return replace(split, tokens=tokens, kv_bytes=tokens * per)


def _draft_terms(draft, flags, rules, terms, tokens, starts, refusal, attn_tp, notes):
    """The draft worker's weights and (before 0.5.14) its own KV pool of the target's
    tokens, loaded after the target's pool, out of the (1 - mem_fraction_static)
    headroom: "Load weight end ... mem usage" and "KV Cache is allocated" of the second
    worker. From 0.5.14 its pool is inside the target's (`Rules.draft_in_cell`)."""
    from kvcalc.ground.dtypes import dtype

    weights = draft.weight_bytes(flags.weights, attn_tp if flags.layout.dp_attention
                                 else flags.layout.tp)
    kv_dt = dtype(KV_DTYPES[flags.kv_cache_dtype] or flags.weights.model_dtype)
    own = 0
    if not rules.draft_in_cell() and tokens:
        per = sum(g.layers * g.token_bytes for g in draft.cache_groups(
            kv_dt, attn_tp, flags.kv_scale_bytes))
        own = max(tokens, 0) * per
    after = dict(terms)["avail_mem_after_pool"] - weights - own
    terms = (*terms, ("draft_weights", weights), ("draft_kv_cache", own),
             ("draft_avail_mem_after_pool", after))
    where = ("in the target's pool" if rules.draft_in_cell()
             else "a pool of the target's tokens of its own")
    notes.append(f"speculative decoding ({flags.speculative_algorithm}, draft "
                 f"{draft.method} of {draft.layers} layer(s)): the draft worker loads "
                 f"{weights / GiB:.2f} GiB after the target's pool, its KV {where}")
    if starts and after < 0:
        starts = False
        refusal = (f"CUDA out of memory in the draft worker: its {weights / GiB:.2f} GiB of "
                   f"weights and {own / GiB:.2f} GiB of KV exceed the "
                   f"{dict(terms)['avail_mem_after_pool'] / GiB:.2f} GiB the target leaves")
    return terms, starts, refusal


def _window(lora: int, lora_tensors: list[int], reqs: int, context: int, tokens: int,
            page: int, layer_bytes: tuple[int, ...], kv_bytes: int):
    """What the free memory SGLang logs loses from "Load weight end" to "Memory pool end"
    beyond the LoRA buffers' and the K/V pool's bytes (read in 0.5.1.post3 and 0.5.9:
    `ModelRunner.initialize` runs `init_lora_manager` then `init_memory_pool`, which builds
    `ReqToTokenPool` and then `MHATokenToKVPool._create_buffers`, every layer's K buffer
    and then every layer's V, each of the pool's tokens plus one page): the request-to-token
    table, max_num_reqs x (context_len + 4) int32 (`extra_max_context_len`, 4 without
    speculative decoding), and the rest of the segments PyTorch's allocator takes for the
    LoRA buffers, that table and those buffers (kvcalc.serving.sglang.segments): the pad
    page and the rounding. The LoRA buffers' own rounding is taken before the pool's
    profile in SGLang; kvcalc leaves it in the pool's budget (within 20 MiB a slot of
    rank 256 over Llama-3.1-8B's linear modules)."""
    from kvcalc.serving.sglang.segments import segments

    table = reqs * (context + 4) * 4
    kv = [(tokens + page) * b // 2 for b in layer_bytes]  # K then V, each half a layer's
    taken = segments([*lora_tensors, table, *kv, *kv])
    return (("req_to_token", table), ("segment_rounding", taken - lora - table - kv_bytes))


def _lora_bytes(spec, flags: SglangFlags, rules, notes: list) -> tuple[int, list[int]]:
    """--enable-lora's buffers on one GPU (kvcalc.serving.lora): `max_loras_per_batch`
    slots (8) of --max-lora-rank over --lora-target-modules in the model dtype, taken
    after the weights and before the pool's profile (`Rules.lora_counted`); and each
    buffer's bytes in the order SGLang allocates them (`LoRAMemoryPool.init_buffers`,
    0.5.1.post3 and 0.5.9: each packed module's A buffer (slots, rank x stacked, input)
    for every layer, module by module, then the B buffers (slots, output, rank) likewise;
    SGLang walks the modules as a Python set, whose order changes from process to process,
    kvcalc in the model's order)."""
    given = [n for n in ("max_loras_per_batch", "max_lora_rank", "lora_target_modules")
             if getattr(flags, n) is not None]
    if not flags.enable_lora:
        if given:
            raise ParameterError("{" + given[0] + "} needs {enable_lora}", given[0],
                                 "enable_lora")
        return 0, []
    from kvcalc.ground.dtypes import dtype
    from kvcalc.serving.lora import LoraSlots, lora_bytes, lora_modules, packed_elements

    if not rules.lora_counted():
        raise ParameterError("{enable_lora}: kvcalc counts SGLang's LoRA buffers from "
                             "0.4.10; SGLang " + literal(flags.engine.release) + " is not read",
                             "enable_lora")
    if flags.max_lora_rank is None or flags.lora_target_modules is None:
        raise ParameterError("{enable_lora}: give {max_lora_rank} and {lora_target_modules} "
                             "(SGLang needs both without --lora-paths; kvcalc reads no "
                             "adapters)", "enable_lora", "max_lora_rank", "lora_target_modules")
    if flags.layout.pp > 1:
        raise ParameterError("{enable_lora} with {pp} over 1: the buffers per pipeline rank "
                             "are not counted; give {pp} 1", "enable_lora", "pp")
    slots = LoraSlots(slots=flags.max_loras_per_batch or 8, rank=flags.max_lora_rank,
                      target_modules=lora_modules(flags.lora_target_modules))
    nbytes, more = lora_bytes(spec, slots, tp=flags.layout.attention_tp,
                              model_dtype=flags.weights.model_dtype)
    notes.append(f"LoRA: {slots.slots} adapter slot(s) of rank {slots.rank}, "
                 f"{nbytes / GiB:.2f} GiB out of the KV pool's budget (no log line)")
    notes.extend(more)
    dt = dtype(flags.weights.model_dtype)
    packed = packed_elements(spec, slots.rank, slots.target_modules, flags.layout.attention_tp)
    order = [dt.nbytes(slots.slots * ab[i]) for i in (0, 1) for _, layers, *ab in packed
             for _ in range(layers)]
    return nbytes, order
