"""Gemma 4 by hand arithmetic from its published configs (tests/data/hf, SOURCES.md):
which layers cache, what each holds, and how vLLM pages the two head sizes. The
parameter and cache truth against transformers is tests/test_hf_truth.py."""

from __future__ import annotations

import json
from pathlib import Path

from kvcalc.serving.vllm.blocks import kv_cache_groups
from kvcalc.ground.dtypes import dtype
from kvcalc.formulas.cache import cache_groups, kv_cache
from kvcalc.formulas.params import param_counts
from kvcalc.hfconfig import spec_from_hf_config

HF = Path(__file__).parent / "data" / "hf"
E2B = json.loads((HF / "google__gemma-4-E2B-it-text.json").read_text())
A4B = json.loads((HF / "google__gemma-4-26B-A4B-it-text.json").read_text())


def test_e2b_shared_layers_cache_nothing():
    spec = spec_from_hf_config(E2B, "e2b")
    kinds = [layer.mixer.cache_kind for layer in spec.layer_list()]
    # 35 layers, 4 sliding : 1 full; the last 20 reuse layers 13 (sliding) and 14 (full)
    assert kinds[:15] == (["sliding"] * 4 + ["full"]) * 3
    assert kinds[15:] == ["shared"] * 20
    # bf16, 1,000 tokens: 12 sliding layers x 512 tokens x (1 head x 256 x K,V x 2 B)
    # + 3 full layers x 1,000 tokens x (1 head x 512 x 2 x 2 B)
    assert kv_cache(spec, 1000, 1, "bf16").bytes == 12 * 512 * 1024 + 3 * 1000 * 2048


def test_e2b_wide_mlp_and_per_layer_embeddings():
    spec = spec_from_hf_config(E2B, "e2b")
    layers = spec.layer_list()
    assert layers[14].mlp.d_ff == 6144 and layers[15].mlp.d_ff == 2 * 6144
    b = param_counts(spec).breakdown
    assert b["per_layer_embedding"] == 262144 * 35 * 256
    # model projection 1536 -> 35 x 256 and its norm; per layer a gate and a projection
    assert b["other"] == 1536 * 35 * 256 + 256 + 35 * 2 * 1536 * 256


def test_26b_full_layers_own_heads_and_no_v_proj():
    spec = spec_from_hf_config(A4B, "a4b")
    sliding, full = spec.layer_list()[0].mixer, spec.layer_list()[5].mixer
    assert (sliding.kv_heads, sliding.head_dim) == (8, 256)
    assert (full.kv_heads, full.head_dim, full.k_is_v) == (2, 512, True)
    assert "v" not in full.tensors(2816) and "v" in sliding.tensors(2816)
    # K and V still both cached: 2 heads x 512 x 2 x 2 B a token
    assert full.token_bytes(dtype("bf16")) == 2 * 512 * 2 * 2
    mlp = spec.layer_list()[0].mlp
    # the dense MLP (2112) runs beside 128 experts of 704, gate and up fused; the router
    # has a 2816-wide input scale and one scale per expert
    assert (mlp.experts, mlp.active, mlp.expert_d_ff, mlp.shared_d_ff) == (128, 8, 704, 2112)
    assert mlp.breakdown(2816)["router"] == 2816 * 128 + 2816 + 128


def test_a_saved_per_layer_config_reads_as_its_global_fields():
    # transformers 5.24 saves the global layers' head size as per_layer_config overrides
    full = [i for i, t in enumerate(A4B["layer_types"]) if t == "full_attention"]
    saved = {k: v for k, v in A4B.items()
             if k not in ("global_head_dim", "num_global_key_value_heads")}
    saved["per_layer_config"] = {f"{i:02d}": {"head_dim": 512, "num_key_value_heads": 2}
                                 for i in full}
    assert spec_from_hf_config(saved, "s") == spec_from_hf_config(A4B, "s")


def test_the_wrapper_reads_its_text_config_exactly():
    wrapped = {"model_type": "gemma4", "text_config": E2B, "vision_config": {}}
    spec = spec_from_hf_config(wrapped, "g4")
    assert "approximate" not in spec.extra
    assert param_counts(spec).total == param_counts(spec_from_hf_config(E2B, "t")).total


def test_vllm_pages_sliding_blocks_twice_as_long():
    # E2B: a sliding page (1 x 256 x 2 x 2 B a token) is half a full one (1 x 512): vLLM
    # doubles the sliding layers' block size so both pages are 16 x 2,048 B
    spec = spec_from_hf_config(E2B, "e2b")
    plans = kv_cache_groups(cache_groups(spec, "bf16"), 16, 4096, 2048, unify_pages=True)
    by_kind = {p.group.mixer.cache_kind: p for p in plans}
    assert {p.page_bytes for p in plans} == {16 * 2048}
    assert by_kind["sliding"].block_size == 32 and by_kind["full"].block_size == 16
    # sliding: cdiv(min(512 - 1 + 2048, 4096), 32) + 1 blocks; full: 4096 / 16
    assert by_kind["sliding"].blocks_per_request == -(-(512 - 1 + 2048) // 32) + 1
    assert by_kind["full"].blocks_per_request == 4096 // 16
