"""Vision towers and projectors of multimodal configs, counted apart from the language model.

A served multimodal model holds these weights too, but they cache nothing and run once
per image, so kvcalc reports them beside the text model rather than inside it. Each
function follows that family's vision modeling file in transformers 5 (which modules
exist, their shapes and biases): CLIP (LLaVA), SigLIP (Gemma 3, PaliGemma, DeepSeek-VL),
Pixtral (Mistral 3), Qwen2.5-VL's window-attention ViT, Llama 4's vision encoder, Qwen3.5's
ViT, Fuyu's patch projection, GOT-OCR 2.0's SAM-style ViT, Llama 3.2 Vision's tiled ViT,
Inkling 2's ViT, HY V4's ViT, Gemma 4's vision model, Kimi K2.5's MoonViT; one audio tower,
MOSS-Transcribe-Diarize's Whisper-style encoder. Counts are exact: tests check them against
the models transformers builds on the meta device.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.errors import KvcalcError


def _vit_layer(h: int, i: int) -> int:
    """A ViT block with biases: q, k, v, o; two LayerNorms (weight + bias); fc1, fc2."""
    return 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)


class _Fields:
    def __init__(self, cfg: dict, where: str, section: str = "vision_config") -> None:
        self.cfg, self.where, self.section = cfg, where, section

    def int(self, key: str, default: int | None = None) -> int:
        value = self.cfg.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise KvcalcError(f"{self.where}: {self.section} field {key!r} must be a positive "
                              f"integer, got {value!r}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        return default if value is None else bool(value)


def _clip(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """CLIP vision model (class token, pre and post LayerNorms) + LLaVA's 2-layer projector."""
    h, i = v.int("hidden_size", 768), v.int("intermediate_size", 3072)
    p, size, layers = v.int("patch_size", 32), v.int("image_size", 224), v.int("num_hidden_layers", 12)
    positions = (size // p) ** 2 + 1
    tower = h + 3 * p * p * h + positions * h + 2 * h + layers * _vit_layer(h, i) + 2 * h
    bias = top.get("multimodal_projector_bias", True) is not False
    proj = (h * text_hidden + (text_hidden if bias else 0)
            + text_hidden * text_hidden + (text_hidden if bias else 0))
    return {"vision_tower": tower, "projector": proj}


def _siglip_tower(v: _Fields) -> int:
    """SigLIP vision model: no class token; an attention-pooling head when vision_use_head."""
    h, i = v.int("hidden_size", 768), v.int("intermediate_size", 3072)
    p, size, layers = v.int("patch_size", 16), v.int("image_size", 224), v.int("num_hidden_layers", 12)
    tower = 3 * p * p * h + h + (size // p) ** 2 * h + layers * _vit_layer(h, i) + 2 * h
    if v.bool("vision_use_head", True):
        tower += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) + (i * h + h)
    return tower


def _siglip(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """SigLIP + Gemma 3's projection matrix and soft-embedding RMSNorm."""
    h = v.int("hidden_size", 768)
    return {"vision_tower": _siglip_tower(v), "projector": h * text_hidden + h}


def _deepseek_vl(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """SigLIP + DeepSeek-VL's aligner: two biased linears into the text width."""
    h = v.int("hidden_size", 768)
    proj = (h * text_hidden + text_hidden) + (text_hidden * text_hidden + text_hidden)
    return {"vision_tower": _siglip_tower(v), "projector": proj}


def _paligemma(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """SigLIP + PaliGemma's biased linear projector to the wrapper's projection_dim."""
    h, out = v.int("hidden_size", 768), top.get("projection_dim") or 2048
    return {"vision_tower": _siglip_tower(v), "projector": h * out + out}


def _pixtral(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Pixtral (RMSNorms, bias-free attention, gated MLP) + Mistral 3's patch merger."""
    h, i = v.int("hidden_size", 1024), v.int("intermediate_size", 4096)
    p, layers = v.int("patch_size", 16), v.int("num_hidden_layers", 24)
    tower = 3 * p * p * h + h + layers * (2 * h + 4 * h * h + 3 * h * i)
    merge = top.get("spatial_merge_size", 2)
    bias = top.get("multimodal_projector_bias", False) is True
    proj = (h + h * merge * merge * h + h * text_hidden + (text_hidden if bias else 0)
            + text_hidden * text_hidden + (text_hidden if bias else 0))
    return {"vision_tower": tower, "projector": proj}


def _qwen25_vl(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Qwen2.5-VL's ViT (3D patch embedding, RMSNorms, biased qkv/proj and gated MLP)
    and its patch merger (RMSNorm, two linears over spatial_merge_size^2 patches)."""
    h, i = v.int("hidden_size", 3584), v.int("intermediate_size", 3420)
    p, t, depth = v.int("patch_size", 14), v.int("temporal_patch_size", 2), v.int("depth", 32)
    merge, out = v.int("spatial_merge_size", 2), v.int("out_hidden_size", 3584)
    block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (h * i + i) + (i * h + h)
    tower = 3 * t * p * p * h + depth * block
    m = h * merge * merge
    merger = h + (m * m + m) + (m * out + out)
    return {"vision_tower": tower + merger, "projector": 0}


def _llama4_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Llama 4's vision encoder (class token, unfolded linear patch embedding, LayerNorms,
    biased ViT blocks, a pixel-shuffle MLP adapter) + a bias-free projector."""
    h, i = v.int("hidden_size", 768), v.int("intermediate_size", 5632)
    p, size, layers = v.int("patch_size", 14), v.int("image_size", 448), v.int("num_hidden_layers", 34)
    tower = (h + ((size // p) ** 2 + 1) * h + 3 * p * p * h + 2 * 2 * h
             + layers * _vit_layer(h, i))
    adapter = i * v.int("projector_input_dim", 4096) + v.int("projector_output_dim", 4096) ** 2
    proj = v.int("vision_output_dim", 7680) * text_hidden
    return {"vision_tower": tower + adapter, "projector": proj}


def _qwen3_5_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Qwen3.5's ViT (biased 3D patch embedding, learned position table, LayerNorm ViT
    blocks) and its patch merger (LayerNorm, two linears over spatial_merge_size^2 patches)."""
    h, i = v.int("hidden_size", 1152), v.int("intermediate_size", 4304)
    p, t, depth = v.int("patch_size", 16), v.int("temporal_patch_size", 2), v.int("depth", 27)
    merge, out = v.int("spatial_merge_size", 2), v.int("out_hidden_size", 3584)
    tower = (v.int("in_channels", 3) * t * p * p * h + h
             + v.int("num_position_embeddings", 2304) * h + depth * _vit_layer(h, i))
    m = h * merge * merge
    merger = 2 * h + (m * m + m) + (m * out + out)
    return {"vision_tower": tower + merger, "projector": 0}


def _fuyu(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Fuyu has no vision encoder: each image patch of patch_size^2 x num_channels pixels is
    projected straight into the language model (vision_embed_tokens, a biased Linear)."""
    pixels = v.int("patch_size", 30) ** 2 * v.int("num_channels", 3)
    return {"vision_tower": 0, "projector": pixels * text_hidden + text_hidden}


def _got_ocr2(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """GOT-OCR 2.0's SAM-style ViT (conv patch embedding, an absolute position grid, windowed
    and global blocks with relative-position tables, a convolutional neck) and its projector
    (two stride-2 3x3 convolutions, then a biased Linear)."""
    h, mlp = v.int("hidden_size", 768), v.int("mlp_dim", 3072)
    p, size, layers = v.int("patch_size", 16), v.int("image_size", 1024), v.int("num_hidden_layers", 12)
    heads, out, window = v.int("num_attention_heads", 12), v.int("output_channels", 256), v.int("window_size", 14)
    grid, head_dim = size // p, h // heads
    globals_ = v.cfg.get("global_attn_indexes", (2, 5, 8, 11))
    tower = v.int("num_channels", 3) * p * p * h + h  # patch_embed: Conv2d with bias
    if v.bool("use_abs_pos", True):
        tower += grid * grid * h
    qkv_bias = 3 * h if v.bool("qkv_bias", True) else 0
    for i in range(layers):
        tower += 2 * 2 * h + (3 * h * h + qkv_bias) + (h * h + h) + (h * mlp + mlp) + (mlp * h + h)
        if v.bool("use_rel_pos", True):
            side = grid if i in globals_ else window  # rel_pos_h and rel_pos_w: 2 x side - 1 rows
            tower += 2 * (2 * side - 1) * head_dim
    tower += h * out + 2 * out + out * out * 9 + 2 * out  # neck: 1x1 and 3x3 convs, LayerNorms
    proj = out * 2 * out * 9 + 2 * out * text_hidden * 9 + text_hidden * text_hidden + text_hidden
    return {"vision_tower": tower, "projector": proj}


def _mllama_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Llama 3.2 Vision's tiled ViT (bias-free conv patch embedding and attention, biased MLP,
    a gated position embedding and per-aspect-ratio tile embeddings, a local then a gated
    global encoder) + a biased projector from vision_output_dim."""
    h, i = v.int("hidden_size", 1280), v.int("intermediate_size", 5120)
    p, size = v.int("patch_size", 14), v.int("image_size", 448)
    tiles, patches = v.int("max_num_tiles", 4), (size // p) ** 2 + 1  # a class token a tile
    ratios = v.cfg.get("supported_aspect_ratios") or [[1, 1], [1, 2], [1, 3], [1, 4],
                                                      [2, 1], [2, 2], [3, 1], [4, 1]]
    rows = len(ratios) + 1  # Embedding(max_aspect_ratio_id + 1, ...)
    block = 2 * 2 * h + 4 * h * h + (h * i + i) + (i * h + h)  # bias-free q/k/v/o
    tower = (v.int("num_channels", 3) * p * p * h + h  # patch embedding, class embedding
             + 1 + patches * h + rows * tiles * patches * h  # gated positions, tile positions
             + 2 * (rows * tiles * h + 1)  # pre- and post-tile aspect-ratio embeddings, gated
             + 2 * 2 * h  # layernorm_pre, layernorm_post
             + v.int("num_hidden_layers", 32) * block
             + v.int("num_global_layers", 8) * (block + 2))  # gate_attn, gate_ffn
    out = v.int("vision_output_dim", 7680)
    return {"vision_tower": tower, "projector": out * text_hidden + text_hidden}


def _moss_audio(a: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """MOSS-Transcribe-Diarize's Whisper-style audio encoder (two biased convolutions,
    learned positions, biased q/v/out and a bias-free k, LayerNorms, a biased GELU MLP, a
    final LayerNorm) and its projector (two linears over audio_merge_size frames side by
    side, biased by projector_bias, then a LayerNorm)."""
    def size(key: str, alias: str, default: int) -> int:  # the class's attribute_map names
        return a.int(key, a.cfg.get(alias, default))

    h, i = size("hidden_size", "d_model", 1024), size("intermediate_size", "encoder_ffn_dim", 4096)
    layers = size("num_hidden_layers", "encoder_layers", 24)
    block = 4 * h * h + 3 * h + 2 * 2 * h + (h * i + i) + (i * h + h)
    tower = (a.int("num_mel_bins", 80) * h * 3 + h + h * h * 3 + h  # conv1, conv2
             + a.int("max_source_positions", 1500) * h + layers * block + 2 * h)
    merge = top.get("audio_merge_size", 4)
    bias = text_hidden if top.get("projector_bias", True) is not False else 0
    proj = h * merge * text_hidden + bias + text_hidden * text_hidden + bias + 2 * text_hidden
    return {"audio_tower": tower, "projector": proj}


def _inkling2_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Inkling 2's ViT (a bias-free linear patch embedding, a learned position grid, class
    token and class position, a pre-LayerNorm, biased ViT blocks with two layer scales each)
    and its merger (two linears over spatial_merge_size^2 patches, biased with
    projector_bias) into the language model."""
    h, p = v.int("hidden_size", 1024), v.int("patch_size", 20)
    layers = v.int("num_hidden_layers", 23)
    i = v.cfg.get("intermediate_size") or int(h * v.cfg.get("mlp_ratio", 4.0))
    grid, merge = v.int("posemb_grid_size", 32), v.int("spatial_merge_size", 2)
    tower = (v.int("num_channels", 3) * p * p * h + grid * grid * h + 2 * h  # class, its position
             + 2 * h + layers * (_vit_layer(h, i) + 2 * h))  # pre_layernorm; lambda_1, lambda_2
    mid, bias = v.int("projection_hidden_dim", 4096), v.bool("projector_bias", False)
    proj = merge * merge * h * mid + mid * text_hidden + ((mid + text_hidden) if bias else 0)
    return {"vision_tower": tower, "projector": proj}


def _hy_v4_vl_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """HY V4's ViT (HunYuan-VL's: a biased conv patch embedding, a learned position grid of
    max_image_size / patch_size squared plus a class position, biased ViT blocks, no final
    norm) and its patch merger (an RMSNorm, a biased conv over spatial_merge_size^2
    patches, a biased 1 x 1 conv to out_hidden_size, and the image_newline row)."""
    h, p = v.int("hidden_size", 1536), v.int("patch_size", 16)
    i, layers = v.int("intermediate_size", 6144), v.int("num_hidden_layers", 40)
    heads, merge = v.int("num_attention_heads", 16), v.int("spatial_merge_size", 2)
    out = v.int("out_hidden_size", 6144)
    a = heads * (h // heads)  # q, k, v and o are heads x head_dim wide (head_dim h // heads)
    block = 3 * (h * a + a) + (a * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)
    edge = v.int("max_image_size", 2048) // p
    tower = v.int("num_channels", 3) * p * p * h + h + (edge * edge + 1) * h + layers * block
    wide = h * merge * merge
    proj = h + (wide * h * merge * merge + wide) + (wide * out + out) + out
    return {"vision_tower": tower, "projector": proj}


def _gemma4_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Gemma 4's vision model (modeling_gemma4.py, Gemma4VisionModel): a bias-free patch
    projection of 3 x patch^2 pixels, a two-axis position table (2 x position_embedding_size
    x hidden), blocks of bias-free q, k, v, o (ClippableLinear: its clip bounds and the
    standardize statistics are buffers, not parameters), q and k RMSNorms of head_dim, a
    gated MLP and four RMSNorms; no final norm, a parameter-free pooler. The projector
    (Gemma4MultimodalEmbedder): a scale-free RMSNorm and a bias-free hidden -> text_hidden."""
    h, i = v.int("hidden_size", 768), v.int("intermediate_size", 3072)
    layers, p = v.int("num_hidden_layers", 16), v.int("patch_size", 16)
    heads = v.int("num_attention_heads", 12)
    kv_heads, d = v.int("num_key_value_heads", 12), v.int("head_dim", 64)
    block = (2 * h * heads * d + 2 * h * kv_heads * d + 2 * d + 3 * h * i + 4 * h)
    tower = 3 * p * p * h + 2 * v.int("position_embedding_size", 10 * 1024) * h + layers * block
    return {"vision_tower": tower, "projector": h * text_hidden}


def _kimi_k25_vision(v: _Fields, top: dict, text_hidden: int) -> dict[str, int]:
    """Kimi K2.5's MoonViT (a biased conv patch embedding, a learned position grid, biased
    ViT blocks, a final LayerNorm) and its patch merger (a LayerNorm of
    projection_hidden_size, two biased linears over merge_kernel_size patches). transformers'
    names first; the published file's own (vt_hidden_size, init_pos_emb_height, ...), which
    transformers 5.24 does not read, when they are absent (K2.5's agree with the defaults)."""
    def size(key: str, published: str, default: int) -> int:
        return v.int(key if key in v.cfg else published, default)

    h = size("hidden_size", "vt_hidden_size", 1152)
    i = size("intermediate_size", "vt_intermediate_size", 4304)
    layers = size("num_hidden_layers", "vt_num_hidden_layers", 27)
    grid = size("pos_emb_height", "init_pos_emb_height", 64) * size(
        "pos_emb_width", "init_pos_emb_width", 64)
    p = v.int("patch_size", 14)
    merge = v.cfg.get("merge_kernel_size") or (2, 2)
    if (not isinstance(merge, (list, tuple)) or len(merge) != 2
            or any(isinstance(m, bool) or not isinstance(m, int) or m <= 0 for m in merge)):
        raise KvcalcError(f"{v.where}: vision_config field 'merge_kernel_size' must be two "
                          "positive integers")
    merged = h * merge[0] * merge[1]
    norm = top.get("projection_hidden_size") or 1152
    tower = 3 * p * p * h + h + grid * h + layers * _vit_layer(h, i) + 2 * h
    proj = 2 * norm + (merged * merged + merged) + (merged * text_hidden + text_hidden)
    return {"vision_tower": tower, "projector": proj}


_TOWERS: dict[str, Callable[[_Fields, dict, int], dict[str, int]]] = {
    "kimi_k25": _kimi_k25_vision,
    "llava": _clip, "llava_next": _clip, "gemma3": _siglip, "mistral3": _pixtral,
    "qwen2_5_vl": _qwen25_vl, "llama4": _llama4_vision,
    "qwen3_5": _qwen3_5_vision, "qwen3_5_moe": _qwen3_5_vision, "fuyu": _fuyu,
    "qwen4_exp": _qwen3_5_vision,  # Qwen4ExpVisionModel is Qwen3.5-MoE's, renamed
    "got_ocr2": _got_ocr2, "mllama": _mllama_vision, "moss_transcribe_diarize": _moss_audio,
    "inkling2": _inkling2_vision, "inkling2_loop": _inkling2_vision,
    "hy_v4_vl": _hy_v4_vl_vision, "deepseek_vl": _deepseek_vl, "paligemma": _paligemma,
    "gemma4": _gemma4_vision,
}
# Wrappers whose image fields sit in the config itself, not in a vision_config.
_FIELDS_AT_TOP = ("fuyu",)
# Wrappers whose tower is not a vision_config's.
_TOWER_KEY = {"moss_transcribe_diarize": "audio_config"}


def tower_params(cfg: dict[str, Any], wrapper: str, text_hidden: int, where: str) -> dict[str, int]:
    """Parameters of the vision tower and projector of a multimodal config, by part;
    {} for a wrapper kvcalc has no tower formula for."""
    vision = cfg if wrapper in _FIELDS_AT_TOP else cfg.get(_TOWER_KEY.get(wrapper, "vision_config"))
    if wrapper not in _TOWERS or not isinstance(vision, dict):
        return {}
    section = _TOWER_KEY.get(wrapper, "vision_config")
    return _TOWERS[wrapper](_Fields(vision, where, section), cfg, text_hidden)
