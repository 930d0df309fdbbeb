"""SGLang's pools: what one token costs (`cell_size`) and how the rest of memory is split
when a model keeps more than one kind of cache. Release differences are asked of
kvcalc.serving.sglang.rules.

Facts (quoted, not copied code; paths inside `sglang/srt/`):

* full attention and MLA (`ModelRunner.profile_max_num_token`, 0.4.0-0.5.4;
  `model_runner_kv_cache_mixin.py` `get_cell_size_per_token`, 0.5.8; 0.5.23
  `pool_configurator.py` `_compute_cell_size`): one pool of rest // cell_size tokens,
  the cell over the attention layers of this pipeline rank: K/V heads
  max(1, kv_heads // attention_tp) x (head_dim + v_head_dim; before 0.5.8 head_dim
  twice) x dtype bytes; MLA its latent, kv_lora_rank + qk_rope_head_dim, not divided.
* sliding-window models SGLang runs with two pools (the rules' `hybrid_swa`): up to
  0.5.8 (`set_num_token_hybrid`) the budget counts every layer at full size, then
  total = tokens x layers, full = int(total / (ratio x n_swa + n_full)), swa =
  int(full x ratio), ratio = --swa-full-tokens-ratio (0.8); 0.5.23
  (`HybridSWAPoolConfigurator`): cell = full bytes x n_full + ratio x sliding bytes x
  n_swa, full = bytes // cell. Other sliding-window models are sized as full layers.
* hybrid state models (0.5.4 on; `handle_max_mamba_cache`): unless
  --max-mamba-cache-size is given (or the radix cache is off: NemotronH, FalconH1,
  which take max_running_requests or 512 slots), the state gets rest x r / (1 + r),
  r = --mamba-full-memory-ratio (0.9), as slots of one request's states (convolution in
  bf16 with conv_kernel - 1 inputs, temporal in --mamba-ssm-dtype, fp32 by default,
  over every state layer); the KV pool takes the rest over the attention layers; the
  running requests are capped at slots // 3 (slots with the radix cache off).
* DeepSeek sparse attention (DeepSeek-V3.2, GLM-5; `NSATokenToKVPool`, 0.5.3 on): the MLA
  latent replicated on every rank plus the indexer's fp8 key and its fp32 scale a layer;
  what the budget counts and what the pool stores differ by release
  (`Rules.dsa_token_bytes`): the pool's bytes are the stored ones.
"""

from __future__ import annotations

from kvcalc.ground.num import exact_ratio
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import dtype

__all__ = ["Split", "pools"]

# Hybrid state models SGLang runs with its radix cache off (`ModelRunner.initialize`):
# their slots are max_running_requests (or 512), not a share of memory.
NO_RADIX_STATE_TYPES = frozenset({"nemotron_h", "falcon_h1"})


class _Pool:
    """Which of SGLang's pools a layer kind's cache lives in (a layer names its kind
    through `kv_cache_spec`; SGLang's rules decide here)."""

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

# Layer kinds no SGLang release read serves (no model in its registry keeps them), or that
# keep caches of their own kvcalc does not model (DeepSeek-V4's compressor, Qwen4-Exp's
# QSA indexer, Mllama's image cross-attention): SGLang's own table, by the layer's class.
NOT_MODELLED = frozenset({
    "Mamba",  # Mamba-1 (Jamba, Falcon-Mamba): SGLang's state pools are Mamba-2's and GDN's
    "RWKV", "RGLRU", "MLSTM", "ZambaMamba", "LaraGatedDeltaNet", "Lfm3ShortConv",
    "MixtureOfAttention", "ConvolvedAttention", "NormalizedGatedAttention", "ByteAttention",
    "AudioAttention", "AudioCrossAttention", "ImageCrossAttention", "ConvAttention",
    "Compressor", "QSAAttention"})


def _kind(mixer):
    return None if type(mixer).__name__ in NOT_MODELLED else mixer.kv_cache_spec(_POOL)


