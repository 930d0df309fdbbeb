"""kvcalc.hfconfig: published config.json files mapped to ModelSpec.

The files under tests/data/hf/ are copies of the models' published config.json
(tests/data/hf/SOURCES.md says where each came from). The expected values below
are written out by hand from the model cards and configs, not computed by the
code under test; the parameter totals are the published ones, each cited.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.hfconfig import SUPPORTED_MODEL_TYPES, spec_from_hf_config, spec_from_hf_config_file
from kvcalc.layers import Dense

DATA = Path(__file__).parent / "data" / "hf"


def load(stem: str) -> dict:
    return json.loads((DATA / f"{stem}.json").read_text())


def spec(stem: str):
    return spec_from_hf_config_file(DATA / f"{stem}.json")


# ---------------------------------------------------------------------------------
# Derived fields, by hand from each model card / config.json
# ---------------------------------------------------------------------------------
EXPECTED: dict[str, dict] = {
    # Llama 2 7B: MHA, 32 x 128 heads (model card: 4096 wide, 32 layers, no GQA at 7B).
    "meta-llama__Llama-2-7b-hf": dict(
        layers=32, d_model=4096, heads=32, kv_heads=32, head_dim=128, d_ff=11008, vocab=32000,
        mlp="gated", norm="rmsnorm", norms_per_layer=2, tied_embeddings=False,
        sliding_window=0, global_every=0, max_context=4096, learned_pos=0,
        qkv_bias=False, out_bias=False, mlp_bias=False, attention_kind="MHA"),
    # Llama 3 8B: GQA with 8 K/V heads, 128K vocab, 8K context.
    "meta-llama__Meta-Llama-3-8B": dict(
        layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=14336, vocab=128256,
        tied_embeddings=False, max_context=8192, attention_kind="GQA"),
    # Mistral 7B v0.1: GQA 8, sliding window 4096 in every layer (paper sec. 2).
    "mistralai__Mistral-7B-v0.1": dict(
        layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=14336, vocab=32000,
        sliding_window=4096, global_every=0, sliding_layers=32, max_context=32768,
        tied_embeddings=False),
    # Mixtral 8x7B: 8 experts, top-2, each a 14336-wide SwiGLU; sliding_window null.
    "mistralai__Mixtral-8x7B-v0.1": dict(
        layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, vocab=32000,
        sliding_window=0, max_context=32768,
        moe=dict(experts=8, active=2, expert_d_ff=14336, shared_experts=0, dense_layers=0,
                 router_bias=False)),
    # Qwen2-7B: 28 heads of 128 (3584 wide), 4 K/V heads; q/k/v biases, o without;
    # sliding_window 131072 in the file but use_sliding_window false -> no window.
    "Qwen__Qwen2-7B": dict(
        layers=28, d_model=3584, heads=28, kv_heads=4, head_dim=128, d_ff=18944, vocab=152064,
        qkv_bias=True, out_bias=False, mlp_bias=False, sliding_window=0, global_every=0,
        tied_embeddings=False, max_context=131072),
    # Qwen3-8B: head_dim 128 given explicitly, q/k RMSNorm, no biases.
    "Qwen__Qwen3-8B": dict(
        layers=36, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=12288, vocab=151936,
        qk_norm=True, qkv_bias=False, out_bias=False, sliding_window=0, tied_embeddings=False,
        max_context=40960),
    # Gemma 7B: head_dim 256 although 3072 / 16 = 192; tied embeddings (GemmaConfig default).
    "google__gemma-7b": dict(
        layers=28, d_model=3072, heads=16, kv_heads=16, head_dim=256, d_ff=24576, vocab=256000,
        tied_embeddings=True, sliding_window=0, norms_per_layer=2, max_context=8192),
    # Gemma 2 9B: 4 norms per layer, 4096-token window on every other layer (even ones).
    "google__gemma-2-9b": dict(
        layers=42, d_model=3584, heads=16, kv_heads=8, head_dim=256, d_ff=14336, vocab=256000,
        norms_per_layer=4, sliding_window=4096, global_every=2, sliding_layers=21,
        tied_embeddings=True, max_context=8192),
    # Phi-3-mini-4k: MHA 32 x 96, sliding_window 2047 applied in every layer (Phi3Attention
    # passes config.sliding_window to the attention function).
    "microsoft__Phi-3-mini-4k-instruct": dict(
        layers=32, d_model=3072, heads=32, kv_heads=32, head_dim=96, d_ff=8192, vocab=32064,
        sliding_window=2047, global_every=0, tied_embeddings=False, max_context=4096),
    # Falcon-7B: multi-query (1 K/V head), parallel attention+MLP sharing one LayerNorm,
    # no linear biases, 71 heads of 64, MLP 4 x 4544, tied lm_head, 2048 context.
    "tiiuae__falcon-7b": dict(
        layers=32, d_model=4544, heads=71, kv_heads=1, head_dim=64, d_ff=18176, vocab=65024,
        mlp="plain", norm="layernorm", norm_bias=True, norms_per_layer=1,
        qkv_bias=False, out_bias=False, mlp_bias=False, tied_embeddings=True,
        max_context=2048, attention_kind="MQA"),
    # Falcon-40B: new decoder architecture, 8 K/V groups, ln_attn + ln_mlp (2 norms).
    "tiiuae__falcon-40b": dict(
        layers=60, d_model=8192, heads=128, kv_heads=8, head_dim=64, d_ff=32768, vocab=65024,
        mlp="plain", norms_per_layer=2, tied_embeddings=True, max_context=2048,
        attention_kind="GQA"),
    # GPT-2 small: 1024 learned positions, biases everywhere, MLP 4 x 768.
    "gpt2": dict(
        layers=12, d_model=768, heads=12, kv_heads=12, head_dim=64, d_ff=3072, vocab=50257,
        mlp="plain", norm="layernorm", norm_bias=True, qkv_bias=True, out_bias=True,
        mlp_bias=True, learned_pos=1024, max_context=1024, tied_embeddings=True),
    # StarCoder: multi-query GPT-BigCode, 8192 learned positions, n_inner 24576.
    "bigcode__starcoder": dict(
        layers=40, d_model=6144, heads=48, kv_heads=1, head_dim=128, d_ff=24576, vocab=49152,
        mlp="plain", learned_pos=8192, max_context=8192, qkv_bias=True, tied_embeddings=True,
        attention_kind="MQA"),
    # Pythia-1.4B: GPT-NeoX, rotary, untied embed_out, two LayerNorms despite the
    # parallel residual.
    "EleutherAI__pythia-1.4b": dict(
        layers=24, d_model=2048, heads=16, kv_heads=16, head_dim=128, d_ff=8192, vocab=50304,
        mlp="plain", norm="layernorm", norms_per_layer=2, qkv_bias=True, out_bias=True,
        mlp_bias=True, learned_pos=0, tied_embeddings=False, max_context=2048),
    # OPT-1.3B: learned positions with OPT's offset of 2 (2048 + 2 rows), ReLU MLP 8192.
    "facebook__opt-1.3b": dict(
        layers=24, d_model=2048, heads=32, kv_heads=32, head_dim=64, d_ff=8192, vocab=50272,
        mlp="plain", norm="layernorm", learned_pos=2050, max_context=2048, final_norm=True,
        qkv_bias=True, mlp_bias=True, tied_embeddings=True),
    # DeepSeek-V2: MLA latent 512 + RoPE key 64; 160 routed experts top-6, 2 shared,
    # first layer dense.
    "deepseek-ai__DeepSeek-V2": dict(
        layers=60, d_model=5120, heads=128, kv_heads=128, head_dim=192, v_head_dim=128,
        d_ff=12288, vocab=102400, max_context=163840, tied_embeddings=False,
        attention_kind="MLA",
        mla=dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                 q_lora_rank=1536),
        moe=dict(experts=160, active=6, expert_d_ff=1536, shared_experts=2, dense_layers=1,
                 router_bias=False)),
    # DeepSeek-V3: 256 routed experts top-8, 1 shared, first 3 layers dense,
    # e_score_correction_bias on the router (noaux_tc) is a buffer in transformers 5,
    # not a parameter, so it is not counted.
    "deepseek-ai__DeepSeek-V3": dict(
        layers=61, d_model=7168, heads=128, kv_heads=128, head_dim=192, v_head_dim=128,
        d_ff=18432, vocab=129280, max_context=163840, attention_kind="MLA",
        mla=dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                 q_lora_rank=1536),
        moe=dict(experts=256, active=8, expert_d_ff=2048, shared_experts=1, dense_layers=3,
                 router_bias=False)),
}


def test_every_expected_file_exists():
    # Every config file is checked against transformers in tests/test_hf_truth.py;
    # the ones here also have their derived fields written out by hand.
    assert set(EXPECTED) <= {p.stem for p in DATA.glob("*.json")}


# The config's names for MLA's widths, as kvcalc.layers.Latent names them.
_LATENT = {"kv_lora_rank": "kv_lora_rank", "qk_rope_head_dim": "rope_dim",
           "qk_nope_head_dim": "nope_dim", "v_head_dim": "v_dim", "q_lora_rank": "q_lora_rank"}


def _check_layers(s, key: str, want, stem: str) -> None:
    """The flat description's terms (global_every, mla, moe) asked of the layers."""
    layers = s.layer_list()
    if key == "global_every":  # n: layer i attends globally when (i + 1) % n == 0
        slides = [layer.mixer.kind == "sliding" for layer in layers]
        window = bool(s.sliding_window)
        assert slides == [window and not (want and (i + 1) % want == 0)
                          for i in range(len(layers))], f"{stem}: {key}"
    elif key == "mla":
        assert {type(layer.mixer).__name__ for layer in layers} == {"Latent"}, stem
        for sub, sub_want in want.items():
            assert getattr(s.mla, _LATENT[sub]) == sub_want, f"{stem}: mla.{sub}"
    else:  # moe: experts after the first dense_layers
        dense = want["dense_layers"]
        assert all(isinstance(layer.mlp, Dense) for layer in layers[:dense]), stem
        (moe,) = {layer.mlp for layer in layers[dense:]}
        for sub, sub_want in want.items():
            if sub != "dense_layers":
                assert getattr(moe, sub) == sub_want, f"{stem}: moe.{sub}"


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_derived_fields(stem):
    s = spec(stem)
    for key, want in EXPECTED[stem].items():
        if key in ("global_every", "mla", "moe"):
            _check_layers(s, key, want, stem)
            continue
        got = getattr(s, key)
        assert got == want, f"{stem}: {key} is {got!r}, expected {want!r}"


