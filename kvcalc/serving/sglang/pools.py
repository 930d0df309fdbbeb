"""SGLang's pools: what one token costs (`cell_size`) and how the rest of memory is split
when a model keeps more than one kind of cache.

Facts (quoted, not copied code; paths inside `sglang/srt/`):

* full attention and MLA: one pool of `rest // cell_size` tokens, cell_size summed over
  the attention layers of this pipeline rank (`ModelRunner.profile_max_num_token`).
* sliding-window models SGLang runs as hybrid (`model_config.is_hybrid_swa` by
  architecture: gpt-oss, Llama 4's chunked layers, MiMo-V2; the model types are the
  release table's): two pools, the sliding layers' holding `swa_full_tokens_ratio`
  (0.8) times the full layers' tokens, both from one budget
  (`ModelRunner.set_num_token_hybrid`): full tokens =
  rest / (full bytes + ratio x sliding bytes). --disable-hybrid-swa-memory sizes every
  layer as full. Other models' sliding layers are sized as full layers.
* hybrid state models (Mamba, gated delta net: `ModelRunner.handle_max_mamba_cache`):
  unless --max-mamba-cache-size is given, state memory is
  rest x r / (1 + r) with r = --mamba-full-memory-ratio (0.9); it holds
  that // (one request's conv and temporal states over every state layer) slots; the
  KV pool takes the rest over the attention layers only. Running requests are capped
  by the slots.
"""

from __future__ import annotations

from kvcalc._num import exact_ratio
from kvcalc._record import record
from kvcalc.dtypes import dtype

__all__ = ["Split", "pools"]

# Model types SGLang sizes with two pools (full and sliding-window layers).
HYBRID_SWA_TYPES = frozenset({"gpt_oss", "llama4", "llama4_text", "mimo_v2_flash"})


class _Pool:
    """Which of SGLang's pools a layer kind's cache lives in (a layer names its kind
    through `kv_cache_spec`, SGLang's rules decide here)."""

    def full(self):
        return "full"

    def sliding(self, window: int):
        return "swa"

    def chunked(self, chunk: int):
        return "swa"

    def state(self, mixer):
        return "state"

    def cross(self):
        return None  # encoder-decoder caches: not modelled

    def unpaged(self, mixer):
        return None


_POOL = _Pool()


@record
class Split:
    tokens: int | None  # the full pool's tokens (None: a kind is not modelled)
    cell_bytes: int  # one token in every layer of the full pool
    kv_bytes: int  # the KV pools' bytes
    state_bytes: int = 0  # the state pool's bytes
    slots: int | None = None  # state slots (hybrid state models)
    slot_cap: int = 0  # running requests the slots admit
    pool_figures: tuple[tuple[str, int], ...] = ()
    state_terms: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()


def _kv_dtype(flags):
    from kvcalc.serving.sglang.rules import KV_DTYPES

    name = KV_DTYPES[flags.kv_cache_dtype] or flags.weights.model_dtype
    return dtype(name)


def pools(spec, flags, rules, *, rest: int, attn_tp: int, stage: int, sizes, context: int,
          page: int) -> Split:
    """The pools of one pipeline rank from `rest` bytes."""
    from kvcalc.capacity.blocks import groups_on_stage
    from kvcalc.formulas.cache import cache_groups

    kv_dt = _kv_dtype(flags)
    groups = cache_groups(spec, kv_dt, attn_tp, flags.kv_scale_bytes,
                          state_dtype=dtype(flags.mamba_ssm_dtype))
    groups = groups_on_stage(groups, spec.layers, sizes[stage], stage, sizes)
    kinds = [(g, g.mixer.kv_cache_spec(_POOL)) for g in groups]
    unknown = sorted({g.label for g, kind in kinds if kind is None})
    if unknown:
        return Split(tokens=None, cell_bytes=0, kv_bytes=0, notes=(
            f"kvcalc does not model how SGLang pages {', '.join(unknown)} layers: its KV "
            f"tokens and running requests are not counted",))
    hybrid = (spec.extra.get("hf_model_type") in HYBRID_SWA_TYPES
              and not flags.disable_hybrid_swa_memory)
    full = sum(g.layers * g.token_bytes for g, k in kinds
               if k == "full" or (k == "swa" and not hybrid))
    swa = sum(g.layers * g.token_bytes for g, k in kinds if k == "swa" and hybrid)
    state = sum(g.layers * g.state_bytes for g, k in kinds if k == "state")
    notes: list[str] = []
    if state:
        return _with_state(flags, rest=rest, cell=full + swa, state=state, page=page)
    if swa:
        rnum, rden = exact_ratio(flags.swa_full_tokens_ratio)
        # rest = full_tokens x (full + ratio x swa)
        tokens = max(rest, 0) * rden // (full * rden + swa * rnum) if full else 0
        tokens = tokens // page * page
        swa_tokens = tokens * rnum // rden // page * page
        kv = tokens * full + swa_tokens * swa
        return Split(tokens=tokens, cell_bytes=full, kv_bytes=kv,
                     pool_figures=(("full_layer_tokens", tokens),
                                   ("swa_layer_tokens", swa_tokens)))
    if not full:
        return Split(tokens=0, cell_bytes=0, kv_bytes=0, notes=tuple(notes))
    tokens = max(rest, 0) // full // page * page if rest > 0 else rest // full
    return Split(tokens=tokens, cell_bytes=full, kv_bytes=max(tokens, 0) * full)


def _with_state(flags, *, rest: int, cell: int, state: int, page: int) -> Split:
    """A hybrid state model: state slots first, the KV pool from what they leave."""
    if flags.max_mamba_cache_size is not None:
        slots = flags.max_mamba_cache_size
    else:
        rnum, rden = exact_ratio(flags.mamba_full_memory_ratio)
        slots = max(rest, 0) * rnum // (rnum + rden) // state
    state_bytes = slots * state
    kv_rest = rest - state_bytes
    tokens = max(kv_rest, 0) // cell // page * page if cell else 0
    return Split(tokens=tokens, cell_bytes=cell, kv_bytes=tokens * cell,
                 state_bytes=state_bytes, slots=slots, slot_cap=slots,
                 pool_figures=(("mamba_slots", slots),),
                 state_terms=(("mamba_cache", state_bytes),))
