"""xLSTM by hand arithmetic: the mLSTM state a block keeps, its widths, and that no vLLM
release pages it. The truth against transformers is tests/test_hf_truth.py."""

from __future__ import annotations

from kvcalc.serving.vllm.state import unpaged_kinds
from kvcalc.ground.dtypes import dtype
from kvcalc.formulas.cache import cache_groups
from kvcalc.formulas.params import param_counts
from kvcalc.hfconfig import spec_from_hf_config

# xLSTM 7B's geometry (xLSTMConfig's defaults): 4096 wide, 32 blocks, 8 heads
XLSTM = {"model_type": "xlstm", "hidden_size": 4096, "num_hidden_layers": 32, "num_heads": 8,
         "vocab_size": 50304}


def test_a_block_keeps_each_heads_matrix_memory_normaliser_and_stabiliser():
    mixer = spec_from_hf_config(XLSTM, "x").layer_list()[0].mixer
    # q/k 4096 x 0.5 = 2048 wide (256 a head), v 4096 (512 a head)
    assert (mixer.heads, mixer.qk_head_dim, mixer.v_head_dim) == (8, 256, 512)
    # bf16, as transformers' xLSTMCache holds it: 8 x (256 x 512 + 256 + 1) x 2 B
    assert mixer.state_bytes(dtype("bf16"), dtype("fp32")) == 8 * (256 * 512 + 256 + 1) * 2


def test_the_mlp_is_rounded_up_to_64():
    spec = spec_from_hf_config(XLSTM, "x")
    # 4096 x 2.667 = 10924.03, up to the next multiple of 64: 10944
    assert spec.layer_list()[0].mlp.d_ff == 10944
    assert param_counts(spec).breakdown["mlp"] == 32 * 3 * 4096 * 10944


def test_no_vllm_release_pages_it():
    spec = spec_from_hf_config(XLSTM, "x")
    assert unpaged_kinds(cache_groups(spec)) == ["mlstm state"]
