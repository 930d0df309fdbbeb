"""Zamba and Zamba2 by hand arithmetic: the shared block's weights counted once per
`num_mem_blocks`, its cache once per use; Zamba's state unpaged (no vLLM release serves
it). The truth against transformers is tests/test_hf_truth.py (DEFAULT_CONFIGS)."""

from __future__ import annotations

from kvcalc.serving.vllm.state import unpaged_kinds
from kvcalc.formulas.cache import cache_groups, kv_cache
from kvcalc.formulas.params import param_counts
from kvcalc.hfconfig import spec_from_hf_config

ZAMBA2 = {"model_type": "zamba2", "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100,
          "intermediate_size": 128, "n_mamba_heads": 2, "mamba_d_state": 8,
          "mamba_ngroups": 1, "adapter_rank": 8, "num_mem_blocks": 1,
          "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"]}


def test_the_shared_block_is_counted_once_and_its_adapters_per_use():
    b = param_counts(spec_from_hf_config(ZAMBA2, "z")).breakdown
    block = {k.removeprefix("shared_block/"): n for k, n in b.items()
             if k.startswith("shared_block/")}
    # attention from 2 x 64 = 128 wide, heads of 128 / 4 = 32: q, k, v 128 x 128, o 128 x 64
    assert (block["q"], block["k"], block["v"], block["o"]) == (16384, 16384, 16384, 8192)
    # the gated MLP (gate and up fused) and its two norms (128 + 64), once
    assert (block["gate_up"], block["down"], block["norms"]) == (64 * 256, 128 * 64, 192)
    # per use (two hybrid layers): the 64 x 64 linear and the MLP adapter 64 -> 8 -> 256
    assert block["linear"] == 2 * 64 * 64
    assert block["mlp_adapter_in"] + block["mlp_adapter_out"] == 2 * (64 * 8 + 8 * 256)


def test_every_use_caches_its_own_keys_and_values():
    spec = spec_from_hf_config(ZAMBA2, "z")
    two_uses = kv_cache(spec, 1000, 1, "bf16").bytes
    one_use = kv_cache(spec_from_hf_config(
        {**ZAMBA2, "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"]}, "z"),
        1000, 1, "bf16").bytes
    # 4 K/V heads x 32 x (K, V) x 2 B = 512 B a token in each hybrid layer
    assert two_uses - one_use == 1000 * 512


def test_zamba_state_is_not_paged_by_any_vllm_release():
    zamba = {"model_type": "zamba", "hidden_size": 64, "num_hidden_layers": 3,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100,
             "intermediate_size": 128, "layers_block_type": ["mamba", "hybrid", "hybrid"]}
    assert unpaged_kinds(cache_groups(spec_from_hf_config(zamba, "z"))) == ["mamba (zamba) state"]
    assert unpaged_kinds(cache_groups(spec_from_hf_config(ZAMBA2, "z"))) == []
