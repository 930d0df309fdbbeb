"""kvcalc against transformers itself, for every published config under tests/data/hf/.

Parameters: the model transformers builds from the config on the meta device
(tests/hf_truth.py) has exactly kvcalc's count, tied weights once; for multimodal
configs, the language model's count. Cache bytes: a reduced real copy of each model
(same layer pattern and cache geometry, tiny vocabulary and MLP, windows shrunk) is run
on the CPU for a prefill of L-1 tokens and one decode step; every layer's cache then
holds exactly the bytes kvcalc predicts for that layer's kind, below and above the window.
Nothing here compares kvcalc with itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# One worker runs every truth test (pytest-xdist --dist loadgroup): a broken harness is
# reported once (tests/conftest.py), not once per worker.
pytestmark = pytest.mark.xdist_group("transformers-truth")

import hf_truth  # noqa: E402  (tests/ is on sys.path)

from kvcalc.formulas.cache import kv_cache  # noqa: E402
from kvcalc.formulas.params import param_counts  # noqa: E402
from kvcalc.hfconfig import spec_from_hf_config, spec_from_hf_config_file  # noqa: E402
from kvcalc.presets import presets_dir  # noqa: E402
from kvcalc.ground.dtypes import dtype
from kvcalc.layers.indexed import IndexedLatent  # noqa: E402

# Published configs: the test data, and those behind the layered presets (shipped).
DIRS = (Path(__file__).parent / "data" / "hf", presets_dir() / "hf")
FILES = {p.stem: p for d in DIRS for p in d.glob("*.json")}
CONFIGS = sorted(FILES)


def _cfg(stem: str) -> dict:
    return json.loads(FILES[stem].read_text())


def _transformers_extra_params(cfg: dict) -> int:
    """Parameters transformers builds that no checkpoint holds: LongCat-Flash's
    LongcatFlashExperts sizes gate_up_proj for routed + zero experts (its down_proj for the
    routed ones), so each identity expert gets a gate and an up matrix it never runs
    (the checkpoint, 560B by the model card, has none; kvcalc counts the checkpoint's).
    0 elsewhere."""
    if cfg.get("model_type") != "longcat_flash":
        return 0
    blocks = cfg["num_layers"]
    return (blocks * (cfg.get("zero_expert_num") or 0) * 2 * cfg["expert_ffn_hidden_size"]
            * cfg["hidden_size"])


@pytest.mark.parametrize("stem", CONFIGS)
def test_parameters_equal_transformers_meta_model(stem):
    cfg = _cfg(stem)
    truth = hf_truth.meta_param_count(cfg)
    kvcalc_total = param_counts(spec_from_hf_config_file(FILES[stem])).total
    assert kvcalc_total + _transformers_extra_params(cfg) == truth["text"]


def _kvcalc_layer_bytes(cfg: dict, seq_len: int, cross: bool = False) -> list[int]:
    """kvcalc's bytes per decoder layer, one sequence, bf16 cache, fp32 recurrent state;
    with `cross`, a cross-attending layer's K/V of an encoder output of seq_len tokens too
    (what the harness hands a decoder that cross-attends: MusicGen's)."""
    spec = spec_from_hf_config(cfg, "reduced")
    bf16, fp32 = dtype("bf16"), dtype("fp32")
    # transformers keeps an indexer's key in the model's dtype (bf16), dots.llm3's in fp32:
    # its indexer's interleaved RoPE returns fp32 and is not cast back (modeling_dots3_note.py)
    index_bytes = 4 if cfg.get("model_type") == "dots3_note_text" else 2
    out = []
    for layer in spec.layer_list():
        # a parallel hybrid's two mixers share one transformers cache layer (Falcon-H1)
        mixers = (layer.mixer,) if layer.beside is None else (layer.mixer, layer.beside)
        stored = 0
        for mx in mixers:
            held = mx.tokens_held(seq_len)
            stored += mx.token_bytes(bf16) * held + mx.state_bytes(bf16, fp32)
            if isinstance(mx, IndexedLatent):
                # a serving engine keeps it as fp8 and scales (test_indexer_key_bytes_as_vllm)
                stored += (index_bytes * mx.index_head_dim - mx.index_token_bytes()) * held
        if cross and layer.cross is not None:
            stored += layer.cross.token_bytes(bf16) * layer.cross.tokens_held(seq_len, seq_len)
        out.append(stored)
    if cfg.get("model_type") == "deepseek_v4":
        out = [b + d for b, d in zip(out, _deepseek_v4_transformers_difference(cfg, seq_len))]
    return out


def _deepseek_v4_transformers_difference(cfg: dict, seq_len: int) -> list[int]:
    """What transformers 5.24 holds beyond kvcalc's count, per layer, after a prefill of
    seq_len - 1 tokens and a decode step (bf16; modeling_deepseek_v4.py). A sliding-only
    layer's DynamicSlidingWindowLayer keeps K and V apart, the same vector twice (kvcalc,
    like the compressed layers' own cache, once). A compressed layer's leftover, which
    kvcalc counts at its most (compress-rate tokens, and on CSA layers the previous
    group's Ca): DeepseekV4HCACache keeps a view of the decode step's concatenation,
    (L - 1) % rate + 1 tokens of keys and gates, and the Ca (keys bf16, gates fp32) only
    once a first group has closed. Negative where transformers holds less."""
    d, di = cfg["head_dim"], cfg["index_head_dim"]
    rates = cfg["compress_rates"]
    window = cfg["sliding_window"]
    out = []
    for kind in cfg["layer_types"]:
        if kind == "sliding_attention":
            out.append(2 * d * min(seq_len, window))
            continue
        rate = rates[kind]
        csa = kind == "compressed_sparse_attention"
        # keys and gates: two series (2 x head_dim) on CSA and its indexer's (2 x di)
        per_token = 2 * 2 * ((2 * d + 2 * di) if csa else d)
        missing = rate - ((seq_len - 1) % rate + 1)
        diff = -missing * per_token
        if csa and seq_len < rate:
            diff -= (2 + 4) * rate * (d + di)
        out.append(diff)
    return out


def _measured_layer_bytes(measured: list[dict], layers_after=None) -> tuple[list[int], bool]:
    """Bytes per decoder layer as transformers holds them: an EncoderDecoderCache's
    cross-attention layer joins its self-attention layer of the same index, or with
    `layers_after` (BLT's local decoder) its layers follow the self part's. Also whether
    there was a cross-attention part."""
    own = [m["stored_bytes"] for m in measured if m["part"] == "self"]
    cross = [m for m in measured if m["part"] == "cross"]
    if layers_after is not None:  # BLT: the cross part holds the local decoder's layers
        return own + [m["stored_bytes"] for m in cross], False
    for m in cross:
        own[m["layer"]] += m["stored_bytes"]
    return own, bool(cross)


def test_indexer_key_bytes_as_vllm():
    # vLLM's DeepseekV32IndexerCache: head_dim + head_dim // quant_block_size (128) * 4
    # bytes of uint8 (model_executor/models/deepseek_v2.py): DeepSeek-V3.2's 128-element
    # key is 128 fp8 bytes and one fp32 scale.
    cfg = _cfg("deepseek-ai__DeepSeek-V3.2-Exp")
    mixer = spec_from_hf_config(cfg, "v32").layer_list()[0].mixer
    assert mixer.index_token_bytes() == 128 + 4
    # the latent (512 + 64 elements) in bf16 plus the indexer's key, per token per layer
    assert mixer.token_bytes(dtype("bf16")) == (512 + 64) * 2 + 132


# Reduced copies keep windows of WINDOW tokens: contexts below, at and above it.
WINDOW = 8


def _transformers_expansion(cfg: dict) -> int:
    """Where transformers caches more than a serving engine: its Falcon with
    new_decoder_architecture repeats K/V to every query head before caching them
    (kvcalc, like vLLM, counts num_kv_heads). 1 elsewhere."""
    if cfg.get("model_type") == "falcon" and cfg.get("new_decoder_architecture"):
        return cfg["num_attention_heads"] // cfg["num_kv_heads"]
    return 1


@pytest.mark.parametrize("stem", CONFIGS)
def test_cache_bytes_equal_transformers_cache_after_decode(stem):
    cfg = _cfg(stem)
    reduced = hf_truth.reduced_config(cfg, window=WINDOW)
    expand = _transformers_expansion(reduced)
    for seq_len in (WINDOW - 3, WINDOW + 5, 3 * WINDOW + 1):
        measured = hf_truth.cache_bytes_after_decode(cfg, seq_len, window=WINDOW)
        predicted = [b * expand for b in _kvcalc_layer_bytes(reduced, seq_len)]
        assert len(predicted) == len(measured)
        got = [m["stored_bytes"] for m in measured]
        assert predicted == got, (seq_len, [m["cache_class"] for m in measured])


# Families without a published config here (or whose default pattern differs from the
# published ones): the config transformers itself builds for the model_type, with its
# class defaults, cut to a few layers that still show every layer kind.
DEFAULT_CONFIGS = {
    "granite": {"num_hidden_layers": 2},
    "granitemoe": {"num_hidden_layers": 2},
    # Granite's later decoders (kvcalc/hfconfig/granite.py): GraniteMoeShared with a shared
    # MLP (its class's 0 builds none; its docstring's 1024), the SWA ones' three sliding
    # layers to one global as their classes lay them out; head_dim stated (the 128 their
    # attention derives) so that the reduced copy narrows hidden_size (4096)
    "granitemoeshared": {"num_hidden_layers": 2, "shared_intermediate_size": 1024, "head_dim": 128},
    "granite_swa": {"num_hidden_layers": 4},
    "granitemoe_swa": {"num_hidden_layers": 4, "head_dim": 128},
    "flex_olmo": {"num_hidden_layers": 2, "head_dim": 128},  # stated: hidden_size narrows
    # Llama with one part of its own (kvcalc/hfconfig/llama.py); Mellum with a sliding
    # layer and a dense one beside its class's full, sparse layers
    "bitnet": {"num_hidden_layers": 2},
    "diffllama": {"num_hidden_layers": 2},
    "hyperclovax": {"num_hidden_layers": 2},
    "mellum": {"num_hidden_layers": 3,
               "layer_types": ["sliding_attention", "full_attention", "full_attention"],
               "mlp_layer_types": ["dense", "dense", "sparse"]},
    # Emu3's language model through its wrapper (AutoModelForCausalLM builds Emu3ForCausalLM
    # from the wrapper's config, nothing from emu3_text_model's alone)
    "emu3": {"text_config": {"num_hidden_layers": 2}},
    # GPT-SW3: transformers maps gpt-sw3 to GPT2Config and GPT2LMHeadModel
    "gpt-sw3": {"n_layer": 2},
    "solar_open": {"num_hidden_layers": 2},
    "kolibri1": {"num_hidden_layers": 5},  # four sliding layers, then the global one
    "modernbert-decoder": {"num_hidden_layers": 3},  # a global layer, then two sliding
    "axk2": {"num_hidden_layers": 2},  # a dense layer, then experts (4 in the reduced copy)
    "stablelm": {"num_hidden_layers": 2, "qk_layernorm": True, "use_qkv_bias": True},
    "nemotron": {"num_hidden_layers": 2, "num_key_value_heads": 8},
    "phimoe": {"num_hidden_layers": 2},
    "bloom": {"n_layer": 2},
    "gpt_neo": {"num_layers": 4, "attention_types": [[["global", "local"], 2]]},
    "mpt": {"n_layers": 2},
    "lfm2": {"num_hidden_layers": 6, "full_attn_idxs": [2, 5], "layer_types": None},
    "minicpm3": {"num_hidden_layers": 2},
    "qwen3_next": {"num_hidden_layers": 8},
    "cohere2": {"num_hidden_layers": 8},
    "gemma3_text": {"num_hidden_layers": 7},
    "qwen2_moe": {"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]},
    "llama4_text": {"num_hidden_layers": 4, "interleave_moe_layer_step": 2},
    "nemotron_h": {"layers_block_type": ["linear_attention", "moe", "full_attention", "mlp",
                                         "linear_attention", "mlp"]},
    # state and hybrid families (kvcalc/hfconfig/mamba.py, liquid.py, qwen.py, lara.py)
    "mamba2": {"num_hidden_layers": 3},  # 2 would cut time_step_limit, a 2-list, too
    "bamba": {"num_hidden_layers": 4, "attn_layer_indices": [1, 3]},
    "granitemoehybrid": {"num_hidden_layers": 4, "layer_types": [
        "mamba", "attention", "mamba", "attention"]},
    "lfm2_moe": {"num_hidden_layers": 4, "num_dense_layers": 1,
                 "layer_types": ["conv", "conv", "full_attention", "conv"]},
    "qwen3_5_text": {"num_hidden_layers": 4},
    "qwen3_5_moe_text": {"num_hidden_layers": 4},
    "minimax": {"num_hidden_layers": 4},
    "kimi_linear": {"num_hidden_layers": 5},
    "recurrent_gemma": {"num_hidden_layers": 3},
    "rwkv": {"num_hidden_layers": 3},
    "falcon_h1": {"num_hidden_layers": 3},
    # 2024-2026 attention and MoE families (kvcalc/hfconfig/llama.py, glm.py, ...)
    "glm": {"num_hidden_layers": 2},
    "glm4": {"num_hidden_layers": 2},
    "seed_oss": {"num_hidden_layers": 2},
    "ernie4_5": {"num_hidden_layers": 2},
    "exaone4": {"num_hidden_layers": 4},
    "smollm3": {"num_hidden_layers": 4, "use_sliding_window": True, "sliding_window": 64},
    "apertus": {"num_hidden_layers": 2},
    "arcee": {"num_hidden_layers": 2},
    "helium": {"num_hidden_layers": 2},
    # Their classes default head_dim to None, which their attention cannot build with.
    "hunyuan_v1_dense": {"num_hidden_layers": 2, "head_dim": 128},
    "ministral": {"num_hidden_layers": 2, "head_dim": 128},
    "ministral3": {"num_hidden_layers": 2},
    "cwm": {"num_hidden_layers": 4, "layer_types": ["full_attention"] + ["sliding_attention"] * 3},
    "internlm3": {"num_hidden_layers": 2},
    "iquestcoder": {"num_hidden_layers": 2},
    "exaone": {"num_hidden_layers": 2},
    "vaultgemma": {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]},
    "olmo3": {"num_hidden_layers": 4},
    "glm4_moe": {"num_hidden_layers": 3},
    "deepseek_v32": {"num_hidden_layers": 4},
    "minimax_m2": {"num_hidden_layers": 2},
    "ernie4_5_moe": {"num_hidden_layers": 3},
    "glm_moe_dsa": {"num_hidden_layers": 4, "index_topk_freq": 2},  # layer 2 shares an indexer
    "glm4_moe_lite": {"num_hidden_layers": 3},
    "hunyuan_v1_moe": {"num_hidden_layers": 2, "head_dim": 128, "num_experts": 8, "moe_topk": 2},
    # More MoE families (kvcalc/hfconfig/dots.py, jetmoe.py, ...). Dots1Config leaves the experts None,
    # which its MoE cannot build with: a small set, and a window from layer 2 on.
    "dots1": {"num_hidden_layers": 3, "n_routed_experts": 8, "num_experts_per_tok": 2,
              "n_shared_experts": 1, "first_k_dense_replace": 1, "max_window_layers": 2},
    # a dense first layer (its own pattern: global), then three sliding to one global
    "cohere2_moe": {"num_hidden_layers": 5, "first_k_dense_replace": 1,
                    "num_shared_experts": 1},
    "exaone_moe": {"num_hidden_layers": 4},
    "jetmoe": {"num_hidden_layers": 2},
    "longcat_flash": {"num_layers": 1},
    # Gemma 4 (kvcalc/hfconfig/gemma.py): the class's 5 sliding : 1 full, per-layer input
    # embeddings; the published E2B and 26B-A4B configs show K/V sharing and experts
    "gemma4_text": {"num_hidden_layers": 6},
    # Zamba and Zamba2 (kvcalc/hfconfig/zyphra.py): shared blocks tied over the hybrid layers
    # (Zamba: one; here Zamba2 cycles two over three uses, with q/k/v adapters). Zamba needs
    # two hybrid layers to build; both 256 wide (the classes' 3712 and 2560 made the CPU's
    # Mamba take a minute)
    "zamba": {"num_hidden_layers": 3, "hidden_size": 256, "intermediate_size": 1024,
              "layers_block_type": ["mamba", "hybrid", "hybrid"]},
    "zamba2": {"num_hidden_layers": 5, "num_mem_blocks": 2, "use_shared_attention_adapter": True,
               "hidden_size": 256,
               "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "hybrid"]},
    # OLMo Hybrid (kvcalc/hfconfig/olmo.py): three Gated DeltaNet layers, then OLMo 3's
    # attention; 256 wide (the class's 3840 made the CPU's delta rule slow)
    "olmo_hybrid": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4},
    # xLSTM (kvcalc/hfconfig/xlstm.py): mLSTM blocks, 256 wide (the class's 4096 is 7B)
    "xlstm": {"num_hidden_layers": 2, "hidden_size": 256, "num_heads": 4},
    # Ling 3 (bailing_hybrid, kvcalc/hfconfig/bailing.py): a dense and a sparse delta layer,
    # then gated MLA; 8 experts (the class's 512 are not built in seconds)
    "bailing_hybrid": {"num_hidden_layers": 3, "layer_group_size": 3, "first_k_dense_replace": 1,
                       "num_local_experts": 8, "num_experts_per_tok": 2, "n_group": 1,
                       "topk_group": 1},
    # Older GPT-shaped decoders (kvcalc/hfconfig/gpt.py; CodeGen on GPT-J's reader)
    "codegen": {"n_layer": 2},
    "ctrl": {"n_layer": 2},
    "xglm": {"num_layers": 2},
    "biogpt": {"num_hidden_layers": 2},
    "gpt_neox_japanese": {"num_hidden_layers": 2},
    "persimmon": {"num_hidden_layers": 2},
    # GIT: its text decoder (the CLIP image encoder inside GitModel: a tower, not counted)
    "git": {"num_hidden_layers": 2},
    # Gemma 3n (kvcalc/hfconfig/gemma.py): a sliding and a global layer, then one of each
    # sharing their K/V (the class's 4 sliding : 1 global needs 10 layers to show the same)
    "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2, "layer_types": [
        "sliding_attention", "full_attention"] * 2},
    # its multimodal wrapper: the language model counted (built alone: the wrapper's timm
    # vision tower is not installed here), the vision and audio towers apart
    "gemma3n": {"text_config": {"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                                "layer_types": ["sliding_attention", "full_attention"] * 2}},
    # Gemma 4 unified: Gemma 4's 5 sliding : 1 global in Gemma 2's layer, no per-layer inputs
    "gemma4_unified_text": {"num_hidden_layers": 6},
    # its multimodal wrapper: the language model counted, the vision and audio towers apart
    "gemma4_unified": {"text_config": {"num_hidden_layers": 6}},
    "apertus1p5_text": {"num_hidden_layers": 2},
    # Fuyu: Persimmon-8B with image patches projected in; GOT-OCR 2.0: a Qwen2 with a
    # SAM-style ViT (their towers: the tower test below). Whole: a text_config given here
    # replaces the wrapper's own text defaults, and the reduced copy cuts the layers anyway
    "fuyu": {},
    "got_ocr2": {},
    # Phi-4-multimodal: Phi-3's decoder, its image and audio encoders inside the text model
    # (not counted by kvcalc: no tower formula)
    "phi4_multimodal": {"num_hidden_layers": 2},
    # Language models of multimodal families (kvcalc/hfconfig/aria.py, moshi.py, llama.py)
    "aria_text": {"num_hidden_layers": 2},
    "moshi": {"num_hidden_layers": 2},
    # Mllama's language model: a self-attention and a cross-attention layer (the class's
    # pattern at 40 layers: its third of four, then every fifth)
    "mllama_text_model": {"num_hidden_layers": 2, "cross_attention_layers": [1]},
    # LFM3 (kvcalc/hfconfig/liquid.py): the class's conv, conv, global, conv, sliding
    "lfm3": {"num_hidden_layers": 5},
    "youtu": {"num_hidden_layers": 2},
    # Lara Mini (kvcalc/hfconfig/lara.py): the class's period of five (delta, sliding,
    # delta, global, sliding), 128 experts (4 in the reduced copy)
    "lara_mini": {"num_hidden_layers": 5},
    # MoE with sliding/full attention and gated attention; Sarvam's two
    # (kvcalc/hfconfig/moe_swa.py). MiMo-V2-Flash: dense full, sparse sliding (twice the
    # K/V heads, sinks), sparse full; Laguna's class has no sliding layer: one here
    "mimo_v2_flash": {"num_hidden_layers": 3,
                      "layer_types": ["full_attention", "sliding_attention", "full_attention"]},
    "laguna": {"num_hidden_layers": 3,
               "layer_types": ["full_attention", "sliding_attention", "full_attention"]},
    "afmoe": {"num_hidden_layers": 4},
    "beam": {"num_hidden_layers": 5},  # three dense sliding, a sparse sliding, the last full
    "flint": {"num_hidden_layers": 4},
    "sarvam_moe": {"num_hidden_layers": 2},
    "sarvam_mla": {"num_hidden_layers": 2},
    "jais2": {"num_hidden_layers": 2},
    "nanochat": {"num_hidden_layers": 2},
    "hy_v3": {"num_hidden_layers": 2},  # a dense layer, then experts (4 in the reduced copy)
    "axk1": {"num_hidden_layers": 2},  # the same
    "doge": {"num_hidden_layers": 2},
    # ZAYA1 (kvcalc/layers/cca.py): every layer CCA, its K/V beside a convolution state and
    # the previous token's delayed values; a sliding layer too (the class has none)
    "zaya": {"num_hidden_layers": 2, "sliding_window": 64,
             "layer_types": ["hybrid", "hybrid_sliding"]},
    # MiniMax-M3 (kvcalc/hfconfig/minimax.py): the class has no sparse layer and no dense
    # MLP: a dense full layer, then a sparse (indexer) layer with experts
    "minimax_m3_vl_text": {"num_hidden_layers": 2,
                           "layer_types": ["full_attention", "minimax_m3_sparse"],
                           "mlp_layer_types": ["dense", "sparse"]},
    # Inkling (kvcalc/hfconfig/inkling.py): a sliding layer (swa_* heads), a full one; a dense
    # first MLP (dense_mlp_idx) then experts
    "inkling_text": {"num_hidden_layers": 2, "local_layer_ids": [0], "dense_mlp_idx": 1},
    # Inkling 2 (kvcalc/hfconfig/inkling.py): a sliding layer, a full one (dynamic K/V
    # convolutions, three block-residual queries); the class lays out five sliding to one full
    "inkling2_text": {"num_hidden_layers": 2, "layer_types": ["hybrid_sliding", "hybrid"]},
    # Inkling 2 Loop: a sliding layer, then a full and a sliding one looped, the class's three
    # passes (two more cache layers each after the model's three); loop bounds must be
    # multiples of n_layers_per_attn_res_block, 1 here (the class's 6 would need 18 layers)
    "inkling2_loop_text": {"num_hidden_layers": 3, "n_layers_per_attn_res_block": 1,
                           "loop_layer_index_start": 1, "loop_layer_index_end": 3,
                           "layer_types": ["hybrid_sliding", "hybrid", "hybrid_sliding"]},
    # Inkling's multimodal wrapper: the language model counted (as inkling_text's entry), its
    # vision and audio towers apart (not compared: no tower formula)
    "inkling_mm_model": {"text_config": {"num_hidden_layers": 2, "local_layer_ids": [0],
                                         "dense_mlp_idx": 1}},
    # dots.llm3 (kvcalc/hfconfig/dots.py): two DSA layers (the first dense), then a
    # sliding MLA layer of its own geometry (per_layer_config)
    "dots3_note_text": {"num_hidden_layers": 3},
    # its multimodal wrapper: the language model counted, the vision and audio towers apart
    # (not compared: one dense layer each, as their 42 + 32 take seconds to build on meta)
    # Qwen4-Exp (kvcalc/hfconfig/qwen.py): three Gated DeltaNet layers, then a QSA
    # layer. Its class lays out indexed layers but leaves the indexer's fields None, which
    # the indexer cannot build with (token_budget // compress_ratio), and rotates all 256
    # of a head's elements, which validate_architecture refuses beside a 128-wide index
    # head: the values public Qwen4-Exp text configs give (4 query heads and 1 key head
    # of 128, a budget of 2048 tokens in blocks of 4, a quarter of the head rotated)
    "qwen4_exp_text": {"num_hidden_layers": 4, "indexer_n_heads": 4, "indexer_kv_heads": 1,
                       "indexer_head_dim": 128, "indexer_budget": 2048,
                       "indexer_compress_ratio": 4,
                       "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                                           "partial_rotary_factor": 0.25,
                                           "mrope_section": [11, 11, 10],
                                           "mrope_interleaved": True}},
    # its multimodal wrapper: the language model counted (Qwen3.5-MoE's vision tower apart)
    "qwen4_exp": {"text_config": {"num_hidden_layers": 4, "indexer_n_heads": 4,
                                  "indexer_kv_heads": 1, "indexer_head_dim": 128,
                                  "indexer_budget": 2048, "indexer_compress_ratio": 4,
                                  "rope_parameters": {"rope_type": "default",
                                                      "rope_theta": 10000000.0,
                                                      "partial_rotary_factor": 0.25,
                                                      "mrope_section": [11, 11, 10],
                                                      "mrope_interleaved": True}}},
    # Looped decoders (kvcalc/hfconfig/looped.py): Dory's input layer, four recurrent
    # layers (three sliding, one full) run twice, its output layer; HRM-Text's two stacks
    # of two layers, in its class's 2 cycles of 3 low-level passes and a high-level one
    "dory": {"num_hidden_layers": 6, "n_input_layers": 1, "n_output_layers": 1},
    "hrm_text": {"num_hidden_layers": 2},
    # HY V4's multimodal wrapper: its language model (hy_v4_vl_text, HY V4's reader) cut as
    # hy_v4's; the ViT apart (the tower test below, at the class's 40 layers)
    "hy_v4_vl": {"text_config": {"num_hidden_layers": 2, "indexer_types": ["full", "shared"]}},
    # image-text wrappers over language models read already: DeepSeek-VL's and its hybrid's
    # (Llama's class defaults), PaliGemma's (its class's Gemma, which the class builds only
    # when text_config is absent, cut to two layers)
    "deepseek_vl": {"text_config": {"num_hidden_layers": 2}},
    "deepseek_vl_hybrid": {"text_config": {"num_hidden_layers": 2}},
    "paligemma": {"text_config": {"num_hidden_layers": 2, "hidden_size": 2048,
                                  "intermediate_size": 16384, "num_attention_heads": 8,
                                  "num_key_value_heads": 1, "vocab_size": 257152}},
    "dots3_note": {"text_config": {"num_hidden_layers": 3},
                   "vision_config": {"num_hidden_layers": 1, "pyramid_num_routed": [-1]},
                   "audio_config": {"num_hidden_layers": 1}},
    # MusicGen (kvcalc/hfconfig/musicgen.py): the decoder of the composite config, beside its T5
    # text encoder and EnCodec codec (not counted); four codebooks' tables and heads, every
    # layer cross-attending (the harness hands it seq_len encoder states). Melody: the
    # conditioning prepended, no cross-attention
    "musicgen": {"decoder": {"num_hidden_layers": 2}},
    "musicgen_melody": {"decoder": {"num_hidden_layers": 2}},
    # MOSS-Transcribe-Diarize: Qwen3 (its class's own sizes) beside a Whisper-style audio
    # encoder (the tower test below)
    "moss_transcribe_diarize": {"text_config": {"num_hidden_layers": 2}},
    # HY V4 (kvcalc/hfconfig/hunyuan.py): a dense layer running its own indexer, then
    # experts on a layer that shares its choice (no indexer, no indexer cache)
    "hy_v4": {"num_hidden_layers": 2, "indexer_types": ["full", "shared"]},
    # DeepSeek-V4 (kvcalc/hfconfig/deepseek.py): a sliding-only layer (the class has none),
    # then HCA and CSA; the first three route by token id, the last by top-k
    "deepseek_v4": {"num_hidden_layers": 4, "layer_types": [
        "sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
        "compressed_sparse_attention"]},
    # BLT (kvcalc/hfconfig/blt.py): its class's stacks whole (the 3.1B-row hashed n-gram
    # table and 25 global layers build on meta in a second); the cache test's copy keeps the
    # local encoder's layer and two of the local decoder's (every byte's K/V, in the
    # EncoderDecoderCache handed to it), the rest cut narrow
    "blt": {},
}


def _default_cfg(model_type: str) -> dict:
    import transformers

    cfg = transformers.AutoConfig.for_model(model_type, **DEFAULT_CONFIGS[model_type])
    # an alias keeps its own name (gpt-sw3: GPT2Config, whose to_dict says gpt2)
    return {**json.loads(json.dumps(cfg.to_dict(), default=str)), "model_type": model_type}


@pytest.mark.parametrize("model_type", sorted(DEFAULT_CONFIGS))
def test_default_config_parameters_equal_transformers(model_type):
    cfg = _default_cfg(model_type)
    truth = hf_truth.meta_param_count(cfg)
    kvcalc_total = param_counts(spec_from_hf_config(cfg, model_type)).total
    assert kvcalc_total + _transformers_extra_params(cfg) == truth["text"]


def _in_running_order(reduced: dict, rows: list) -> list:
    """The cache layers in the order their passes run, as kvcalc lists them: Dory's
    forward appends the recurrent section's later loops after the model's layers
    (DoryModel.forward: "Loops 1, 2, ... write to copies of the recurrent cache layers,
    appended at the end"), and Inkling 2 Loop's the loop layers' later passes
    (Inkling2LoopTextModel.forward: "Append extra caches for loop layers"); every other
    model caches in running order."""
    if reduced.get("model_type") not in ("dory", "inkling2_loop_text"):
        return rows
    c = hf_truth.make_config(reduced)
    if reduced["model_type"] == "dory":
        looped_end = c.n_input_layers + c.n_recurrent_layers
    else:
        looped_end = c.loop_layer_index_end
    n = c.num_hidden_layers
    return rows[:looped_end] + rows[n:] + rows[looped_end:n]


@pytest.mark.parametrize("model_type", sorted(DEFAULT_CONFIGS))
def test_default_config_cache_bytes_equal_transformers(model_type):
    cfg = _default_cfg(model_type)
    reduced = hf_truth.reduced_config(cfg, window=WINDOW)
    for seq_len in (WINDOW - 3, 3 * WINDOW + 1):
        measured = hf_truth.cache_bytes_after_decode(cfg, seq_len, window=WINDOW)
        got, cross = _measured_layer_bytes(_in_running_order(reduced, measured),
                                           reduced.get("model_type") == "blt" or None)
        assert _kvcalc_layer_bytes(reduced, seq_len, cross) == got, (
            seq_len, [m["cache_class"] for m in measured])


def test_an_encoder_length_of_its_own_equals_transformers_cache():
    """MusicGen's decoder keeps K/V of its text encoder's output in every layer: at
    --encoder-seq-len tokens, not the decoder's length, as transformers holds them when
    handed an encoder output of that length."""
    cfg = _default_cfg("musicgen")
    reduced = hf_truth.reduced_config(cfg, window=WINDOW)
    spec = spec_from_hf_config(reduced, "reduced")
    for seq_len, encoder_len in ((5, 13), (13, 5)):
        measured = hf_truth.cache_bytes_after_decode(cfg, seq_len, window=WINDOW,
                                                     encoder_len=encoder_len)
        got, cross = _measured_layer_bytes(_in_running_order(reduced, measured))
        cache = kv_cache(spec, seq_len, kv_dtype="bf16", encoder_seq_len=encoder_len)
        assert cross and cache.bytes == sum(got), (seq_len, encoder_len, cache.bytes, got)
        assert cache.cross_attention_bytes_per_sequence == sum(
            m["stored_bytes"] for m in measured if m["part"] == "cross")


# Switches a class-default config leaves off, each a structure of its own: the model
# transformers builds with it on (meta device, parameters only: no cache changes).
VARIANT_CONFIGS = {
    # Apertus 1.5's output head cut to the text rows: the input table keeps every row
    "apertus1p5_text": {"num_hidden_layers": 2, "output_vocab_size": 131072},
    # Doge's product-key experts (16,384 single-neuron experts beside a shared SwiGLU)
    "doge": {"num_hidden_layers": 2, "is_moe": True, "mlp_bias": True},
    # ZAYA1 with a sliding layer, biases and a three-tap depthwise convolution
    "zaya": {"num_hidden_layers": 3, "attention_bias": True, "lm_head_bias": True,
             "sliding_window": 64, "layer_types": ["hybrid", "hybrid_sliding", "hybrid"],
             "cca_time0": 3},
}


@pytest.mark.parametrize("model_type", sorted(VARIANT_CONFIGS))
def test_variant_parameters_equal_transformers(model_type):
    import transformers

    cfg = transformers.AutoConfig.for_model(model_type, **VARIANT_CONFIGS[model_type])
    cfg = json.loads(json.dumps(cfg.to_dict(), default=str))
    truth = hf_truth.meta_param_count(cfg)
    assert param_counts(spec_from_hf_config(cfg, model_type)).total == truth["text"]


def test_every_model_type_kvcalc_reads_is_held_to_transformers():
    """Each model_type kvcalc reads has a published config here or is built from its
    configuration class's defaults above, its own or its multimodal wrapper's (DBRX's class
    defaults cannot build a model: its published config stands for it)."""
    from kvcalc.hfconfig import READER_MODULE
    from kvcalc.hfconfig.multimodal import WRAPPERS

    kept = set()
    for stem in CONFIGS:
        cfg = _cfg(stem)
        kept.add(cfg.get("model_type"))
        if isinstance(cfg.get("text_config"), dict):
            kept.add(cfg["text_config"].get("model_type"))
    # a wrapper's class-default config holds its language model's family too (Emu3's)
    kept |= {WRAPPERS[m] for m in DEFAULT_CONFIGS if m in WRAPPERS}
    assert not set(READER_MODULE) - kept - set(DEFAULT_CONFIGS)


WRAPPER_DEFAULTS = ("llava", "gemma3", "mistral3", "qwen2_5_vl", "llama4", "fuyu", "got_ocr2",
                    "mllama", "moss_transcribe_diarize", "inkling2", "inkling2_loop",
                    "qwen4_exp", "hy_v4_vl", "deepseek_vl", "paligemma")
# Wrappers whose class defaults cannot build a model: their DEFAULT_CONFIGS overrides (which
# say why) stand in for them
_UNBUILT_CLASS_DEFAULTS = ("qwen4_exp",)


# Published wrappers whose vision tower is a timm model (Gemma 3n's MobileNet-V5): transformers
# cannot build the tower here (hf_truth._TOWERS_NEED_TIMM), so only their language model is
# compared (test_parameters_equal_transformers_meta_model), as for their class defaults.
_TOWERS_UNBUILT = {s for s in CONFIGS if _cfg(s).get("model_type") in hf_truth._TOWERS_NEED_TIMM}


# Published configs of a family whose image tower kvcalc leaves out by design and says so
# (GIT's CLIP encoder and projection: kvcalc.hfconfig.gpt.git's note), as its class default
# is not among WRAPPER_DEFAULTS: only their language model is compared, above.
_TOWERS_UNCOUNTED = {s for s in CONFIGS if _cfg(s).get("model_type") in ("git",)}


@pytest.mark.parametrize("source", [*(s for s in CONFIGS if _cfg(s).get("vision_config")
                                      and s not in _TOWERS_UNBUILT | _TOWERS_UNCOUNTED),
                                    *(f"default:{w}" for w in WRAPPER_DEFAULTS)])
def test_vision_towers_equal_transformers(source):
    """Multimodal configs: the language model is counted (above), the vision tower and
    projector apart; together they are the whole model transformers builds."""
    if source.startswith("default:"):
        import transformers

        wrapper = source.split(":")[1]
        overrides = DEFAULT_CONFIGS[wrapper] if wrapper in _UNBUILT_CLASS_DEFAULTS else {}
        config = transformers.AutoConfig.for_model(wrapper, **overrides)
        cfg = json.loads(json.dumps(config.to_dict(), default=str))
    else:
        cfg = _cfg(source)
    truth = hf_truth.meta_param_count(cfg)
    spec = spec_from_hf_config(cfg, "m")
    assert sum(spec.extra["towers"].values()) == truth["towers"]
    assert param_counts(spec).total + truth["towers"] == truth["total"]


@pytest.mark.parametrize("wrapper", ["moss_transcribe_diarize", "paligemma", "deepseek_vl"])
def test_a_wrapper_without_text_config_reads_its_class_sub_config_defaults(wrapper):
    """MOSS-Transcribe-Diarize's and PaliGemma's classes build an absent text_config from
    init_kwargs of their own (a 28-layer Qwen3 of 1024; an 18-layer Gemma of 2048 with one
    K/V head), not from Qwen3Config's or GemmaConfig's defaults; DeepSeek-VL's from
    LlamaConfig's."""
    cfg = {"model_type": wrapper}
    truth = hf_truth.meta_param_count(cfg)
    assert param_counts(spec_from_hf_config(cfg, "m")).total == truth["text"]


def test_fuyu_reads_a_short_text_config_with_its_class_defaults_not_its_flat_fields():
    """adept/fuyu-8b's published config: `"text_config": {"model_type": "persimmon"}` and the
    geometry at the top level. FuyuConfig pops flat fields only when text_config is absent;
    a given one is read with the class's text defaults (Fuyu-8B's), the flat fields ignored.
    Here the flat fields say another model (5 layers of 1024), which must not be read."""
    cfg = {"model_type": "fuyu", "hidden_size": 1024, "num_hidden_layers": 5,
           "num_attention_heads": 8, "text_config": {"model_type": "persimmon",
                                                     "num_hidden_layers": 2}}
    truth = hf_truth.meta_param_count(cfg)
    spec = spec_from_hf_config(cfg, "fuyu")
    assert len(spec.layer_list()) == 2 and spec.d_model == 4096
    assert param_counts(spec).total == truth["text"]


# The expert count under the other names its configuration class accepts (an
# attribute_map key, a legacy name __post_init__ takes): transformers reads each as
# n_routed_experts, and so must kvcalc (96 is no class's default, so a reader that falls
# back to its class default cannot pass by chance).
EXPERT_COUNT_ALIASES = [
    ("deepseek-ai__DeepSeek-V2", "num_experts"),          # DeepseekV2Config.attribute_map
    ("deepseek-ai__DeepSeek-V3", "num_local_experts"),    # DeepseekV3Config.attribute_map
    ("moonshotai__Kimi-K2-Instruct", "num_local_experts"),
    ("zai-org__GLM-4.5", "num_local_experts"),            # Glm4MoeConfig.attribute_map
    ("deepseek-ai__DeepSeek-V3.2-Exp", "num_local_experts"),
    ("deepseek-ai__DeepSeek-V3.2-Exp", "num_experts"),    # DeepseekV32Config.__post_init__
    ("zai-org__GLM-5", "num_local_experts"),              # GlmMoeDsaConfig.attribute_map
    ("zai-org__GLM-5", "num_experts"),                    # GlmMoeDsaConfig.__post_init__
    ("default:glm4_moe_lite", "num_local_experts"),       # Glm4MoeLiteConfig.attribute_map
    ("baidu__ERNIE-4.5-21B-A3B-Thinking", "num_experts"),  # Ernie4_5_MoeConfig.attribute_map
]


@pytest.mark.parametrize("source,alias", EXPERT_COUNT_ALIASES)
def test_an_expert_count_alias_is_read_as_transformers_reads_it(source, alias):
    if source.startswith("default:"):
        cfg = _default_cfg(source.split(":")[1])
    else:
        cfg = _cfg(source)
    cfg = {k: v for k, v in cfg.items() if k not in ("n_routed_experts", "moe_num_experts")}
    cfg[alias] = 96
    truth = hf_truth.meta_param_count(cfg)
    assert param_counts(spec_from_hf_config(cfg, source)).total == truth["text"]


def test_glm_4_7_flash_head_dim_is_its_rope_width():
    """Glm4MoeLiteConfig's attribute_map makes head_dim the name of qk_rope_head_dim: a
    config that gives only head_dim sets the rotary part of each query/key head (and so
    q_b_proj's and kv_a_proj's widths and the latent cache) as transformers reads it."""
    cfg = {k: v for k, v in _default_cfg("glm4_moe_lite").items() if k != "qk_rope_head_dim"}
    cfg["head_dim"] = 32
    spec = spec_from_hf_config(cfg, "glm4_moe_lite")
    assert param_counts(spec).total == hf_truth.meta_param_count(cfg)["text"]
    assert spec.layer_list()[0].mixer.rope_dim == 32
