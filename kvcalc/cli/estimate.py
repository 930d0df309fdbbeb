"""`kvcalc estimate` and `kvcalc fit`: parse, call kvcalc.estimate, render."""

from __future__ import annotations  # the commands not run never evaluate their options

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli import feature_flags as ff
from kvcalc.cli import speed
from kvcalc.cli.counting import _estimates, write
from kvcalc.cli.parsing import command

from kvcalc.cli.options import (
    DEFAULT_GPU,
    EngineOpt,
    FitEngineOpt,
    BatchOpt,
    FitBatchOpt,
    BandwidthEffOpt,
    EncoderLenOpt,
    GroupSizeOpt,
    MfuOpt,
    PromptLenOpt,
    ForceOpt,
    FormatOpt,
    GpuOpt,
    KvDtypeOpt,
    MemFractionOpt,
    ModelRequest,
    OutputOpt,
    ReserveOpt,
    SUFFIXES,
    ScaleOpt,
    SeqLenOpt,
    TpOpt,
    WeightDtypeOpt,
    DataParallelOpt,
    ExpertParallelOpt,
    model_options,
    output_format,
)
from kvcalc.errors import KvcalcError

def vllm_layout(ref, data_parallel_size, enable_expert_parallel) -> dict:
    """--data-parallel-size and --enable-expert-parallel as EngineSettings' dp and
    enable_expert_parallel for vLLM's count (`ref` None or vLLM); refused, in one line,
    for another engine's."""
    from kvcalc.cli import engine_flags as ef
    from kvcalc.serving.flags import check_owners

    given = {"dp": data_parallel_size, "enable_expert_parallel": enable_expert_parallel or None}
    if ref is not None and ref.name != "vllm":
        if ref.name == "sglang" and data_parallel_size is not None:
            raise KvcalcError(f"--data-parallel-size with --engine {ref.name}: estimate counts "
                              f"{ref.title} at its defaults; fit takes its layout (--dp-size)")
        check_owners(ref.name, given, ef.flag_of)
    return {k: v for k, v in given.items() if v is not None}


def _estimate_items(est, detail: bool) -> list:
    """estimate's table: the one-line answer, the compact table (or every breakdown)."""
    from kvcalc.report.tables import estimate_tables, headline, summary_table

    body = estimate_tables(est) if detail else [summary_table(est)]
    return [headline(est), *body, *_notes(est)]


def _compare_items(ests) -> list:
    from kvcalc.report.tables import compare_table

    return [compare_table(ests)]


def _notes(est) -> list[str]:
    from kvcalc.report.tables import estimate_notes

    notes = estimate_notes(est)
    return ["\n".join(f"note: {n}" for n in notes)] if notes else []


