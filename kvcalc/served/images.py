"""Requests that carry images, timed: the tokens the images add to each prompt (their KV
and their prefill in the language model, kvcalc.formulas.images) and the vision encoder's
FLOPs, which the engine runs in the step that carries the request's first prompt chunk
(vLLM: `gpu_model_runner.py::_execute_mm_encoder`, before the text model's forward in
`execute_model`).

The encoder's FLOPs (a matrix multiply of m x k by k x n is 2mkn), per image of P patches
through L blocks of width h and MLP width i:
* q, k, v, o: 2 x P x 4h^2; the MLP: 2 x P x (3 if gated else 2) x h x i (Qwen's ViTs and
  Pixtral gated, CLIP and SigLIP not);
* attention, QK^T and AV: 4 x P x W x h, W the patches a patch attends: all P (CLIP, SigLIP,
  Pixtral, Qwen2-VL, Qwen3.5), or Qwen2.5-VL's 8 x 8-patch windows (window_size 112 /
  patch 14) except in its fullatt_block_indexes layers (4 of 32);
* the merger or projector: Qwen's 2 x (P / merge^2) x (4h x 4h + 4h x out); LLaVA's
  2 x tokens x (h x d + d x d); Pixtral's merge 2 x (P / 4) x 4h x h and its two linears.
The time is FLOPs / (tp x peak x the engine's matmul efficiency) (kvcalc.served.step's
rate for prompt tokens): the encoder's weights are split over tp by default
(--mm-encoder-tp-mode weights).
"""

from __future__ import annotations

from kvcalc.errors import ParameterError, literal
from kvcalc.formulas.images import image_patches, image_tokens

__all__ = ["image_load", "vision_flops"]

_GATED = ("qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "mistral3")
_FULL_ATTENTION_LAYERS = {"qwen2_5_vl": 4}  # Qwen2.5-VL's fullatt_block_indexes
_WINDOW_PATCHES = {"qwen2_5_vl": 64}  # window_size 112 / patch 14 = 8 x 8 patches


def vision_flops(g: dict, patches: int, tokens: int, text_width: int) -> int:
    """FLOPs of the vision tower and projector over one image of `patches` patches that
    becomes `tokens` tokens of width `text_width` (module docstring)."""
    h, i, layers, fam = g["hidden"], g["intermediate"], g["layers"], g["family"]
    mlp = (3 if fam in _GATED else 2) * h * i
    linear = 2 * patches * (4 * h * h + mlp)
    full = _FULL_ATTENTION_LAYERS.get(fam, layers)
    window = min(patches, _WINDOW_PATCHES.get(fam, patches))
    attention = full * 4 * patches * patches * h + (layers - full) * 4 * patches * window * h
    if "merge" in g and fam != "mistral3":  # Qwen's merger: merge^2 patches side by side
        wide = h * g["merge"] ** 2
        head = 2 * (patches // g["merge"] ** 2) * (wide * wide + wide * text_width)
    elif fam == "mistral3":  # patch merger, then the projector's two linears
        head = 2 * (patches // 4) * 4 * h * h + 2 * tokens * (h * text_width
                                                              + text_width * text_width)
    else:  # LLaVA / Gemma 3: a projector over the image tokens
        head = 2 * tokens * (h * text_width + text_width * text_width)
    return layers * linear + attention + head


def image_load(spec, images: int, width: int, height: int) -> tuple[int, int]:
    """(tokens, FLOPs) that `images` images of width x height add to one request of
    `spec` (a multimodal config with an image rule, kvcalc.formulas.images)."""
    g = spec.extra.get("image")
    if g is None:
        raise ParameterError("{images_per_request}: " + literal(spec.name) + " is read as a "
                             "text model (no vision tower with an image rule); give a "
                             "multimodal config", "images_per_request")
    if images < 0:
        raise ParameterError(f"{{images_per_request}} must be 0 or more, got {images}",
                             "images_per_request")
    tokens = image_tokens(g, width, height)
    flops = vision_flops(g, image_patches(g, width, height), tokens, spec.d_model)
    return images * tokens, images * flops
