"""The sweep's array arithmetic equals kvcalc.figures()'s exact integers, row for row, for
every cache kind: full, sliding, chunked, MLA, linear-attention and SSM state, short
convolution, cross-attention, and MoE on some layers.

The sweep calls the same formulas on int64 (or object) arrays that figures() calls on
Python ints; this checks that nothing in them branches on an axis value, overflows, or
rounds differently, on a few thousand random (seq_len, batch) points per kind,
including points just below and above every window.
"""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

from kvcalc import figures  # noqa: E402
from kvcalc.hfconfig import spec_from_hf_config  # noqa: E402
from kvcalc.presets import load_hardware, load_model  # noqa: E402
from kvcalc.sweep.compute import iter_rows  # noqa: E402
from kvcalc.sweep.plan import plan_sweep  # noqa: E402

# One model per kind (and the hybrids that mix them).
MODELS = {
    "full": "llama3-8b",
    "sliding (every layer)": "mistral-7b",
    "sliding 5:1 full": "gemma3-27b",
    "chunked + full, MoE interleaved": "llama4-maverick",
    "mla + MoE after dense": "deepseek-r1",
    "linear attention + gated full": "qwen3-next-80b-a3b",
    "mamba only": "falcon-mamba-7b",
    "mamba + attention + MoE": "jamba-1.5-mini",
    "sliding + sinks + MoE": "gpt-oss-20b",
    "cross-attention": "t5-11b",
}

LFM2 = {  # LFM2's published shape, short-convolution and attention layers
    "model_type": "lfm2", "hidden_size": 2048, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288,
    "vocab_size": 65536, "conv_L_cache": 3,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention",
                    "conv", "conv", "full_attention", "conv", "full_attention", "conv",
                    "full_attention", "conv", "full_attention", "conv"],
}


NEMOTRON_H = {  # NemotronHConfig's defaults: Mamba-2, MoE-only, attention and MLP-only blocks
    "model_type": "nemotron_h", "hidden_size": 4096, "vocab_size": 131072,
    "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"] * 3,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 21504, "mamba_num_heads": 128, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "n_routed_experts": 8,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 7688,
    "moe_shared_expert_intermediate_size": 7688,
}
EXTRA = {"lfm2": LFM2, "nemotron_h": NEMOTRON_H}


def rows_equal(a: dict, b: dict, rel: float = 1e-12) -> list[str]:
    """Columns where two rows differ: ints, strings and bools exactly, floats to `rel`."""
    bad = [k for k in a.keys() ^ b.keys()]
    if list(a) != list(b):
        bad.append("(column order)")
    for k in a.keys() & b.keys():
        x, y = a[k], b[k]
        if isinstance(x, float) or isinstance(y, float):
            if not abs(x - y) <= rel * max(abs(x), abs(y)):
                bad.append(k)
        elif x != y or type(x) is not type(y):
            bad.append(k)
    return bad


def _spec(name):
    return spec_from_hf_config(EXTRA[name], name) if name in EXTRA else load_model(name)


def _seq_lens(spec, rng):
    windows = {getattr(layer.mixer, "window", 0) for layer, _ in spec.groups()} - {0}
    near = {w + d for w in windows for d in (-1, 0, 1, 2)}
    return sorted(near | {rng.randrange(1, 1 << 20) for _ in range(40)} | {1, 1 << 24})


@pytest.mark.parametrize("name", [*MODELS.values(), *EXTRA])
def test_sweep_rows_equal_estimate(name):
    rng = random.Random(name)
    spec = _spec(name)
    seqs = _seq_lens(spec, rng)
    batches = sorted({1, 1 << 16, *(rng.randrange(1, 512) for _ in range(8))})
    hw = load_hardware("h100-sxm")
    plan = plan_sweep(spec, seqs, batches, kv_dtype=["bf16", "fp8"], hardware=hw)
    rows = list(iter_rows(plan))
    assert len(rows) == len(seqs) * len(batches) * 2
    for row in rng.sample(rows, 150):
        want = figures(spec, row["seq_len"], row["batch"], row["kv_dtype"], None,
                       hardware=hw).as_row()
        assert rows_equal(row, want) == [], (row["seq_len"], row["batch"])


def test_every_kind_is_covered():
    kinds = set()
    for name in [*MODELS.values(), *EXTRA]:
        kinds |= {layer.mixer.kind for layer, _ in _spec(name).groups()}
    assert {"full", "sliding", "chunked", "mla", "linear", "mamba", "mamba2", "conv",
            "none"} <= kinds
