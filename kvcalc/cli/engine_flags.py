"""SGLang's and TensorRT-LLM's flags as kvcalc's commands take them, spelled as on each
engine's own command line (TensorRT-LLM's underscore spellings too), vLLM's layout flags
(--data-parallel-size, --enable-expert-parallel) that every command counting its memory
takes, and the parameter each one fills (kvcalc.serving.flags says whose each is)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.cli.options import DataParallelOpt, ExpertParallelOpt  # noqa: F401  vLLM's

_E = "SGLang: "
_T = "TensorRT-LLM: "


def layout_flags(ref, given: dict, data_parallel_size, enable_expert_parallel) -> dict:
    """--data-parallel-size and --enable-expert-parallel as the parameters of the engine
    counted (`ref`, None: vLLM): vLLM's dp and enable_expert_parallel, SGLang's dp_size
    for its own alias --data-parallel-size; added to `given` (the engine's other flags)."""
    out = dict(given)
    if ref is not None and ref.name == "sglang" and data_parallel_size is not None:
        if out.get("dp_size") not in (None, data_parallel_size):
            from kvcalc.errors import KvcalcError

            raise KvcalcError(f"--data-parallel-size {data_parallel_size} and --dp-size "
                              f"{out['dp_size']} are one SGLang flag: give one")
        out["dp_size"] = data_parallel_size
        data_parallel_size = None
    out["dp"] = data_parallel_size
    out["enable_expert_parallel"] = enable_expert_parallel or None
    return out


MemFractionStaticOpt = Annotated[Optional[str], typer.Option(
    "--mem-fraction-static", show_default=False,
    help=_E + "share of the memory free at start for weights and the KV pool, in (0, 1] "
    "(default: SGLang's own, from the GPU's memory, tp x pp, chunked prefill and CUDA graphs; "
    "0.835 on one H100 from 0.5.4).")]
ContextLengthOpt = Annotated[Optional[str], typer.Option(
    "--context-length", show_default=False, metavar="<tokens>",
    help=_E + "the longest request (default: the model's context).")]
MaxRunningRequestsOpt = Annotated[Optional[int], typer.Option(
    "--max-running-requests", show_default=False,
    help=_E + "requests run at once (default: from the pool's tokens and the context).")]
MaxTotalTokensOpt = Annotated[Optional[int], typer.Option(
    "--max-total-tokens", show_default=False, help=_E + "cap on the KV pool's tokens.")]
PageSizeOpt = Annotated[Optional[int], typer.Option(
    "--page-size", show_default=False, help=_E + "tokens per KV page (default 1).")]
ChunkedPrefillOpt = Annotated[Optional[int], typer.Option(
    "--chunked-prefill-size", show_default=False,
    help=_E + "tokens per prefill chunk (default: SGLang's for the GPU).")]
CudaGraphMaxBsOpt = Annotated[Optional[int], typer.Option(
    "--cuda-graph-max-bs", show_default=False,
    help=_E + "largest batch captured in a CUDA graph (default: SGLang's for the GPU).")]
DisableCudaGraphOpt = Annotated[bool, typer.Option(
    "--disable-cuda-graph", help=_E + "no CUDA graphs.")]
EnforceEagerOpt = Annotated[bool, typer.Option(
    "--enforce-eager", help="vLLM: no CUDA graphs (every step launches its kernels from "
    "Python; their memory is not reserved).")]
DpSizeOpt = Annotated[Optional[int], typer.Option(
    "--dp-size", show_default=False,
    help=_E + "data-parallel size; with --enable-dp-attention, attention groups within --tp.")]
DpAttentionOpt = Annotated[bool, typer.Option(
    "--enable-dp-attention", help=_E + "attention data-parallel over --dp-size groups of "
    "--tp / --dp-size GPUs (an MLA latent is whole on each: more tokens per GPU).")]
MambaRatioOpt = Annotated[Optional[str], typer.Option(
    "--mamba-full-memory-ratio", show_default=False,
    help=_E + "state memory over KV memory in hybrid models (default 0.9).")]
MaxMambaCacheOpt = Annotated[Optional[int], typer.Option(
    "--max-mamba-cache-size", show_default=False,
    help=_E + "state slots of a hybrid model (default: from --mamba-full-memory-ratio).")]
SwaRatioOpt = Annotated[Optional[str], typer.Option(
    "--swa-full-tokens-ratio", show_default=False,
    help=_E + "sliding-window pool tokens over full-attention pool tokens (default 0.8).")]
DisableHybridSwaOpt = Annotated[bool, typer.Option(
    "--disable-hybrid-swa-memory", help=_E + "size sliding-window layers as full ones.")]

GpuMemoryUtilizationOpt = Annotated[Optional[str], typer.Option(
    "--gpu-memory-utilization", show_default=False,
    help="Engine: share of driver-visible memory vLLM may use, in (0, 1] "
    "(default 0.9).")]
MaxNumBatchedTokensOpt = Annotated[Optional[int], typer.Option(
    "--max-num-batched-tokens", show_default=False,
    metavar="<tokens>",
    help="Engine: tokens per scheduler step, which sizes the profiling pass; "
    "suffixes as --max-model-len (default: the engine's for this GPU).")]
MaxNumSeqsOpt = Annotated[Optional[int], typer.Option(
    "--max-num-seqs", show_default=False,
    help="Engine: concurrent sequences, which size the sampler's profile "
    "(default: the engine's for this GPU).")]
EnableChunkedPrefillOpt = Annotated[bool, typer.Option(
    "--enable-chunked-prefill", "--enable_chunked_prefill",
    help=_T + "split a prompt over steps (default off: a prompt runs whole, in one step "
    "of at most --max-num-tokens).")]

FreeFractionOpt = Annotated[Optional[str], typer.Option(
    "--free-gpu-memory-fraction", "--kv_cache_free_gpu_memory_fraction", show_default=False,
    help=_T + "share of the memory free after the weights, activations and graphs for the KV "
    "cache, in (0, 1) (default 0.9).")]
MaxBatchSizeOpt = Annotated[Optional[int], typer.Option(
    "--max-batch-size", "--max_batch_size", show_default=False,
    help=_T + "requests run at once (default 2048).")]
MaxNumTokensOpt = Annotated[Optional[int], typer.Option(
    "--max-num-tokens", "--max_num_tokens", show_default=False,
    help=_T + "tokens per iteration, which sizes the profiling pass (default 8192).")]
MaxSeqLenOpt = Annotated[Optional[str], typer.Option(
    "--max-seq-len", "--max_seq_len", show_default=False, metavar="<tokens>",
    help=_T + "the longest request (default: the model's context).")]
TokensPerBlockOpt = Annotated[Optional[int], typer.Option(
    "--tokens-per-block", "--tokens_per_block", show_default=False,
    help=_T + "tokens per KV block (default 32).")]
BackendOpt = Annotated[Optional[str], typer.Option(
    "--backend", show_default=False, metavar="pytorch|tensorrt",
    help=_T + "the PyTorch runtime (trtllm-serve, the LLM API) or a built TensorRT engine "
    "(default pytorch).")]
MaxAttentionWindowOpt = Annotated[Optional[str], typer.Option(
    "--max-attention-window", "--max_attention_window", show_default=False,
    metavar="W[,W...]",
    help=_T + "kv_cache_config.max_attention_window (in --extra_llm_api_options): window sizes "
    "in tokens, repeated over the layers; several sizes give a KV pool per window, e.g. "
    "1024,1024,1024,1024,1024,32768 for Gemma 3 (default: max_seq_len for every layer).")]
MaxTokensPagedOpt = Annotated[Optional[int], typer.Option(
    "--max-tokens-in-paged-kv-cache", "--max_tokens_in_paged_kv_cache", show_default=False,
    help=_T + "cap on the KV cache's tokens.")]

# KV offload to CPU memory and prefix caching (kvcalc.serving.offload, .prefix), each in
# its engine's spelling and unit
_V = "vLLM: "
KvOffloadingSizeOpt = Annotated[Optional[str], typer.Option(
    "--kv-offloading-size", show_default=False, metavar="<GiB>",
    help=_V + "CPU memory for offloaded KV blocks, in GiB (2^30 bytes) over ALL tp x pp "
    "ranks (0.11.1+; default: none).")]
KvOffloadingBackendOpt = Annotated[Optional[str], typer.Option(
    "--kv-offloading-backend", show_default=False, metavar="native|lmcache",
    help=_V + "the offloading backend (default native from 0.14; 0.11.1-0.13: none, "
    "which keeps no host tier).")]
PrefixCachingOpt = Annotated[Optional[bool], typer.Option(
    "--enable-prefix-caching/--no-enable-prefix-caching", show_default=False,
    help=_V + "prefix caching (default on in V1).")]
HicacheOpt = Annotated[bool, typer.Option(
    "--enable-hierarchical-cache", help=_E + "a host (CPU) KV pool behind the radix cache.")]
HicacheRatioOpt = Annotated[Optional[str], typer.Option(
    "--hicache-ratio", show_default=False,
    help=_E + "host pool tokens over device pool tokens (default 2.0).")]
HicacheSizeOpt = Annotated[Optional[str], typer.Option(
    "--hicache-size", show_default=False, metavar="<GB>",
    help=_E + "host pool in GB (10^9 bytes) PER RANK, a whole number; overrides "
    "--hicache-ratio (default 0: the ratio).")]
HicacheWritePolicyOpt = Annotated[Optional[str], typer.Option(
    "--hicache-write-policy", show_default=False,
    metavar="write_back|write_through|write_through_selective",
    help=_E + "when the host pool is written (default write_through from 0.5.2).")]
DisableRadixCacheOpt = Annotated[bool, typer.Option(
    "--disable-radix-cache", help=_E + "no prefix caching.")]
HostCacheSizeOpt = Annotated[Optional[str], typer.Option(
    "--host-cache-size", "--host_cache_size", show_default=False, metavar="<bytes>",
    help=_T + "kv_cache_config.host_cache_size: host memory for offloaded KV blocks, in "
    "bytes PER RANK (default: none).")]
BlockReuseOpt = Annotated[Optional[bool], typer.Option(
    "--enable-block-reuse/--no-enable-block-reuse", show_default=False,
    help=_T + "kv_cache_config.enable_block_reuse: prefix caching (default on).")]


def side_flags(*, kv_offloading_size=None, kv_offloading_backend=None,
               enable_prefix_caching=None, enable_hierarchical_cache=False,
               hicache_ratio=None, hicache_size=None, hicache_write_policy=None,
               disable_radix_cache=False, host_cache_size=None,
               enable_block_reuse=None) -> dict:
    """The offload and prefix-caching flags given, by parameter name (None: not given)."""
    return {"kv_offloading_size": kv_offloading_size,
            "kv_offloading_backend": kv_offloading_backend,
            "enable_prefix_caching": enable_prefix_caching,
            "enable_hierarchical_cache": enable_hierarchical_cache or None,
            "hicache_ratio": hicache_ratio, "hicache_size": hicache_size,
            "hicache_write_policy": hicache_write_policy,
            "disable_radix_cache": disable_radix_cache or None,
            "host_cache_size": host_cache_size, "enable_block_reuse": enable_block_reuse}


def windows(text: str) -> tuple[int, ...]:
    """--max-attention-window's list: whole numbers of tokens, comma-separated."""
    from kvcalc.errors import KvcalcError

    parts = [p.strip() for p in text.replace("[", "").replace("]", "").split(",")]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise KvcalcError(f"--max-attention-window takes window sizes in tokens, "
                          f"comma-separated (e.g. 1024,32768), got {text!r}")
    return tuple(int(p) for p in parts)


def flag_of(name: str) -> str:
    """A parameter's flag as kvcalc's commands spell it (kvcalc.cli.flag_of)."""
    from kvcalc.cli import flag_of as cli_flag_of

    return cli_flag_of(name)