@record
class Split:
    tokens: int | None  # the full pool's tokens (None: a kind is not modelled)
    cell_bytes: int  # one token in every layer of the full pool
    kv_bytes: int  # the KV pools' bytes
    profiled: int = 0  # the tokens the budget gave before page and pool splits
    state_bytes: int = 0  # the state pool's bytes
    slots: int | None = None  # state slots (hybrid state models)
    slot_cap: int = 0  # running requests the slots admit
    pool_figures: tuple[tuple[str, int], ...] = ()
    stored_bytes: int = 0  # one token as the pool stores it, where not cell_bytes (DSA)
    state_terms: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()
    # one token's K and V bytes in each layer, where the pool is one K and one V buffer a
    # layer of every layer's full tokens (none: swa, state, DSA or draft layers in it)
    layer_bytes: tuple[int, ...] = ()


def _dsa(mx) -> bool:
    return type(mx).__name__ == "IndexedLatent"


def _dsa_bytes(mx, dt, rules, hw_name: str) -> tuple[int, int]:
    return rules.dsa_token_bytes(kv_lora_rank=mx.kv_lora_rank, rope_dim=mx.rope_dim,
                                 index_head_dim=mx.index_head_dim, kv_bytes=dt.nbytes(1),
                                 fp8=dt.nbytes(1) == 1, hw_name=hw_name)


def _token_bytes(g, dt, attn_tp: int, scale: int, rules, hw_name: str = "") -> int:
    """One token in one layer of group `g` on one attention-TP rank, as SGLang's cell."""
    mx = g.mixer
    if _dsa(mx):
        return _dsa_bytes(mx, dt, rules, hw_name)[0]
    head, v_head = getattr(mx, "head_dim", 0), getattr(mx, "v_head_dim", 0)
    if not rules.v_head_dim_counted() and head and v_head and head != v_head:
        heads = mx.kv_heads_per_device(attn_tp)
        return 2 * dt.nbytes(heads * mx.head_dim) + 2 * heads * scale
    return g.token_bytes


