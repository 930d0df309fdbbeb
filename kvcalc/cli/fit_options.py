"""The options of `kvcalc estimate` and `kvcalc fit`, in the order --help lists them:
(parameter, Annotated alias, default) rows that kvcalc.cli.parsing.with_options gives
each command when it is built. The model's flags come from kvcalc.cli.options'
model_options; the engines' own from kvcalc.cli.engine_flags and feature_flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli import engine_flags as ef
from kvcalc.cli import feature_flags as ff
from kvcalc.cli.options import (
    DEFAULT_GPU, SUFFIXES, BandwidthEffOpt, BatchOpt, DataParallelOpt, EncoderLenOpt,
    EngineOpt, ExpertParallelOpt, FitBatchOpt, FitEngineOpt, ForceOpt, FormatOpt, GpuOpt,
    GroupSizeOpt, KvDtypeOpt, MemFractionOpt, MfuOpt, OutputOpt, PromptLenOpt, ReserveOpt,
    ScaleOpt, SeqLenOpt, TpOpt, WeightDtypeOpt,
)

CompareOpt = Annotated[bool, typer.Option(
    "--compare", help="MHA, GQA and MQA of this model side by side.")]
DetailOpt = Annotated[bool, typer.Option(
    "--detail", help="Every breakdown (cache, parameters matrix by matrix, decode bytes "
    "and FLOPs, Shazeer's terms, roofline, fit) instead of the compact table.")]
PpOpt = Annotated[Optional[int], typer.Option(
    "--pp", show_default=False, help="Pipeline-parallel stages (engine count; default 1).")]
FitGpuOpt = Annotated[str, typer.Option("--gpu", help="Hardware preset (or YAML file) to "
                                        "fit on.")]
MaxModelLenOpt = Annotated[Optional[str], typer.Option(
    "--max-model-len", show_default=False, metavar="<tokens>|auto",
    help="Engine: requests up to this many tokens; {SUFFIXES}; auto (or -1, as vLLM "
    "spells it): the longest that fits, as vLLM's own auto-fit finds it (default: "
    "--seq-len, else the model's max context).".replace("{SUFFIXES}", SUFFIXES))]
KvCacheMemoryOpt = Annotated[Optional[str], typer.Option(
    "--kv-cache-memory", "--kv-cache-memory-bytes", show_default=False, metavar="<bytes>",
    help="Engine: KV cache memory per device, skipping the profile as vLLM's "
    "--kv-cache-memory-bytes does: 8GiB (2^30 each), 500MB (10^6 each), 8G = 8GiB "
    "(default: the budget less weights, activations, non-torch memory and CUDA "
    "graphs).")]
BlockSizeOpt = Annotated[Optional[int], typer.Option(
    "--block-size", show_default=False, help="Engine: tokens per KV block "
    "(default 16, raised for hybrid models as vLLM does).")]
FitEnforceEagerOpt = Annotated[bool, typer.Option(
    "--enforce-eager", help="Engine: no CUDA graphs (their memory is not reserved).")]
VllmVersionOpt = Annotated[Optional[str], typer.Option(
    "--vllm-version", show_default=False,
    help="Engine: the vLLM release whose rules to follow (default 0.33).")]
CalibrationOpt = Annotated[Optional[Path], typer.Option(
    "--calibration", show_default=False, metavar="<file>",
    help="Engine: the terms a start-up log taught (`kvcalc check LOG -o FILE`): its "
    "weights, activation peak, non-torch memory and CUDA graphs in place of "
    "kvcalc's models, its release and driver-visible memory by default.")]
TtftOpt = Annotated[Optional[float], typer.Option(
    "--ttft-ms", show_default=False,
    help="Largest batch whose time to first token stays under this (ms).")]
TpotOpt = Annotated[Optional[float], typer.Option(
    "--tpot-ms", show_default=False,
    help="Largest batch whose time per output token stays under this (ms).")]

# Last on both commands, after the architecture's: the cache scale, the floor's memory
# and where the answer goes.
_TAIL = (
    ("kv_scale_bytes", ScaleOpt, 0), ("encoder_seq_len", EncoderLenOpt, None),
    ("memory_fraction", MemFractionOpt, None), ("reserve", ReserveOpt, None),
    ("fmt", FormatOpt, None), ("output", OutputOpt, None), ("force", ForceOpt, False),
)

ESTIMATE = (
    ("seq_len", SeqLenOpt, None), ("batch", BatchOpt, 1), ("kv_dtype", KvDtypeOpt, "bf16"),
    ("weight_dtype", WeightDtypeOpt, None), ("group_size", GroupSizeOpt, None),
    ("tp", TpOpt, 1), ("gpu", GpuOpt, DEFAULT_GPU), ("prompt_len", PromptLenOpt, None),
    ("mfu", MfuOpt, None), ("bandwidth_efficiency", BandwidthEffOpt, None),
    ("engine", EngineOpt, None), ("compare", CompareOpt, False),
    ("detail", DetailOpt, False), ("data_parallel_size", DataParallelOpt, None),
    ("enable_expert_parallel", ExpertParallelOpt, False),
    ("limit_mm_per_prompt", ff.LimitMmPerPromptOpt, None),
    *_TAIL,
)

FIT = (
    ("seq_len", SeqLenOpt, None), ("batch", FitBatchOpt, None),
    ("kv_dtype", KvDtypeOpt, "bf16"), ("weight_dtype", WeightDtypeOpt, None),
    ("group_size", GroupSizeOpt, None), ("tp", TpOpt, 1), ("pp", PpOpt, None),
    ("gpu", FitGpuOpt, DEFAULT_GPU), ("max_model_len", MaxModelLenOpt, None),
    ("kv_cache_memory", KvCacheMemoryOpt, None),
    ("gpu_memory_utilization", ef.GpuMemoryUtilizationOpt, None),
    ("block_size", BlockSizeOpt, None),
    ("max_num_batched_tokens", ef.MaxNumBatchedTokensOpt, None),
    ("max_num_seqs", ef.MaxNumSeqsOpt, None), ("enforce_eager", FitEnforceEagerOpt, False),
    ("vllm_version", VllmVersionOpt, None), ("calibration", CalibrationOpt, None),
    ("ttft_ms", TtftOpt, None), ("tpot_ms", TpotOpt, None),
    ("prompt_len", PromptLenOpt, None), ("mfu", MfuOpt, None),
    ("bandwidth_efficiency", BandwidthEffOpt, None), ("speed_engine", FitEngineOpt, None),
    # SGLang's
    ("mem_fraction_static", ef.MemFractionStaticOpt, None),
    ("context_length", ef.ContextLengthOpt, None),
    ("max_running_requests", ef.MaxRunningRequestsOpt, None),
    ("max_total_tokens", ef.MaxTotalTokensOpt, None), ("page_size", ef.PageSizeOpt, None),
    ("chunked_prefill_size", ef.ChunkedPrefillOpt, None),
    ("cuda_graph_max_bs", ef.CudaGraphMaxBsOpt, None),
    ("disable_cuda_graph", ef.DisableCudaGraphOpt, False), ("dp_size", ef.DpSizeOpt, None),
    ("enable_dp_attention", ef.DpAttentionOpt, False),
    ("mamba_full_memory_ratio", ef.MambaRatioOpt, None),
    ("max_mamba_cache_size", ef.MaxMambaCacheOpt, None),
    ("swa_full_tokens_ratio", ef.SwaRatioOpt, None),
    ("disable_hybrid_swa_memory", ef.DisableHybridSwaOpt, False),
    # TensorRT-LLM's
    ("free_gpu_memory_fraction", ef.FreeFractionOpt, None),
    ("max_batch_size", ef.MaxBatchSizeOpt, None), ("max_num_tokens", ef.MaxNumTokensOpt, None),
    ("max_seq_len", ef.MaxSeqLenOpt, None), ("tokens_per_block", ef.TokensPerBlockOpt, None),
    ("backend", ef.BackendOpt, None),
    ("max_tokens_in_paged_kv_cache", ef.MaxTokensPagedOpt, None),
    # speculative decoding, LoRA, multimodal inputs
    ("speculative_config", ff.SpeculativeConfigOpt, None),
    ("speculative_algorithm", ff.SpecAlgorithmOpt, None),
    ("speculative_draft_model_path", ff.SpecDraftPathOpt, None),
    ("speculative_num_steps", ff.SpecStepsOpt, None),
    ("speculative_eagle_topk", ff.SpecTopkOpt, None),
    ("speculative_num_draft_tokens", ff.SpecDraftTokensOpt, None),
    ("extra_llm_api_options", ff.ExtraLlmApiOptionsOpt, None),
    ("acceptance_rate", ff.AcceptanceRateOpt, None), ("enable_lora", ff.EnableLoraOpt, False),
    ("max_loras", ff.MaxLorasOpt, None), ("max_loras_per_batch", ff.MaxLorasPerBatchOpt, None),
    ("max_lora_rank", ff.MaxLoraRankOpt, None), ("lora_dtype", ff.LoraDtypeOpt, None),
    ("lora_target_modules", ff.LoraTargetModulesOpt, None),
    ("limit_mm_per_prompt", ff.LimitMmPerPromptOpt, None),
    ("mm_encoder_tp_mode", ff.MmEncoderTpModeOpt, None),
    # layout, offloading and prefix caching
    ("max_attention_window", ef.MaxAttentionWindowOpt, None),
    ("data_parallel_size", ef.DataParallelOpt, None),
    ("enable_expert_parallel", ef.ExpertParallelOpt, False),
    ("kv_offloading_size", ef.KvOffloadingSizeOpt, None),
    ("kv_offloading_backend", ef.KvOffloadingBackendOpt, None),
    ("enable_prefix_caching", ef.PrefixCachingOpt, None),
    ("enable_hierarchical_cache", ef.HicacheOpt, False),
    ("hicache_ratio", ef.HicacheRatioOpt, None),
    ("hicache_size", ef.HicacheSizeOpt, None),
    ("hicache_write_policy", ef.HicacheWritePolicyOpt, None),
    ("disable_radix_cache", ef.DisableRadixCacheOpt, False),
    ("host_cache_size", ef.HostCacheSizeOpt, None), ("enable_block_reuse", ef.BlockReuseOpt, None),
    *_TAIL,
)
