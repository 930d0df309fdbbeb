"""The family table: each config.json model_type kvcalc reads, and the adapter that reads
it (a function of the typed config returning ModelSpec's fields).

The first sentence of each adapter's docstring is its description in
`kvcalc presets --families`.
"""

from __future__ import annotations

from typing import Callable

from kvcalc.hfconfig.config import Config
from kvcalc.hfconfig.gpt import (bloom, falcon, gpt2_like, gpt_neo, gpt_neox, gptj, mpt,
                                      opt, phi)
from kvcalc.hfconfig.liquid import jamba, lfm2, lfm3, mamba, nemotron_h, qwen3_next
from kvcalc.hfconfig.llama import cohere, gemma3, llama_like, llama_variants, olmo, starcoder2
from kvcalc.hfconfig import (gemma3n, gpt_older, llama_2026, moe_2026, moe_more, inkling,
                             moe_indexed, moe_swa, vlm_text)
from kvcalc.hfconfig import gemma as gemma4, olmo as olmo_hybrid, zyphra as zamba
from kvcalc.hfconfig.moe import deepseek, gpt_oss, llama4, qwen_moe, youtu
from kvcalc.hfconfig.multimodal import WRAPPERS
from kvcalc.hfconfig.recurrent import (bailing_hybrid, kimi_linear, minimax, recurrent_gemma,
                                        rwkv, xlstm)
from kvcalc.hfconfig.mamba import (bamba, falcon_h1, granitemoehybrid, lara_mini,
                                            lfm2_moe, mamba2, qwen3_5, qwen4_exp)
from kvcalc.hfconfig import (blt, granite, llama_more, looped, modernbert, moe_later)
from kvcalc.hfconfig import deepseek as deepseek_v4, musicgen as audio

