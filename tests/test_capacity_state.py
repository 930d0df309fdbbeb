"""vLLM's own count for state layers, attention-free models and MLA's block size
(kvcalc.serving.vllm.state, kvcalc.serving.vllm.block_size).

Every expected figure is hand arithmetic from the published config and vLLM's rules
(the rule and the release are named in each test; the source lines are quoted in the
modules' docstrings), never kvcalc's own output. KV memory is given
(`kv_cache_memory_bytes`), so only the block arithmetic is under test.
"""

from __future__ import annotations

import pytest

from kvcalc.serving.vllm.block_size import attention_block_size
from kvcalc.serving.vllm.settings import GiB, EngineSettings
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.serving.vllm.state import engine_state_groups, is_hopper
from kvcalc.ground.dtypes import dtype
from kvcalc.formulas.cache import cache_groups
from kvcalc.presets import load_hardware, load_model

H100 = load_hardware("h100-sxm")
A100 = load_hardware("a100-80gb")


def fit(model: str, hw, **settings):
    settings.setdefault("kv_cache_memory_bytes", 20 * GiB)
    return serving_capacity(load_model(model), hw, EngineSettings(**settings))


# --------------------------------------------------------------------------------
# Rule 2: the conv state keeps conv_kernel - 1 inputs, in the model dtype
# --------------------------------------------------------------------------------
# Qwen3-Next-80B-A3B at tp 4: conv channels 2 x 16 x 128 + 32 x 128 = 8192, /4 = 2048;
# recurrent state 32/4 x 128 x 128 = 131072 elements.
QWEN3_NEXT_TP4_STATE = 2048 * 3 * 2 + 131072 * 2  # bf16 conv (3 inputs) + bf16 ssm = 274432
# Jamba-1.5-Mini at tp 2: d_inner 2 x 4096 / 2 = 4096; d_state 16; d_conv 4.
JAMBA_TP2_STATE = 4096 * 3 * 2 + 4096 * 16 * 2  # = 155648
# mamba-2.8b: d_inner 5120, d_state 16, conv_kernel 4, 64 layers.
MAMBA_STATE = 5120 * 3 * 2 + 5120 * 16 * 2  # = 194560


def _state_page(model: str, kv: str, tp: int, model_dt: str = "bf16") -> int:
    groups = cache_groups(load_model(model), kv, tp, state_dtype=model_dt)
    groups = engine_state_groups(groups, dtype(model_dt), dtype(model_dt), tp)
    (page,) = {g.state_bytes for g in groups if g.state_bytes}
    return page


def test_conv_state_keeps_kernel_minus_one_inputs() -> None:
    assert QWEN3_NEXT_TP4_STATE == 274432
    assert _state_page("qwen3-next-80b-a3b", "bf16", 4) == QWEN3_NEXT_TP4_STATE
    assert _state_page("jamba-1.5-mini", "bf16", 2) == JAMBA_TP2_STATE == 155648
    assert _state_page("mamba-2.8b", "bf16", 1) == MAMBA_STATE == 194560


def test_conv_state_is_in_the_model_dtype_whatever_the_kv_dtype() -> None:
    # --kv-cache-dtype fp8 leaves the state alone (mamba_cache_dtype "auto" = model dtype)
    assert _state_page("qwen3-next-80b-a3b", "fp8", 4) == QWEN3_NEXT_TP4_STATE
    assert _state_page("jamba-1.5-mini", "fp8", 2) == JAMBA_TP2_STATE


