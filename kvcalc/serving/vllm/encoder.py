"""vLLM's multimodal start-up: the encoder cache budget, the images it profiles with, and
what running the vision encoder on them adds to the profiled activation peak.

Facts (quoted, not copied code), the same in every V1 release read (0.10.1.1, 0.11.0,
0.14.1, 0.20.0, 0.27.1, 0.33.0):

* `config/scheduler.py::SchedulerConfig.__post_init__` (0.33 l. 306-307; 0.10.1.1 l.
  218-219): max_num_encoder_input_tokens = encoder_cache_size = max_num_batched_tokens.
* `v1/core/encoder_cache_manager.py::compute_encoder_budget` (0.10.1.1 l. 172-250; 0.33
  `compute_mm_encoder_budget` l. 333-380): the largest tokens of one item over the
  modalities not limited to 0 by --limit-mm-per-prompt, M; compute budget = max(max_num_
  encoder_input_tokens, M), cache size = max(encoder_cache_size, M); the budget the log
  prints is the smaller (`get_encoder_budget`). All modalities limited to 0: no budget,
  no encoder profile ("Encoder cache will not be initialized").
* items profiled (`v1/worker/utils.py::MultiModalBudget.get_max_items`, 0.10.1.1 l.
  82-125; 0.33 `multimodal/encoder_budget.py::_get_max_items` l. 142-182): per prompt
  max(1, min(limit, max_model_len // M)); per batch max(1, min(budget // M, max_num_seqs
  x per prompt)), max_num_seqs first cut to max_num_batched_tokens // M when chunked
  prefill is off. The limit is 999 for a modality not named (0.10.1.1
  `MultiModalConfig.get_limit_per_prompt`, V1; 0.33 the same).
* `v1/worker/gpu_model_runner.py::profile_run` (0.10.1.1 l. 2566-2633; 0.33 l.
  6072-6146): logs "Encoder cache will be initialized with a budget of N tokens, and
  profiled with K image items of the maximum feature size.", runs the encoder on K dummy
  images of the size with the most tokens, keeps the outputs in the encoder cache while
  the text model's dummy run and the sampler run, then frees them. So the profiled peak is
  the larger of the encoder's own and the text run's plus the kept outputs.

Modelled, not read off a log (no public start-up log of a vision model with both the
budget line and its memory terms was found; the terms are kvcalc's):

* --mm-encoder-tp-mode data (kvcalc.serving.vllm.rules, `encoder_tp_data`): the tower
  whole on every rank (its weights) and ceil(K / tp) images a rank, MLP unsharded;
* the encoder's peak: the dummy images' pixel values as the processor hands them (fp32,
  3 x temporal patch x patch^2 a patch) and their model-dtype copy, plus one ViT block's
  activations over all patches by the text model's rule (kvcalc.serving.weights,
  FWD_MLP_COPIES x MLP width / tp + FWD_HIDDEN_COPIES x width, MLP sharded over tp in
  --mm-encoder-tp-mode weights, the default), plus the outputs;
* the outputs: items x M x the text model's width x model dtype; in 0.11-0.12 each
  output is first copied into zeros of budget rows when M is smaller (0.11.0
  `profile_run` l. 3369-3384), so items x budget rows are kept.

Families: Qwen2-VL, Qwen2.5-VL and Qwen3.5 (`get_mm_max_tokens_per_item` = the image with
the most features, max_pixels over (patch x merge)^2) and LLaVA 1.5 (576 placeholders, all
embeddings). Video, which Qwen's processors also take, is not modelled (give
--limit-mm-per-prompt '{"video": 0}' for an exact budget); Mistral 3's [IMG_BREAK]
placeholders and Gemma 3's start/end tokens, which vLLM counts apart from the embeddings,
are not either.
"""

from __future__ import annotations

import json

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import dtype
from kvcalc.serving.weights import FWD_HIDDEN_COPIES, FWD_MLP_COPIES

