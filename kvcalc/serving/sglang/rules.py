"""SGLang's release rules, one table: every release comparison of the SGLang wing is here.

Read in the PyPI wheels (`pip download --no-deps sglang==X`) of 0.4.0, 0.4.6.post5,
0.4.10.post2, 0.5.1, 0.5.4, 0.5.8 and 0.5.23, each change dated with 0.4.7, 0.4.8, 0.4.9,
0.5.2, 0.5.3 and 0.5.14; paths are inside `sglang/srt/`, and each rule names the file,
function and release it follows. A release between two read ones
follows the older one's rule (0.4.7 as 0.4.6.post5, 0.5.5 as 0.5.4, ...).
"""

from __future__ import annotations

import functools

from kvcalc.errors import KvcalcError

__all__ = ["KV_DTYPES", "MiB", "GiB", "Rules", "auto_speculative_params", "parse_release",
           "rules_for"]

MiB = 1 << 20
GiB = 1 << 30

OLDEST = (0, 4, 0)  # the oldest release whose rules are encoded
# The releases read, each rule's era starting at one of them.
READ = ((0, 4, 0), (0, 4, 6), (0, 4, 7), (0, 4, 8), (0, 4, 10), (0, 5, 1), (0, 5, 3),
        (0, 5, 4), (0, 5, 8), (0, 5, 14), (0, 5, 23))
# --kv-cache-dtype values (`server_args.py` choices) and the dtype each stores; "auto":
# the model's.
KV_DTYPES = {"auto": None, "bf16": "bf16", "fp16": "fp16", "bfloat16": "bf16",
             "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
             "fp32": "fp32", "float32": "fp32"}
# GPUs of compute capability 10.x (SM100), on which SGLang picks TensorRT-LLM's attention
# kernels and their 64-token pages.
SM100 = ("b200", "gb200", "b300", "gb300")
# GPUs whose compute capability's major is 10 or more (SM100 and SM12x), where SGLang
# turns DeepSeek sparse attention's KV cache to fp8 (`torch.cuda.get_device_capability`).
SM10_PLUS = SM100 + ("rtx5090", "rtx-pro-6000-blackwell", "dgx-spark")
# AMD Instinct presets (ROCm: SGLang's `is_hip`)
ROCM = ("mi300x", "mi325x", "mi355x")
# DeepSeek sparse attention's fp8 layouts (`NSATokenToKVPool`): 128 elements a fp32 scale
DSA_QUANT_BLOCK = 128


@functools.lru_cache(maxsize=32)
def parse_release(text: str) -> tuple[int, int, int]:
    """'0.5.4' -> (0, 5, 4); '0.4.6.post5' -> (0, 4, 6); 'v0.5.1rc2' -> (0, 5, 1)."""
    from kvcalc.serving.releases import version_parts

    v = version_parts(text, "SGLang", "0.MINOR[.PATCH]")
    if v < OLDEST:
        raise KvcalcError(f"kvcalc encodes SGLang's rules from 0.4.0 on; got {text!r}")
    return v  # type: ignore[return-value]


