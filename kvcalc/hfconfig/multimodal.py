"""Multimodal configs: the language model is `text_config`, read as its own family;
vision towers and projectors are counted apart (kvcalc.towers).

`text_config` builds the dict the language model is read from, with the defaults the
wrapper's config class supplies; `with_towers` adds the towers to the spec read from it.
"""

from __future__ import annotations

import dataclasses

from kvcalc.errors import KvcalcError
from kvcalc.spec import ModelSpec

# Wrapper model_type -> its language model's model_type (text_config's default).
WRAPPERS = {
    "llava": "llama", "llava_next": "llama", "mistral3": "mistral", "gemma3": "gemma3_text",
    "llama4": "llama4_text", "qwen2_5_vl": "qwen2", "qwen2_vl": "qwen2",
    "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "gemma4": "gemma4_text",
    "fuyu": "persimmon", "got_ocr2": "qwen2", "phi4_multimodal": "phi3",
    "mllama": "mllama_text_model",
    "emu3": "emu3_text_model",
    "gemma4_unified": "gemma4_unified_text",
    "dots3_note": "dots3_note_text",
    # text-to-music and speech: MusicGen's decoder is `decoder`, beside a T5 text encoder
    # and an EnCodec codec; MOSS-Transcribe-Diarize's language model (Qwen3) a Whisper-style
    # audio encoder's
    "musicgen": "musicgen_decoder", "musicgen_melody": "musicgen_melody_decoder",
    "moss_transcribe_diarize": "qwen3",
    "gemma3n": "gemma3n_text",
    "inkling2": "inkling2_text", "inkling2_loop": "inkling2_loop_text",
    "inkling_mm_model": "inkling_text",
    "qwen4_exp": "qwen4_exp_text",
    "hy_v4_vl": "hy_v4_vl_text",
    "deepseek_vl": "llama", "deepseek_vl_hybrid": "llama", "paligemma": "gemma",
    # Kimi K2.5 (Kimi_K25Config): DeepSeek-V3's language model (its published text_config
    # says "kimi_k2", which Kimi_K25Config reads as deepseek_v3) beside a MoonViT tower
    "kimi_k25": "deepseek_v3",
}
# Each wrapper's config-class default for tie_word_embeddings.
_WRAPPER_TIED = {"llava": False, "llava_next": False, "mistral3": True, "gemma3": True,
                 "llama4": False, "qwen2_5_vl": False, "qwen2_vl": False,
                 "qwen3_5": False, "qwen3_5_moe": False, "gemma4": True, "fuyu": False,
                 "got_ocr2": True, "phi4_multimodal": False,
                 "mllama": None,  # None: the class has no flag; text_config's own ties
                 "emu3": False, "gemma4_unified": True, "dots3_note": False,
                 "musicgen": None, "musicgen_melody": None,
                 "moss_transcribe_diarize": True, "gemma3n": True,
                 # the Inklings' heads are never tied (_tied_weights_keys = {}): no flag read
                 "inkling2": None, "inkling2_loop": None, "inkling_mm_model": None,
                 "qwen4_exp": False, "hy_v4_vl": False, "deepseek_vl": True,
                 "deepseek_vl_hybrid": True, "paligemma": True, "kimi_k25": True}
# Where a wrapper keeps its language model, when not in text_config.
_TEXT_KEY = {"musicgen": "decoder", "musicgen_melody": "decoder"}
# What a wrapper holds beside its language model, where kvcalc has no formula for it.
_UNCOUNTED = {"musicgen": "its T5 text encoder, EnCodec audio codec and projection",
              "musicgen_melody": "its T5 text encoder, EnCodec audio codec and the text "
                                 "and chroma projections",
              "deepseek_vl_hybrid": "its SigLIP and SAM vision towers, SAM neck and "
                                    "aligner"}
# What a wrapper with a tower formula may also hold, where kvcalc has none for it: the
# sub-config that says so and what is not counted.
_UNCOUNTED_BESIDE = {"gemma4": ("audio_config", "its audio tower and audio projector")}
# LlamaConfig's defaults (Llama 2 7B), which LLaVA-1.5's short text_config relies on, and
# DeepSeek-VL's absent one.
_LLAMA_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "vocab_size": 32000}

# PaliGemmaConfig's text_config when absent (its SubConfigSpec init_kwargs): Gemma's class
# with these; a text_config given is read with Gemma's own defaults.
_PALIGEMMA_TEXT_DEFAULTS = {"model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18,
                            "intermediate_size": 16384, "num_attention_heads": 8,
                            "num_key_value_heads": 1, "vocab_size": 257152}

# MossTranscribeDiarizeConfig's text_config when absent (its SubConfigSpec init_kwargs):
# Qwen3's class with these; a text_config given is read with Qwen3's own defaults.
_MOSS_TEXT_DEFAULTS = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                       "num_attention_heads": 16, "num_key_value_heads": 8,
                       "max_position_embeddings": 131_072, "vocab_size": 151936}

# FuyuConfig's text_config defaults (its SubConfigSpec init_kwargs, transformers 5.24: Fuyu-8B's
# Persimmon, which PersimmonConfig's own defaults equal). A text_config given is read with
# these, the flat fields beside it ignored: adept/fuyu-8b's published config states
# `"text_config": {"model_type": "persimmon"}` and its geometry at the top level.
_FUYU_TEXT_DEFAULTS = {"vocab_size": 262144, "max_position_embeddings": 16384,
                       "hidden_size": 4096, "intermediate_size": 16384,
                       "num_hidden_layers": 36, "num_attention_heads": 64,
                       "hidden_act": "relu2", "layer_norm_eps": 1e-5, "qk_layernorm": True}