__all__ = ["DEFAULT_LIMIT", "ENCODER_FAMILIES", "EncoderProfile", "encoder_data_parallel",
           "encoder_profile", "parse_limit_mm_per_prompt", "tower_data_bytes"]

DEFAULT_LIMIT = 999  # items per prompt of a modality --limit-mm-per-prompt does not name
ENCODER_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "llava")
_MODALITIES = ("image", "video", "audio")


@record
class EncoderProfile:
    """What vLLM's multimodal profile run sets up (one rank)."""

    budget: int  # "a budget of N tokens": min(compute budget, cache size)
    items: int  # "profiled with K image items"
    items_per_prompt: int
    tokens_per_item: int  # the image with the most features
    patches: int  # the vision tower's patches on one rank (all K items, or its share)
    outputs: int  # bytes of the K items' embeddings kept in the encoder cache
    encoder_peak: int  # bytes at the encoder's own peak (its outputs, as made, included)

    def log_line(self) -> str:
        return (f"Encoder cache will be initialized with a budget of {self.budget} tokens, "
                f"and profiled with {self.items} image items of the maximum feature size.")


def parse_limit_mm_per_prompt(text: str, nested_ok: bool = True) -> dict[str, int]:
    """--limit-mm-per-prompt as vLLM takes it: JSON ('{"image": 2, "video": 0}'; 0.11.2+
    also '{"image": {"count": 2}}') or the older 'image=2,video=0'. Items by modality."""
    text = text.strip()
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParameterError("{limit_mm_per_prompt}: not JSON (" + literal(e.msg) + "): "
                                 + literal(repr(text)), "limit_mm_per_prompt") from None
    else:
        raw = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not value.strip().isdigit():
                raise ParameterError("{limit_mm_per_prompt} takes JSON like '{{\"image\": 2}}' "
                                     "or image=2,video=0; got " + literal(repr(text)),
                                     "limit_mm_per_prompt")
            raw[key.strip()] = int(value)
    out = {}
    for key, value in raw.items():
        if key not in _MODALITIES:
            raise ParameterError("{limit_mm_per_prompt}: modality " + literal(repr(key))
                                 + " is none of " + literal(", ".join(_MODALITIES)),
                                 "limit_mm_per_prompt")
        if isinstance(value, dict):
            if not nested_ok:
                raise ParameterError("{limit_mm_per_prompt}: the {{\"count\": N, ...}} form "
                                     "is vLLM's from 0.11.2; give a number",
                                     "limit_mm_per_prompt")
            extra = set(value) - {"count"}
            if extra:
                raise ParameterError("{limit_mm_per_prompt}: " + literal(", ".join(sorted(extra)))
                                     + " (the dummy image's size) is not counted; give the "
                    "count alone", "limit_mm_per_prompt")
            value = value.get("count", DEFAULT_LIMIT)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ParameterError("{limit_mm_per_prompt}: " + literal(key) + " must be a whole "
                                 "number >= 0, got " + literal(repr(value)),
                                 "limit_mm_per_prompt")
        out[key] = value
    return out


