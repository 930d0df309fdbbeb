"""dots.llm1, JetMoE, Command A MoE, K-EXAONE and LongCat-Flash (kvcalc/hfconfig/dots.py,
jetmoe.py, cohere.py, exaone.py, longcat.py)
by hand: active parameters per token from each config's numbers (top-k routed experts,
shared experts, JetMoE's attention experts, LongCat-Flash's zero-computation experts),
the cache per token, and `estimate` / `fit --max-model-len` on each. transformers' own
parameter and cache counts are in tests/test_hf_truth.py; this file needs neither torch
nor transformers.

The configs without a published file here are their transformers 5.24 configuration
classes' defaults, written out (JetMoeConfig, Cohere2MoeConfig, ExaoneMoeConfig,
LongcatFlashConfig: the fields the adapters read).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.ground.dtypes import dtype
from kvcalc.formulas.params import param_counts
from kvcalc.hfconfig import spec_from_hf_config

DOTS1 = json.loads((Path(__file__).parent / "data" / "hf" /
                    "rednote-hilab__dots.llm1.inst.json").read_text())
JETMOE = {"model_type": "jetmoe", "vocab_size": 32000, "hidden_size": 2048,
          "num_hidden_layers": 12, "num_key_value_heads": 16, "kv_channels": 128,
          "intermediate_size": 5632, "max_position_embeddings": 4096,
          "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": True}
COHERE2_MOE = {"model_type": "cohere2_moe", "vocab_size": 256000, "hidden_size": 8192,
               "intermediate_size": 22528, "num_hidden_layers": 40,
               "num_attention_heads": 64, "num_key_value_heads": None, "head_dim": 128,
               "max_position_embeddings": 8192, "tie_word_embeddings": True,
               "sliding_window": 4096, "num_experts_per_tok": 2, "num_experts": 8,
               "num_shared_experts": 0, "sliding_window_pattern": 4}
EXAONE_MOE = {"model_type": "exaone_moe", "vocab_size": 102400, "hidden_size": 4096,
              "intermediate_size": 16384, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 32, "max_position_embeddings": 2048,
              "tie_word_embeddings": False, "sliding_window": 4096,
              "sliding_window_pattern": 4, "first_k_dense_replace": 1,
              "moe_intermediate_size": 1024, "num_experts": 64, "num_experts_per_tok": 8,
              "num_shared_experts": 1}
LONGCAT = {"model_type": "longcat_flash", "vocab_size": 131072, "hidden_size": 6144,
           "num_layers": 28, "num_attention_heads": 64, "max_position_embeddings": 131072,
           "tie_word_embeddings": False, "ffn_hidden_size": 12288, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
           "v_head_dim": 128, "moe_topk": 12, "n_routed_experts": 512, "zero_expert_num": 256,
           "expert_ffn_hidden_size": 2048}


def _counts(cfg: dict):
    return param_counts(spec_from_hf_config(cfg, cfg["model_type"]))


def _gated(d: int, f: int) -> int:
    """gate, up and down projections of width f, no biases."""
    return 3 * d * f


def test_dots1_active_parameters_are_six_routed_and_two_shared_experts():
    d, layers, vocab = 4096, 62, 152064
    attention = 4 * d * 32 * 128 + 2 * 128  # q, k, v, o over 32 heads of 128; q/k norms
    per_layer = attention + 2 * d
    active = (2 * vocab * d + d + layers * per_layer + _gated(d, 10944)  # one dense layer
              + 61 * (128 * d + (6 + 2) * _gated(d, 1408)))  # router, 6 routed + 2 shared
    total = active + 61 * (128 - 6) * _gated(d, 1408)
    counts = _counts(DOTS1)
    assert (counts.active, counts.total) == (active, total) == (14_016_581_120,
                                                               142_774_373_888)
    # the model card: 142B total, 14B activated


def test_jetmoe_counts_its_attention_experts_exactly():
    d, layers, kv, head, experts, k, ff = 2048, 12, 16, 128, 8, 2, 5632
    w = kv * head  # one attention expert's query width
    attention = 2 * experts * d * w + d + d * experts + d * 2 * w  # q/o experts, bias, router, kv
    mlp = experts * _gated(d, ff) + d * experts + d  # experts, router, output bias
    total = 32000 * d + d + layers * (attention + mlp + 2 * d)  # tied embeddings
    skipped = layers * (experts - k) * (2 * d * w + _gated(d, ff))
    counts = _counts(JETMOE)
    assert (counts.total, counts.active) == (total, total - skipped)
    spec = spec_from_hf_config(JETMOE, "jetmoe")
    # the cache: the shared K/V, 16 heads of 128 each, not the 32 query heads' worth
    assert spec.layer_list()[0].mixer.token_bytes(dtype("bf16")) == 2 * kv * head * 2
    assert spec.heads == kv * k



def test_jetmoe_reads_its_remote_code_names():
    """JetMoE-8B's published files (and their fine-tunes') name the MLP width, experts and
    top-k as JetMoE's own JetMoEConfig did: ffn_hidden_size, moe_num_experts, moe_top_k.
    Read as the sizes they state (transformers' JetMoeConfig fills in its 5632, 8 and 2,
    the same numbers); a canonical name, where present, wins."""
    remote = {k: v for k, v in JETMOE.items()
              if k not in ("intermediate_size", "num_local_experts", "num_experts_per_tok")}
    remote.update(ffn_hidden_size=5632, moe_num_experts=8, moe_top_k=2)
    assert _counts(remote) == _counts(JETMOE)
    wider = dict(remote, ffn_hidden_size=4096, moe_num_experts=4)
    assert _counts(wider).total < _counts(JETMOE).total
    assert _counts(dict(wider, intermediate_size=5632, num_local_experts=8)) == _counts(JETMOE)

def test_cohere2_moe_and_exaone_moe_active_parameters():
    d, layers = 8192, 40
    per_layer = 4 * d * 64 * 128 + d + 8 * d  # attention, one norm, router
    active = 256000 * d + d + layers * (per_layer + 2 * _gated(d, 22528))
    counts = _counts(COHERE2_MOE)
    assert (counts.active, counts.total) == (active, active + layers * 6 * _gated(d, 22528))

    d, layers = 4096, 32
    per_layer = 4 * d * d + 2 * 128 + 2 * d  # attention (32 x 128), q/k norms, two norms
    routed = 64 * d + (8 + 1) * _gated(d, 1024)  # router, 8 routed + 1 shared
    active = 2 * 102400 * d + d + layers * per_layer + _gated(d, 16384) + 31 * routed
    counts = _counts(EXAONE_MOE)
    assert (counts.active, counts.total) == (active, active + 31 * 56 * _gated(d, 1024))


def test_longcat_flash_counts_routed_experts_not_zero_experts():
    d, blocks, heads = 6144, 28, 64
    mla = (d * 1536 + 1536 + 1536 * heads * 192 + d * (512 + 64) + 512
           + 512 * heads * (128 + 128) + heads * 128 * d)
    expert = _gated(d, 2048)
    # per block: two MLA sublayers, two dense MLPs, four norms, the router over routed and
    # zero experts, and the routed experts (zero experts hold no weights)
    block = 2 * mla + 2 * _gated(d, 12288) + 4 * d + (512 + 256) * d + 512 * expert
    total = 2 * 131072 * d + d + blocks * block
    counts = _counts(LONGCAT)
    assert counts.total == total == 560_664_958_976  # the model card: 560B
    # at most 12 routed experts a token (every pick a routed one), at least none
    assert counts.active == total - blocks * (512 - 12) * expert
    fewest = total - blocks * 512 * expert
    # the card's 18.6B to 31.3B activated leaves the input embedding out
    assert round((fewest - 131072 * d) / 1e8) == 187
    assert round((counts.active - 131072 * d) / 1e8) == 314
    # 2 x 28 MLA sublayers, each one latent of 512 + 64 per token
    spec = spec_from_hf_config(LONGCAT, "longcat")
    assert spec.layers == 56
    assert sum(l.mixer.token_bytes(dtype("bf16")) for l in spec.layer_list()) == 56 * 576 * 2


def _json(*args: str) -> dict:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


CONFIGS = {"dots1": DOTS1, "jetmoe": JETMOE, "cohere2_moe": COHERE2_MOE,
           "exaone_moe": EXAONE_MOE, "longcat_flash": LONGCAT}
# per family: a device, tp and weight dtype its weights fit on
LAYOUTS = {"dots1": ("h100-sxm", "8", "bf16"), "jetmoe": ("h100-sxm", "1", "bf16"),
           "cohere2_moe": ("h100-sxm", "8", "bf16"), "exaone_moe": ("h100-sxm", "1", "bf16"),
           "longcat_flash": ("h200", "8", "fp8")}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_estimate_and_fit_answer(family, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[family]))
    est = _json("estimate", str(path), "--seq-len", "4096", "--format", "json")
    assert est["params"]["total"] == _counts(CONFIGS[family]).total
    gpu, tp, weights = LAYOUTS[family]
    fit = _json("fit", str(path), "--gpu", gpu, "--tp", tp, "--weight-dtype", weights,
                "--max-model-len", "2048", "--format", "json")
    assert fit["fits"], fit
    if family == "jetmoe":
        # no vLLM release serves JetMoE: no page rule, the counts withheld with the reason
        assert fit["kv_cache_tokens"] is None and fit["num_gpu_blocks"] is None
        assert any("vLLM pages no moa attention" in n for n in fit["notes"])
        # one request's K/V priced as full attention's pages: 16-token blocks of the shared
        # K/V (16 heads of 128, bf16) in each of 12 layers
        assert fit["kv_needed_bytes"] == 12 * 2 * 16 * 128 * 2 * 2048
    else:
        assert fit["num_gpu_blocks"] > 0 and fit["kv_cache_tokens"] > 2048