# Phi4MultimodalConfig's defaults where Phi3Config's differ (transformers 5.24).
_PHI4_MULTIMODAL_DEFAULTS = {"vocab_size": 200064, "num_key_value_heads": 8,
                             "max_position_embeddings": 131072}


def text_config(cfg: dict, model_type: str, where: str) -> dict:
    """The language model's config dict (a copy), with the wrapper's defaults filled in."""
    text = cfg.get(_TEXT_KEY.get(model_type, "text_config"))
    if text is None and model_type == "moss_transcribe_diarize":
        text = dict(_MOSS_TEXT_DEFAULTS)
    elif text is None and model_type == "paligemma":
        text = dict(_PALIGEMMA_TEXT_DEFAULTS)
    elif text is None and model_type in ("deepseek_vl", "deepseek_vl_hybrid"):
        text = {}  # LlamaConfig's defaults (below)
    elif text is None and model_type in ("qwen2_5_vl", "qwen2_vl"):
        text = {k: v for k, v in cfg.items() if k != "vision_config"}  # older flat layout
    elif text is None and model_type == "phi4_multimodal":
        # Phi4MultimodalConfig: Phi-3's fields at the top, its own defaults where they differ
        text = {k: v for k, v in cfg.items() if k not in ("vision_config", "audio_config")}
        for key, value in _PHI4_MULTIMODAL_DEFAULTS.items():
            text.setdefault(key, value)
    elif text is None and model_type == "dots3_note":
        # Dots3NoteConfig: published checkpoints keep the text fields at the top level
        text = {k: v for k, v in cfg.items() if k not in ("vision_config", "audio_config")}
    elif text is None and model_type == "fuyu":
        # FuyuConfig: a flat config's text fields (or none: Persimmon-8B's) become text_config
        text = {k: v for k, v in cfg.items() if k not in ("model_type", "text_config")}
    if not isinstance(text, dict):
        raise KvcalcError(f"{where}: model_type {model_type!r} needs a "
                          f"'{_TEXT_KEY.get(model_type, 'text_config')}' object")
    text = dict(text)
    if model_type == "fuyu":
        for key, value in _FUYU_TEXT_DEFAULTS.items():
            text.setdefault(key, value)
    text.setdefault("model_type", WRAPPERS[model_type])
    if model_type == "kimi_k25" and text["model_type"] == "kimi_k2":
        text["model_type"] = "deepseek_v3"  # Kimi_K25Config.__post_init__ (remote code's name)
    if text["model_type"] in (model_type, "qwen2_5_vl_text", "qwen2_vl_text"):
        text["model_type"] = WRAPPERS[model_type]  # Qwen2-VL's text model is Qwen2's
    if text["model_type"] == "llama" and model_type.startswith(("llava", "deepseek_vl")):
        for key, value in _LLAMA_DEFAULTS.items():
            text.setdefault(key, value)
    if text["model_type"] == "gemma3_text":
        text.setdefault("vocab_size", 262_208)  # Gemma3TextConfig's default, which Gemma 3 relies on
    # The wrapper's own flag (its config class's default when absent) ties the lm_head of
    # the whole model in transformers 5, whatever text_config says.
    tied = cfg.get("tie_word_embeddings")
    if _WRAPPER_TIED[model_type] is not None:
        text["tie_word_embeddings"] = _WRAPPER_TIED[model_type] if tied is None else tied
    return text


def with_towers(spec: ModelSpec, cfg: dict, model_type: str, where: str) -> ModelSpec:
    """The language model's spec with the wrapper's vision towers noted and kept in extra."""
    from kvcalc.towers import tower_params

    towers = tower_params(cfg, model_type, spec.d_model, where)
    if towers:
        notes = spec.notes + (f"; {model_type}: a multimodal config; the language model is "
                              f"counted, its {'audio' if 'audio_tower' in towers else 'vision'} "
                              f"tower and projector "
                              f"({sum(towers.values()):,} parameters) apart")
        key, what = _UNCOUNTED_BESIDE.get(model_type, (None, ""))
        if key and isinstance(cfg.get(key), dict):
            notes += f"; {what} not counted (no formula for them)"
    elif model_type in _UNCOUNTED:
        notes = spec.notes + (f"; {model_type}: the decoder is counted; "
                              f"{_UNCOUNTED[model_type]} are not (no formula for them)")
    else:
        notes = spec.notes + (f"; {model_type}: the language model of a multimodal config "
                              "(no vision tower formula for it: not counted)")
    extra = {**spec.extra, "hf_wrapper": model_type, "towers": towers}
    from kvcalc.formulas.images import image_geometry

    image = image_geometry(cfg, model_type)
    if image is not None:  # what an image becomes in tokens (kvcalc.formulas.images)
        extra["image"] = image
    vision = cfg.get("vision_config")
    if isinstance(vision, dict):  # as the config states them (engines size by them)
        extra["vision_config"] = {k: vision[k] for k in ("num_hidden_layers", "hidden_size")
                                  if k in vision}
    return dataclasses.replace(spec, notes=notes, extra=extra)
