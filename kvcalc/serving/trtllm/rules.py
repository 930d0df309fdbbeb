"""TensorRT-LLM's release rules, one table: every release comparison of its wing is here.

Each rule names the snapshot it was read in and the file and function it follows
(NVIDIA/TensorRT-LLM; /work/notes/trtllm-source.md has the reading, per release). The
upstream tags could not be checked out, so each release is pinned to the nearest
snapshot that was read:

* main@0.12dev (upstream main be9cd719, 0.12.0.dev2024080600), main@0.15dev (c629546c),
  main@0.17dev (be178810): the Python tree (trtllm-build, PluginConfig, BuildConfig);
  the C++ batch manager is binary-only before 0.19 ("The C++ runtime is now open
  sourced", release notes 0.19.0);
* ~0.19: an undated index copy of the PyTorch flow's estimate (`_torch/pyexecutor`,
  `estimate_max_kv_cache_tokens` and `cal_max_tokens`);
* 0.20.0 and 1.1.0rc6: the two sides of merge-conflicted files in the fork
  Ataraksia/TensorRT-LLM @ a451bf93 (`_torch/pyexecutor/_util.py`, `commands/serve.py`);
* 1.2.0rc2: NVIDIA @ b35ac1b6, `_util.py` up to `configure_kv_cache_capacity`;
* 1.3.0rc3: a flattened copy of the Python tree (github nctu6/vllm-tensorrt, version.py
  1.3.0rc3); "l. N" below is a line of that copy;
* the C++ `cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp`, two stored versions
  (single-window `KVCacheManager::calculateMaxNumBlocks`, the first public code; and
  the window-aware `BaseKVCacheManager::calculateFreeMemBytes` /
  `calculateMaxNumBlocks`, 2025 H2).

Where a rule changed between two read snapshots and no release in between was read,
the switch is marked UNVERIFIED and a release in the gap follows the older snapshot's
rule (unless a public log of that release shows otherwise, named at the rule).
"""

from __future__ import annotations

import functools
import math
import struct

from kvcalc.errors import KvcalcError, ParameterError

__all__ = ["GiB", "MiB", "Rules", "float32_ratio", "parse_release", "rules_for"]

MiB = 1 << 20
GiB = 1 << 30
OLDEST = (0, 12, 0)
PYTORCH_FROM = (0, 17, 0)  # release notes 0.17.0: the PyTorch flow, "experimental"


@functools.lru_cache(maxsize=32)
def parse_release(text: str) -> tuple[int, int, int]:
    """'1.0.0' -> (1, 0, 0); '0.21.0rc1' -> (0, 21, 0); '1.1' -> (1, 1, 0)."""
    from kvcalc.serving.releases import version_parts

    v = version_parts(text, "TensorRT-LLM", "MAJOR.MINOR[.PATCH]")
    if v < OLDEST:
        raise KvcalcError(f"kvcalc encodes TensorRT-LLM's rules from 0.12 on; got {text!r}")
    return v  # type: ignore[return-value]


def float32_ratio(num: int, den: int) -> tuple[int, int]:
    """num / den as the C++ `KvCacheConfig` holds it (a float): 0.9 -> 0.8999999761581421
    exactly, which the logs print ("fraction is set 0.8999999761581421")."""
    value = struct.unpack("<f", struct.pack("<f", num / den))[0]
    return value.as_integer_ratio()


