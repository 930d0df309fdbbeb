"""The transformers truth harness (tests/hf_truth.py) checked against independent facts:
published parameter totals, and cache bytes worked out by hand from the ORIGINAL config's
fields (never from the harness's own output or from kvcalc's formulas)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

# One worker runs every truth test (pytest-xdist --dist loadgroup): a broken harness is
# reported once (tests/conftest.py), not once per worker.
pytestmark = pytest.mark.xdist_group("transformers-truth")

import hf_truth as H  # noqa: E402

DATA = Path(__file__).parent / "data" / "hf"
BF16 = 2


def _cfg(name):
    return json.loads((DATA / f"{name}.json").read_text())


# Synthetic config.json dicts for families without a data file (published geometries).
MAMBA_130M = dict(model_type="mamba", vocab_size=50280, hidden_size=768, state_size=16,
                  num_hidden_layers=24, expand=2, conv_kernel=4)
GEMMA3_4B_TEXT = dict(model_type="gemma3_text", vocab_size=262208, hidden_size=2560,
                      intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                      num_key_value_heads=4, head_dim=256, sliding_window=1024,
                      sliding_window_pattern=6, query_pre_attn_scalar=256)
QWEN3_NEXT_80B = dict(model_type="qwen3_next", vocab_size=151936, hidden_size=2048,
                      intermediate_size=5120, num_hidden_layers=48, num_attention_heads=16,
                      num_key_value_heads=2, head_dim=256, linear_conv_kernel_dim=4,
                      linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16,
                      linear_num_value_heads=32, moe_intermediate_size=512,
                      shared_expert_intermediate_size=512, num_experts=512,
                      num_experts_per_tok=10, full_attention_interval=4)
LFM2_350M = dict(model_type="lfm2", vocab_size=65536, hidden_size=1024, intermediate_size=6656,
                 num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
                 conv_L_cache=3, full_attn_idxs=[2, 5, 8, 10, 12, 14])
LLAMA4_CHUNKED = dict(model_type="llama4_text", vocab_size=202048, hidden_size=5120,
                      intermediate_size=8192, intermediate_size_mlp=16384, num_hidden_layers=48,
                      num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                      num_local_experts=128, num_experts_per_tok=1, interleave_moe_layer_step=2,
                      attention_chunk_size=8192)
GPT_NEO_13B = dict(model_type="gpt_neo", vocab_size=50257, hidden_size=2048, num_layers=24,
                   num_heads=16, window_size=256, attention_types=[[["global", "local"], 12]],
                   max_position_embeddings=2048)
# new_decoder_architecture (falcon-40b/180b style), small: 16 query heads, 2 kv heads
FALCON_NEW_ARCH = dict(model_type="falcon", vocab_size=65024, hidden_size=1024,
                       num_attention_heads=16, num_kv_heads=2, num_hidden_layers=4,
                       new_decoder_architecture=True, parallel_attn=True, bias=False)
JAMBA_V01 = dict(model_type="jamba", vocab_size=65536, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 num_experts=16, num_experts_per_tok=2, attn_layer_period=8, attn_layer_offset=4,
                 expert_layer_period=2, expert_layer_offset=1, mamba_d_state=16, mamba_d_conv=4,
                 mamba_expand=2)


# --------------------------------------------------------------- parameter counts (meta)

@pytest.mark.parametrize("name, published", [
    ("meta-llama__Meta-Llama-3-8B", 8_030_261_248),   # Hub safetensors total
    ("mistralai__Mistral-7B-v0.1", 7_241_732_096),    # Hub safetensors total
    ("gpt2", 124_439_808),                             # GPT-2 small, tied lm_head
])
def test_meta_count_matches_published_totals(name, published):
    got = H.meta_param_count(_cfg(name))
    assert got["total"] == published
    assert got["text"] == published and got["towers"] == 0


def test_tied_embedding_counted_once():
    gpt2 = H.meta_param_count(_cfg("gpt2"))
    assert gpt2["tied"] is True
    # falcon-7b ties lm_head to the embedding: the Hub total 7,217,189,760 stores the
    # 65024 x 4544 matrix twice
    falcon = H.meta_param_count(_cfg("tiiuae__falcon-7b"))
    assert falcon["tied"] is True
    assert falcon["total"] == 7_217_189_760 - 65024 * 4544


def test_deepseek_v3_meta_count_is_the_671b_main_model():
    got = H.meta_param_count(_cfg("deepseek-ai__DeepSeek-V3"))
    # model card: 671B main model weights (the 14B MTP module is not built by transformers)
    assert abs(got["total"] - 671e9) < 0.1e9


def test_multimodal_split_llava_1_5_7b():
    cfg = dict(model_type="llava", image_token_index=32000, vision_feature_layer=-2,
               text_config=dict(model_type="llama", vocab_size=32064, hidden_size=4096,
                                intermediate_size=11008, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=32),
               vision_config=dict(model_type="clip_vision_model", hidden_size=1024,
                                  intermediate_size=4096, num_hidden_layers=24,
                                  num_attention_heads=16, image_size=336, patch_size=14,
                                  projection_dim=768))
    got = H.meta_param_count(cfg)
    assert got["total"] == 7_063_427_072                     # llava-1.5-7b-hf Hub total
    # text = Llama-2-7B (6,738,415,616) + 64 extra vocab rows in embed and lm_head
    assert got["text"] == 6_738_415_616 + 2 * 64 * 4096
    # towers = projector (1024->4096->4096 with biases) + CLIP ViT-L/14-336 vision model
    projector = 1024 * 4096 + 4096 + 4096 * 4096 + 4096
    assert got["towers"] == 7_063_427_072 - got["text"]
    assert got["towers"] - projector == 303_507_456


# --------------------------------------------------------------- reduced configs

def test_reduced_config_keeps_pattern_and_geometry():
    r = H.reduced_config(GEMMA3_4B_TEXT)
    assert r["num_hidden_layers"] == 6
    assert r["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert (r["num_attention_heads"], r["num_key_value_heads"], r["head_dim"]) == (8, 4, 256)
    assert r["sliding_window"] == 8 and r["vocab_size"] <= 256

    j = H.reduced_config(JAMBA_V01)  # periods compacted: mamba dense, mamba MoE, attention
    cfg = H.make_config(j)
    kinds = set(zip(cfg.layers_block_type, [n > 1 for n in cfg.layers_num_experts]))
    assert len(cfg.layers_block_type) == 3  # from 32
    # jamba-v0.1: attention every 8th layer (offset 4, always dense), MoE every other layer
    assert kinds == {("mamba", False), ("mamba", True), ("attention", False)}
    assert (cfg.hidden_size, cfg.mamba_d_state, cfg.mamba_d_conv, cfg.mamba_expand) == (4096, 16, 4, 2)
    assert cfg.num_key_value_heads == 8 and cfg.hidden_size // cfg.num_attention_heads == 128


# --------------------------------------------------------------- cache bytes

def test_llama_cache_bytes_by_hand():
    src = _cfg("meta-llama__Meta-Llama-3-8B")
    kv_heads = src["num_key_value_heads"]
    head_dim = src["hidden_size"] // src["num_attention_heads"]
    L, batch = 12, 2
    rows = H.cache_bytes_after_decode(src, L, batch=batch)
    for r in rows:
        want = 2 * batch * kv_heads * head_dim * L * BF16  # K and V
        assert r["cache_class"] == "DynamicLayer"
        assert r["exposed_bytes"] == r["stored_bytes"] == want
        assert r["tokens_exposed"] == r["tokens_stored"] == L
    per_layer = 2 * kv_heads * head_dim * L * BF16
    assert sum(r["exposed_bytes"] for r in rows) == batch * len(rows) * per_layer


def test_sliding_window_tokens_exposed_and_stored():
    src = _cfg("mistralai__Mistral-7B-v0.1")  # sliding_window 4096 -> shrunk to w
    w, L = 8, 20
    per_tok = 2 * src["num_key_value_heads"] * 128 * BF16
    (dec,) = H.cache_bytes_after_decode(src, L, window=w)
    assert dec["cache_class"] == "DynamicSlidingWindowLayer"
    assert (dec["tokens_exposed"], dec["tokens_stored"]) == (w - 1, w)
    assert (dec["exposed_bytes"], dec["stored_bytes"]) == ((w - 1) * per_tok, w * per_tok)
    (pre,) = H.cache_bytes_after_prefill(src, L, window=w)  # bare prefill keeps a view
    assert (pre["tokens_exposed"], pre["tokens_stored"]) == (w - 1, L)
    (short,) = H.cache_bytes_after_decode(src, 5, window=w)  # below the window: all
    assert short["tokens_exposed"] == short["tokens_stored"] == 5


def test_gemma3_mixed_sliding_and_full():
    rows = H.cache_bytes_after_decode(GEMMA3_4B_TEXT, 20)
    per_tok = 2 * 4 * 256 * BF16
    assert [r["kind"] for r in rows] == ["sliding_attention"] * 5 + ["full_attention"]
    assert [r["stored_bytes"] for r in rows] == [8 * per_tok] * 5 + [20 * per_tok]


def test_llama4_chunked_layers_cache_like_sliding():
    rows = H.cache_bytes_after_decode(LLAMA4_CHUNKED, 20, window=8)
    chunked = [r for r in rows if r["kind"] == "chunked_attention"]
    assert chunked and all(r["cache_class"] == "DynamicSlidingWindowLayer" for r in chunked)
    assert all((r["tokens_exposed"], r["tokens_stored"]) == (7, 8) for r in chunked)
    assert [r["tokens_exposed"] for r in rows if r["kind"] == "full_attention"] == [20]


def test_gpt_neo_local_layers_cache_every_token():
    rows = H.cache_bytes_after_decode(GPT_NEO_13B, 20, window=8)
    assert [r["kind"] for r in rows] == ["global", "local"]
    for r in rows:
        assert r["cache_class"] == "DynamicLayer"
        assert r["exposed_bytes"] == 2 * 16 * 128 * 20 * BF16


def test_mamba_state_bytes_by_hand():
    d_inner = MAMBA_130M["expand"] * MAMBA_130M["hidden_size"]
    d_state, d_conv = MAMBA_130M["state_size"], MAMBA_130M["conv_kernel"]
    want = d_inner * d_state * 4 + d_inner * d_conv * BF16  # fp32 SSM state, bf16 conv state
    for L in (2, 30):
        (r,) = H.cache_bytes_after_decode(MAMBA_130M, L, batch=2)
        assert r["exposed_bytes"] == r["stored_bytes"] == 2 * want
        assert r["state_dtypes"] == {"conv_states[0]": "bfloat16", "recurrent_states[0]": "float32"}
        assert r["tokens_exposed"] is None


def test_qwen3_next_gated_deltanet_state_by_hand():
    c = QWEN3_NEXT_80B
    key_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    value_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    conv = (2 * key_dim + value_dim) * c["linear_conv_kernel_dim"] * BF16
    rec = c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"] * 4
    rows = H.cache_bytes_after_decode(c, 10)
    assert [r["kind"] for r in rows] == ["linear_attention"] * 3 + ["full_attention"]
    assert {r["exposed_bytes"] for r in rows[:3]} == {conv + rec}
    assert rows[3]["exposed_bytes"] == 2 * c["num_key_value_heads"] * c["head_dim"] * 10 * BF16


def test_lfm2_short_conv_state_by_hand():
    rows = H.cache_bytes_after_decode(LFM2_350M, 10)
    conv = [r for r in rows if r["kind"] == "conv"]
    assert conv and {r["exposed_bytes"] for r in conv} == {1024 * 3 * BF16}
    assert all(list(r["state_dtypes"]) == ["conv_states[0]"] for r in conv)


def test_deepseek_v3_mla_caches_the_latent():
    src = _cfg("deepseek-ai__DeepSeek-V3")
    L = 6
    rows = H.cache_bytes_after_decode(src, L)
    latent = (src["kv_lora_rank"] + src["qk_rope_head_dim"]) * L * BF16  # one "head"
    assert {r["exposed_bytes"] for r in rows} == {latent}
    assert rows[0]["shapes"] == {"keys": (1, 1, L, 512), "values": (1, 1, L, 64)}


def test_falcon_new_decoder_architecture_caches_all_query_heads():
    L = 10
    rows = H.cache_bytes_after_decode(FALCON_NEW_ARCH, L)
    head_dim = 1024 // 16
    # K/V are broadcast to all 16 query heads before the cache update (not num_kv_heads = 2)
    assert {r["exposed_bytes"] for r in rows} == {2 * 16 * head_dim * L * BF16}


# --------------------------------------------------------------- the harness checks itself
# transformers 5.24 renamed the cache argument and output field to `cache`
# (past_key_values / cache_params deprecated). A forward that takes **kwargs drops a cache
# passed under a name it no longer reads, and the decode step starts a fresh cache: every
# layer then holds one token. These tests hold on the releases before and after.

class _Out:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class _NewForward:  # transformers >= 5.24
    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs): ...


class _TransitionForward:  # a release that reads both while the old name is deprecated
    def forward(self, input_ids=None, past_key_values=None, cache=None, **kwargs): ...


class _OldForward:  # transformers 5.5 - 5.23, attention models
    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs): ...


class _OldStateForward:  # transformers 5.5 - 5.23, Mamba-style models
    def forward(self, input_ids=None, cache_params=None, use_cache=None, **kwargs): ...


class _NoCacheForward:
    def forward(self, input_ids=None, **kwargs): ...


@pytest.mark.parametrize("model, name", [
    (_NewForward(), "cache"), (_TransitionForward(), "cache"),
    (_OldForward(), "past_key_values"), (_OldStateForward(), "cache_params"),
])
def test_cache_is_passed_under_the_name_forward_reads(model, name):
    assert H._cache_kw(model) == name


def test_a_forward_that_reads_no_cache_name_breaks_the_harness():
    with pytest.raises(H.HarnessBroken, match="takes none of"):
        H._cache_kw(_NoCacheForward())


@pytest.mark.parametrize("field", ["cache", "past_key_values", "cache_params"])
def test_the_returned_cache_is_read_under_every_name(field):
    c = object()
    assert H._returned_cache(_Out(**{field: c})) is c


def test_no_returned_cache_breaks_the_harness():
    with pytest.raises(H.HarnessBroken, match="returned no cache"):
        H._returned_cache(_Out(logits=1))


def test_decode_step_that_drops_the_cache_breaks_the_harness(monkeypatch):
    """The 5.24 failure, reproduced on whichever release is installed: the cache handed to
    the decode step under a name the model does not read. One HarnessBroken, not a wrong
    byte count."""
    monkeypatch.setattr(H, "_cache_kw", lambda model: "a_cache_name_no_release_reads")
    H._built.cache_clear()
    try:
        with pytest.raises(H.HarnessBroken, match="instead of updating the prefill's cache"):
            H.cache_bytes_after_decode(_cfg("meta-llama__Meta-Llama-3-8B"), 6)
    finally:
        H._built.cache_clear()


def test_decode_step_sees_every_token_on_the_installed_release():
    rows = H.cache_bytes_after_decode(_cfg("meta-llama__Meta-Llama-3-8B"), 6)
    assert {r["seq_length"] for r in rows} == {6}


def test_attention_layers_that_saw_one_token_break_the_harness():
    passed = object()
    rows = [dict(part="self", tokens_exposed=1, seq_length=1)]
    with pytest.raises(H.HarnessBroken, match=r"have seen \[1\] tokens, not 6"):
        H._check_decode_kept_cache(passed, passed, rows, 6)


def test_a_broken_harness_fails_once_and_skips_the_rest(pytester):
    """tests/conftest.py turns the second and later HarnessBroken into skips."""
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(hf_truth="class HarnessBroken(AssertionError):\n    pass\n")
    pytester.makepyfile(test_truth="""
import pytest
import hf_truth

@pytest.mark.parametrize("i", range(5))
def test_truth(i):
    raise hf_truth.HarnessBroken("decode step started a fresh cache")

def test_kvcalc_wrong():
    assert 1 == 2
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(failed=2, skipped=4)
    result.stdout.fnmatch_lines(["*the transformers truth harness is broken*fresh cache*",
                                 "*truth harness broken (see test_truth.py::test_truth[[]0[]])*"])