def test_name_and_source_from_file():
    s = spec("meta-llama__Llama-2-7b-hf")
    assert s.name == "meta-llama/Llama-2-7b-hf"
    path = DATA / "meta-llama__Llama-2-7b-hf.json"
    assert s.source == f"config.json ({path})"
    assert spec_from_hf_config_file(path, name="llama2").name == "llama2"


def test_name_of_a_config_json_in_a_model_directory(tmp_path):
    cfg = load("gpt2")
    d = tmp_path / "my-gpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    assert spec_from_hf_config_file(d / "config.json").name == "my-gpt"
    cfg["_name_or_path"] = "openai-community/gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    assert spec_from_hf_config_file(d / "config.json").name == "openai-community/gpt2"


def test_mla_cache_is_the_latent_plus_rope_key():
    from kvcalc.formulas.cache import kv_bytes_per_token_per_layer

    s = spec("deepseek-ai__DeepSeek-V2")
    assert s.mla.kv_lora_rank + s.mla.rope_dim == 576
    # bf16: (512 + 64) x 2 bytes per token per layer, whatever kv_heads/head_dim say.
    assert kv_bytes_per_token_per_layer(s, "bf16") == 1152


# ---------------------------------------------------------------------------------
# Parameter totals: formulas.param_counts(spec) against the published counts
# ---------------------------------------------------------------------------------
# (published total, exact?, where it is published). "exact" figures are the Hub's
# safetensors totals (the sum of the checkpoint's tensor sizes) or a model card's
# table; the others are a card's rounded headline, checked to 0.5%.
PUBLISHED: dict[str, tuple[int, bool, str]] = {
    # HF Hub safetensors total for meta-llama/Llama-2-7b-hf ("6.74B params").
    "meta-llama__Llama-2-7b-hf": (6_738_415_616, True, "huggingface.co/meta-llama/Llama-2-7b-hf"),
    # HF Hub safetensors total for meta-llama/Meta-Llama-3-8B ("8.03B params").
    "meta-llama__Meta-Llama-3-8B": (8_030_261_248, True,
                                    "huggingface.co/meta-llama/Meta-Llama-3-8B"),
    # HF Hub safetensors total for mistralai/Mistral-7B-v0.1 ("7.24B params").
    "mistralai__Mistral-7B-v0.1": (7_241_732_096, True, "huggingface.co/mistralai/Mistral-7B-v0.1"),
    # HF Hub safetensors total for mistralai/Mixtral-8x7B-v0.1 ("46.7B params").
    "mistralai__Mixtral-8x7B-v0.1": (46_702_792_704, True,
                                     "huggingface.co/mistralai/Mixtral-8x7B-v0.1"),
    # HF Hub safetensors total for Qwen/Qwen2-7B ("7.62B params").
    "Qwen__Qwen2-7B": (7_615_616_512, True, "huggingface.co/Qwen/Qwen2-7B"),
    # HF Hub safetensors total for Qwen/Qwen3-8B ("8.19B params"; card: 8.2B, 6.95B non-embedding).
    "Qwen__Qwen3-8B": (8_190_735_360, True, "huggingface.co/Qwen/Qwen3-8B"),
    # HF Hub safetensors total for google/gemma-7b ("8.54B params"; Keras Hub gemma_7b_en).
    "google__gemma-7b": (8_537_680_896, True, "huggingface.co/google/gemma-7b"),
    # HF Hub safetensors total for google/gemma-2-9b ("9.24B params").
    "google__gemma-2-9b": (9_241_705_984, True, "huggingface.co/google/gemma-2-9b"),
    # HF Hub safetensors total for microsoft/Phi-3-mini-4k-instruct ("3.82B params").
    "microsoft__Phi-3-mini-4k-instruct": (3_821_079_552, True,
                                          "huggingface.co/microsoft/Phi-3-mini-4k-instruct"),
    # GPT-2 small: sum(p.numel()) of GPT2LMHeadModel, the widely quoted 124,439,808
    # ("124M params" on huggingface.co/openai-community/gpt2).
    "gpt2": (124_439_808, True, "huggingface.co/openai-community/gpt2"),
    # StarCoder model card: "The StarCoder models are 15.5B parameter models".
    "bigcode__starcoder": (15_500_000_000, False, "huggingface.co/bigcode/starcoder"),
    # Pythia README, models table: pythia-1.4b 1,414,647,808 total (1,208,602,624 non-embedding).
    "EleutherAI__pythia-1.4b": (1_414_647_808, True, "github.com/EleutherAI/pythia README"),
    # facebook/opt-1.3b ("1.32B params" on the Hub): sum(p.numel()) of OPTForCausalLM.
    "facebook__opt-1.3b": (1_315_758_080, True, "huggingface.co/facebook/opt-1.3b"),
    # Falcon: the Hub's totals count the checkpoint's tensors, where lm_head.weight is
    # stored next to the word embeddings it is tied to: 7,217,189,760 for falcon-7b and
    # 41,835,970,560 for falcon-40b. The model has vocab x d_model fewer parameters
    # (sum(p.numel()) counts a tied matrix once):
    #   falcon-7b:  7,217,189,760 - 65024 x 4544 = 6,921,720,704
    #   falcon-40b: 41,835,970,560 - 65024 x 8192 = 41,303,293,952
    "tiiuae__falcon-7b": (7_217_189_760 - 65024 * 4544, True, "huggingface.co/tiiuae/falcon-7b"),
    "tiiuae__falcon-40b": (41_835_970_560 - 65024 * 8192, True, "huggingface.co/tiiuae/falcon-40b"),
    # DeepSeek-V2 model card: "236B total parameters, of which 21B are activated".
    # (The Hub's safetensors total is 235,741,434,880.)
    "deepseek-ai__DeepSeek-V2": (235_741_434_880, True, "huggingface.co/deepseek-ai/DeepSeek-V2"),
    # DeepSeek-V3 model card: "671B total parameters with 37B activated"; the Hub's 685B
    # adds the 14B multi-token-prediction module, which transformers does not load.
    "deepseek-ai__DeepSeek-V3": (671_000_000_000, False, "huggingface.co/deepseek-ai/DeepSeek-V3"),
}