def encoder_profile(spec, s, tokens: int, seqs: int) -> EncoderProfile | None:
    """The multimodal profile vLLM runs before the text model's (None: a model with no
    image rule, or every modality limited to 0). `tokens`, `seqs`: max_num_batched_tokens
    and max_num_seqs as the release fills them in."""
    from kvcalc.formulas.images import max_image_patches, max_image_tokens

    if not s.rules.encoder_profiled():
        if s.limit_mm_per_prompt is not None:
            raise ParameterError("{limit_mm_per_prompt}: vLLM's multimodal profile is "
                                 "counted in the V1 engine; vLLM " + literal(
                                     f"{s.vllm_version} ({s.engine.upper()}) is not read"),
                                 "limit_mm_per_prompt")
        return None
    g = spec.extra.get("image")
    if g is None or g["family"] not in ENCODER_FAMILIES:
        if s.limit_mm_per_prompt is not None and g is None:
            raise ParameterError("{limit_mm_per_prompt}: " + literal(spec.name) + " is read "
                                 "as a text model (no vision tower with an image rule, "
                                 "kvcalc.formulas.images); give a multimodal config",
                                 "limit_mm_per_prompt")
        if s.limit_mm_per_prompt is not None:
            raise ParameterError("{limit_mm_per_prompt}: vLLM's encoder budget for "
                                 + literal(g["family"]) + " is not modelled (kvcalc counts it "
                                 "for " + literal(", ".join(ENCODER_FAMILIES)) + ")",
                                 "limit_mm_per_prompt")
        return None
    limits = ({} if s.limit_mm_per_prompt is None else
              parse_limit_mm_per_prompt(s.limit_mm_per_prompt, s.rules.limit_mm_nested()))
    limit = limits.get("image", DEFAULT_LIMIT)
    if limit == 0:
        return None
    m = max_image_tokens(g)
    budget = max(tokens, m)  # min(max(encoder inputs, M), max(cache size, M)): both = tokens
    per_prompt = max(1, min(limit, s.max_model_len // m))
    reqs = seqs if s.chunked_prefill is not False else min(seqs, tokens // m)
    items = max(1, min(budget // m, reqs * per_prompt))
    md = dtype(s.model_dtype)
    rows = budget if s.rules.encoder_outputs_expanded() and m < budget else m
    outputs = md.nbytes(items * rows * spec.d_model)
    data = encoder_data_parallel(spec, s)
    patches = (-(-items // s.tp) if data else items) * max_image_patches(g)  # on one rank
    pixel = 3 * g.get("temporal", 1) * g["patch"] ** 2
    inputs = patches * pixel * 4 + md.nbytes(patches * pixel)  # fp32, then the tower's dtype
    mlp = g["intermediate"] if data else -(-g["intermediate"] // s.tp)
    block = md.nbytes(patches * (FWD_MLP_COPIES * mlp + FWD_HIDDEN_COPIES * g["hidden"]))
    return EncoderProfile(budget=budget, items=items, items_per_prompt=per_prompt,
                          tokens_per_item=m, patches=patches, outputs=outputs,
                          encoder_peak=inputs + block + md.nbytes(items * m * spec.d_model))


def encoder_data_parallel(spec, s) -> bool:
    """Whether --mm-encoder-tp-mode data takes effect: given, at tp > 1, for a model whose
    vLLM class supports it at this release (`Rules.encoder_tp_data`); "data" where vLLM
    falls back to "weights" counts as "weights", as vLLM runs it."""
    if s.mm_encoder_tp_mode not in ("weights", "data"):
        raise ParameterError("{mm_encoder_tp_mode} is weights or data, got "
                             + literal(repr(s.mm_encoder_tp_mode)), "mm_encoder_tp_mode")
    if s.mm_encoder_tp_mode == "weights":
        return False
    g = spec.extra.get("image")
    supported = s.rules.encoder_tp_data(g["family"] if g else "")
    if supported is None:
        raise ParameterError("{mm_encoder_tp_mode} is vLLM's from 0.10.2; vLLM "
                             + literal(s.vllm_version) + " does not take it", "mm_encoder_tp_mode")
    return bool(supported) and s.tp > 1


def tower_data_bytes(spec, s) -> int:
    """What --mm-encoder-tp-mode data adds to a rank's weights: the vision tower and
    projector whole instead of a 1/tp share (kvcalc.serving.weights counts the share)."""
    if not encoder_data_parallel(spec, s) or s.weights_bytes is not None:
        return 0
    towers = sum(spec.extra.get("towers", {}).values())
    md = dtype(s.model_dtype)
    return md.nbytes(towers) - md.nbytes(-(-towers // s.tp))