def test_fp8_hybrid_block_size_follows_the_model_dtype_state() -> None:
    # Jamba tp 2, fp8 KV: attention 8/2 heads x 128 x 2 (K, V) x 1 byte = 1024 B/token;
    # block = 16 x cdiv(155648, 16 x 1024) = 16 x 10 = 160 (vLLM 0.33, A100: no checkpoint).
    cap = fit("jamba-1.5-mini", A100, tp=2, max_model_len=16384, kv_dtype="fp8")
    assert cap.block_size == 16 * -(-155648 // (16 * 1024)) == 160


def test_pure_mamba_state_page_and_blocks() -> None:
    # 64 layers x 194560 B a block (one request); 20 GiB // that.
    cap = fit("mamba-2.8b", A100, max_model_len=2048)
    assert cap.num_gpu_blocks == 20 * GiB // (64 * 194560) == 1724


# --------------------------------------------------------------------------------
# Rule 3: attention-free models: one block is one request of max_model_len tokens
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.33", "0.24", "0.20", "0.11"])
def test_attention_free_block_is_max_model_len(version: str) -> None:
    cap = fit("mamba-2.8b", A100, max_model_len=2048, vllm_version=version)
    assert cap.block_size == 2048
    # 0.24+: int(blocks / 1 x len); up to 0.20: blocks // 1 group x block size: the same
    assert cap.kv_cache_tokens == 1724 * 2048 == 3530752
    assert cap.max_concurrency == 1724


def test_attention_free_ignores_prefix_caching_default() -> None:
    # is_prefix_caching_supported: False for attention_free: one page per request
    cap = fit("mamba-2.8b", H100, max_model_len=4096)
    assert cap.groups[0].blocks_per_request == 1


# --------------------------------------------------------------------------------
# Rule 1: hybrids' prefix caching puts the state in "align" mode
# --------------------------------------------------------------------------------
def test_qwen3_next_h100_033_align_with_checkpoint_block() -> None:
    # 0.33 on Hopper: prefix caching on (hybrid), align: 2 pages + 1 FlashInfer GDN
    # checkpoint page per DeltaNet layer; block a multiple of lcm(16, 64) = 64:
    # attention 2 kv heads / tp 4 -> 1 x 256 x 2 x 2 B = 1024 B/token;
    # block = 64 x cdiv(274432, 64 x 1024) = 64 x 5 = 320.
    cap = fit("qwen3-next-80b-a3b", H100, tp=4, max_model_len=32768)
    assert cap.block_size == 320
    # 12 attention + 36 DeltaNet layers: groups of 12 -> 1 attention group, 3 state.
    per_block = 12 * 320 * 1024
    assert cap.num_gpu_blocks == 20 * GiB // per_block == 5461
    per_request = -(-32768 // 320) + 3 * (2 + 1)  # 103 + 9
    assert sum(p.blocks_per_request for p in cap.groups) == per_request == 112
    assert cap.max_concurrency == 5461 / 112
    assert cap.kv_cache_tokens == int(5461 / 112 * 32768)


def test_qwen3_next_off_hopper_has_no_checkpoint_block() -> None:
    # A100: Triton GDN prefill, no checkpoint: align 2 pages; block 16 x cdiv(274432,
    # 16 x 1024) = 16 x 17 = 272.
    cap = fit("qwen3-next-80b-a3b", A100, tp=4, max_model_len=32768)
    assert cap.block_size == 272
    assert sum(p.blocks_per_request for p in cap.groups) == -(-32768 // 272) + 3 * 2 == 127


@pytest.mark.parametrize(("version", "state_pages"), [
    ("0.33", 3), ("0.32", 2), ("0.28", 2), ("0.25", 1)])
def test_qwen3_next_state_pages_by_release(version: str, state_pages: int) -> None:
    # 0.32 and 0.28: align, no checkpoint; 0.25: prefix caching off for hybrids.
    cap = fit("qwen3-next-80b-a3b", H100, tp=4, max_model_len=32768, vllm_version=version)
    state = [p.blocks_per_request for p in cap.groups if p.group.state_bytes]
    assert state == [state_pages] * 3


def test_prefix_caching_off_charges_one_state_page() -> None:
    cap = fit("qwen3-next-80b-a3b", H100, tp=4, max_model_len=32768, prefix_caching=False)
    # no checkpoint grid either: block 16 x 17 = 272
    assert cap.block_size == 272
    assert sum(p.blocks_per_request for p in cap.groups) == -(-32768 // 272) + 3 * 1 == 124


def test_jamba_033_align_two_pages_no_checkpoint() -> None:
    # Mamba-1 layers declare no prefill checkpoint: align = 2 pages each.
    # Jamba tp 2: 4 attention layers (period 8), 28 mamba -> groups of 4: 1 + 7.
    # attention 4 heads x 128 x 2 x 2 B = 2048 B/token; block 16 x cdiv(155648, 32768) = 80.
    cap = fit("jamba-1.5-mini", H100, tp=2, max_model_len=16384)
    assert cap.block_size == 80
    assert cap.num_gpu_blocks == 20 * GiB // (4 * 80 * 2048) == 32768
    assert sum(p.blocks_per_request for p in cap.groups) == -(-16384 // 80) + 7 * 2 == 219


def test_jamba_026_all_mode_charges_every_block() -> None:
    # 0.26-0.27: Jamba declares SupportsMambaPrefixCaching: mode "all", a state page per
    # block of the request: cdiv(16384, 80) = 205 for each of the 7 state groups.
    cap = fit("jamba-1.5-mini", H100, tp=2, max_model_len=16384, vllm_version="0.26")
    assert sum(p.blocks_per_request for p in cap.groups) == 205 + 7 * 205
    assert any("mamba_cache_mode 'all'" in n for n in cap.notes)


# --------------------------------------------------------------------------------
# Rule 4: MLA with fp8 KV on Hopper runs FlashMLA: 64-token blocks
# --------------------------------------------------------------------------------
def test_hopper_by_name() -> None:
    assert is_hopper(H100) and is_hopper(load_hardware("h200")) and is_hopper(load_hardware("h20"))
    assert not is_hopper(A100) and not is_hopper(load_hardware("b200"))


@pytest.mark.parametrize(("gpu", "kv", "version", "block"), [
    ("h200", "fp8", "0.33", 64),  # FLASH_ATTN_MLA refuses fp8 -> FLASHMLA
    ("h200", "auto", "0.33", 16),  # FLASH_ATTN_MLA, MultipleOf(16)
    ("h100-sxm", "fp8", "0.18", 64),
    ("h100-sxm", "auto", "0.17", 64),  # up to 0.17 FlashMLA forced for every MLA model
    ("a100-80gb", "fp8", "0.33", 16),
])
def test_mla_block_size(gpu: str, kv: str, version: str, block: int) -> None:
    s = EngineSettings(max_model_len=32768, kv_dtype=kv, vllm_version=version)
    assert attention_block_size(load_model("deepseek-r1"), load_hardware(gpu), s) == block


def test_deepseek_r1_fp8_h200_blocks() -> None:
    # latent 512 + rope 64 = 576 fp8 bytes a token a layer, 61 layers, block 64.
    cap = fit("deepseek-r1", load_hardware("h200"), tp=8, max_model_len=32768, kv_dtype="fp8",
              kv_cache_memory_bytes=10 * GiB)
    assert cap.block_size == 64
    assert cap.num_gpu_blocks == 10 * GiB // (61 * 64 * 576) == 4774
    assert cap.max_concurrency == 4774 / (32768 // 64)


@pytest.mark.parametrize(("version", "user", "block"), [
    ("0.33", 32, 32 * -(-155648 // (32 * 2048))),  # 0.21+: the user's block is the base: 96
    ("0.19", 32, 16 * -(-155648 // (16 * 2048))),  # raised to the 16-aligned 80
    ("0.33", 1024, 1024),  # already holds a state page: kept
])
def test_hybrid_raises_a_user_block_too_small_for_the_state(version: str, user: int,
                                                            block: int) -> None:
    # Jamba tp 2: state page 155648 B, attention 2048 B/token.
    cap = fit("jamba-1.5-mini", A100, tp=2, max_model_len=16384, block_size=user,
              vllm_version=version)
    assert cap.block_size == block


def test_user_block_kept_for_attention_models() -> None:
    cap = fit("llama3.1-8b", A100, max_model_len=8192, block_size=32)
    assert cap.block_size == 32


# --------------------------------------------------------------------------------
# The 2026 state kinds (issue #20 point 4)
# --------------------------------------------------------------------------------
def _spec(cfg: dict):
    from kvcalc.hfconfig import spec_from_hf_config

    return spec_from_hf_config(cfg, "x")


# Kimi Linear's KDA layers (32 heads of 128, kernel 4) beside MLA layers, as vLLM 0.32's
# kda_state_shape / kda_state_dtype size them: conv 3 x 32 x 128 = 12288 channels x 3
# inputs in the model dtype; recurrent 32 x 128 x 128 in fp32 ("auto" is fp32 for KDA,
# unlike Mamba-2 and DeltaNet, where it is the model dtype).
KIMI = {"model_type": "kimi_linear", "hidden_size": 2304, "num_hidden_layers": 4,
        "num_attention_heads": 32, "vocab_size": 1000, "intermediate_size": 9216,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
KDA_STATE_AUTO = 12288 * 3 * 2 + 32 * 128 * 128 * 4  # = 2170880
KDA_STATE_BF16 = 12288 * 3 * 2 + 32 * 128 * 128 * 2  # = 1122304


@pytest.mark.parametrize(("ssm", "page"), [("auto", KDA_STATE_AUTO), ("bf16", KDA_STATE_BF16)])
def test_kda_recurrent_state_is_fp32_under_auto(ssm: str, page: int) -> None:
    groups = cache_groups(_spec(KIMI), dtype("bf16"), 1, 0, dtype("bf16"))
    paged = engine_state_groups(groups, dtype("bf16"), dtype("bf16" if ssm == "auto" else ssm),
                                1, ssm_auto=ssm == "auto")
    assert [g.state_bytes for g in paged if g.state_bytes] == [page]


# RWKV and RecurrentGemma: no vLLM release serves them (vLLM 0.32's model registry names
# neither): the memory before the cache is counted, the counts of the cache are not.
RWKV_CFG = {"model_type": "rwkv", "hidden_size": 2048, "num_hidden_layers": 24,
            "vocab_size": 50277}


# Kinds an engine does serve, with cache layouts kvcalc does not model: the counts are
# withheld too, and the note says so in the kind's own words, not "no release serves".
QWEN4_EXP_TEXT_CFG = {"model_type": "qwen4_exp_text", "num_hidden_layers": 4,
                      "hidden_size": 2048, "intermediate_size": 5120,
                      "num_attention_heads": 16, "vocab_size": 151936,
                      "indexer_n_heads": 4, "indexer_kv_heads": 1, "indexer_head_dim": 128,
                      "indexer_budget": 2048, "indexer_compress_ratio": 4,
                      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                                          "partial_rotary_factor": 0.25}}


@pytest.mark.parametrize("spec_of, says", [
    (lambda: _spec(QWEN4_EXP_TEXT_CFG),
     "kvcalc does not model how an engine pages Qwen4-Exp's QSA indexer"),
    (lambda: _spec_file("deepseek-ai__DeepSeek-V4-Flash.json"),
     "vLLM 0.32 serves DeepSeek-V4 with cache specs of its own"),
])
def test_served_kinds_kvcalc_does_not_page_say_so(spec_of, says) -> None:
    cap = serving_capacity(spec_of(), H100, EngineSettings(
        max_model_len=8192, kv_cache_memory_bytes=20 * GiB))
    assert cap.num_gpu_blocks is None and cap.kv_cache_tokens is None
    (note,) = [n for n in cap.notes if "not modelled" in n]
    assert note.startswith(says) and "no release" not in note, note


def _spec_file(name: str):
    import json
    from pathlib import Path

    cfg = json.loads((Path(__file__).parent / "data" / "hf" / name).read_text())
    return _spec(cfg)


def test_unpaged_state_kinds_withhold_the_cache_counts() -> None:
    cap = serving_capacity(_spec(RWKV_CFG), H100, EngineSettings(
        max_model_len=8192, kv_cache_memory_bytes=20 * GiB))
    assert cap.fits
    assert (cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_concurrency,
            cap.max_model_len_fit, cap.block_size) == (None, None, None, None, None)
    assert [n for n in cap.notes if "not modelled" in n] == [
        "vLLM pages no rwkv state (no release read serves such a model): KV blocks, cache "
        "tokens, concurrency and the longest length that fits are not modelled"]