def test_every_data_file_has_a_published_count():
    assert set(PUBLISHED) == set(EXPECTED)


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_param_count_matches_published(stem):
    from kvcalc.formulas.params import param_counts

    published, exact, where = PUBLISHED[stem]
    total = param_counts(spec(stem)).total
    assert abs(total - published) <= 0.005 * published, (
        f"{stem}: formula {total:,} vs published {published:,} ({where})")
    if exact:
        assert total == published, f"{stem}: {total:,} != {published:,} ({where})"


def test_falcon_40b_count_by_hand():
    """Falcon-40B from FalconForCausalLM's module shapes, independent of formulas.py."""
    from kvcalc.formulas.params import param_counts

    d, v, L, hd, heads, kv = 8192, 65024, 60, 64, 128, 8
    qkv = d * (heads + 2 * kv) * hd  # query_key_value, bias=False
    dense = d * d
    mlp = 2 * d * 4 * d  # dense_h_to_4h, dense_4h_to_h
    norms = 2 * (2 * d)  # ln_attn, ln_mlp: weight + bias
    total = L * (qkv + dense + mlp + norms) + 2 * d + v * d  # + ln_f, tied word_embeddings
    assert total == 41_303_293_952
    assert param_counts(spec("tiiuae__falcon-40b")).total == total