def pools(spec, flags, rules, *, rest: int, attn_tp: int, stage: int, sizes, context: int,
          page: int, hw_name: str, running: int | None, draft_layers: int = 0) -> Split:
    """The pools of one pipeline rank from `rest` bytes (may be negative: none).
    `draft_layers`: a speculative draft's layers inside the pool (0.5.14 on): the cell
    grows by int(cell x draft_layers / target layers), the draft taken to share the
    target's per-layer size (`pool_configurator.py`)."""
    from kvcalc.serving.layout import groups_on_stage
    from kvcalc.formulas.cache import cache_groups
    from kvcalc.serving.sglang.rules import KV_DTYPES

    kv_dt = dtype(KV_DTYPES[flags.kv_cache_dtype] or flags.weights.model_dtype)
    groups = cache_groups(spec, kv_dt, attn_tp, flags.kv_scale_bytes,
                          state_dtype=dtype(flags.mamba_ssm_dtype))
    groups = groups_on_stage(groups, spec.layers, sizes[stage], stage, sizes)
    kinds = [(g, _kind(g.mixer)) for g in groups]
    unknown = sorted({g.label for g, kind in kinds if kind is None})
    if any(_dsa(g.mixer) for g, _ in kinds) and not rules.dsa_served():
        unknown.append("DeepSeek sparse attention (served from 0.5.3)")
    if any(k == "state" for _, k in kinds) and not rules.state_models():
        unknown.append("state (Mamba, linear attention: SGLang serves them from 0.5.4)")
    if unknown:
        return Split(tokens=None, cell_bytes=0, kv_bytes=0, notes=(
            f"kvcalc does not model how SGLang {flags.engine.release} pages "
            f"{', '.join(unknown)} layers: its KV tokens and running requests are not "
            f"counted",))
    model_type = spec.extra.get("hf_model_type", "")
    hybrid = (not flags.disable_hybrid_swa_memory) and rules.hybrid_swa(model_type, hw_name)
    floor = page if rules.pages_pool() else 1
    per = {id(g): _token_bytes(g, kv_dt, attn_tp, flags.kv_scale_bytes, rules, hw_name)
           for g, _ in kinds}
    full = sum(g.layers * per[id(g)] for g, k in kinds if k == "full" or
               (k == "swa" and not hybrid))
    swa = sum(g.layers * per[id(g)] for g, k in kinds if k == "swa" and hybrid)
    n_full = sum(g.layers for g, k in kinds if k == "full" or (k == "swa" and not hybrid))
    n_swa = sum(g.layers for g, k in kinds if k == "swa" and hybrid)
    if draft_layers and (swa or any(k == "state" for _, k in kinds)):
        return Split(tokens=None, cell_bytes=0, kv_bytes=0, notes=(
            f"kvcalc does not count how SGLang {flags.engine.release} puts a speculative "
            f"draft's layers in a sliding-window or state model's pools: its KV tokens and "
            f"running requests are not counted",))
    if draft_layers and n_full:
        full += full * draft_layers // n_full
    if any(k == "state" for _, k in kinds):
        states = [(g, g.mixer) for g, k in kinds if k == "state"]
        per_request = sum(g.layers * mx.state_bytes(dtype("bf16"), dtype(flags.mamba_ssm_dtype),
                                                    attn_tp, conv_len=max(mx.conv_taps - 1, 1)
                                                    if mx.conv_taps else None)
                          for g, mx in states)
        return _with_state(flags, rules, rest=rest, cell=full, per_request=per_request,
                           floor=floor, model_type=model_type, running=running)
    if not (full or swa):
        return Split(tokens=0, cell_bytes=0, kv_bytes=0)
    if swa:
        rnum, rden = exact_ratio(flags.swa_full_tokens_ratio)
        if rules.swa_cell_by_kind():
            cell = (full * rden + swa * rnum)  # over rden
            tokens = max(rest, 0) * rden // cell // floor * floor
            profiled = tokens
        else:
            # every layer counted at full size, then the tokens re-split over the layers
            n_all = n_full + n_swa
            cell_all = (full // n_full if n_full else swa // n_swa) * n_all
            profiled = max(rest, 0) // cell_all
            total = profiled * n_all
            tokens = total * rden // (rnum * n_swa + rden * n_full)
            tokens = tokens // floor * floor
        swa_tokens = tokens * rnum // rden // floor * floor
        return Split(tokens=tokens, cell_bytes=full, profiled=profiled,
                     kv_bytes=tokens * full + swa_tokens * swa,
                     pool_figures=(("full_layer_tokens", tokens),
                                   ("swa_layer_tokens", swa_tokens)))
    profiled = rest // full
    tokens = profiled // floor * floor if profiled > 0 else profiled
    stored = sum(g.layers * (_dsa_bytes(g.mixer, kv_dt, rules, hw_name)[1] if _dsa(g.mixer)
                             else per[id(g)]) for g, k in kinds if k == "full")
    if draft_layers:
        stored = full  # the draft's share as the budget counts it
    plain = not draft_layers and stored == full and all(k == "full" for _, k in kinds)
    return Split(tokens=tokens, cell_bytes=full, kv_bytes=max(tokens, 0) * stored,
                 profiled=profiled, stored_bytes=stored if stored != full else 0,
                 layer_bytes=tuple(per[id(g)] for g, _ in kinds for _ in range(g.layers))
                 if plain else ())


def _with_state(flags, rules, *, rest: int, cell: int, per_request: int, floor: int,
                model_type: str, running: int | None) -> Split:
    """A hybrid state model: state slots first, the KV pool from what they leave."""
    radix = model_type not in NO_RADIX_STATE_TYPES
    if not radix:
        slots = flags.max_mamba_cache_size or running or 512
    elif flags.max_mamba_cache_size is not None and rules.max_mamba_cache_size_taken():
        slots = flags.max_mamba_cache_size
    else:
        rnum, rden = exact_ratio(flags.mamba_full_memory_ratio)
        slots = rules.state_slots(max(rest, 0) * rnum // (rnum + rden), per_request)
    state_bytes = slots * per_request
    kv_rest = rest - state_bytes
    profiled = kv_rest // cell if cell else 0
    tokens = profiled // floor * floor if profiled > 0 else profiled
    pool = rules.state_pool_slots(slots) * per_request
    return Split(tokens=tokens, cell_bytes=cell, kv_bytes=max(tokens, 0) * cell,
                 profiled=profiled, state_bytes=pool, slots=slots,
                 slot_cap=slots // rules.state_request_ratio(radix),
                 pool_figures=(("mamba_slots", slots),),
                 state_terms=(("mamba_cache", pool),))