def register(app: typer.Typer, only: str | None = None) -> None:
    if only in (None, "fit"):  # fit's engine flags: their annotations name this module's `ef`
        global ef
        from kvcalc.cli import engine_flags as ef

    @command(app, only)
    @model_options
    def estimate(
        request: ModelRequest,
        seq_len: SeqLenOpt = None,
        batch: BatchOpt = 1,
        kv_dtype: KvDtypeOpt = "bf16",
        weight_dtype: WeightDtypeOpt = None,
        group_size: GroupSizeOpt = None,
        tp: TpOpt = 1,
        gpu: GpuOpt = DEFAULT_GPU,
        prompt_len: PromptLenOpt = None,
        mfu: MfuOpt = None,
        bandwidth_efficiency: BandwidthEffOpt = None,
        engine: EngineOpt = None,
        compare: Annotated[bool, typer.Option(
            "--compare", help="MHA, GQA and MQA of this model side by side.")] = False,
        detail: Annotated[bool, typer.Option(
            "--detail", help="Every breakdown (cache, parameters matrix by matrix, decode bytes "
            "and FLOPs, Shazeer's terms, roofline, fit) instead of the compact table.")] = False,
        data_parallel_size: DataParallelOpt = None,
        enable_expert_parallel: ExpertParallelOpt = False,
        limit_mm_per_prompt: ff.LimitMmPerPromptOpt = None,
        kv_scale_bytes: ScaleOpt = 0,
        encoder_seq_len: EncoderLenOpt = None,
        memory_fraction: MemFractionOpt = None,
        reserve: ReserveOpt = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """KV cache, parameters, decode time and what fits, for one model: one line, then a
        compact table (--detail for every breakdown).

        Examples: `kvcalc estimate Qwen/Qwen3-8B` (a Hub id; or the model's folder);
        `kvcalc estimate --preset gpt3`; `kvcalc estimate --preset llama3-70b
        --seq-len 8192 --batch 16 --tp 4 --format json`; `kvcalc estimate --preset
        llama2-7b --compare`; `-o r.md` writes markdown.
        """
        fmt = output_format(fmt, output)
        ref = speed.memory_engine(engine)  # whose memory count (None: vLLM 0.33's)
        speed_engine = speed.engine_option(engine, mfu, bandwidth_efficiency, speed.DEFAULT)
        mfu, bandwidth_efficiency = speed.shares(mfu, bandwidth_efficiency)
        memory = {}
        layout = vllm_layout(ref, data_parallel_size, enable_expert_parallel)
        if limit_mm_per_prompt is not None:
            from kvcalc.cli import engine_flags as ef
            from kvcalc.serving.flags import check_owners

            check_owners(ref.name if ref else "vllm",
                         {"limit_mm_per_prompt": limit_mm_per_prompt}, ef.flag_of)
            layout = {**layout, "limit_mm_per_prompt": limit_mm_per_prompt}
        if ref is not None and ref.name == "vllm":
            from kvcalc.serving.vllm import release_settings

            memory["serving"] = {**release_settings(ref.release), **layout}
        elif ref is not None:
            memory["memory_engine"] = ref
        elif layout:
            memory["serving"] = layout
        ests = _estimates(request, seq_len=seq_len, batch=batch, kv_dtype=kv_dtype,
                          weight_dtype=weight_dtype, tp=tp, gpu=gpu,
                          kv_scale_bytes=kv_scale_bytes, encoder_seq_len=encoder_seq_len,
                          memory_fraction=memory_fraction, reserve=reserve,
                          prompt_len=prompt_len, group_size=group_size, compare=compare,
                          mfu=mfu, bandwidth_efficiency=bandwidth_efficiency,
                          engine=speed_engine, **memory)
        if compare:
            write(fmt, output, force,
                  lambda: {"variants": [e.as_dict() for e in ests],
                           "reductions_vs_mha": [_reductions(ests[0], e) for e in ests[1:]]},
                  lambda: [{**e.as_row(), **_reductions(ests[0], e)} for e in ests],
                  lambda: _compare_items(ests))
            return
        est = ests[0]
        write(fmt, output, force, est.as_dict, lambda: [est.as_row()],
              lambda: _estimate_items(est, detail))

    @command(app, only)
    @model_options
    def fit(
        request: ModelRequest,
        seq_len: SeqLenOpt = None,
        batch: FitBatchOpt = None,
        kv_dtype: KvDtypeOpt = "bf16",
        weight_dtype: WeightDtypeOpt = None,
        group_size: GroupSizeOpt = None,
        tp: TpOpt = 1,
        pp: Annotated[Optional[int], typer.Option(
            "--pp", show_default=False, help="Pipeline-parallel stages (engine count; "
            "default 1).")] = None,
        gpu: Annotated[str, typer.Option("--gpu", help="Hardware preset (or YAML file) to "
                                         "fit on.")] = DEFAULT_GPU,
        max_model_len: Annotated[Optional[str], typer.Option(
            "--max-model-len", show_default=False,
            metavar="<tokens>|auto",
            help="Engine: requests up to this many tokens; {SUFFIXES}; auto (or -1, as vLLM "
            "spells it): the longest that fits, as vLLM's own auto-fit finds it (default: "
            "--seq-len, else the model's max context).".replace("{SUFFIXES}", SUFFIXES))]
        = None,
        kv_cache_memory: Annotated[Optional[str], typer.Option(
            "--kv-cache-memory", "--kv-cache-memory-bytes", show_default=False,
            metavar="<bytes>",
            help="Engine: KV cache memory per device, skipping the profile as vLLM's "
            "--kv-cache-memory-bytes does: 8GiB (2^30 each), 500MB (10^6 each), 8G = 8GiB "
            "(default: the budget less weights, activations, non-torch memory and CUDA "
            "graphs).")] = None,
        gpu_memory_utilization: ef.GpuMemoryUtilizationOpt = None,
        block_size: Annotated[Optional[int], typer.Option(
            "--block-size", show_default=False, help="Engine: tokens per KV block "
            "(default 16, raised for hybrid models as vLLM does).")] = None,
        max_num_batched_tokens: ef.MaxNumBatchedTokensOpt = None,
        max_num_seqs: ef.MaxNumSeqsOpt = None,
        enforce_eager: Annotated[bool, typer.Option(
            "--enforce-eager", help="Engine: no CUDA graphs (their memory is not reserved).")
        ] = False,
        vllm_version: Annotated[Optional[str], typer.Option(
            "--vllm-version", show_default=False,
            help="Engine: the vLLM release whose rules to follow (default 0.33).")] = None,
        calibration: Annotated[Optional[Path], typer.Option(
            "--calibration", show_default=False, metavar="<file>",
            help="Engine: the terms a start-up log taught (`kvcalc check LOG -o FILE`): its "
            "weights, activation peak, non-torch memory and CUDA graphs in place of "
            "kvcalc's models, its release and driver-visible memory by default.")] = None,
        ttft_ms: Annotated[Optional[float], typer.Option(
            "--ttft-ms", show_default=False,
            help="Largest batch whose time to first token stays under this (ms).")] = None,
        tpot_ms: Annotated[Optional[float], typer.Option(
            "--tpot-ms", show_default=False,
            help="Largest batch whose time per output token stays under this (ms).")] = None,
        prompt_len: PromptLenOpt = None,
        mfu: MfuOpt = None,
        bandwidth_efficiency: BandwidthEffOpt = None,
        speed_engine: FitEngineOpt = None,
        mem_fraction_static: ef.MemFractionStaticOpt = None,
        context_length: ef.ContextLengthOpt = None,
        max_running_requests: ef.MaxRunningRequestsOpt = None,
        max_total_tokens: ef.MaxTotalTokensOpt = None,
        page_size: ef.PageSizeOpt = None,
        chunked_prefill_size: ef.ChunkedPrefillOpt = None,
        cuda_graph_max_bs: ef.CudaGraphMaxBsOpt = None,
        disable_cuda_graph: ef.DisableCudaGraphOpt = False,
        dp_size: ef.DpSizeOpt = None,
        enable_dp_attention: ef.DpAttentionOpt = False,
        mamba_full_memory_ratio: ef.MambaRatioOpt = None,
        max_mamba_cache_size: ef.MaxMambaCacheOpt = None,
        swa_full_tokens_ratio: ef.SwaRatioOpt = None,
        disable_hybrid_swa_memory: ef.DisableHybridSwaOpt = False,
        free_gpu_memory_fraction: ef.FreeFractionOpt = None,
        max_batch_size: ef.MaxBatchSizeOpt = None,
        max_num_tokens: ef.MaxNumTokensOpt = None,
        max_seq_len: ef.MaxSeqLenOpt = None,
        tokens_per_block: ef.TokensPerBlockOpt = None,
        backend: ef.BackendOpt = None,
        max_tokens_in_paged_kv_cache: ef.MaxTokensPagedOpt = None,
        speculative_config: ff.SpeculativeConfigOpt = None,
        speculative_algorithm: ff.SpecAlgorithmOpt = None,
        speculative_draft_model_path: ff.SpecDraftPathOpt = None,
        speculative_num_steps: ff.SpecStepsOpt = None,
        speculative_eagle_topk: ff.SpecTopkOpt = None,
        speculative_num_draft_tokens: ff.SpecDraftTokensOpt = None,
        extra_llm_api_options: ff.ExtraLlmApiOptionsOpt = None,
        acceptance_rate: ff.AcceptanceRateOpt = None,
        enable_lora: ff.EnableLoraOpt = False,
        max_loras: ff.MaxLorasOpt = None,
        max_loras_per_batch: ff.MaxLorasPerBatchOpt = None,
        max_lora_rank: ff.MaxLoraRankOpt = None,
        lora_dtype: ff.LoraDtypeOpt = None,
        lora_target_modules: ff.LoraTargetModulesOpt = None,
        limit_mm_per_prompt: ff.LimitMmPerPromptOpt = None,
        mm_encoder_tp_mode: ff.MmEncoderTpModeOpt = None,
        max_attention_window: ef.MaxAttentionWindowOpt = None,
        data_parallel_size: ef.DataParallelOpt = None,
        enable_expert_parallel: ef.ExpertParallelOpt = False,
        kv_offloading_size: ef.KvOffloadingSizeOpt = None,
        kv_offloading_backend: ef.KvOffloadingBackendOpt = None,
        enable_prefix_caching: ef.PrefixCachingOpt = None,
        enable_hierarchical_cache: ef.HicacheOpt = False,
        hicache_ratio: ef.HicacheRatioOpt = None,
        hicache_size: ef.HicacheSizeOpt = None,
        hicache_write_policy: ef.HicacheWritePolicyOpt = None,
        disable_radix_cache: ef.DisableRadixCacheOpt = False,
        host_cache_size: ef.HostCacheSizeOpt = None,
        enable_block_reuse: ef.BlockReuseOpt = None,
        kv_scale_bytes: ScaleOpt = 0,
        encoder_seq_len: EncoderLenOpt = None,
        memory_fraction: MemFractionOpt = None,
        reserve: ReserveOpt = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """Does it fit? vLLM's own start-up count decides, the floor (weights + KV) beside it.

        vLLM's arithmetic (V1 engine): driver-visible memory x --gpu-memory-utilization,
        less weights, the profiling pass's activation peak, non-torch memory and CUDA
        graphs; then KV blocks per layer group, "KV cache tokens" and the maximum
        concurrency at max_model_len (--max-model-len, else --seq-len, with --batch
        requests at once). It fits when the engine starts and holds them all. Where it
        does not: the memory table anyway, the bytes the KV cache lacks, and each single
        change that makes it start (--tp, the length, --gpu-memory-utilization, --kv-dtype
        fp8, --weight-dtype fp8 or int4), each counted again; the exit status is then 1
        (the input was valid; the answer is no), bad input 2. --ttft-ms and --tpot-ms give
        the largest batch meeting both.

        Examples: `kvcalc fit Qwen/Qwen3-8B --gpu l4`; `kvcalc fit --preset llama3.1-8b
        --gpu rtx3090 --max-model-len 20000`;
        `kvcalc fit --config config.json --gpu h100-sxm --tp 4 --max-model-len 32768
        --gpu-memory-utilization 0.95 --format json`.
        """
        _fit_command(dict(locals()))  # every option, by its parameter name


def _fit_command(p: dict) -> None:
    """fit: parse, call kvcalc.fit (vLLM's count, or --engine sglang|tensorrt-llm's),
    write; exit 1 when it does not fit."""
    from kvcalc.answers.fit import fit
    from kvcalc.report.csv_json import flatten

    fmt = output_format(p["fmt"], p["output"])
    ref = speed.memory_engine(p["speed_engine"])  # whose memory count (None: vLLM's)
    others, side, dp, expert_parallel = _engine_flags_given(p, ref)
    parameters = _fit_parameters(p, dp, expert_parallel)
    if ref is not None and ref.name != "vllm":  # that engine's own flags, by name
        from kvcalc.ground import units

        for name in ("context_length", "max_seq_len"):
            if others.get(name) is not None:
                others[name] = units.count(others[name], "--" + name.replace("_", "-"))
        parameters.update({k: v for k, v in {**others, **side}.items()
                           if v is not None and k not in parameters})
    answer = fit(**parameters)
    write(fmt, p["output"], p["force"], answer.as_dict, lambda: [flatten(answer.as_dict())],
          lambda: _fit_tables(answer))
    if not answer.fits:
        raise typer.Exit(1)  # a valid question answered no (bad input exits 2)


def _engine_flags_given(p: dict, ref) -> tuple:
    """The engine flags given, by parameter name, each checked against the engine it
    belongs to (kvcalc.serving.flags): (the memory engine's own, the offload and prefix
    flags, vLLM's dp, its expert parallelism)."""
    from kvcalc.cli import engine_flags as ef
    from kvcalc.serving.flags import check_owners

    names = ("mem_fraction_static", "context_length", "max_running_requests",
             "max_total_tokens", "page_size", "chunked_prefill_size", "cuda_graph_max_bs",
             "disable_cuda_graph", "dp_size", "enable_dp_attention", "mamba_full_memory_ratio",
             "max_mamba_cache_size", "swa_full_tokens_ratio", "disable_hybrid_swa_memory",
             "free_gpu_memory_fraction", "max_batch_size", "max_num_tokens", "max_seq_len",
             "tokens_per_block", "backend", "max_tokens_in_paged_kv_cache")
    others = {k: p[k] or None if isinstance(p[k], bool) else p[k] for k in names}
    window = p["max_attention_window"]
    others["max_attention_window"] = None if window is None else ef.windows(window)
    others.update(ff.speculative_given(**{k: p[k] for k in (
        "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens", "extra_llm_api_options")}))
    others.pop("speculative_config")
    lora = ff.lora_given(**{k: p[k] for k in ("enable_lora", "max_loras", "max_loras_per_batch",
                                             "max_lora_rank", "lora_dtype",
                                             "lora_target_modules")})
    others["max_loras_per_batch"] = lora["max_loras_per_batch"]
    shared_lora = {k: lora[k] for k in ("enable_lora", "max_lora_rank", "lora_target_modules")}
    vllm_given = {k: p[k] for k in ("gpu_memory_utilization", "max_model_len", "block_size",
                                    "max_num_batched_tokens", "max_num_seqs", "vllm_version",
                                    "calibration", "speculative_config", "max_loras",
                                    "lora_dtype", "limit_mm_per_prompt", "mm_encoder_tp_mode")}
    vllm_given.update(kv_cache_memory_bytes=p["kv_cache_memory"],
                      enforce_eager=p["enforce_eager"] or None)
    side = ef.side_flags(**{k: p[k] for k in (
        "kv_offloading_size", "kv_offloading_backend", "enable_prefix_caching",
        "enable_hierarchical_cache", "hicache_ratio", "hicache_size", "hicache_write_policy",
        "disable_radix_cache", "host_cache_size", "enable_block_reuse")})
    others = ef.layout_flags(ref, others, p["data_parallel_size"], p["enable_expert_parallel"])
    check_owners(ref.name if ref else "vllm", {**vllm_given, **others, **shared_lora, **side},
                 ef.flag_of)
    return others, side, others.pop("dp"), others.pop("enable_expert_parallel")


def _fit_parameters(p: dict, dp, expert_parallel) -> dict:
    """kvcalc.fit's parameters from fit's options: sizes and lengths read from their
    text, the model resolved from MODEL, --preset or --config and the architecture flags."""
    from kvcalc.cli.options import parse_size
    from kvcalc.ground import units

    length = p["max_model_len"]
    if length is not None:
        t = length.strip()
        length = "auto" if t.lower() == "auto" else units.count(t, "--max-model-len")
    same = ("seq_len", "batch", "kv_dtype", "weight_dtype", "group_size", "tp", "pp", "gpu",
            "gpu_memory_utilization", "block_size", "max_num_batched_tokens", "max_num_seqs",
            "enforce_eager", "vllm_version", "calibration", "ttft_ms", "tpot_ms", "prompt_len",
            "mfu", "bandwidth_efficiency", "kv_scale_bytes", "encoder_seq_len",
            "memory_fraction", "speculative_config", "acceptance_rate", "enable_lora",
            "max_loras", "max_lora_rank", "lora_dtype", "lora_target_modules",
            "enable_prefix_caching", "kv_offloading_size", "kv_offloading_backend",
            "limit_mm_per_prompt", "mm_encoder_tp_mode")
    memory, reserve = p["kv_cache_memory"], p["reserve"]
    return {**{k: p[k] for k in same}, "model": p["request"].resolve(),
            "max_model_len": length, "engine": p["speed_engine"],
            "kv_cache_memory_bytes": None if memory is None else
            parse_size(memory, "--kv-cache-memory"),
            "reserve_bytes": None if reserve is None else parse_size(reserve),
            "data_parallel_size": dp, "enable_expert_parallel": bool(expert_parallel)}


def _fit_tables(answer) -> list:
    """fit's tables: vLLM's count beside the floor, the speculative time, the host tier."""
    from kvcalc.report.offload import host_tier_tables
    from kvcalc.report.speculative import speculative_table
    from kvcalc.report.tables import capacity_table

    est = answer.estimate
    if answer.count is not None:  # another engine's count
        from kvcalc.report.serving import serving_table

        out = [serving_table(est, answer.count, answer.max_batch_for_slo)]
    else:
        out = [capacity_table(est, answer.max_batch_for_slo,
                              "--max-model-len" if answer.engine_parameters else "--seq-len")]
    if answer.speculative is not None:
        out.append(speculative_table(answer.speculative, answer.speculative_timed_on))
    return [*out, *host_tier_tables(answer.host_tier)]


def _reductions(base, other) -> dict:
    """How many times smaller `other` makes each quantity than `base` (MHA)."""
    out = {
        "kv_bytes_reduction": base.cache.bytes / other.cache.bytes,
        "params_reduction": base.params.total / other.params.total,
        "decode_bytes_reduction": base.decode.bytes / other.decode.bytes,
        "intensity_gain": other.decode.arithmetic_intensity / base.decode.arithmetic_intensity,
    }
    if base.roofline is not None:
        out["roofline_speedup"] = base.roofline.time_s / other.roofline.time_s
    return out
