"""ModelSpec: its runs of layers are the model; ModelSpec.uniform builds them from the flat
description presets and config files give, and builds them again when a flag reshapes it.
Truth: the published configs' layer patterns (Gemma 2: even layers slide; DeepSeek-V2: the
first layer dense) and hand arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention, Dense, Layer, MoE, Run
from kvcalc.presets import load_model
from kvcalc.spec import ModelSpec

TINY = dict(name="tiny", layers=4, d_model=64, heads=4, kv_heads=2, head_dim=16, d_ff=128,
            vocab=100)


def kinds(spec: ModelSpec) -> list[str]:
    return [layer.mixer.kind for layer in spec.layer_list()]


def test_a_shape_flag_builds_a_uniform_model_again():
    g = load_model("gemma2-9b")  # sliding_window 4096, global_every 2
    small = g.replace(layers=4)
    assert kinds(small) == ["sliding", "full", "sliding", "full"]
    assert small.sliding_window == 4096 and small.sliding_layers == 2
    # The recipe's own inputs are flags of replace() too.
    assert kinds(g.replace(sliding_window=0, global_every=0)) == ["full"] * 42
    v2 = load_model("deepseek-v2").replace(layers=3)  # first_k_dense_replace 1
    mlps = [layer.mlp for layer in v2.layer_list()]
    assert mlps[0] == Dense(12288) and isinstance(mlps[1], MoE) and mlps[1] == mlps[2]
    assert v2.mla is not None and v2.mla.kv_lora_rank == 512


def test_kv_heads_of_a_uniform_model():
    mqa = ModelSpec.uniform(**TINY).with_kv_heads(1)
    assert mqa.name == "tiny[MQA]" and {layer.mixer.kv_heads for layer in mqa.layer_list()} == {1}


def test_a_model_described_layer_by_layer_keeps_its_layers():
    attn = Attention(heads=4, kv_heads=2, head_dim=16)
    runs = (Run(Layer(attn, Dense(128)), 1),
            Run(Layer(Attention(4, 2, 16, kind="sliding", window=8), Dense(128)), 3))
    spec = ModelSpec(**TINY, runs=runs)
    assert spec.recipe is None and spec.sliding_window == 8 and spec.sliding_layers == 3
    with pytest.raises(KvcalcError, match=r"^tiny is described layer by layer: d_ff, layers "
                                          r"cannot be changed by a flag$"):
        spec.replace(layers=2, d_ff=64)
    # K/V heads: every attention layer with the model's count takes the new one.
    mha = spec.replace(kv_heads=4)
    assert [layer.mixer.kv_heads for layer in mha.layer_list()] == [4] * 4
    assert kinds(mha) == kinds(spec)


def test_equal_layers_are_equal_models_however_built():
    flat = ModelSpec.uniform(**TINY)
    assert ModelSpec(**TINY, runs=flat.runs) == flat


def test_no_layers_and_layers_that_disagree_are_refused():
    with pytest.raises(KvcalcError, match="no layers"):
        ModelSpec(**TINY)
    flat = ModelSpec.uniform(**TINY)
    with pytest.raises(KvcalcError, match="runs differ"):
        dataclasses.replace(flat, d_ff=256)  # past replace(): the layers would say 128
    assert flat.replace(d_ff=256).layer_list()[0].mlp == Dense(256)
    with pytest.raises(KvcalcError, match="the layer runs add up to 4 layers, not layers=3"):
        ModelSpec(**{**TINY, "layers": 3}, runs=flat.runs)


def test_uniform_checks_its_inputs_as_presets_name_them():
    with pytest.raises(KvcalcError, match="global_every needs a sliding_window"):
        ModelSpec.uniform(**TINY, global_every=2)
    with pytest.raises(KvcalcError, match="sliding_window must be >= 0, got -1"):
        ModelSpec.uniform(**TINY, sliding_window=-1)
    with pytest.raises(KvcalcError, match="moe.dense_layers must be between 0 and layers"):
        ModelSpec.uniform(**TINY, moe=MoE(8, 2, 64), dense_layers=5)


def test_a_layer_run_again_counts_its_weights_once_and_its_cache_and_reads_per_pass():
    """A looped model (Dory, HRM-Text): one layer's weights run three times, a cache per
    pass. Hand arithmetic for d_model 64, 4 heads of 16, 2 K/V heads, a gated MLP of 128."""
    from kvcalc.formulas.cache import kv_cache
    from kvcalc.formulas.params import param_counts
    from kvcalc.formulas.step import decode_step

    layer = Layer(Attention(heads=4, kv_heads=2, head_dim=16), Dense(128))
    again = dataclasses.replace(layer, owns_weights=False)
    spec = ModelSpec(**{**TINY, "layers": 3}, runs=(Run(layer, 1), Run(again, 2)))
    one_layer = 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64  # q, o; k, v; MLP; norms
    assert one_layer == 36_992
    total = one_layer + 2 * 100 * 64 + 64  # embedding and lm_head, the final norm
    assert param_counts(spec).total == total
    # every pass caches its K/V: 3 x (k + v) x 2 heads x 16 x 2 bytes a token
    assert kv_cache(spec, 10, 1, "bf16").bytes == 10 * 3 * 2 * 2 * 16 * 2
    # a decode step reads the weights once per pass (the input table: one row)
    step = decode_step(spec, 10, 1, "bf16")
    assert step.bytes_breakdown["weights"] == 2 * (total - 100 * 64 + 64 + 2 * one_layer)


def test_a_layer_run_again_needs_an_earlier_layer_that_owns_its_weights():
    layer = Layer(Attention(heads=4, kv_heads=2, head_dim=16), Dense(128))
    again = dataclasses.replace(layer, owns_weights=False)
    with pytest.raises(KvcalcError, match="no earlier layer owns the weights"):
        ModelSpec(**{**TINY, "layers": 2}, runs=(Run(again, 1), Run(layer, 1)))


# --- every figure from the layers (issue #40 point 2) ----------------------------------
# Models whose layers the flat fields do not (all) describe, or describe alike: uniform,
# GQA with windows, layer by layer with two head widths (Gemma 4), shared and compressed
# K/V (DeepSeek V4), MLA, an encoder-decoder, a hybrid, and no attention at all.
_TWIN_MODELS = ("gpt3", "gemma2-9b", "tests/data/hf/google__gemma-4-E2B-it-text.json",
                "tests/data/hf/deepseek-ai__DeepSeek-V4-Flash.json", "deepseek-r1", "t5-11b",
                "jamba-1.5-mini", "mamba-2.8b")


def _flat_twin(spec: ModelSpec) -> ModelSpec:
    """The same runs of layers under other flat fields (heads, K/V heads, widths, MLP)."""
    return dataclasses.replace(
        spec, recipe=None, runs=spec.runs, heads=6, kv_heads=3, head_dim=40, v_head_dim=24,
        d_ff=1000, mlp="plain" if spec.mlp == "gated" else "gated", qkv_bias=not spec.qkv_bias,
        out_bias=not spec.out_bias, mlp_bias=not spec.mlp_bias, qk_norm=not spec.qk_norm)


def _outputs(spec: ModelSpec, monkeypatch) -> dict:
    """What kvcalc answers for `spec`: the CLI's estimate JSON (on a device: fit, verdict,
    latency), the library's records behind it, a small sweep's rows and the counts."""
    import json

    from typer.testing import CliRunner

    import kvcalc
    from kvcalc import presets
    from kvcalc.cli import app
    from kvcalc.estimate import attention_variants
    from kvcalc.formulas.cache import kv_bytes_per_token_by_kind, kv_bytes_per_token_per_layer
    from kvcalc.formulas.cache import valid_tps
    from kvcalc.plan import tp_sizes
    from kvcalc.sweep.compute import iter_rows
    from kvcalc.sweep.plan import plan_sweep

    monkeypatch.setattr(presets, "load_model", lambda name: spec)
    out = {}
    for argv in (["--format", "json"], ["--gpu", "h100-sxm", "--format", "json"],
                 ["--gpu", "h100-sxm", "--detail"]):
        r = CliRunner().invoke(app, ["estimate", "--preset", "twin", "--seq-len", "8192", *argv])
        assert r.exit_code == 0, r.output
        out[" ".join(argv)] = json.loads(r.stdout) if "json" in argv else r.stdout
    h100 = presets.load_hardware("h100-sxm")
    est = kvcalc.estimate(model=spec, seq_len=8192, batch=4, gpu=h100)
    out["estimate"] = est.as_dict()
    out["row"] = est.as_row()
    out["cache"] = kvcalc.kv_cache(spec, 8192, 4, tp=valid_tps(spec)[-1])
    out["params"] = kvcalc.param_counts(spec)
    out["fit"] = kvcalc.floor(spec, h100, 8192)
    out["per layer"] = (kv_bytes_per_token_per_layer(spec, "bf16"),
                        kv_bytes_per_token_by_kind(spec, "bf16"))
    out["tp"] = (valid_tps(spec), tp_sizes(spec, 8))
    plan = plan_sweep(spec, "1024,65536", "1,16", hardware=h100)
    out["sweep"] = list(iter_rows(plan))
    out["shape"] = (spec.attention_kind, spec.mixing, spec.attention_shape, spec.group_size,
                    spec.attends, spec.encoder_runs)
    try:
        out["variants"] = [(v.name, v.runs) for v in attention_variants(spec)]
    except KvcalcError as e:  # MLA, no attention, or heads fixed (DeepSeek V4)
        out["variants"] = str(e)
    return out


@pytest.mark.parametrize("name", _TWIN_MODELS)
def test_no_public_figure_depends_on_a_flat_field(name, monkeypatch):
    from kvcalc import _model

    spec = _model(name)
    twin = _flat_twin(spec)
    assert twin.runs == spec.runs and twin != spec
    assert _outputs(twin, monkeypatch) == _outputs(spec, monkeypatch)


def test_one_answer_to_does_it_attend():
    """A layer attends when its mixer says so: DeepSeek V4's compressor (a cache kind of
    its own) attends; a model of state layers does not."""
    v4 = load_model("mamba-2.8b")
    assert not v4.attends and v4.attention_free and v4.attention_shape is None
    from kvcalc import _model

    ds = _model("tests/data/hf/deepseek-ai__DeepSeek-V4-Flash.json")
    kinds = {mx.cache_kind for mx, _ in ds.attention_layers()}
    assert "compressed" in kinds and ds.attends


def test_gemma4_per_layer_bytes_are_per_kind():
    """Gemma 4 E2B: the sliding layers hold 1,024 B a token each (256-wide), the full
    layers 2,048 B (512-wide); no single per-layer figure, and the RoPE caches both."""
    from kvcalc import _model
    from kvcalc.formulas.cache import kv_cache

    spec = _model("tests/data/hf/google__gemma-4-E2B-it-text.json")
    c = kv_cache(spec, 4096)
    assert c.bytes_per_token_per_layer is None
    assert c.bytes_per_token_per_layer_by_kind == {"sliding 512": 1024, "full": 2048}
    assert sorted({mx.head_dim for mx, _ in spec.attention_layers()}) == [256, 512]
