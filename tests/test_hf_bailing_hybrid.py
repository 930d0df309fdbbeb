"""Ling 3 (bailing_hybrid) by hand arithmetic: the delta attention's full-rank gates and
state, the MLA's head gate, and the head size its config class takes from head_dim. The
truth against transformers is tests/test_hf_truth.py (DEFAULT_CONFIGS)."""

from __future__ import annotations

from kvcalc.ground.dtypes import dtype
from kvcalc.hfconfig import spec_from_hf_config

CFG = {"model_type": "bailing_hybrid", "hidden_size": 256, "num_hidden_layers": 6,
       "num_attention_heads": 4, "head_dim": 32, "intermediate_size": 512, "vocab_size": 100,
       "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 64}


def test_layers_and_their_kinds():
    layers = spec_from_hf_config(CFG, "l").layer_list()
    # every 6th layer MLA (layer_group_size), the first two MLPs dense (first_k_dense_replace)
    assert [l.mixer.cache_kind for l in layers] == ["state"] * 5 + ["mla"]
    assert [l.mlp.kind for l in layers] == ["dense", "dense"] + ["moe"] * 4


def test_the_delta_attention_has_full_rank_gates_and_a_head_sized_state():
    delta = spec_from_hf_config(CFG, "l").layer_list()[0].mixer
    t = delta.tensors(256)
    assert t["f_proj"].params == t["g_proj"].params == 256 * 4 * 32
    assert "f_a_proj" not in t
    # fp32 state 4 heads x 32 x 32; bf16 convolution over q, k, v (3 x 128) x 4 taps
    assert delta.state_bytes(dtype("bf16"), dtype("fp32")) == 4 * 32 * 32 * 4 + 3 * 128 * 4 * 2


def test_a_saved_config_states_the_linear_head_size():
    # BailingHybridConfig overwrites head_dim with qk_rope_head_dim and saves linear_head_dim
    saved = {**CFG, "head_dim": 64, "linear_head_dim": 32}
    assert spec_from_hf_config(saved, "s") == spec_from_hf_config(CFG, "s")


def test_mla_has_one_output_gate_per_head():
    mla = spec_from_hf_config(CFG, "l").layer_list()[5].mixer
    assert mla.tensors(256)["g"].params == 256 * 4
