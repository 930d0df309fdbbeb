"""The tokens an image becomes in the language model, per vision family kvcalc reads.

A multimodal config's vision tower (kvcalc.towers counts its weights) turns each image
into placeholder tokens the language model attends over like text: they take KV cache,
prefill compute and, in a serving engine, the encoder cache (kvcalc.serving.vllm.encoder).
Each rule follows that family's image processor in transformers 5 (the `processing_*` /
`image_processing_*` files named) with the defaults the published checkpoints'
preprocessor_config.json set, which is what vLLM's processors load:

* Qwen2-VL, Qwen2.5-VL (`qwen2_vl/image_processing_qwen2_vl.py::smart_resize`): height and
  width rounded to multiples of patch x merge (28), scaled into [min_pixels, max_pixels]
  keeping the aspect ratio; tokens = (h / 28) x (w / 28) (patches merged 2 x 2). Qwen2.5-VL's
  published preprocessor_config: min_pixels 3,136, max_pixels 12,845,056 (16,384 tokens at
  most; the class default, 1,003,520, would give 1,280).
* Qwen3.5 (Qwen3-VL's processor, `qwen3_vl/processing_qwen3_vl.py`): the same resize with
  patch 16 (factor 32); Qwen3-VL's published size: shortest_edge 65,536, longest_edge
  16,777,216 pixels (16,384 tokens at most).
* LLaVA 1.5 (`llava/processing_llava.py`): the image is resized to the tower's image_size;
  (image_size / patch_size)^2 tokens, the class token dropped by the "default" feature
  select strategy (576 for CLIP-L/14 at 336).
* Gemma 3 (`gemma3/processing_gemma3.py`): mm_tokens_per_image (256) whatever the size
  (pan-and-scan crops, off by default, are not modelled).
* Mistral 3 / Pixtral (`pixtral/processing_pixtral.py::_get_num_multimodal_tokens`): the
  image shrunk to fit image_size (1,540) on its longest edge (floor), then cut in patches of
  patch_size x spatial_merge_size (28): rows x (columns + 1), one [IMG_BREAK] a row (the last
  an [IMG_END]); 55 x 56 = 3,080 at most.

Not modelled (image_tokens refuses them, naming the family): LLaVA-NeXT's any-resolution
tiles, Llama 4's and InternVL's tiles, Gemma 4, Kimi K2.5, and the others kvcalc.towers counts.
"""

from __future__ import annotations

import math

from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["IMAGE_FAMILIES", "image_geometry", "image_tokens", "max_image_tokens",
           "parse_image_size"]

# Published preprocessor defaults (pixels), by wrapper model_type: (min_pixels, max_pixels).
_QWEN_PIXELS = {"qwen2_vl": (3136, 12845056), "qwen2_5_vl": (3136, 12845056),
                "qwen3_5": (65536, 16777216), "qwen3_5_moe": (65536, 16777216)}
IMAGE_FAMILIES = (*_QWEN_PIXELS, "llava", "gemma3", "mistral3")


def image_geometry(cfg: dict, wrapper: str) -> dict | None:
    """What an image's token count needs from a multimodal config (`wrapper`: its
    model_type), as plain integers; None for a family kvcalc has no rule for. Also the
    vision tower's width, depth and MLP width, which its activations and FLOPs use."""
    if wrapper not in IMAGE_FAMILIES:
        return None
    v = cfg.get("vision_config") or {}
    if not isinstance(v, dict):
        return None

    def num(d: dict, key: str, default: int) -> int:
        value = d.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
            else default

    g = {"family": wrapper}
    if wrapper in _QWEN_PIXELS:
        qwen3 = wrapper.startswith("qwen3")
        lo, hi = _QWEN_PIXELS[wrapper]
        g.update(patch=num(v, "patch_size", 16 if qwen3 else 14),
                 temporal=num(v, "temporal_patch_size", 2), merge=num(v, "spatial_merge_size", 2), min_pixels=lo, max_pixels=hi,
                 hidden=num(v, "hidden_size", 1152 if qwen3 else 1280),
                 intermediate=num(v, "intermediate_size", 4304 if qwen3 else 3420),
                 layers=num(v, "depth", 27 if qwen3 else 32))
    elif wrapper == "llava":
        full = cfg.get("vision_feature_select_strategy", "default") == "full"
        side = num(v, "image_size", 336) // num(v, "patch_size", 14)
        g.update(fixed=side * side + (1 if full else 0), patches=side * side + 1,
                 patch=num(v, "patch_size", 14),
                 hidden=num(v, "hidden_size", 1024), intermediate=num(v, "intermediate_size", 4096),
                 layers=num(v, "num_hidden_layers", 24))
    elif wrapper == "gemma3":
        side = num(v, "image_size", 896) // num(v, "patch_size", 14)
        g.update(fixed=num(cfg, "mm_tokens_per_image", 256), patches=side * side,
                 patch=num(v, "patch_size", 14),
                 hidden=num(v, "hidden_size", 1152), intermediate=num(v, "intermediate_size", 4304),
                 layers=num(v, "num_hidden_layers", 27))
    else:  # mistral3
        g.update(patch=num(v, "patch_size", 14), merge=num(cfg, "spatial_merge_size", 2),
                 longest_edge=num(v, "image_size", 1540), hidden=num(v, "hidden_size", 1024),
                 intermediate=num(v, "intermediate_size", 4096),
                 layers=num(v, "num_hidden_layers", 24))
    return g


