"""`kvcalc estimate` and `kvcalc fit`: parse, call kvcalc.estimate, render."""

from __future__ import annotations  # the commands not run never evaluate their options

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli import feature_flags as ff
from kvcalc.cli import speed
from kvcalc.cli.counting import _engine_fit, _estimates, _slo, slo_fields, write
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
    resolve_gpu,
)
from kvcalc.errors import KvcalcError

AUTO = -1  # --max-model-len auto, as vLLM reads it (kvcalc.serving.vllm.verdict.AUTO)


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
        from kvcalc.estimate import approximate_fields, weights_source
        from kvcalc.report.csv_json import flatten
        from kvcalc.report.tables import capacity_table

        fmt = output_format(fmt, output)
        if gpu.strip().lower() == "none":
            raise KvcalcError("fit needs a device: --gpu NAME (see `kvcalc presets`)")
        # --ttft-ms / --tpot-ms are timed as estimate times: vLLM on a GPU unless --engine,
        # --mfu or --bandwidth-efficiency says otherwise.
        named_engine = speed_engine is not None and speed_engine.strip() != "roofline"
        ref = speed.memory_engine(speed_engine)  # whose memory count (None: vLLM's)
        others = {"mem_fraction_static": mem_fraction_static,
                  "context_length": context_length,
                  "max_running_requests": max_running_requests,
                  "max_total_tokens": max_total_tokens, "page_size": page_size,
                  "chunked_prefill_size": chunked_prefill_size,
                  "cuda_graph_max_bs": cuda_graph_max_bs,
                  "disable_cuda_graph": disable_cuda_graph or None, "dp_size": dp_size,
                  "enable_dp_attention": enable_dp_attention or None,
                  "mamba_full_memory_ratio": mamba_full_memory_ratio,
                  "max_mamba_cache_size": max_mamba_cache_size,
                  "swa_full_tokens_ratio": swa_full_tokens_ratio,
                  "disable_hybrid_swa_memory": disable_hybrid_swa_memory or None,
                  "free_gpu_memory_fraction": free_gpu_memory_fraction,
                  "max_batch_size": max_batch_size, "max_num_tokens": max_num_tokens,
                  "max_seq_len": max_seq_len, "tokens_per_block": tokens_per_block,
                  "backend": backend,
                  "max_tokens_in_paged_kv_cache": max_tokens_in_paged_kv_cache,
                  "max_attention_window": None if max_attention_window is None
                  else ef.windows(max_attention_window),
                  **ff.speculative_given(
                      speculative_algorithm=speculative_algorithm,
                      speculative_draft_model_path=speculative_draft_model_path,
                      speculative_num_steps=speculative_num_steps,
                      speculative_eagle_topk=speculative_eagle_topk,
                      speculative_num_draft_tokens=speculative_num_draft_tokens,
                      extra_llm_api_options=extra_llm_api_options)}
        lora = ff.lora_given(enable_lora=enable_lora, max_loras=max_loras,
                             max_loras_per_batch=max_loras_per_batch,
                             max_lora_rank=max_lora_rank, lora_dtype=lora_dtype,
                             lora_target_modules=lora_target_modules)
        others = {k: v for k, v in others.items() if k != "speculative_config"}
        others.update({k: lora[k] for k in ("max_loras_per_batch",)})
        shared_lora = {k: lora[k] for k in ("enable_lora", "max_lora_rank",
                                             "lora_target_modules")}
        vllm_given = {"gpu_memory_utilization": gpu_memory_utilization,
                      "max_model_len": max_model_len, "block_size": block_size,
                      "max_num_batched_tokens": max_num_batched_tokens,
                      "max_num_seqs": max_num_seqs, "kv_cache_memory_bytes": kv_cache_memory,
                      "enforce_eager": enforce_eager or None, "vllm_version": vllm_version,
                      "calibration": calibration, "speculative_config": speculative_config,
                      "max_loras": max_loras, "lora_dtype": lora_dtype,
                      "limit_mm_per_prompt": limit_mm_per_prompt,
                      "mm_encoder_tp_mode": mm_encoder_tp_mode}
        from kvcalc.serving.flags import check_owners

        side = ef.side_flags(
            kv_offloading_size=kv_offloading_size, kv_offloading_backend=kv_offloading_backend,
            enable_prefix_caching=enable_prefix_caching,
            enable_hierarchical_cache=enable_hierarchical_cache, hicache_ratio=hicache_ratio,
            hicache_size=hicache_size, hicache_write_policy=hicache_write_policy,
            disable_radix_cache=disable_radix_cache, host_cache_size=host_cache_size,
            enable_block_reuse=enable_block_reuse)
        others = ef.layout_flags(ref, others, data_parallel_size, enable_expert_parallel)
        check_owners(ref.name if ref else "vllm", {**vllm_given, **others, **shared_lora,
                                                   **side}, ef.flag_of)
        dp, expert_parallel = others.pop("dp"), others.pop("enable_expert_parallel")
        if ref is not None and ref.name != "vllm":
            others.update({k: v for k, v in shared_lora.items() if v is not None})
        if ref is not None and ref.name == "vllm" and ref.named:
            if vllm_version is not None and vllm_version != ref.release:
                raise KvcalcError(f"--engine {speed_engine} and --vllm-version {vllm_version} "
                                  f"name two releases: give one")
            vllm_version = ref.release
        speed_engine = speed.engine_option(speed_engine, mfu, bandwidth_efficiency,
                                           speed.DEFAULT)
        mfu, bandwidth_efficiency = speed.shares(mfu, bandwidth_efficiency)
        if ref is not None and ref.name != "vllm":
            if memory_fraction is not None or reserve is not None:
                raise KvcalcError("--memory-fraction and --reserve shape the plain fit; "
                                  f"{ref.title} counts its own terms")
            if batch is not None:
                raise KvcalcError(f"--batch sizes the plain fit; {ref.title} serves up to "
                                  f"its running-request limit at once")
            _engine_fit(request, ref, {**others, **side}, fmt=fmt, output=output, force=force,
                        seq_len=seq_len, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
                        group_size=group_size, tp=tp, pp=pp, gpu=gpu,
                        kv_scale_bytes=kv_scale_bytes, encoder_seq_len=encoder_seq_len,
                        prompt_len=prompt_len, mfu=mfu,
                        bandwidth_efficiency=bandwidth_efficiency, speed_engine=speed_engine,
                        ttft_ms=ttft_ms, tpot_ms=tpot_ms, acceptance_rate=acceptance_rate)
            return
        engine_flags = {"--max-model-len": max_model_len, "--gpu-memory-utilization":
                        gpu_memory_utilization, "--pp": pp, "--block-size": block_size,
                        "--max-num-batched-tokens": max_num_batched_tokens,
                        "--max-num-seqs": max_num_seqs, "--vllm-version": vllm_version,
                        "--enforce-eager": enforce_eager or None, "--calibration": calibration,
                        "--kv-cache-memory": kv_cache_memory,
                        "--speculative-config": speculative_config,
                        "--enable-lora": enable_lora or None,
                        "--limit-mm-per-prompt": limit_mm_per_prompt,
                        "--mm-encoder-tp-mode": mm_encoder_tp_mode,
                        "--data-parallel-size": dp,
                        "--enable-expert-parallel": expert_parallel}
        engine = {k: v for k, v in engine_flags.items() if v is not None}
        if engine and (memory_fraction is not None or reserve is not None):
            raise KvcalcError("--memory-fraction and --reserve shape the plain fit; with engine "
                              "flags use --gpu-memory-utilization (the engine subtracts "
                              "activations, non-torch memory and CUDA graphs itself)")
        if engine and batch is not None:
            raise KvcalcError("--batch sizes the plain fit; the engine count is per "
                              "--max-model-len request and serves up to --max-num-seqs at "
                              "once: give --max-num-seqs, or drop the engine flags")
        length = _length(max_model_len)
        learnt = hardware = None
        if calibration is not None:
            from dataclasses import replace

            from kvcalc.serving.vllm.calibration import read_calibration

            learnt = read_calibration(calibration)
            if learnt.visible_memory_bytes:
                hardware = replace(resolve_gpu(gpu),
                                   visible_memory_bytes=learnt.visible_memory_bytes)
        serving = _serving(pp=pp, utilization=gpu_memory_utilization, block_size=block_size,
                           batched=max_num_batched_tokens, seqs=max_num_seqs,
                           enforce_eager=enforce_eager, vllm_version=vllm_version,
                           kv_cache_memory=kv_cache_memory, learnt=learnt, dp=dp,
                           expert_parallel=expert_parallel)
        if speculative_config is not None:
            serving["speculative_config"] = speculative_config
        for name, value in (("limit_mm_per_prompt", limit_mm_per_prompt),
                            ("mm_encoder_tp_mode", mm_encoder_tp_mode)):
            if value is not None:
                serving[name] = value
        serving.update({k: v for k, v in {**shared_lora, "max_loras": max_loras,
                                          "lora_dtype": lora_dtype}.items() if v is not None})
        if enable_prefix_caching is not None:  # a hybrid's state cache follows it
            serving["prefix_caching"] = enable_prefix_caching
        if seq_len is None and length is not None and length != AUTO:
            seq_len = length  # the floor beside the engine's count, at the length it asks
        args = dict(seq_len=seq_len, batch=batch or 1, kv_dtype=kv_dtype,
                    weight_dtype=weight_dtype, tp=tp, gpu=gpu, kv_scale_bytes=kv_scale_bytes,
                    encoder_seq_len=encoder_seq_len, memory_fraction=memory_fraction,
                    reserve=reserve, prompt_len=prompt_len, group_size=group_size, mfu=mfu,
                    bandwidth_efficiency=bandwidth_efficiency, engine=speed_engine,
                    hardware=hardware)
        if length is not None and length != AUTO:
            serving["max_model_len"] = length
        est = _estimates(request, **args, serving=serving)[0]
        if length == AUTO:  # vLLM's auto-fit: counted at the model's context first
            from kvcalc.serving.vllm.verdict import auto_max_model_len

            fitted = auto_max_model_len(est.spec, est.hardware, est.verdict.settings,
                                        kv_scale_bytes=est.workload.kv_scale_bytes)
            if fitted:
                if seq_len is None:
                    args["seq_len"] = fitted
                est = _estimates(request, **args, serving={**serving, "max_model_len": fitted})[0]
        if named_engine and ref is None and ttft_ms is None and tpot_ms is None:
            from kvcalc.serving import MEMORY_ENGINES

            raise KvcalcError(f"kvcalc counts the memory of {', '.join(MEMORY_ENGINES)}; "
                              f"--engine {est.latency.engine_name or 'NAME'} only times the "
                              f"batch --ttft-ms and --tpot-ms allow: give one of them")
        if learnt is not None:  # the terms are one GPU's, model's and layout's
            s = est.verdict.settings
            learnt.check_for(est.spec, est.hardware, str(calibration))
            if not learnt.matches(s.tp, s.pp):
                raise KvcalcError(
                    f"--calibration {calibration}: learnt at {learnt.layout_words()}, not "
                    f"tp={s.tp} pp={s.pp}: its terms are per device of the layout its log "
                    f"ran (plan --calibration prices other layouts by kvcalc's models)")
        if learnt is not None:  # the table says whose terms these are
            from dataclasses import replace

            note = (f"measured terms from {calibration} (vLLM {learnt.vllm_version} on "
                    f"{learnt.gpu or 'its GPU'}) in place of kvcalc's models")
            v = est.verdict
            est = replace(est, verdict=replace(v, capacity=replace(
                v.capacity, notes=(*v.capacity.notes, note))))
        v = est.verdict
        cap = v.capacity
        room = cap.max_num_seqs if cap.max_concurrency is None else int(cap.max_concurrency)
        # Requests as the engine takes them: up to max_model_len tokens each, at most as
        # many at once as its blocks and max_num_seqs allow.
        slo = _slo(est, ttft_ms=ttft_ms, tpot_ms=tpot_ms, mfu=mfu,
                   bandwidth_efficiency=bandwidth_efficiency,
                   speed_engine=speed.resolve(speed_engine, est.hardware),
                   seq_len=v.settings.max_model_len,
                   limit=min(v.capacity.max_num_seqs, room))
        verdict = {"fits": v.serves, "floor_fits": est.fit.fits,
                   "kv_needed_bytes": v.kv_needed_bytes, "shortfall_bytes": v.shortfall_bytes,
                   "refusal": v.refusal, "fixes": v.as_dict()["fixes"]}
        if engine:
            from kvcalc.serving.vllm.verdict import fit_fields

            obj = {**fit_fields(est, v.capacity, approximate_fields(est.spec)), **verdict}
        else:
            obj = {"model": est.spec.name, **approximate_fields(est.spec),
                   "gpu": est.hardware.name, "seq_len": est.seq_len,
                   "batch": est.batch, "tp": est.tp, "kv_dtype": est.kv_dtype.name,
                   "weight_dtype": est.weight_label, **est.as_dict()["fit"], **verdict,
                   "leaves_out": PLAIN_FIT_LEAVES_OUT}
            source = weights_source(est)
            if source is not None:  # a model folder or Hub id
                obj["weights_source"] = source
        obj.update(slo_fields(est, slo))
        from kvcalc.serving.vllm.capacity import speculative_draft

        timed, timed_tab = ff.speculative_time_parts(
            est, speculative_draft(est.spec, v.settings), acceptance_rate,
            speed.resolve(speed_engine, est.hardware), mfu, bandwidth_efficiency)
        if timed is not None:
            obj["speculative_time"] = timed
        from kvcalc.report.offload import host_tier_tables
        from kvcalc.serving.offload import vllm_host_tier

        tier = vllm_host_tier(est, side)
        if tier is not None:
            obj["host_tier"] = tier.as_dict()
            obj["fits"] = obj["fits"] and not tier.refusal
        write(fmt, output, force, lambda: obj, lambda: [flatten(obj)],
              lambda: [capacity_table(est, slo, "--max-model-len" if engine else "--seq-len"),
                       *([timed_tab] if timed_tab is not None else []),
                       *host_tier_tables(tier)])
        if not v.serves or (tier is not None and tier.refusal):
            raise typer.Exit(1)  # a valid question answered no (bad input exits 2)