def test_mixtral_active_params_match_published():
    from kvcalc.formulas.params import param_counts

    # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B total, 12.9B used per token.
    active = param_counts(spec("mistralai__Mixtral-8x7B-v0.1")).active
    assert abs(active - 12_900_000_000) <= 0.005 * 12_900_000_000


# ---------------------------------------------------------------------------------
# Field semantics on variants of the published files
# ---------------------------------------------------------------------------------
def test_llama_kv_heads_default_to_heads_when_missing_or_null():
    cfg = load("meta-llama__Llama-2-7b-hf")
    del cfg["num_key_value_heads"]
    assert spec_from_hf_config(cfg, "x", "t").kv_heads == 32
    cfg["num_key_value_heads"] = None
    assert spec_from_hf_config(cfg, "x", "t").kv_heads == 32


def test_llama_head_dim_field_wins_over_hidden_over_heads():
    # Mistral-Nemo-like: 5120 wide, 32 heads, head_dim 128 (not 160).
    cfg = load("meta-llama__Llama-2-7b-hf") | {"hidden_size": 5120, "head_dim": 128}
    assert spec_from_hf_config(cfg, "x", "t").head_dim == 128
    cfg["head_dim"] = None
    assert spec_from_hf_config(cfg, "x", "t").head_dim == 160


def test_llama_biases():
    cfg = load("meta-llama__Meta-Llama-3-8B") | {"attention_bias": True, "mlp_bias": True}
    s = spec_from_hf_config(cfg, "x", "t")
    assert (s.qkv_bias, s.out_bias, s.mlp_bias) == (True, True, True)


def test_mistral_null_sliding_window_means_full_attention():
    cfg = load("mistralai__Mistral-7B-v0.1") | {"sliding_window": None}
    assert spec_from_hf_config(cfg, "x", "t").sliding_window == 0