FAMILIES: dict[str, Callable[[Config], dict]] = {
    "llama": llama_like,
    "mistral": llama_like,
    "mixtral": llama_like,
    "qwen2": llama_like,
    "qwen3": llama_like,
    "gemma": llama_like,
    "gemma2": llama_like,
    "phi3": llama_like,
    "falcon": falcon,
    "gpt2": gpt2_like,
    "gpt_bigcode": gpt2_like,
    "gpt_neox": gpt_neox,
    "opt": opt,
    "deepseek_v2": deepseek,
    "deepseek_v3": deepseek,
    "gemma3_text": gemma3,
    "cohere": cohere,
    "cohere2": cohere,
    "gpt_oss": gpt_oss,
    "llama4_text": llama4,
    "qwen2_moe": qwen_moe,
    "qwen3_moe": qwen_moe,
    "olmoe": qwen_moe,
    "olmo": olmo,
    "olmo2": olmo,
    "phi": phi,
    "gptj": gptj,
    "starcoder2": starcoder2,
    "mamba": mamba,
    "falcon_mamba": mamba,
    "jamba": jamba,
    "granite": llama_variants,
    "granitemoe": llama_variants,
    # Granite's later decoders (granite)
    "granitemoeshared": granite.granite_later,
    "granite_swa": granite.granite_later,
    "granitemoe_swa": granite.granite_later,
    "flex_olmo": qwen_moe,
    # Llama with one part of its own (llama_more)
    "bitnet": llama_more.bitnet,
    "diffllama": llama_more.diffllama,
    "hyperclovax": llama_more.hyperclovax,
    "mellum": llama_more.mellum,
    "emu3_text_model": llama_more.emu3_text,
    "gpt-sw3": gpt2_like,  # AutoConfig: GPT2Config (GPT2LMHeadModel)
    "solar_open": moe_later.solar_open,
    "kolibri1": moe_later.kolibri1,
    "modernbert-decoder": modernbert.modernbert_decoder,
    "axk2": moe_later.axk2,
    "stablelm": llama_variants,
    "nemotron": llama_variants,
    "phimoe": llama_variants,
    "bloom": bloom,
    "gpt_neo": gpt_neo,
    "mpt": mpt,
    "lfm2": lfm2,
    "qwen3_next": qwen3_next,
    "minicpm3": deepseek,
    "nemotron_h": nemotron_h,
    # state and hybrid families (kvcalc.hfconfig.mamba)
    "mamba2": mamba2,
    "bamba": bamba,
    "granitemoehybrid": granitemoehybrid,
    "falcon_h1": falcon_h1,
    "lfm2_moe": lfm2_moe,
    "qwen3_5_text": qwen3_5,
    "qwen3_5_moe_text": qwen3_5,
    # families with recurrent kinds of their own (kvcalc.hfconfig.recurrent)
    "minimax": minimax,
    "kimi_linear": kimi_linear,
    "recurrent_gemma": recurrent_gemma,
    "rwkv": rwkv,
    # Attention and MoE families of 2024-2026 (llama_2026, moe_2026).
    "glm": llama_2026.glm,
    "glm4": llama_2026.glm,
    "seed_oss": llama_2026.seed_oss,
    "ernie4_5": llama_2026.ernie4_5,
    "exaone4": llama_2026.exaone4,
    "smollm3": llama_2026.smollm3,
    "apertus": llama_2026.apertus,
    "arcee": llama_2026.arcee,
    "helium": llama_2026.helium,
    "hunyuan_v1_dense": llama_2026.hunyuan_dense,
    "ministral": llama_2026.ministral,
    "ministral3": llama_2026.ministral,
    "cwm": llama_2026.cwm,
    "internlm3": llama_2026.llama_biased,
    "iquestcoder": llama_2026.llama_biased,
    "exaone": llama_2026.llama_biased,
    "vaultgemma": llama_2026.vaultgemma,
    "olmo3": llama_2026.olmo3,
    "glm4_moe": moe_2026.glm4_moe,
    "deepseek_v32": moe_2026.deepseek_v32,
    "minimax_m2": moe_2026.minimax_m2,
    "dbrx": moe_2026.dbrx,
    "ernie4_5_moe": moe_2026.ernie4_5_moe,
    "glm_moe_dsa": moe_2026.deepseek_v32,  # GLM-5: DeepSeek-V3.2's attention, GLM's experts
    "deepseek_v4": deepseek_v4.deepseek_v4,  # compressed attention, hyper-connections
    "glm4_moe_lite": moe_2026.glm4_moe_lite,
    "hunyuan_v1_moe": moe_2026.hunyuan_moe,
    # More MoE families (moe_more)
    "dots1": moe_more.dots1,
    "jetmoe": moe_more.jetmoe,
    "cohere2_moe": moe_more.cohere2_moe,
    "exaone_moe": moe_more.exaone_moe,
    "longcat_flash": moe_more.longcat_flash,
    # MoE with sliding/full attention and gated attention; Sarvam's two (moe_swa)
    "mimo_v2_flash": moe_swa.mimo_v2_flash,
    "laguna": moe_swa.laguna,
    "afmoe": moe_swa.afmoe,
    "beam": moe_swa.beam,
    "flint": moe_swa.flint,
    "sarvam_moe": moe_swa.sarvam_moe,
    "sarvam_mla": moe_swa.sarvam_mla,
    "minimax_m3_vl_text": moe_indexed.minimax_m3_text,
    "dots3_note_text": moe_indexed.dots3_note_text,
    "hy_v4": moe_indexed.hy_v4,
    "hy_v4_vl_text": moe_indexed.hy_v4,  # HY V4's language model in its multimodal wrapper
    "inkling_text": inkling.inkling_text,
    "inkling2_text": inkling.inkling2_text,
    "inkling2_loop_text": inkling.inkling2_loop_text,
    "gemma4_text": gemma4.gemma4_text,
    "zamba": zamba.zamba,
    "zamba2": zamba.zamba,
    "olmo_hybrid": olmo_hybrid.olmo_hybrid,
    "xlstm": xlstm,
    "bailing_hybrid": bailing_hybrid,
    # Older GPT-shaped decoders (gpt_older)
    "codegen": gpt_older.codegen,
    "ctrl": gpt_older.ctrl,
    "xglm": gpt_older.xglm,
    "biogpt": gpt_older.biogpt,
    "gpt_neox_japanese": gpt_older.gpt_neox_japanese,
    "persimmon": gpt_older.persimmon,
    "git": gpt_older.git,
    # Gemma 3n, 2026 Llama variants and more (gemma3n, ...)
    "gemma3n_text": gemma3n.gemma3n_text,
    "gemma4_unified_text": gemma4.gemma4_unified_text,
    "apertus1p5_text": llama_2026.apertus1p5_text,
    # Language models of multimodal families (vlm_text)
    "aria_text": vlm_text.aria_text,
    "moshi": vlm_text.moshi,
    "mllama_text_model": vlm_text.mllama_text,
    "lfm3": lfm3,
    "youtu": youtu,
    "lara_mini": lara_mini,
    "jais2": llama_2026.jais2,
    "nanochat": llama_2026.nanochat,
    "hy_v3": moe_2026.hy_v3,
    "axk1": moe_2026.axk1,
    "doge": llama_2026.doge,
    "zaya": moe_more.zaya,
    "dory": looped.dory,
    "hrm_text": looped.hrm_text,
    # Decoders over audio codes (audio); their composite configs are wrappers (multimodal)
    "musicgen_decoder": audio.musicgen_decoder,
    "musicgen_melody_decoder": audio.musicgen_melody_decoder,
    "qwen4_exp_text": qwen4_exp,
    # The Byte Latent Transformer (blt)
    "blt": blt.blt,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(FAMILIES) + tuple(WRAPPERS)