class Rules:
    """The rules of one TensorRT-LLM release."""

    def __init__(self, release: tuple[int, int, int]):
        self.release = release

    # -- which runtime exists --------------------------------------------------------
    def check_backend(self, backend: str) -> None:
        """The PyTorch flow arrived in 0.17.0 (release notes 0.17.0, "experimental")."""
        if backend == "pytorch" and self.release < PYTORCH_FROM:
            raise ParameterError("TensorRT-LLM's PyTorch backend arrived in 0.17; before it "
                                 "give {backend} tensorrt (a built engine)", "backend")

    def default_backend(self) -> str:
        """The runtime trtllm-serve and the LLM API run without --backend: the PyTorch
        flow from 1.0 (its release notes: the PyTorch backend became the default), built
        engines before."""
        return "pytorch" if self.release >= (1, 0, 0) else "tensorrt"

    # -- the scheduler (kvcalc.served) -------------------------------------------------
    def overlap_scheduler(self) -> bool:
        """Whether the host prepares step n+1 while the GPU runs step n, by default:
        0.18.2's PyTorch quickstart takes --enable_overlap_scheduler (off unless given);
        1.0's LlmArgs has disable_overlap_scheduler=False. Dated 0.19, the first release
        after the switch (the two docs read, not the releases between them)."""
        return self.release >= (0, 19, 0)

    # -- defaults --------------------------------------------------------------------
    def default_free_gpu_memory_fraction(self) -> tuple[int, int]:
        """0.9: C++ `kDefaultGpuMemFraction` and the Python fallbacks ("if fraction is
        None: 0.9") in every snapshot; `KvCacheConfig.free_gpu_memory_fraction`
        default 0.9 (1.3.0rc3 `llmapi/llm_args.py` l. 1699-1703)."""
        return 9, 10

    def fraction_as_used(self, backend: str, num: int, den: int) -> tuple[int, int]:
        """The fraction as the code multiplies by it. The C++ path (built engines, and
        the PyTorch flow's final pool up to 1.2) reads the float of the C++
        `KvCacheConfig`; the PyTorch estimate of 0.20.0-1.1 reads it through that
        binding too (0.20.0 and 1.1.0rc3 logs print "0.8999999761581421" and
        "0.800000011920929"); 1.3.0rc3 keeps the Python `KvCacheConfig` (a double of
        the decimal, taken exactly here)."""
        if backend == "pytorch" and self.release >= (1, 3, 0):
            return num, den
        return float32_ratio(num, den)

    def default_max_batch_size(self, backend: str) -> int:
        """PyTorch: `TorchLlmArgs.validate_misc` sets 2048 (1.3.0rc3 llm_args.py l. 3122;
        trtllm-serve passes BuildConfig's 2048, serve.py `get_llm_args`). Built engines
        keep trtllm-build's `--max_batch_size`: 256 at main@0.12dev (`commands/build.py`
        l. 77-101), 2048 from 0.14 (release notes 0.14; `BuildConfig` at main@0.15dev,
        main@0.17dev and 1.3.0rc3)."""
        if backend == "tensorrt" and self.release < (0, 14, 0):
            return 256
        return 2048

    def default_max_num_tokens(self, backend: str) -> int:
        """8192: `BaseLlmArgs.max_num_tokens` (1.3.0rc3 llm_args.py l. 2144) and
        trtllm-build's `--max_num_tokens` (main@0.12dev build.py; BuildConfig 0.15+)."""
        return 8192

    def default_tokens_per_block(self, backend: str, flash_mla: bool) -> int:
        """PyTorch: `KvCacheConfig.tokens_per_block` 32 (1.3.0rc3 llm_args.py l. 1760;
        before that field existed, 0.17-0.21, it came from `executor_config` whose
        default was not read: UNVERIFIED, but the 0.20.0 log of NVIDIA/TensorRT-LLM#6294
        and a 1.1.0rc3 log print "Number of tokens per block: 32."). FlashMLA forces 64
        (`py_executor_creator.py` l. 452-457, `model_config.py::enable_flash_mla`
        l. 195-204: an MLA latent of 576 on a compute-capability 9.0 GPU with the TRTLLM
        attention backend). Built engines: trtllm-build's `PluginConfig` default, 64 at
        main@0.12dev, 0.15dev and 0.17dev (`plugin/plugin.py` l. 167 / l. 347), 32 in
        1.3.0rc3 (plugin.py l. 248-251). The switch is UNVERIFIED in the source between
        0.17dev and 1.3; two logs place it by 0.18: the LLaVA guide of
        triton-inference-server/tensorrtllm_backend (a 0.18 dev engine, built without
        --tokens_per_block) holds 315,488 tokens, not a multiple of 64, and the 0.19.0
        engine of NVIDIA/TensorRT-LLM#4275 prints 32. So 64 before 0.18, 32 from it."""
        if backend == "pytorch":
            return 64 if flash_mla else 32
        return 64 if self.release < (0, 18, 0) else 32

    def default_cuda_graph_batch_sizes(self, max_batch_size: int) -> tuple[int, ...]:
        """CUDA graphs the PyTorch flow captures before its profiling peak, by default:
        `TorchLlmArgs.cuda_graph_config` is on by default with max_batch_size 128 and no
        padding (1.3.0rc3 llm_args.py l. 2864, `validate_cuda_graph_config` l. 3255),
        i.e. `CudaGraphConfig._generate_cuda_graph_batch_sizes` (l. 135-164): 1-31, 32,
        64, 128. Before 1.0 the PyTorch config's `use_cuda_graph` was off by default;
        when the default turned on is UNVERIFIED (taken at 1.0)."""
        return self.cuda_graph_batch_sizes(max_batch_size, None)

    def cuda_graph_batch_sizes(self, max_batch_size: int, config: dict | None) -> tuple[int, ...]:
        """The batch sizes a `cuda_graph_config` (the LLM API options' mapping; None: the
        release's default, none before 1.0) captures, none over the engine's
        `max_batch_size`: its `batch_sizes`, else
        `CudaGraphConfig._generate_cuda_graph_batch_sizes` (1.3.0rc3 l. 135-164, the same
        in the 1.x copies read) at its max_batch_size (default 128): with enable_padding
        1, 2, 4 and 8 to 128 by 8, else 1-31, 32, 64 and 128; then the powers of two
        from 256 below it, and the maximum itself."""
        if config is None and self.release < (1, 0, 0):
            return ()
        config = config or {}
        sizes = config.get("batch_sizes")
        if not sizes:
            top = int(config.get("max_batch_size") or 128)
            sizes = ([1, 2, 4, *range(8, 129, 8)] if config.get("enable_padding")
                     else [*range(1, 32), 32, 64, 128])
            sizes += [2 ** i for i in range(8, math.ceil(math.log2(top)))] if top > 256 else []
            sizes = sorted(b for b in sizes if b <= top)
            if sizes[-1] != top:
                sizes.append(top)
        return tuple(sorted(int(b) for b in sizes if int(b) <= max_batch_size))

    # -- the PyTorch flow's estimate -------------------------------------------------
    def estimate_shape(self) -> str:
        """"warmup": the estimation PyExecutor runs the dummy requests with a temporary
        KV pool, and the pool gets (device total - peak + temporary pool) x fraction
        (0.20.0 `_util.py::cal_max_tokens`; 1.1.0rc6-1.3.0rc3 `KvCacheCreator.
        _cal_max_memory`, 1.3.0rc3 l. 129). "forward": the ~0.19 copy's one
        `model_engine.forward` of max_num_tokens tokens without a KV pool, and
        (total - peak) x fraction (which release that copy is: UNVERIFIED, taken for
        0.17-0.19)."""
        return "warmup" if self.release >= (0, 20, 0) else "forward"

    def estimate_counts_attention_layers_only(self) -> bool:
        """The estimate's layers: `num_hidden_layers` on this pipeline rank in 0.20.0,
        `get_num_attention_layers()` from 1.1.0rc6 (1.0 follows 0.20.0: UNVERIFIED);
        the ~0.19 copy: every layer, no pipeline split."""
        return self.release >= (1, 1, 0)

    def estimate_splits_pipeline(self) -> bool:
        """The ~0.19 copy counted every layer on each rank (no PP split)."""
        return self.release >= (0, 20, 0)

    def temporary_pool_tokens(self, *, max_batch_size: int, max_num_tokens: int,
                              max_seq_len: int, tokens_per_block: int,
                              cap_tokens: int) -> int:
        """The temporary KV pool of the estimation run, in tokens (it is inside the
        measured peak and added back, so it cancels in the pool; shown as a term).
        0.20.0 `get_token_num_for_estimation`: min(max(max_batch_size, max_num_tokens +
        ceil(max_num_tokens / max_seq_len) x tokens_per_block, max_seq_len), what the
        fraction of the free memory holds). 1.1.0rc6-1.3.0rc3
        `_get_token_num_for_estimation` (1.3.0rc3 l. 257): the dummy requests' blocks,
        each request min(max_num_tokens, max_seq_len - 1) prompt tokens + 1 (+1 for the
        overlap scheduler, on by default), until they sum to max_num_tokens; 1.3.0rc3
        also at least one max_seq_len request plus a block per CUDA-graph batch
        (l. 286-303), capped by the fraction of the free memory."""
        tpb = tokens_per_block
        if self.release < (1, 1, 0):
            want = max(max_batch_size, max_num_tokens
                       + -(-max_num_tokens // max_seq_len) * tpb, max_seq_len)
            return min(want, cap_tokens)
        prompt = max(min(max_num_tokens, max_seq_len - 1), 1)
        blocks, left = 0, max_num_tokens
        while left > 0:
            this = min(prompt, left)
            blocks += -(-(this + 2) // tpb)
            left -= this
        if self.release >= (1, 3, 0):
            blocks = max(blocks, (max_seq_len + 1) // tpb + min(max_batch_size, 128) - 1,
                         max_batch_size)
        return min(blocks * tpb, cap_tokens // tpb * tpb)

    # -- the pool --------------------------------------------------------------------
    def pool_rounding(self, backend: str) -> str:
        """How the final token count becomes blocks. The C++ `calculateMaxNumBlocks`
        (both stored versions of kvCacheManager.cpp) rounds UP: blocks = ceilDiv(max
        tokens, tokens_per_block). Built engines always take it; so did the PyTorch flow
        while it built its pool through C++ (0.20.0 log #6294: 860,308 estimated ->
        860,320; a 1.1.0rc3 log: 86,711 -> 86,720; the C++ warning "Both
        free_gpu_memory_fraction and max_tokens are set (to F and N, respectively)" in
        both; PR NVIDIA/TensorRT-LLM#5933's review, 2025-07: the C++ KvCacheManager
        computes the tokens). 1.3.0rc3's Python `KVCacheManager.calculate_max_num_blocks`
        (`resource_manager.py` l. 816-864) rounds DOWN: blocks = int(max_tokens //
        tokens_per_block) (l. 857). The switch is UNVERIFIED between 1.1 and 1.3 (1.2
        follows 1.1)."""
        if backend == "pytorch" and self.release >= (1, 3, 0):
            return "floor"
        return "ceil"

    # -- variable sliding-window attention (VSWA): one pool per window size ------------
    def window_share(self) -> str | None:
        """How the KV memory is split between the window sizes when
        kv_cache_config.max_attention_window names several (clamped to max_seq_len;
        1.3.0rc3 `resource_manager.py::KVCacheManager.__init__` l. 277-296: one window,
        max_seq_len, when it is not given, so every layer is sized as full attention).
        Both runtimes reach the C++ `BaseKVCacheManager::calculateMaxNumBlocks` with the
        windows' layers (the PyTorch flow through `calculate_max_num_blocks_from_cpp`,
        1.3.0rc3 l. 1189-1262, its memory the estimate's max_gpu_total_bytes, l. 1227;
        a built engine with the fraction of the free memory, `calculateFreeMemBytes`):
        "weighted": `BlockManager::calculateWindowSizeToShare`, each window's share its
        bytes per token x window size over the sum (PR NVIDIA/TensorRT-LLM#4667,
        2025-05-26; the index copy of kvCacheManager.cpp id 1277673704) with
        max_tokens capping each window; "equal": 1 / the number of windows (unless
        TRTLLM_WINDOW_SIZE_SHARES), max_tokens ignored under VSWA (PR #7923, 2025-09;
        read at NVIDIA @ b35ac1b6, 1.2.0rc2, and a later copy with linear attention).
        None: before 1.0 (the PyTorch flow's VSWA manager arrived with PR #5151 and
        #5933, June-July 2025; not modelled). 1.0 and 1.1 are taken as "weighted" (no
        snapshot between the two versions was read: UNVERIFIED; 1.1.0rc6's `_util.py`
        still sets max_tokens to None for VSWA, which #7923 removed)."""
        if self.release < (1, 0, 0):
            return None
        return "weighted" if self.release < (1, 2, 0) else "equal"

    # -- built engines: how a rank's K/V heads are counted ---------------------------
    def engine_kv_heads(self, kv_heads: int, tp: int) -> int:
        """`gptJsonConfig.cpp::createModelConfig`: max(num_key_value_heads / (tp x cp), 1)
        in integer division (one head replicated when tp exceeds kv_heads); per-layer
        lists ceil(n / (tp x cp)). Read in the stored copy (no release pinned)."""
        return max(kv_heads // tp, 1)

    def host_cache(self, backend: str) -> dict:
        """The secondary (host) pool from `kv_cache_config.host_cache_size` (bytes per
        rank; default None: no host pool). PyTorch backend, `_torch/pyexecutor/
        resource_manager.py` `KVCacheManager.calculate_max_num_blocks`: max_tokens_secondary
        = host_cache_size / get_cache_bytes_per_token(), blocks = int(that /
        tokens_per_block) (index copies of ~0.20-1.0, float division), the same with
        integer division in 1.3.0rc3 (l. 859-862; the estimation dry run too, l. 310-313);
        logged as "Number of blocks in KV cache secondary pool: N" (C++ KVCacheManager).
        Block reuse (`KvCacheConfig.enable_block_reuse`) defaults to True in the LLM API's
        KvCacheConfig of every snapshot read (the BaseModel copies of ~0.20 and
        1.3.0rc3 l. 1681); `kv_cache_config.enable_block_reuse: false` turns it off.
        A built engine (--backend tensorrt) sizes it in the C++ `calculateMaxNumBlocks`,
        not read for the host pool: counted by the same rule, with a note."""
        return {"reuse_default": True, "integer_division": True,
                "note": "" if backend == "pytorch" else
                "a built engine's host pool is counted by the PyTorch backend's rule "
                "(C++ calculateMaxNumBlocks not read for it)",
                "source": "tensorrt_llm/_torch/pyexecutor/resource_manager.py "
                          "KVCacheManager.calculate_max_num_blocks (1.3.0rc3 l. 859-862)"}

    def term_names(self, backend: str) -> tuple[str, ...]:
        """Each term under the name TensorRT-LLM's log gives it (snake-cased), in the
        order the runtime meets them. PyTorch (`_util.py::configure_kv_cache_capacity`,
        0.20.0+): "Memory used after loading model weights (inside torch)", "Memory
        dynamically allocated during inference (inside torch)", "Memory used outside
        torch (e.g., NCCL and CUDA graphs)" (the temporary pool included), "Peak memory
        during memory usage profiling (torch + non-torch)", "tmp kv_mem" (1.1.0rc6+),
        "available KV cache memory when calculating max tokens", "device total memory";
        then the C++ "[MemUsageChange] Allocated X GiB for max tokens in paged KV
        cache". Built engines (`TrtGptModelInflightBatching`, C++): "Loaded engine
        size", "IExecutionContext creation" (activations; the runtime buffers and decoder
        it logs next are not counted), the CUDA context and NCCL (no log line), then
        "Memory usage when calculating max tokens in paged kv cache: total, available"
        and the allocated pool."""
        if backend == "pytorch":
            return ("device_total_memory", "model_weights_inside_torch",
                    "dynamic_inside_torch", "outside_torch", "tmp_kv_mem", "peak_memory",
                    "available_kv_cache_memory", "paged_kv_cache")
        return ("total", "engine_size", "execution_context", "non_torch", "available",
                "paged_kv_cache")


@functools.lru_cache(maxsize=32)
def rules_for(release: str) -> Rules:
    return Rules(parse_release(release))