def test_mistral_fields_left_out_are_read_as_its_class_fills_them():
    # MistralConfig defaults num_key_value_heads=8 and sliding_window=4096 (transformers
    # 5.24): a config without them is that model, as transformers builds it; null keeps
    # its own meaning (tests/test_hf_defaults.py holds every such field to the class).
    cfg = load("mistralai__Mistral-7B-v0.1") | {"num_key_value_heads": 4, "sliding_window": 512}
    for key, value in (("num_key_value_heads", 8), ("sliding_window", 4096)):
        without = {k: v for k, v in cfg.items() if k != key}
        assert spec_from_hf_config(without, "x", "t") == spec_from_hf_config(
            {**cfg, key: value}, "x", "t")
    assert spec_from_hf_config(cfg | {"num_key_value_heads": None}, "x", "t").kv_heads == 32


def test_the_sizes_that_name_the_model_stay_required():
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"):
        cfg = load("mistralai__Mistral-7B-v0.1")
        del cfg[key]
        with pytest.raises(KvcalcError, match=f"missing required field '{key}'"):
            spec_from_hf_config(cfg, "x", "t")


def test_qwen2_sliding_window_when_enabled():
    cfg = load("Qwen__Qwen2-7B") | {"use_sliding_window": True, "sliding_window": 4096}
    # Layers with index >= max_window_layers slide: 28 of 28 layers -> none.
    assert spec_from_hf_config(cfg, "x", "t").sliding_window == 0
    cfg["max_window_layers"] = 0
    s = spec_from_hf_config(cfg, "x", "t")
    assert (s.sliding_window, s.sliding_layers) == (4096, 28)
    cfg["max_window_layers"] = 14
    with pytest.raises(KvcalcError, match="cannot describe"):
        spec_from_hf_config(cfg, "x", "t")


def test_gemma2_explicit_layer_types():
    cfg = load("google__gemma-2-9b")
    cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(42)]
    s = spec_from_hf_config(cfg, "x", "t")
    assert s.sliding_window == 4096
    assert [layer.mixer.kind for layer in s.layer_list()] == ["sliding", "full"] * 21
    cfg["layer_types"] = ["full_attention"] * 42
    assert spec_from_hf_config(cfg, "x", "t").sliding_window == 0


def test_gemma_head_dim_left_out_is_the_class_256():
    cfg = load("google__gemma-7b")
    del cfg["head_dim"]  # GemmaConfig uses 256, not 3072 // 16
    assert spec_from_hf_config(cfg, "x", "t").head_dim == 256


def test_nemotron_head_dim_left_out_is_hidden_over_heads_rounded_down():
    cfg = load("nvidia__Minitron-8B-Base")
    assert spec_from_hf_config(cfg, "x", "t").head_dim == 128  # stated: 48 heads of 128
    del cfg["head_dim"]  # NemotronConfig: hidden_size // num_attention_heads, 4096 // 48
    assert spec_from_hf_config(cfg, "x", "t").head_dim == 85


def test_falcon_variants():
    base = load("tiiuae__falcon-7b")
    # Neither multi-query nor the new architecture: every head has its K/V.
    s = spec_from_hf_config(base | {"multi_query": False}, "x", "t")
    assert s.kv_heads == 71
    # Falcon-RW-1B style: sequential block (two LayerNorms), biases, ALiBi.
    rw = base | {"multi_query": False, "parallel_attn": False, "bias": True, "alibi": True,
                 "hidden_size": 2048, "num_attention_heads": 32, "num_hidden_layers": 24}
    s = spec_from_hf_config(rw, "x", "t")
    assert (s.norms_per_layer, s.qkv_bias, s.mlp_bias, s.learned_pos) == (2, True, True, 0)
    # New architecture with one shared norm (num_ln_in_parallel_attn=1, Falcon2-11B style).
    s = spec_from_hf_config(load("tiiuae__falcon-40b") | {"num_ln_in_parallel_attn": 1}, "x", "t")
    assert s.norms_per_layer == 1
    # ffn_hidden_size overrides 4 x hidden.
    assert spec_from_hf_config(base | {"ffn_hidden_size": 1000}, "x", "t").d_ff == 1000


def test_gpt_bigcode_without_multi_query_is_mha():
    cfg = load("bigcode__starcoder") | {"multi_query": False}
    assert spec_from_hf_config(cfg, "x", "t").kv_heads == 48


def test_gpt2_n_inner():
    cfg = load("gpt2") | {"n_inner": None}
    assert spec_from_hf_config(cfg, "x", "t").d_ff == 3072
    assert spec_from_hf_config(cfg | {"n_inner": 1000}, "x", "t").d_ff == 1000


def test_opt_variants():
    cfg = load("facebook__opt-1.3b")
    s = spec_from_hf_config(cfg | {"do_layer_norm_before": False}, "x", "t")
    assert s.final_norm is False  # OPT-350m: post-LN, no final_layer_norm
    with pytest.raises(KvcalcError, match="word_embed_proj_dim"):
        spec_from_hf_config(cfg | {"word_embed_proj_dim": 512}, "x", "t")