class Rules:
    """The rules of one SGLang release (`era`: the newest release read at or below it)."""

    def __init__(self, release: tuple[int, int, int]):
        self.release = release
        self.era = max(r for r in READ if r <= release)

    # -- server_args.py: the defaults filled in at start-up ---------------------------
    # -- the scheduler, as kvcalc.served runs it ---------------------------------------
    def schedule(self, *, gpu_mib: int = 0, tp: int = 1, cuda_graph_max_bs: int | None = None,
                 disable_cuda_graph: bool = False, chunked_prefill_size: int = 8192):
        """managers/schedule_policy.py `PrefillAdder`: a waiting request joins when its
        prompt and its max_new_tokens (clipped at 4096) fit beside new_token_ratio of
        every running request's remaining output; the ratio starts at 0.7
        (global_config init_new_token_ratio), falls by (0.7 - 0.1) / 600 a decode step
        to 0.1, and a decode step that finds the pool full retracts requests
        (ScheduleBatch.retract_decode). Prefill and decode run as separate steps unless
        --enable-mixed-chunk (off by default); the overlap scheduler (the host prepares
        the next batch while the GPU runs this one) is on by default from 0.4.0
        (--disable-overlap-schedule turns it off). CUDA graphs as cuda_graphs captures
        them."""
        from kvcalc.serving.record import Schedule

        batches, tokens = self.cuda_graphs(gpu_mib, tp, cuda_graph_max_bs, disable_cuda_graph,
                                           chunked_prefill_size)
        return Schedule(admission="ratio", mixed=False, overlaps_host=True,
                        source="sglang/srt/managers/schedule_policy.py PrefillAdder; "
                               "scheduler.py overlap schedule (default from 0.4.0)",
                        reserve_ratio=0.7, reserve_floor=0.1, reserve_decay_steps=600,
                        graph_batches=batches, graph_tokens=tokens)

    def cuda_graphs(self, gpu_mib: int, tp: int, cuda_graph_max_bs: int | None,
                    disable_cuda_graph: bool, chunked_prefill_size: int
                    ) -> tuple[tuple[int, ...], int]:
        """(The largest decode batch captured, padded up to; the most prompt tokens a
        prefill step replays a graph at.) Decode: `cuda_graph_max_bs`, else
        default_cuda_graph_max_bs, else the capture list's own top
        (`model_executor/cuda_graph_runner.py` get_batch_sizes_to_capture: 160; 0.4.6
        256 over 96 GiB; 0.4.10-0.5.3 256 over 90 GiB and 512 over 160,000 MiB), batches
        padded to the next size captured. Prefill: eager until 0.5.14 turned its CUDA
        graphs on by default (prefill_graph_sizes, up to chunked_prefill_size).
        --disable-cuda-graph: none."""
        if disable_cuda_graph:
            return (), 0
        top = cuda_graph_max_bs or self.default_cuda_graph_max_bs(gpu_mib, tp)
        if top is None:
            top = 160
            if self.era >= (0, 4, 10):
                top = 512 if gpu_mib > 160 * 1000 else 256 if gpu_mib > 90 * 1024 else 160
            elif self.era >= (0, 4, 6) and gpu_mib > 96 * 1024:
                top = 256
        tokens = 0
        if self.era >= (0, 5, 14):
            tokens = max(prefill_graph_sizes(chunked_prefill_size), default=0)
        return (top,), tokens

    def default_chunked_prefill_size(self, gpu_mib: int, tp: int) -> int:
        """0.4.0/0.4.6 `ServerArgs.__post_init__`: 2048 under 25,000 MiB, else 8192;
        0.4.10/0.5.1: 2048 under 35 GiB, 8192 under 160 GiB, else 16384; 0.5.4
        `_handle_gpu_memory_settings` (0.5.8 the same, 0.5.23 `memory_hook.py`
        `handle_gpu_memory_settings`: 4096 from 20 to 35 GiB)."""
        if self.era < (0, 4, 10):
            return 2048 if gpu_mib < 25_000 else 8192
        if self.era < (0, 5, 3):
            return 2048 if gpu_mib < 35 * 1024 else 8192 if gpu_mib < 160 * 1024 else 16384
        if gpu_mib < 20 * 1024:
            return 2048
        if gpu_mib < 35 * 1024:
            return 4096 if self.era >= (0, 5, 23) else 2048
        if gpu_mib < 60 * 1024:
            return 4096
        return 8192 if gpu_mib < 160 * 1024 else 16384

    def default_cuda_graph_max_bs(self, gpu_mib: int, tp: int) -> int | None:
        """The largest batch captured (None: the capture list's own top, 160 or 256):
        0.4.0: 8 under 25,000 MiB else 160; 0.4.6: under 25,000 MiB 8 (tp < 4) or 80;
        0.4.10/0.5.1: under 35 GiB 8 or 80; 0.5.4 `_handle_gpu_memory_settings`: the
        table by the card's memory (16/80 under 35 GiB; 0.5.8 24/80; 0.5.23 48/160)."""
        small = tp < 4
        if self.era < (0, 4, 6):
            return 8 if gpu_mib < 25_000 else 160
        if self.era < (0, 4, 10):
            return (8 if small else 80) if gpu_mib < 25_000 else None
        if self.era < (0, 5, 3):
            return (8 if small else 80) if gpu_mib < 35 * 1024 else None
        if gpu_mib < 20 * 1024:
            return 8
        if gpu_mib < 35 * 1024:
            if self.era >= (0, 5, 23):
                return 48 if small else 160
            return (24 if self.era >= (0, 5, 8) else 16) if small else 80
        if gpu_mib < 60 * 1024:
            return 32 if small else 160
        if gpu_mib < 160 * 1024:
            return 256 if small else 512
        return 512

    def default_mem_fraction_static(self, *, gpu_mib: int, tp: int, pp: int,
                                    chunked_prefill_size: int, cuda_graph_max_bs: int | None,
                                    dp: int, dp_attention: bool, multimodal: bool,
                                    mla: bool, vision: dict | None = None,
                                    speculative: str | None = None) -> float:
        """SGLang's default --mem-fraction-static, computed in floats as SGLang does.

        0.4.0 `ServerArgs.__post_init__`: by tp (0.88 at 1 down to 0.79 at >= 16), a
        multimodal model x 0.95 (`ModelRunner.__init__`). 0.4.6.post5: by tp x pp up to
        81,920 MiB, else 0.88; over 96 GiB raised to min(mfs + 48 GiB x (1 - mfs) / mem,
        (mem - 18 GiB) / mem); multimodal x 0.90 (`model_specific_adjustment`).
        0.4.7 sets 0.79 on cards over 180,000 MiB. 0.4.8-0.5.2 (read in 0.4.10.post2 and
        0.5.1): reserved GiB by the card (2.8 + P/10 under 35 GiB, 9.5 + P/2
        under 90, 12 + P/2 under 160, else 32), + 4 with DP attention, rounded to three
        places. 0.5.3-0.5.8 (read in 0.5.4) `_handle_gpu_memory_settings`: reserved MiB = 512 + 1.5 x
        max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + P / 8 x 1024 (+ DP
        attention's graph buffers), at least 10 GiB on cards over 60 GiB. 0.5.14 and
        0.5.23 (`memory_hook.py`): the same without the speculative term, plus the prefill CUDA
        graphs (8 MiB a captured size; 1.5 GiB for MLA); `speculative` (the algorithm) adds
        `speculative_reserve_mib`. From 0.4.10 a model with a vision_config
        is scaled by `adjust_mem_fraction_for_vlm` (`vision`: that config's
        num_hidden_layers and hidden_size as stated; absent, SGLang's 24 and 1024).
        """
        size = tp * pp
        mem = float(gpu_mib)
        if self.era < (0, 4, 8):
            n = size if self.era >= (0, 4, 6) else tp
            share = (0.79 if n >= 16 else 0.81 if n >= 8 else 0.85 if n >= 4 else
                     0.87 if n >= 2 else 0.88)
            if self.era >= (0, 4, 6):
                if gpu_mib > 81920:
                    share = 0.88
                if gpu_mib > 96 * 1024:
                    share = min(share + 48 * 1024 * (1 - share) / mem,
                                (mem - 18 * 1024) / mem)
                if self.era >= (0, 4, 7) and gpu_mib > 180 * 1000:
                    share = 0.79  # 0.4.7: B200-class cards
                return share * 0.90 if multimodal else share
            return share * 0.95 if multimodal else share
        if self.era < (0, 5, 3):
            if gpu_mib < 35 * 1024:
                reserved = (2.8 + size / 10) * 1024
            elif gpu_mib < 90 * 1024:
                reserved = (9.5 + size / 2) * 1024
            elif gpu_mib < 160 * 1024:
                reserved = (12 + size / 2) * 1024
            else:
                reserved = 32 * 1024
            if dp_attention:
                reserved += 4 * 1024
        else:
            graph_bs = cuda_graph_max_bs or 0
            reserved = 512 + 1.5 * max(chunked_prefill_size, 2048) + size / 8 * 1024
            reserved += 2 * graph_bs
            if dp_attention:
                reserved += 3 * graph_bs * dp
                if graph_bs > 300:
                    reserved += 1.5 * graph_bs * dp
            if self.era >= (0, 5, 14):  # the prefill CUDA graphs (on by default)
                reserved += 1.5 * 1024 if mla else 8 * len(prefill_graph_sizes(
                    chunked_prefill_size))
            if gpu_mib > 60 * 1024:
                reserved = max(reserved, 10 * 1024)
        if speculative:  # --speculative-algorithm: its draft and graphs
            reserved += self.speculative_reserve_mib(speculative)
        share = round((mem - reserved) / mem, 3)
        if vision is not None and self.era >= (0, 4, 10):
            return share * vlm_factor(vision)
        return share * 0.95 if multimodal else share

    def page_size(self, hw_name: str, mla: bool, model_type: str) -> int:
        """Tokens per page when --page-size is not given: 1, except on SM100 where the
        default attention backends are TensorRT-LLM's (64): MLA from 0.5.4 (`trtllm_mla`,
        `_handle_model_specific_adjustments`), every model from 0.5.8 (`trtllm_mha`,
        `_handle_attention_backend_compatibility`)."""
        sm100 = any(hw_name.lower().startswith(n) for n in SM100)
        if sm100 and ((mla and self.era >= (0, 5, 4)) or self.era >= (0, 5, 8)):
            return 64
        return 1

    def pages_pool(self) -> bool:
        """Whether the pool's tokens are floored to the page size (0.4.6 on)."""
        return self.era >= (0, 4, 6)

    def v_head_dim_counted(self) -> bool:
        """The MHA cell counts V at its own head size from 0.5.8
        (`get_cell_size_per_token`); before, K's head_dim for both."""
        return self.era >= (0, 5, 8)

    # -- DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): SGLang's NSA/DSA pool -------
    def dsa_served(self) -> bool:
        """DeepSeek sparse attention is served from 0.5.3 (`models/deepseek_v2.py`
        EntryClass gains DeepseekV32ForCausalLM; 0.5.2's has only V2 and V3)."""
        return self.era >= (0, 5, 3)

    def dsa_forced_settings(self, hw_name: str, kv_cache_dtype: str) -> dict:
        """What SGLang sets for a DSA model (`configs/model_config.py` `is_deepseek_nsa`:
        a DeepSeek-V3 architecture with `index_topk`) after the default fraction is fixed,
        whatever the command line said. 0.5.3 and 0.5.4
        (`server_args.py` `_handle_model_specific_adjustments`): DP attention with
        dp_size = tp_size, page 64, fp8_e4m3 on compute capability 10 and up (0.5.3 also
        --mem-fraction-static 0.8). 0.5.8 (the same function) and 0.5.14: page 64 (ROCm:
        1), `auto` is fp8_e4m3 on compute capability 10 and up, else bfloat16; no DP
        attention. 0.5.23 (`arg_groups/model_overrides/deepseek_v2.py`
        `_deepseek_family_overrides`, `arg_groups/overrides.py`
        `_dsa_kv_cache_dtype_default`): page 64 x index_kpool (ROCm without aiter's
        preshuffle kernel: 1; kvcalc takes the kernel as present), the same dtype rule."""
        name = hw_name.lower()
        sm10 = any(name.startswith(n) for n in SM10_PLUS)
        rocm = any(name.startswith(n) for n in ROCM)
        out: dict = {}
        if self.era < (0, 5, 8):
            out.update(page_size=64, dp_attention=True)
            if sm10:
                out["kv_cache_dtype"] = "fp8_e4m3"
            if self.era < (0, 5, 4):
                out["mem_fraction_static"] = "0.8"
            return out
        out["page_size"] = 1 if rocm and self.era < (0, 5, 23) else 64
        if kv_cache_dtype == "auto":
            out["kv_cache_dtype"] = "fp8_e4m3" if sm10 else "bfloat16"
        return out

    def dsa_token_bytes(self, *, kv_lora_rank: int, rope_dim: int, index_head_dim: int,
                        kv_bytes: int, fp8: bool, hw_name: str) -> tuple[int, int]:
        """(budgeted, stored) bytes of one token in one DSA layer.

        Stored (`mem_cache/memory_pool.py` `NSATokenToKVPool.__init__`, 0.5.3 on): the
        latent (kv_lora_rank + qk_rope_head_dim) x dtype bytes, but with an fp8 cache
        kv_lora_rank fp8 values, a fp32 scale per 128 of them and the rope part in bf16
        (656 B for DeepSeek-V3.2: 0.5.3/0.5.4 a constant 656 in `MLATokenToKVPool`, 0.5.8
        `override_dim`); plus the indexer's key, index_head_dim fp8 values and a fp32 scale
        per 128 (`index_k_with_scale_buffer`, uint8, in pages of 64 tokens).
        Budgeted (the cell the free memory is divided by): 0.5.3
        (`model_runner.py` `profile_max_num_token`) the latent at the cache dtype alone;
        0.5.4 (the same function), 0.5.8 (`model_runner_kv_cache_mixin.py`
        `get_cell_size_per_token`) and 0.5.14 (`pool_configurator.py` `_compute_cell_size`)
        the latent at the cache dtype plus the indexer's key, so with fp8 the pool holds
        80 B a layer more than it budgets; 0.5.23 (`kv_cache_configurator.py`
        `calculate_mla_kv_cache_dim`, `_compute_dsa_indexer_cell_size`) the stored layout,
        except that the fp8 latent is raw (no scales, rope in fp8) under the trtllm
        kernels (the fp8 default on compute capability 10 and up) and ROCm's triton ones,
        and the pool stores what it budgets."""
        name = hw_name.lower()
        latent = (kv_lora_rank + rope_dim) * kv_bytes
        scaled = kv_lora_rank + kv_lora_rank // DSA_QUANT_BLOCK * 4 + rope_dim * 2
        index = index_head_dim + index_head_dim // DSA_QUANT_BLOCK * 4
        stored = (scaled if fp8 else latent) + index
        if self.era < (0, 5, 4):
            return latent, stored
        if self.era < (0, 5, 23):
            return latent + index, stored
        raw = any(name.startswith(n) for n in SM10_PLUS + ROCM)
        budget = (scaled if fp8 and not raw else latent) + index
        return budget, budget

    # -- which models get two pools ------------------------------------------------
    def hybrid_swa(self, model_type: str, hw_name: str) -> bool:
        """Whether a sliding-window model gets SGLang's two pools by default:
        0.4.10 (`ModelRunner.initialize`): Gemma 3 / 3n (Gemma 2 forced off,
        `check_server_args`); 0.5.1/0.5.4: none (Gemma 2/3/3n, gpt-oss and OLMo 2 are
        forced off in `model_specific_adjustments`; Llama 4 only with
        --hybrid-kvcache-ratio); 0.5.8 (`is_hybrid_swa_model`): Llama 4, MiMo-V2, and
        gpt-oss unless on SM100 (trtllm_mha); 0.5.23: also Gemma 4, Step 3.5."""
        if self.era < (0, 4, 10):
            return False
        if self.era < (0, 5, 1):
            return model_type in ("gemma3", "gemma3_text", "gemma3n", "gemma3n_text")
        if self.era < (0, 5, 8):
            return False
        if model_type == "gpt_oss":
            return not any(hw_name.lower().startswith(n) for n in SM100)
        kinds = {"llama4", "llama4_text", "mimo_v2_flash"}
        if self.era >= (0, 5, 23):
            kinds |= {"gemma4", "gemma4_text", "step3p5"}
        return model_type in kinds

    def swa_cell_by_kind(self) -> bool:
        """0.5.14 on (`HybridSWAPoolConfigurator`) sizes the two pools by each kind's own
        bytes; before (`set_num_token_hybrid`), the budget counts every layer at full
        size and the tokens are re-split over the layers (byte-neutral)."""
        return self.era >= (0, 5, 14)

    # -- state models ------------------------------------------------------------------
    def state_models(self) -> bool:
        """Hybrid Mamba / linear-attention pools exist from 0.5.4 (`handle_max_mamba_cache`)."""
        return self.era >= (0, 5, 4)

    def max_mamba_cache_size_taken(self) -> bool:
        """Whether --max-mamba-cache-size sets a radix model's state slots as given (0.5.8
        on); before, the slots came from --mamba-full-memory-ratio whatever it said."""
        return self.era >= (0, 5, 8)

    def state_slots(self, state_memory: int, per_request: int) -> int:
        """Slots from the state's share: int(share // per request) (0.5.4, 0.5.8);
        0.5.23 `_handle_max_mamba_cache`: one slot fewer, kept as a spare."""
        if self.era >= (0, 5, 23):
            return max((state_memory - per_request) // per_request, 0)
        return state_memory // per_request

    def state_pool_slots(self, slots: int) -> int:
        """Slots the pool allocates: size + 1 (`MambaPool`; 0.5.23: (K + 1) x per slot)."""
        return slots + 1

    # -- model_runner.py / scheduler.py: the pool and the requests it serves -----------
    def max_num_reqs(self, tokens: int, context_len: int) -> int:
        """The request pool's size when --max-running-requests is not given
        (`ModelRunner.init_memory_pool`): int(tokens / context x 512) in 2048..4096."""
        return min(max(tokens * 512 // context_len, 2048), 4096)

    def req_pool_extra(self) -> int:
        """Slots the request pool keeps beyond max_num_reqs: one up to 0.4.6 (logged
        max_running_requests 2049 / 4097), none from 0.4.7."""
        return 1 if self.era < (0, 4, 7) else 0

    # -- hierarchical cache (--enable-hierarchical-cache): the host pool ---------------
    def hicache(self) -> dict | None:
        """How the release sizes its host KV pool, or None where kvcalc has not read it.

        0.4.6.post5 and 0.4.7 (`mem_cache/memory_pool.py` `HostKVCache.__init__`) to 0.5.4
        (`mem_cache/memory_pool_host.py` `HostKVCache.__init__`, read at 0.4.8,
        0.4.9, 0.4.10.post2, 0.5.1, 0.5.2, 0.5.3, 0.5.4): tokens = int(--hicache-size x 1e9
        // size_per_token) when --hicache-size (GB, an int) is given, else
        int(device pool tokens x --hicache-ratio) (default 2.0); rounded down to whole
        pages; `assert self.size > device_pool.size` ("The host memory should be larger
        than the device memory with the current protocol"); logs "Allocating X GB host
        memory for hierarchical KV cache." with size x size_per_token / 1e9, per rank.
        size_per_token is the device pool's: heads x head_dim x layers x dtype x 2 per
        rank (MHA), (kv_lora_rank + rope) x dtype x layers (MLA). --hicache-write-policy's
        default: "write_through_selective" to 0.5.1, "write_through" from 0.5.2
        (server_args.py). --enable-hierarchical-cache with --disable-radix-cache is
        refused from 0.5.2 (`_handle_cache_compatibility`, "mutually exclusive"). 0.4.0-0.4.5
        take no --hicache-ratio/--hicache-size (0.4.3.post2's server_args.py); 0.5.14 and
        later rebuilt the host pools (page count rounded up, per-pool classes) and are not
        read here."""
        if self.release < (0, 4, 6) or self.era > (0, 5, 4):
            return None
        return {"write_policy": "write_through_selective" if self.release < (0, 5, 2)
                else "write_through",
                "refuses_without_radix": self.release >= (0, 5, 2),
                "source": "sglang %d.%d.%d mem_cache/memory_pool%s.py HostKVCache.__init__"
                % (*self.release, "" if self.release < (0, 4, 8) else "_host")}

    def state_request_ratio(self, radix_cache: bool) -> int:
        """Running requests per state slot's third (`MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`):
        3 with the radix cache, 1 without."""
        return 3 if radix_cache else 1

    # -- speculative decoding (kvcalc.serving.speculative) --------------------------------
    def speculative_counted(self) -> bool:
        """Whether kvcalc counts this release's draft worker: from 0.4.6 (read in
        0.4.6.post5-0.5.23); 0.4.0-0.4.5 size the draft's pool by a profile of its own,
        not read."""
        return self.era >= (0, 4, 6)

    def speculative_reserve_mib(self, algorithm: str) -> int:
        """MiB --speculative-algorithm adds to the default fraction's reserve
        (`ServerArgs.__post_init__` / `_handle_gpu_memory_settings`): 0.4.8-0.5.2 2 GiB
        for any algorithm ("draft model and larger cuda graph buffers"); 0.5.3-0.5.8
        6 GiB for STANDALONE, none for NGRAM, 2 GiB else, after the 10 GiB floor; none
        before 0.4.8 (the table era) and none from 0.5.14 (`memory_hook.py`)."""
        if not (0, 4, 8) <= self.era < (0, 5, 14):
            return 0
        if self.era < (0, 5, 3):
            return 2 * 1024
        return {"STANDALONE": 6 * 1024, "NGRAM": 0}.get(algorithm, 2 * 1024)

    def speculative_running_default(self, algorithm: str) -> int | None:
        """--max-running-requests SGLang sets when speculative decoding is on and the user
        gave none ("Max running requests is reset to 48 for speculative decoding"):
        0.4.6-0.5.2 EAGLE and EAGLE3 (NEXTN runs as EAGLE); 0.5.3-0.5.8 STANDALONE and
        NGRAM too; none from 0.5.14."""
        if not (0, 4, 6) <= self.era < (0, 5, 14):
            return None
        taken = ("EAGLE", "EAGLE3", "NEXTN") + (
            ("STANDALONE", "NGRAM") if self.era >= (0, 5, 3) else ())
        return 48 if algorithm in taken else None

    def speculative_headroom(self) -> bool:
        """The target pool grows past its budget by max_num_reqs x (steps x topk +
        draft tokens) + 100 tokens, shared with the draft's indices
        (`ModelRunner.init_memory_pool`, EAGLE and from 0.5.3 STANDALONE): 0.4.6-0.5.4;
        gone in 0.5.8."""
        return (0, 4, 6) <= self.era < (0, 5, 8)

    def draft_in_cell(self) -> bool:
        """Where the draft's KV pool is paid: from 0.5.14 inside the target's budget, the
        cell grown by int(cell x draft_layers / target_layers)
        (`pool_configurator.py`: "assumes the draft shares the target's per-layer KV
        size"); before, the draft worker allocates a pool of the target's tokens with its
        own layers after the target's, out of the (1 - mem_fraction_static) headroom."""
        return self.era >= (0, 5, 14)

    # -- lora/: the adapters' buffers -----------------------------------------------------
    def lora_counted(self) -> bool:
        """Whether kvcalc counts --enable-lora's buffers: from 0.4.10 (read in 0.4.10.post2,
        0.5.4, 0.5.8, 0.5.23), where `ModelRunner.initialize` builds the LoRA manager and
        its memory pool (`LoRAMemoryPool.init_buffers`) after the weights and before
        `init_memory_pool` profiles the free memory: the buffers come out of the KV pool's
        budget, in no log line of their own. 0.4.0-0.4.9 are not read."""
        return self.era >= (0, 4, 10)


def auto_speculative_params(algorithm: str, model_type: str) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, num_draft_tokens) SGLang picks when none is given
    (`auto_choose_speculative_params`, 0.5.4; the same table in the releases read):
    STANDALONE and DeepSeek V2/V3/V3.2, gpt-oss and Bailing (3, 1, 4); others (5, 4, 8)."""
    if algorithm == "STANDALONE" or model_type in (
            "deepseek_v2", "deepseek_v3", "deepseek_v32", "gpt_oss", "bailing_moe",
            "bailing_moe_v2"):
        return (3, 1, 4)
    return (5, 4, 8)


def vlm_factor(vision: dict) -> float:
    """`ServerArgs.adjust_mem_fraction_for_vlm` (0.4.10.post2 on): 0.95 x (1 - 0.1 x (the
    tower's layers x hidden^2 over ViT-L/14's 24 x 1024^2, less 1)), the second factor
    kept within 0.8-1.05; the tower's sizes read as attributes of its vision_config, 24
    and 1024 where the config has none by those names (Qwen2.5-VL names its `depth`)."""
    layers = vision.get("num_hidden_layers", 24)
    hidden = vision.get("hidden_size", 1024)
    ratio = layers * hidden ** 2 / (24 * 1024 ** 2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def prefill_graph_sizes(chunked_prefill_size: int) -> tuple[int, ...]:
    """0.5.23's prefill CUDA-graph sizes (`generate_prefill_cuda_graph_batch_sizes`): 4 to
    32 by 4, 48 to 256 by 16, 288 to 512 by 32, 576 to 1024 by 64, 1280 to 4096 by 256,
    4608 on by 512, up to chunked_prefill_size."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32),
             *range(576, 1025, 64), *range(1280, 4097, 256),
             *range(4608, max(chunked_prefill_size, 4608) + 1, 512)]
    return tuple(s for s in sizes if s <= chunked_prefill_size)


@functools.lru_cache(maxsize=32)
def rules_for(release: str) -> Rules:
    return Rules(parse_release(release))