def _smart_resize(height: int, width: int, factor: int, lo: int, hi: int) -> tuple[int, int]:
    """transformers' qwen2_vl smart_resize, step for step (its float arithmetic and
    Python's round, so that the counts agree to the token)."""
    if max(height, width) / min(height, width) > 200:
        raise KvcalcError(f"image {width}x{height}: an aspect ratio over 200, which the "
                          f"processor refuses")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > hi:
        beta = math.sqrt((height * width) / hi)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < lo:
        beta = math.sqrt(lo / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_patches(g: dict, width: int, height: int) -> int:
    """Patches the vision tower runs over for one width x height image (before merging):
    what its activations and FLOPs scale with."""
    if "fixed" in g:
        return g["patches"]
    if g["family"] in _QWEN_PIXELS:
        factor = g["patch"] * g["merge"]
        h, w = _smart_resize(height, width, factor, g["min_pixels"], g["max_pixels"])
        return (h // g["patch"]) * (w // g["patch"])
    h, w = _pixtral_size(g, width, height)
    return (h // g["patch"]) * (w // g["patch"])


def _pixtral_size(g: dict, width: int, height: int) -> tuple[int, int]:
    edge, cut = g["longest_edge"], g["patch"] * g["merge"]
    ratio = max(height / edge, width / edge)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return ((height - 1) // cut + 1) * cut, ((width - 1) // cut + 1) * cut


def image_tokens(g: dict, width: int, height: int) -> int:
    """Placeholder tokens one width x height image becomes in the language model."""
    if width <= 0 or height <= 0:
        raise KvcalcError(f"an image is a positive width x height, got {width}x{height}")
    if "fixed" in g:
        return g["fixed"]
    if g["family"] in _QWEN_PIXELS:
        return image_patches(g, width, height) // (g["merge"] ** 2)
    h, w = _pixtral_size(g, width, height)
    cut = g["patch"] * g["merge"]
    return (w // cut + 1) * (h // cut)


def max_image_tokens(g: dict) -> int:
    """The most tokens one image can become: what vLLM profiles and sizes the encoder
    cache by (`get_max_image_tokens`, the image size with the most features)."""
    if "fixed" in g:
        return g["fixed"]
    if g["family"] in _QWEN_PIXELS:  # max_pixels factored into whole merged patches
        return g["max_pixels"] // (g["patch"] * g["merge"]) ** 2
    side = g["longest_edge"] // (g["patch"] * g["merge"])
    return side * (side + 1)


def max_image_patches(g: dict) -> int:
    """The vision tower's patches for the image with the most tokens."""
    if "fixed" in g:
        return g["patches"]
    if g["family"] in _QWEN_PIXELS:
        return max_image_tokens(g) * g["merge"] ** 2
    side = g["longest_edge"] // g["patch"]
    return side * side


def parse_image_size(text: str) -> tuple[int, int]:
    """`WxH` (e.g. 1024x768) as (width, height)."""
    w, sep, h = text.lower().replace(" ", "").partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) <= 0 or int(h) <= 0:
        raise ParameterError("{image_size} takes WIDTHxHEIGHT in pixels (e.g. 1024x768), got "
                             + literal(repr(text)), "image_size")
    return int(w), int(h)
