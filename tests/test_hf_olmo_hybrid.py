"""OLMo Hybrid by hand arithmetic: which layers attend, and what a Gated DeltaNet layer
keeps. The truth against transformers is tests/test_hf_truth.py (DEFAULT_CONFIGS)."""

from __future__ import annotations

from kvcalc.ground.dtypes import dtype
from kvcalc.hfconfig import spec_from_hf_config

CFG = {"model_type": "olmo_hybrid", "hidden_size": 256, "num_hidden_layers": 8,
       "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 100}


def test_every_fourth_layer_attends_and_the_last_when_none_would():
    kinds = [l.mixer.cache_kind for l in spec_from_hf_config(CFG, "o").layer_list()]
    assert kinds == ["state", "state", "state", "full"] * 2
    short = [l.mixer.cache_kind
             for l in spec_from_hf_config({**CFG, "num_hidden_layers": 2}, "o").layer_list()]
    assert short == ["state", "full"]


def test_a_delta_net_layer_keeps_one_matrix_per_value_head_and_the_convolution():
    linear = spec_from_hf_config(CFG, "o").layer_list()[0].mixer
    # key heads of 0.75 x 256 / 4 = 48, value heads of 96 (the class's defaults)
    assert (linear.k_heads, linear.v_heads, linear.k_dim, linear.v_dim) == (4, 4, 48, 96)
    # fp32 state 4 x 48 x 96; bf16 convolution over q, k, v (48 + 48 + 96 per head) x 4 taps
    assert linear.state_bytes(dtype("bf16"), dtype("fp32")) == (
        4 * 48 * 96 * 4 + 4 * (48 + 48 + 96) * 4 * 2)
