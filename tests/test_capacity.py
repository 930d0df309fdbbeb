"""kvcalc.serving.vllm against public vLLM start-up logs (tests/data/vllm/*.yaml).

Every expected figure here is a number a vLLM log printed (or the page quoting it),
never kvcalc's own output: tokens and concurrency within 5% (the available KV memory
within 5% where a log prints no tokens), memory terms within 0.5 GiB, refusals as the
engine refused. The hand-worked checks at the end use
arithmetic written out from vLLM's rules, not kvcalc calls.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
import yamlload

from kvcalc.serving.vllm.blocks import blocks_per_request, kv_cache_groups
from kvcalc.serving.vllm.settings import GiB, EngineSettings, default_batch_limits
from kvcalc.serving.layout import pipeline_layers
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import CacheGroup
from kvcalc.layers import Attention, CrossAttention, Latent, Mamba
from kvcalc.layers.indexed import IndexedLatent
from kvcalc.hfconfig import spec_from_hf_config, spec_from_hf_config_file
from kvcalc.presets import load_hardware, load_model, model_from_mapping

DATA = Path(__file__).parent / "data" / "vllm"
HF = Path(__file__).parent / "data" / "hf"
LOGS = sorted(DATA.glob("*.yaml"))
TOKENS_TOL = 0.05
MEMORY_TOL = GiB // 2


def load(path: Path) -> dict:
    return yamlload.safe_load(path.read_text())


def run(case: dict):
    if "hf_config" in case:
        spec = spec_from_hf_config_file(HF / case["hf_config"])
    elif "preset" in case:
        spec = load_model(case["preset"])
    else:
        spec = model_from_mapping(case["model"], case["model_name"], require_source=False)
    hw = load_hardware(case["gpu"])
    logged = case["logged"]
    if "visible_memory_gib" in logged:
        hw = dataclasses.replace(hw, visible_memory_bytes=round(logged["visible_memory_gib"] * GiB))
    settings = dict(case["settings"])
    extra = {}
    if case.get("weights_from_log"):
        extra["weights_bytes"] = round(logged["weights_gib"] * GiB)
    if case.get("kv_memory_from_log"):
        extra["kv_cache_memory_bytes"] = round(logged["kv_cache_gib"] * GiB)
    if "weight_dtype" in case:
        extra["weight_dtype"] = case["weight_dtype"]
    s = EngineSettings(engine=case["engine"], vllm_version=case["vllm_version"], **settings,
                       **extra)
    return serving_capacity(spec, hw, s)


def test_there_are_at_least_twenty_logs_each_citing_its_source() -> None:
    assert len(LOGS) >= 20
    for path in LOGS:
        case = load(path)
        assert case["source"].startswith("https://"), path.name
        assert case["vllm_version"] and case["log"].strip(), path.name
        assert path.name in (DATA / "README.md").read_text(), path.name


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_tokens_concurrency_and_refusal_match_the_log(path: Path) -> None:
    case = load(path)
    logged = case["logged"]
    cap = run(case)
    assert cap.fits == (not logged["refused"]), cap.refusal
    if "kv_cache_tokens" in logged:
        want = logged["kv_cache_tokens"]
        if want == 0:
            assert cap.kv_cache_tokens == 0
        else:
            assert cap.kv_cache_tokens == pytest.approx(want, rel=TOKENS_TOL)
    if "max_concurrency" in logged and logged["max_concurrency"]:
        assert cap.max_concurrency == pytest.approx(logged["max_concurrency"], rel=TOKENS_TOL)
    if "max_model_len_fit" in logged:
        assert cap.max_model_len_fit == pytest.approx(logged["max_model_len_fit"], rel=TOKENS_TOL)
    if logged["refused"]:
        assert cap.refusal
    elif "kv_cache_tokens" not in logged and "kv_cache_gib" in logged:
        # The log prints its available KV memory only: that, within the same 5%.
        want_kv = logged["kv_cache_gib"] * GiB
        assert cap.deciding.kv_cache == pytest.approx(want_kv, rel=TOKENS_TOL)


TERMS = ("budget", "weights", "activation_peak", "non_torch", "cuda_graphs", "kv_cache")
MEMORY_CASES = [
    pytest.param(p, term, id=f"{p.stem}-{term}",
                 marks=[pytest.mark.xfail(strict=True, reason=load(p)["not_modelled"][f"{term}_gib"])]
                 if f"{term}_gib" in load(p).get("not_modelled", {}) else [])
    for p in LOGS for term in TERMS if f"{term}_gib" in load(p)["logged"]
]


@pytest.mark.parametrize(("path", "term"), MEMORY_CASES)
def test_each_logged_memory_term_within_half_a_gib(path: Path, term: str) -> None:
    case = load(path)
    cap = run(case)
    # The log's rank: a V0 worker (not the driver) runs no sampler.
    rank = case.get("rank", "any")
    device = next((d for d in cap.devices if d.samples == (rank != "worker")), cap.deciding)
    ours = device.as_dict()[term]
    if term == "activation_peak" and rank == "worker":
        ours = device.forward_activation
    want = round(case["logged"][f"{term}_gib"] * GiB)
    assert abs(ours - want) <= MEMORY_TOL, f"{term}: kvcalc {ours / GiB:.2f} GiB, log {want / GiB:.2f}"


# --- the engine's rules, by hand --------------------------------------------------------
def test_full_attention_blocks_and_tokens_by_hand() -> None:
    # Qwen3-14B (LMCache#1739): 40 layers x 8 KV heads x 128 x 2 (K,V) x 2 bytes = 163,840
    # bytes per token; a 16-token block of all layers 2,621,440 bytes; 6.51 GiB ->
    # 6,990,180,433 // 2,621,440 = 2,666 blocks = 42,656 tokens, as logged.
    avail = round(6.51 * GiB)
    assert avail // (16 * 163_840) == 2_666
    case = load(DATA / "qwen3-14b-lmcache.yaml")
    cap = run(case)
    assert cap.num_gpu_blocks == 2_666 and cap.kv_cache_tokens == 42_656
    assert f"{cap.max_concurrency:.2f}" == "1.30"  # 2,666 / cdiv(32,768, 16)


def test_sliding_window_blocks_per_request() -> None:
    # vLLM: cdiv(min(window - 1 + in_flight, len), block) + 1 for a sliding layer.
    g = CacheGroup(Attention(8, 8, 64, kind="sliding", window=1024), 1, 100)
    assert blocks_per_request(g, 16, 32768, 2048) == -(-(1023 + 2048) // 16) + 1 == 193
    assert blocks_per_request(g, 16, 500, 2048) == -(-500 // 16) + 1 == 33
    full = CacheGroup(Attention(8, 8, 64), 1, 100)
    assert blocks_per_request(full, 16, 20000, 0) == 1250


def test_chunked_state_and_cross_blocks_per_request() -> None:
    # vLLM: chunked local attention cdiv(min(chunk + in_flight, len), block); a mamba
    # state one page; cross-attention the encoder's tokens, cdiv(encoder_len, block).
    chunked = CacheGroup(Attention(8, 8, 64, kind="chunked", window=8192), 1, 100)
    assert blocks_per_request(chunked, 16, 32768, 2048) == (8192 + 2048) // 16 == 640
    assert blocks_per_request(chunked, 16, 1000, 2048) == -(-1000 // 16) == 63
    state = CacheGroup(Mamba(d_inner=64, d_state=16, d_conv=4, dt_rank=4), 1, 0, 9000)
    assert blocks_per_request(state, 16, 32768, 2048) == 1
    cross = CacheGroup(CrossAttention(8, 8, 64), 1, 100)
    assert blocks_per_request(cross, 16, 32768, 2048, encoder_len=1500) == -(-1500 // 16) == 94
    assert blocks_per_request(cross, 16, 32768, 2048) == 32768 // 16  # follows the decoder


def test_gemma3_like_grouping_five_sliding_groups_and_one_full() -> None:
    # Reference doc sec. 4: 48 layers, 5:1 -> 40 sliding + 8 full; group size 8:
    # 5 sliding groups + 1 full group.
    full, sliding = Attention(8, 8, 64), Attention(8, 8, 64, kind="sliding", window=1024)
    groups = (CacheGroup(full, 8, 4096), CacheGroup(sliding, 40, 4096))
    plans = kv_cache_groups(groups, 16, 32768, 2048)
    assert [p.group.label for p in plans] == ["full"] + ["sliding 1,024"] * 5
    assert all(p.slots == 8 for p in plans)


def test_one_attention_type_with_pages_of_two_sizes_is_one_group() -> None:
    # vLLM 0.11+ get_kv_cache_groups (UniformTypeKVCacheSpecs, vllm-project/vllm#25101):
    # layers of one type whose pages differ are one group; a block holds every layer's
    # page and a request needs cdiv(len, block) blocks. HY V4's class default: 10 MLA
    # layers with an indexer, (512 + 64) x 2 + 128 + 4 = 1,284 B a token, 24 without,
    # 1,152 B. Before 0.11: buckets of 10, the 24 in three groups padded to 30.
    geometry = dict(heads=32, kv_lora_rank=512, rope_dim=64, nope_dim=192, v_dim=256,
                    q_lora_rank=1536)
    groups = (CacheGroup(IndexedLatent(**geometry, index_heads=16), 10, 1284),
              CacheGroup(Latent(**geometry), 24, 1152))
    (one,) = kv_cache_groups(groups, 64, 32768, 8192, uniform_type=True)
    assert one.page_bytes * one.slots == 64 * (10 * 1284 + 24 * 1152) == 2_591_232
    assert one.blocks_per_request == 32768 // 64 == 512
    assert [p.slots for p in kv_cache_groups(groups, 64, 32768, 8192)] == [10, 10, 10, 10]
    # a sliding and a full layer are two types: grouped as before
    full, sliding = Attention(8, 8, 64), Attention(8, 8, 64, kind="sliding", window=1024)
    two = (CacheGroup(full, 8, 4096), CacheGroup(sliding, 40, 4096))
    assert len(kv_cache_groups(two, 16, 32768, 2048, uniform_type=True)) == 6
    # the whole count: blocks = available // (block x every layer's bytes a token)
    hy = spec_from_hf_config({"model_type": "hy_v4", "hidden_size": 2816,
                              "num_hidden_layers": 34, "num_attention_heads": 32,
                              "vocab_size": 120832, "intermediate_size": 6912}, "hy")
    cap = serving_capacity(hy, load_hardware("h100-sxm"), EngineSettings(
        max_model_len=32768, kv_cache_memory_bytes=20 * GiB))
    block = cap.block_size
    assert cap.num_gpu_blocks == 20 * GiB // (block * (10 * 1284 + 24 * 1152))
    assert cap.max_concurrency == cap.num_gpu_blocks / -(-32768 // block)


def test_pipeline_stages_give_extra_layers_before_the_last() -> None:
    # vLLM get_pp_indices: layers // pp each; the remainder r goes one by one to the
    # stages -2, -3, ..., -(r + 1) (first and last stage, with embedding / lm_head, lighter).
    assert pipeline_layers(94, 4) == (23, 24, 24, 23)
    assert pipeline_layers(10, 4) == (2, 3, 3, 2)
    assert pipeline_layers(32, 2) == (16, 16)
    with pytest.raises(KvcalcError):
        pipeline_layers(2, 3)


def test_default_batch_limits_follow_the_device() -> None:
    h100, a100, l4 = (load_hardware(n) for n in ("h100-sxm", "a100-80gb", "l4"))
    s = EngineSettings(max_model_len=32768)
    assert default_batch_limits(h100, s) == (8192, 1024)
    assert default_batch_limits(a100, s) == (2048, 256)  # A100 excluded from the >= 70 GiB tier
    assert default_batch_limits(l4, s) == (2048, 256)
    assert default_batch_limits(load_hardware("b200"), s) == (16384, 1024)
    assert default_batch_limits(h100, s.replace(max_num_batched_tokens=512)) == (512, 1024)


def test_pipeline_parallel_stage_with_least_room_decides() -> None:
    spec = spec_from_hf_config_file(HF / "meta-llama__Meta-Llama-3-8B.json")
    hw = load_hardware("rtx4090")
    cap = serving_capacity(spec, hw, EngineSettings(max_model_len=8192, pp=2))
    assert len({d.stage for d in cap.devices}) == 2
    assert cap.num_gpu_blocks == min(d.num_blocks for d in cap.devices)
    # the last stage holds the lm_head and runs the sampler: it has less room
    assert cap.deciding.stage == 1


def test_refusal_names_the_largest_length_that_fits() -> None:
    spec = spec_from_hf_config_file(HF / "meta-llama__Meta-Llama-3-8B.json")
    s = EngineSettings(max_model_len=8192, kv_cache_memory_bytes=64 * 2**20)
    cap = serving_capacity(spec, load_hardware("h100-sxm"), s)
    # 64 MiB / (32 layers x 131,072 bytes per token per 16-token block... ) = 512 tokens
    assert not cap.fits and cap.max_model_len_fit == 512 and "512" in cap.refusal


def test_hardware_presets_carry_visible_memory_and_links() -> None:
    for name in ("b200", "gb200", "h20", "h200-nvl", "mi300x", "mi325x", "l40s", "l4", "a10g",
                 "a10", "t4", "v100", "rtx3090", "rtx4060", "rtx4060ti", "rtx4070", "rtx5090",
                 "rtx6000-ada", "rtx-pro-6000-blackwell", "dgx-spark"):
        hw = load_hardware(name)
        assert 0 < hw.visible_memory_bytes <= hw.memory_bytes, name
        assert hw.visible_memory_source and hw.source, name
        assert hw.interconnect_bandwidth_bytes_per_s > 0, name
    assert load_hardware("rtx3090").visible_memory_bytes == round(23.58 * GiB)  # vllm#10517


def test_non_torch_memory_above_tp_2_on_nvswitch_by_hand() -> None:
    # NCCL v2.27.5 src/transport/nvls.cc: NVLS only above 2 GPUs (ncclNvlsInit), 16
    # channels on Hopper (NVLS_NCHANNELS_SM90), and ncclNvlsBufferSetup's buffers per rank:
    # channels x 2 (reduce, broadcast) x 128 KiB chunk x 8 steps x heads (the node's 4
    # ranks) = 16 x 2 x 1 MiB x 4 = 128 MiB. vLLM 0.18-0.26 run the CUDA-graph profile
    # inside the memory_profiling window (gpu_worker.py), 0.16 and 0.27+ do not: the 0.18
    # logs of 4 x H200 (tests/data/vllm/*-vme.yaml) leave 1.64-1.70 GiB more than 0.16's.
    llama = load_model("llama3.3-70b")

    def non_torch(gpu: str, tp: int, version: str, **kw) -> int:
        s = EngineSettings(max_model_len=8192, tp=tp, vllm_version=version, **kw)
        return serving_capacity(llama, load_hardware(gpu), s).deciding.non_torch

    nvls = 16 * 2 * 128 * 1024 * 8 * 4
    assert nvls == 128 * 2**20
    assert non_torch("h200", 4, "0.16") - non_torch("a100-80gb", 4, "0.16") == nvls  # NVLink 3
    assert non_torch("h200", 2, "0.16") == non_torch("a100-80gb", 2, "0.16")  # no NVLS at 2
    graph_profile = non_torch("h200", 4, "0.18") - non_torch("h200", 4, "0.16")
    assert abs(graph_profile - 1.67 * GiB) <= GiB // 10
    assert non_torch("h200", 4, "0.26") == non_torch("h200", 4, "0.18")
    assert non_torch("h200", 4, "0.27") == non_torch("h200", 4, "0.16")
    assert non_torch("h200", 4, "0.18", enforce_eager=True) == non_torch("h200", 4, "0.16")
    assert non_torch("h200", 2, "0.18") == non_torch("h200", 2, "0.16")  # none at tp 2


# --- lengths the engine refuses ----------------------------------------------------
def test_max_model_len_over_the_models_context_is_refused_as_vllm_does() -> None:
    """vLLM (_get_and_verify_max_len) refuses a max_model_len above the length the config
    gives unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; kvcalc once reported 64x concurrency for
    GPT-2 at 8,192 tokens (its context is 1,024)."""
    from kvcalc.presets import load_model

    gpt2, h100 = load_model("gpt2"), load_hardware("h100-sxm")
    assert gpt2.max_context == 1024  # n_positions in GPT-2's config.json
    with pytest.raises(KvcalcError, match=r"max_model_len 8,192 is over gpt2's context of "
                                          r"1,024 tokens.*VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"):
        serving_capacity(gpt2, h100, EngineSettings(max_model_len=8192))
    allowed = serving_capacity(gpt2, h100, EngineSettings(max_model_len=8192,
                                                          allow_long_max_model_len=True))
    assert allowed.fits and allowed.max_model_len_fit > 8192
    at_context = serving_capacity(gpt2, h100, EngineSettings(max_model_len=1024))
    assert at_context.fits and at_context.max_model_len_fit == 1024  # never past the context


@pytest.mark.parametrize("env, code", [(None, 1), ("0", 1), ("1", 0), ("true", 0), ("TRUE", 0)])
def test_cli_reads_vllms_variable_for_long_lengths(env, code) -> None:
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if k != "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}
    if env is not None:
        environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = env
    r = subprocess.run([sys.executable, "-m", "kvcalc", "fit", "--preset", "llama3-8b",
                        "--max-model-len", "100000", "--format", "json"], env=environ,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == code, r.stderr
    if code:  # refused (valid input, the answer no): the count anyway, and why
        import json

        assert "over llama3-8b's context of 8,192" in json.loads(r.stdout)["refusal"]


@pytest.mark.parametrize("tp", [1, 2])
def test_engine_weights_hold_the_vision_tower(tp) -> None:
    """vLLM loads a multimodal checkpoint whole: Gemma 3 4B's SigLIP tower (416,866,032
    parameters, the So400m encoder) and projector (1152 x 2560 + a 1152 norm) are
    resident beside the language model; the engine count once left out their 0.84 GB."""
    import dataclasses as dc

    from kvcalc.presets import load_model

    gemma = load_model("gemma3-4b")
    towers = gemma.extra["towers"]
    assert towers == {"vision_tower": 416_866_032, "projector": 1152 * 2560 + 1152}
    text_only = dc.replace(gemma, extra={k: v for k, v in gemma.extra.items() if k != "towers"})
    settings = EngineSettings(max_model_len=8192, tp=tp)
    h100 = load_hardware("h100-sxm")
    with_towers = serving_capacity(gemma, h100, settings).memory["weights"]
    without = serving_capacity(text_only, h100, settings).memory["weights"]
    assert with_towers - without == 2 * -(-(416_866_032 + 2_950_272) // tp)  # bf16


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**6))
def test_the_one_binary_search_finds_the_last_length_that_holds(lo, k, width):
    # Every "largest that fits" (plain fit, vLLM's max_model_len, latency limits) is
    # _num.largest: checked here against the threshold it must find, by construction.
    from kvcalc.ground import num as _num
    hi = lo + width
    k = lo + k % width  # the last n that holds, in [lo, hi)
    assert _num.largest(lambda n: n <= k, lo, hi) == k