PLAIN_FIT_LEAVES_OUT = (
    "floor_fits (weights + KV only) leaves out the serving engine's activation peak, "
    "non-torch memory (CUDA context, NCCL), CUDA graphs, driver-visible rather than nominal "
    "memory and block rounding; fits is the engine's own count")


def _length(text: str | None) -> int | None:
    """--max-model-len: tokens (vLLM's suffixes), or AUTO for auto / -1."""
    from kvcalc.ground import units
    from kvcalc.serving.vllm.verdict import check_length

    if text is None:
        return None
    t = text.strip()
    value = AUTO if t.lower() == "auto" else units.count(t, "--max-model-len")
    check_length(value)
    return value


def _serving(*, pp, utilization, block_size, batched, seqs, enforce_eager, vllm_version,
             kv_cache_memory, learnt=None, dp=None, expert_parallel=None) -> dict:
    """The engine flags given, as EngineSettings' names (the rest: the engine's defaults),
    with a calibration file's measured terms (`learnt`) in place of kvcalc's models."""
    from kvcalc.cli.options import parse_size
    from kvcalc.serving.vllm import release_settings

    from kvcalc.serving.releases import DEFAULT_RELEASE

    version = vllm_version or (learnt.vllm_version if learnt else DEFAULT_RELEASE["vllm"])
    given = {"gpu_memory_utilization": utilization, "pp": pp, "block_size": block_size,
             "max_num_batched_tokens": batched, "max_num_seqs": seqs,
             "kv_cache_memory_bytes": None if kv_cache_memory is None else
             parse_size(kv_cache_memory, "--kv-cache-memory"), "dp": dp,
             "enable_expert_parallel": expert_parallel}
    if learnt is not None:
        given.update({k: getattr(learnt, k) for k in
                      ("weights_bytes", "activation_peak_bytes", "non_torch_bytes",
                       "cuda_graph_bytes", "sampler")})
    out = {k: v for k, v in given.items() if v is not None}
    return {**out, "enforce_eager": enforce_eager, **release_settings(version),
            "allow_long_max_model_len": _vllm_allows_long_max_model_len()}


def _vllm_allows_long_max_model_len() -> bool:
    """vLLM's switch (vllm/envs.py): "1" or "true", any case."""
    return os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


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