def test_deepseek_variants():
    cfg = load("deepseek-ai__DeepSeek-V2") | {"q_lora_rank": None}
    assert spec_from_hf_config(cfg, "x", "t").mla.q_lora_rank == 0  # V2-Lite: full-rank q
    assert spec_from_hf_config(cfg | {"n_routed_experts": None}, "x", "t").moe_layers == 0
    with pytest.raises(KvcalcError, match="moe_layer_freq"):
        spec_from_hf_config(cfg | {"moe_layer_freq": 2}, "x", "t")


# ---------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------
def test_missing_required_field_is_named():
    cfg = load("meta-llama__Llama-2-7b-hf")
    del cfg["num_attention_heads"]
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config(cfg, "x", "config.json")
    assert str(e.value) == (
        "config.json: missing required field 'num_attention_heads' for model_type 'llama'")


def test_missing_field_in_a_file_names_the_path(tmp_path):
    cfg = load("gpt2")
    del cfg["n_layer"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(KvcalcError, match="missing required field 'n_layer'") as e:
        spec_from_hf_config_file(p)
    assert str(p) in str(e.value)


def test_unsupported_model_type_lists_the_supported_ones():
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config({"model_type": "rwkv9"}, "x", "t")
    assert str(e.value) == (
        "t: model_type 'rwkv9' is not one kvcalc reads; `kvcalc presets --families` lists "
        f"the {len(SUPPORTED_MODEL_TYPES)} it does")
    with pytest.raises(KvcalcError, match="remote code in 'auto_map'"):
        spec_from_hf_config({"model_type": "mine", "auto_map": {"AutoConfig": "x.Y"}}, "x", "t")
    assert len(SUPPORTED_MODEL_TYPES) >= 30


def test_missing_model_type():
    with pytest.raises(KvcalcError, match="missing required field 'model_type'"):
        spec_from_hf_config({"hidden_size": 1}, "x", "t")


def test_wrong_type_is_named():
    cfg = load("meta-llama__Llama-2-7b-hf") | {"hidden_size": "4096"}
    with pytest.raises(KvcalcError, match="'hidden_size' must be an integer"):
        spec_from_hf_config(cfg, "x", "t")
    cfg = load("meta-llama__Llama-2-7b-hf") | {"tie_word_embeddings": "no"}
    with pytest.raises(KvcalcError, match="'tie_word_embeddings' must be true or false"):
        spec_from_hf_config(cfg, "x", "t")


def test_spec_validation_errors_name_the_source():
    cfg = load("meta-llama__Llama-2-7b-hf") | {"num_key_value_heads": 5}
    with pytest.raises(KvcalcError, match=r"^t: heads \(32\) must be divisible"):
        spec_from_hf_config(cfg, "x", "t")


def test_malformed_json_names_the_path(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama",')
    with pytest.raises(KvcalcError, match="not valid JSON") as e:
        spec_from_hf_config_file(p)
    assert str(p) in str(e.value)


def test_json_that_is_not_an_object(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    with pytest.raises(KvcalcError, match="expected a JSON object"):
        spec_from_hf_config_file(p)


def test_missing_file_names_the_path(tmp_path):
    p = tmp_path / "nope" / "config.json"
    with pytest.raises(KvcalcError, match="no such file") as e:
        spec_from_hf_config_file(p)
    assert str(p) in str(e.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(KvcalcError, match="is a directory"):
        spec_from_hf_config_file(tmp_path)


def test_input_dict_is_not_modified():
    cfg = load("google__gemma-2-9b")
    before = copy.deepcopy(cfg)
    spec_from_hf_config(cfg, "x", "t")
    assert cfg == before


def test_the_table_of_reader_modules_is_the_modules_own_registration():
    """kvcalc.hfconfig.READER_MODULE, written out so that reading a config imports its
    family alone, names for each model_type the module whose READERS reads it: every
    module's READERS are in it under that module, its CLASS_DEFAULTS only for model_types
    it reads, and the wrappers are multimodal's."""
    import importlib
    import pkgutil

    from kvcalc import hfconfig
    from kvcalc.hfconfig.multimodal import WRAPPERS

    registered = {}
    for info in pkgutil.iter_modules(hfconfig.__path__):
        module = importlib.import_module(f"kvcalc.hfconfig.{info.name}")
        readers = getattr(module, "READERS", None)
        if readers is None:
            continue
        assert set(module.CLASS_DEFAULTS) <= set(readers), info.name
        for model_type in readers:
            assert model_type not in registered, (model_type, registered.get(model_type))
            registered[model_type] = info.name
    assert registered == hfconfig.READER_MODULE
    assert set(WRAPPERS) == hfconfig._WRAPPER_TYPES
    assert not set(WRAPPERS) & set(registered)
    assert sorted(hfconfig.SUPPORTED_MODEL_TYPES) == sorted([*registered, *WRAPPERS])


def test_no_heavy_imports():
    code = ("import sys, kvcalc.hfconfig; "
            "bad = [m for m in ('torch', 'pandas', 'transformers') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=Path(__file__).resolve().parents[1])


# ---------------------------------------------------------------------------------
# Malformed and hostile files: one line naming the field, never a traceback
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stem, changes, message", [
    ("meta-llama__Llama-2-7b-hf", {"num_attention_heads": 0},
     "field 'num_attention_heads' must be positive, got 0"),
    ("gpt2", {"n_head": 0}, "field 'n_head' must be positive, got 0"),
    ("meta-llama__Llama-2-7b-hf", {"hidden_size": -4096},
     "field 'hidden_size' must be positive, got -4096"),
    ("meta-llama__Llama-2-7b-hf", {"model_type": ["llama"]},
     "field 'model_type' must be a string, got a list of 1"),
    ("meta-llama__Llama-2-7b-hf", {"model_type": {"name": "llama"}},
     "field 'model_type' must be a string, got an object of 1 keys"),
    ("google__gemma-2-9b", {"layer_types": [{"a": 1}] * 42},
     "field 'layer_types' must list strings, got an object of 1 keys"),
    ("google__gemma-2-9b", {"layer_types": [1] + ["sliding_attention"] * 41},
     "field 'layer_types' must list strings, got 1"),
])
def test_malformed_fields_are_named(stem, changes, message):
    cfg = load(stem) | changes
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config(cfg, "x", "t")
    assert str(e.value) == f"t: {message}"


@pytest.mark.parametrize("text, message", [
    ('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}",
     "not valid JSON: a number has over 4,300 digits"),
    ("[" * 100000 + "]" * 100000, "not valid JSON: nested too deeply"),
], ids=["5000-digits", "100000-deep"])
def test_huge_numbers_and_deep_nesting_are_one_line_errors(tmp_path, text, message):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config_file(p)
    assert str(e.value) == f"{p}: {message}"


def test_only_small_regular_files_are_read(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # reading it would block until a writer came
    with pytest.raises(KvcalcError, match="not a regular file"):
        spec_from_hf_config_file(fifo)
    with pytest.raises(KvcalcError, match="not a regular file"):
        spec_from_hf_config_file("/dev/zero")


# --- sizes bounded before anything is built -------------------------------------------
@pytest.mark.parametrize("model_type", sorted(SUPPORTED_MODEL_TYPES))
@pytest.mark.parametrize("layers", [10_001, 10**8, 2**63, -(2**63)])
def test_huge_layer_counts_are_refused_before_any_list_is_built(model_type, layers):
    """gemma3 with 10^6 layers took 8 s and 900 MB to refuse, cohere with 10^8 56 s and
    5.9 GB, 2^63 overflowed range(): every family refuses at once, naming the field."""
    import time
    import tracemalloc

    cfg = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100}
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers"):
        cfg[key] = layers
    cfg["text_config"] = {k: v for k, v in cfg.items() if k != "model_type"} | {
        "model_type": "llama"}
    if model_type == "blt":  # its stacks' depths are in their sub-configs
        for sub in ("encoder_config", "decoder_config", "global_config", "patcher_config"):
            cfg[sub] = {"num_hidden_layers": layers}
    # the readers are imported on first use: import them all before the clock and the
    # tracer start, which measure the refusal
    from kvcalc import hfconfig
    from kvcalc.hfconfig import architectures, fallback, multimodal  # noqa: F401

    hfconfig.readers()
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(KvcalcError) as e:
            spec_from_hf_config(cfg, "huge")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 1.0
    assert peak < 1 << 20, peak  # under a MiB: nothing per layer was built
    message = str(e.value)
    assert "\n" not in message and str(layers) not in message


@pytest.mark.parametrize("text, message", [
    ("null", 'expected a JSON object ({"model_type": ...}), found null'),
    ("[1, 2]", 'expected a JSON object ({"model_type": ...}), found a list'),
    ("7", 'expected a JSON object ({"model_type": ...}), found a number'),
    ('"x"', 'expected a JSON object ({"model_type": ...}), found a string'),
    # json's own message ends in "starting at": once read "starting at at line"
    ('{"model_type": "llam', "not valid JSON: Unterminated string at line 1 column 16"),
])
def test_config_file_problems_in_kvcalcs_words(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config_file(path)
    assert str(e.value).endswith(message), str(e.value)
    assert "NoneType" not in str(e.value) and "at at" not in str(e.value)


def test_a_configs_strings_are_never_quoted_back(tmp_path):
    """Say what was expected and where, not the file's value (it may hold anything)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": "CANARY-7f3a",
                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                "vocab_size": 10, "intermediate_size": 8}))
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config_file(path)
    assert "CANARY" not in str(e.value)
    assert str(e.value).endswith("field 'hidden_size' must be an integer, got a string")


LFM2 = dict(model_type="lfm2", vocab_size=65536, hidden_size=1024, intermediate_size=6656,
            num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
            conv_L_cache=3)


@pytest.mark.parametrize("idxs, message", [
    (3, "field 'full_attn_idxs' must be a list of layer indices, got 3"),
    ("x", "field 'full_attn_idxs' must be a list of layer indices, got a string"),
    ([2, "5"], "must list layer indices 0 to 15, got a string"),
    ([2, 16], "must list layer indices 0 to 15, got 16"),
    ([True], "must list layer indices 0 to 15, got true"),
])
def test_lfm2_full_attn_idxs_that_are_not_indices_are_named(idxs, message):
    """LFM2's attention layers come from `full_attn_idxs`; anything but a list of layer
    indices is one KvcalcError naming the field (it was a bare TypeError)."""
    with pytest.raises(KvcalcError, match=message) as e:
        spec_from_hf_config({**LFM2, "full_attn_idxs": idxs}, "lfm2", "t")
    assert "\n" not in str(e.value)


def test_lfm2_full_attn_idxs_place_the_attention_layers():
    """Published LFM2-350M: attention on layers 2, 5, 8, 10, 12, 14, convolutions elsewhere;
    absent or null: attention everywhere (transformers' Lfm2Config default)."""
    kinds = [layer.mixer.kind for layer in
             spec_from_hf_config({**LFM2, "full_attn_idxs": [2, 5, 8, 10, 12, 14]},
                                 "lfm2", "t").layer_list()]
    assert [i for i, k in enumerate(kinds) if k == "full"] == [2, 5, 8, 10, 12, 14]
    assert set(kinds) == {"full", "conv"}
    for absent in ({}, {"full_attn_idxs": None}):
        spec = spec_from_hf_config({**LFM2, **absent}, "lfm2", "t")
        assert {layer.mixer.kind for layer in spec.layer_list()} == {"full"}


def _lfm2_mlp_width(cfg: dict) -> int:
    return spec_from_hf_config(cfg, "lfm2", "t").layer_list()[0].mlp.d_ff


@pytest.mark.parametrize("fields, width", [
    # LiquidAI's published LFM2-1.2B: only the legacy name; int(2 x 12288 / 3) = 8192
    ({"block_ff_dim": 12288}, 8192),
    # block_ff_dim wins over intermediate_size (Lfm2Config pops it over the field)
    ({"block_ff_dim": 12288, "intermediate_size": 6656}, 8192),
    # LFM2-350M: int(2 x 6656 / 3) = 4437, x 1.0, rounded up to 256: 4608
    ({"intermediate_size": 6656}, 4608),
    # a null multiplier: Lfm2MLP neither multiplies nor rounds
    ({"intermediate_size": 6656, "block_ffn_dim_multiplier": None}, 4437),
    ({"intermediate_size": 6656, "block_ffn_dim_multiplier": 1.5, "block_multiple_of": 64},
     6656),
    # LFM2-2.6B: no auto-adjust, the width as stated
    ({"block_ff_dim": 10752, "block_auto_adjust_ff_dim": False}, 10752),
])
def test_lfm2_mlp_width_as_lfm2mlp_builds_it(fields, width):
    base = {k: v for k, v in LFM2.items() if k != "intermediate_size"}
    assert _lfm2_mlp_width({**base, **fields}) == width


def test_lfm2_without_a_width_names_both_keys():
    base = {k: v for k, v in LFM2.items() if k != "intermediate_size"}
    with pytest.raises(KvcalcError, match="'intermediate_size' .*legacy name 'block_ff_dim'"):
        spec_from_hf_config(base, "lfm2", "t")


def test_lfm2_tie_embedding_is_the_legacy_tie_word_embeddings():
    """Lfm2Config pops `tie_embedding` over `tie_word_embeddings`."""
    tied = spec_from_hf_config({**LFM2, "tie_embedding": True, "tie_word_embeddings": False},
                               "lfm2", "t")
    untied = spec_from_hf_config({**LFM2, "tie_embedding": False}, "lfm2", "t")
    assert tied.tied_embeddings and not untied.tied_embeddings


def test_exaone_reads_its_checkpoints_own_field_names():
    """EXAONE 3.0/3.5's config.json says num_layers, layer_norm_epsilon and
    activation_function (heegyu/EXAONE-3.0-7.8B-Instruct-bf16, as LGAI-EXAONE's remote-code
    ExaoneConfig wrote them); transformers' ExaoneConfig maps them by its attribute_map to
    num_hidden_layers, rms_norm_eps and hidden_act. Read so, a canonical name winning."""
    from kvcalc.formulas.params import param_counts

    cfg = load("heegyu__EXAONE-3.0-7.8B-Instruct-bf16")
    assert "num_hidden_layers" not in cfg and cfg["num_layers"] == 32
    spec = spec_from_hf_config(cfg, "e")
    assert spec.layers == 32
    canonical = {k: v for k, v in cfg.items() if k != "num_layers"}
    canonical["num_hidden_layers"] = 32
    assert param_counts(spec_from_hf_config(canonical, "e")) == param_counts(spec)
    both = dict(cfg, num_hidden_layers=2)
    assert spec_from_hf_config(both, "e").layers == 2
