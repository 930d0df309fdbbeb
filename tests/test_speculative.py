"""Speculative decoding in the engines' memory counts (kvcalc.serving.speculative), each
figure against the engine's source rule (file and function cited) or a public log
(tests/data/sglang, quoted with its URL); the configs are in tests/data/speculative."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yamlload

from kvcalc.errors import KvcalcError
from kvcalc.hfconfig import spec_from_hf_config_file
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving import engine_ref
from kvcalc.serving.layout import Layout
from kvcalc.serving.sglang import SglangFlags, count as sglang_count
from kvcalc.serving.speculative import draft_for, expected_tokens, vllm_draft
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.weights import Weights

DATA = Path(__file__).parent / "data"
EAGLE3 = DATA / "speculative" / "eagle3-llama3.1-8b.json"
MIMO = DATA / "speculative" / "mimo-7b-rl.json"
GiB = 1 << 30


def _eagle3_config(tmp_path) -> str:
    return json.dumps({"method": "eagle3", "model": str(EAGLE3), "num_speculative_tokens": 3})


# -- the draft itself ----------------------------------------------------------------
def test_eagle3_head_weights_by_hand_from_its_config():
    """vLLM 0.33 `llama_eagle3.py`: the layer's q/k/v read 2 x hidden (`qkv_input_size`),
    o, the gated MLP, input / post-attention / hidden norms, the fc from 3 x hidden, the
    final norm, an lm_head of draft_vocab_size rows, and draft_id_to_target_id (int64)
    since 32,000 differs from 128,256; the embedding is the target's."""
    cfg = json.loads(EAGLE3.read_text())
    h, ff, dv = cfg["hidden_size"], cfg["intermediate_size"], cfg["draft_vocab_size"]
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    params = (2 * h * (q + 2 * kv) + q * h + 3 * h * ff + 3 * h  # the layer
              + 3 * h * h + h + dv * h)  # fc, final norm, lm_head
    want = 2 * params + 8 * dv
    target = load_model("llama3.1-8b")
    draft = draft_for(target, "eagle3", 3, str(EAGLE3))
    assert draft.weight_bytes(Weights(), 1) == want
    assert draft.layers == 1


def test_mtp_layer_joins_the_target_s_cache_kind():
    """DeepSeek-V3's MTP layer (num_nextn_predict_layers 1) is a copy of its last layer:
    its latent cache (kv_lora_rank 512 + rope 64) is the target's kind, one layer more."""
    target = spec_from_hf_config_file(DATA / "hf" / "deepseek-ai__DeepSeek-V3.json")
    draft = draft_for(target, "mtp", 1)
    [(label, layers, token)] = [(g.mixer.label, g.layers, g.token_bytes)
                                for g in draft.cache_groups("bf16", 8)]
    assert (layers, token) == (1, (512 + 64) * 2)


def test_expected_tokens_is_the_geometric_sum():
    """Leviathan et al. 2023 eq. 1: 1 + a + ... + a^k."""
    assert expected_tokens(0.8, 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert expected_tokens(1.0, 4) == 5
    assert expected_tokens(0.0, 4) == 1
    with pytest.raises(KvcalcError):
        expected_tokens(1.5, 3)


# -- vLLM ------------------------------------------------------------------------------
def _vllm(spec, hw, **given):
    s = EngineSettings(max_model_len=8192, **given)
    return serving_capacity(spec, hw, s)


def test_vllm_eagle3_weights_in_model_loading_and_one_layer_in_the_kv_groups(tmp_path):
    """vLLM 0.33 `GPUModelRunner.load_model`: the drafter loads inside the
    DeviceMemoryProfiler whose consumed memory "Model loading took" logs; its attention
    layer is in the forward context `get_kv_cache_spec` reads, of the same spec as the
    target's, so it joins their group: a block holds 33 layers' pages for Llama-3.1-8B."""
    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    plain = _vllm(spec, hw)
    draft = draft_for(spec, "eagle3", 3, str(EAGLE3))
    spec_cap = _vllm(spec, hw, speculative_config=_eagle3_config(tmp_path))
    assert spec_cap.memory["weights"] == plain.memory["weights"] + draft.weight_bytes(
        Weights(), 1)
    [g0], [g1] = plain.groups, spec_cap.groups
    assert g1.layers == g0.layers + 1 == 33
    page = spec_cap.block_size * 8 * 128 * 2 * 2  # one layer's page: 8 K/V heads of 128, bf16
    assert spec_cap.num_gpu_blocks == spec_cap.memory["kv_cache"] // (33 * page)
    assert spec_cap.draft["draft_kv_bytes_per_token"] == 8 * 128 * 2 * 2


def test_vllm_public_eagle3_start_up_draft_layer_joins_the_group_as_logged():
    """vllm-project/vllm-ascend#2667 (tests/data/speculative/vllm-ascend-2667-eagle3-
    llama31-8b.yaml): Llama-3.1-8B with the EAGLE-3 head, the KV memory the worker
    reported (34,184,553,369 bytes) and blocks of 128. vLLM sized 1,975 blocks, 252,800
    tokens, 1975.00x at 128 tokens: 33 layers' pages a block, the head's one layer in the
    target's group; the 32 target layers alone would give 2,037 blocks (260,736). The
    weights it printed after the drafter loaded, 15.7847 GiB, are kvcalc's target and head
    within 0.01 GiB (15.7801; 14.9888 GiB without the head). The NPU enters nowhere: the count is the
    same on any device preset."""
    case = yamlload.safe_load((DATA / "speculative" / "vllm-ascend-2667-eagle3-llama31-8b.yaml")
                          .read_text())
    logged = case["logged"]
    given = dict(case["settings"])
    cfg = json.loads(given.pop("speculative_config"))
    cfg["model"] = str(DATA / "speculative" / case["draft_config"])
    s = EngineSettings(vllm_version="0.10.1.1", kv_cache_memory_bytes=logged[
        "kv_cache_memory_bytes"], speculative_config=json.dumps(cfg), **given)
    spec = load_model(case["model_preset"])
    caps = [serving_capacity(spec, load_hardware(gpu), s) for gpu in ("h100-sxm", "a100-80gb")]
    assert {c.kv_cache_tokens for c in caps} == {logged["kv_cache_tokens"]}
    cap = caps[0]
    assert cap.num_gpu_blocks == 1975 and f"{cap.max_concurrency:.2f}" == "1975.00"
    [group] = cap.groups
    assert group.layers == 33
    alone = serving_capacity(spec, load_hardware("h100-sxm"),
                             dataclasses.replace(s, speculative_config=None))
    assert alone.kv_cache_tokens == 2037 * 128 != logged["kv_cache_tokens"]
    assert abs(cap.deciding.weights - logged["weights_gib"] * GiB) <= GiB // 100
    assert round(alone.deciding.weights / GiB, 4) == 14.9888


def test_vllm_goldens_untouched_without_the_flag():
    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    assert _vllm(spec, hw).draft == {}


@pytest.mark.parametrize("release, method, ok", [
    ("0.10.1.1", "deepseek_mtp", True), ("0.10.1.1", "mtp", False),
    ("0.11.0", "mtp", True), ("0.14.0", "draft_model", False),
    ("0.15.0", "draft_model", True), ("0.8.5", "eagle", False)])
def test_vllm_methods_by_release(release, method, ok):
    """`SpeculativeMethod` in each release's config (0.10.1.1 `config/__init__.py`, 0.11.0
    `config/speculative.py`); draft_model runs in V1 from 0.15 (`v1/spec_decode/
    draft_model.py`, absent from the 0.14.0 wheel); V1 before 0.10 is not read."""
    from kvcalc.serving.vllm.rules import rules_for

    assert (method in rules_for(release).speculative_methods()) is ok


def test_vllm_speculative_config_is_json():
    spec = load_model("llama3.1-8b")
    with pytest.raises(KvcalcError, match="must be JSON"):
        vllm_draft(spec, "{method: eagle3}", ("eagle3",))
    with pytest.raises(KvcalcError, match="num_speculative_tokens"):
        vllm_draft(spec, json.dumps({"method": "eagle3", "model": str(EAGLE3)}), ("eagle3",))


# -- SGLang ----------------------------------------------------------------------------
def _mimo_log():
    return yamlload.safe_load((DATA / "sglang" / "mimo-7b-rl-mtp-h100-tp1-docs-capped-0.4.10.yaml")
                          .read_text())


def test_sglang_mimo_mtp_draft_worker_as_logged():
    """SGLang 0.4.10 (docs run, tests/data/sglang): the draft worker (MiMoMTP) loads its
    MTP layer with its own embedding and lm_head ("Load weight end. type=MiMoMTP ... mem
    usage=2.71 GB"), then a pool of the target's 20,480 tokens over its one layer ("K size:
    0.04 GB, V size: 0.04 GB"), after the target's pool (`eagle_worker.py`:
    draft_runner_cache_size)."""
    d = _mimo_log()
    s, logged = d["settings"], d["logged"]
    spec = spec_from_hf_config_file(MIMO)
    flags = SglangFlags(
        engine=engine_ref("sglang@0.4.10"), weights=Weights(), layout=Layout(),
        mem_fraction_static=str(s["mem_fraction_static"]),
        max_running_requests=s["max_running_requests"], max_total_tokens=s["max_total_tokens"],
        chunked_prefill_size=s["chunked_prefill_size"], disable_cuda_graph=True,
        speculative_algorithm=s["speculative_algorithm"],
        speculative_num_steps=s["speculative_num_steps"],
        speculative_eagle_topk=s["speculative_eagle_topk"],
        speculative_num_draft_tokens=s["speculative_num_draft_tokens"])
    c = sglang_count(spec, load_hardware(d["gpu"]), flags)
    m = c.memory
    assert c.kv_cache_tokens == logged["kv_tokens"]
    assert m["draft_weights"] / GiB == pytest.approx(logged["draft_weights_mem_gb"], abs=0.005)
    half = m["draft_kv_cache"] / 2 / GiB
    assert half == pytest.approx(logged["draft_k_size_gb"], abs=0.005)
    assert m["kv_cache"] / 2 / GiB == pytest.approx(logged["k_size_gb"], abs=0.005)


def test_sglang_draft_share_of_the_cell_from_0_5_14():
    """0.5.23 `pool_configurator.py`: cell += int(cell x draft_layers / num_layers) for
    EAGLE/STANDALONE in the target worker; before (0.5.8), the target's cell alone and the
    draft's pool beside it."""
    spec = spec_from_hf_config_file(MIMO)
    hw = load_hardware("h100-sxm")
    base = dict(weights=Weights(), layout=Layout(), mem_fraction_static="0.8")
    counts = {}
    for release in ("0.5.8", "0.5.23"):
        for algo in (None, "NEXTN"):
            counts[release, algo] = sglang_count(spec, hw, SglangFlags(
                engine=engine_ref(f"sglang@{release}"), speculative_algorithm=algo, **base))
    cell = counts["0.5.23", None].bytes_per_token
    assert counts["0.5.23", "NEXTN"].bytes_per_token == cell + cell * 1 // 36
    assert counts["0.5.8", "NEXTN"].bytes_per_token == counts["0.5.8", None].bytes_per_token
    assert counts["0.5.8", "NEXTN"].memory["draft_kv_cache"] == (
        counts["0.5.8", "NEXTN"].kv_cache_tokens * 8 * 128 * 2 * 2)


def test_sglang_speculative_defaults_by_release():
    """--max-running-requests 48 (0.4.6-0.5.8, `_handle_speculative_decoding`), the
    reserve's 2 GiB (0.4.8-0.5.8), the target pool's headroom of max_num_reqs x (steps x
    topk + draft tokens) + 100 tokens (0.4.6-0.5.4, `init_memory_pool`)."""
    from kvcalc.serving.sglang.rules import rules_for

    assert rules_for("0.5.4").speculative_running_default("EAGLE") == 48
    assert rules_for("0.5.23").speculative_running_default("EAGLE") is None
    assert rules_for("0.4.10").speculative_reserve_mib("EAGLE") == 2048
    assert rules_for("0.5.4").speculative_reserve_mib("STANDALONE") == 6144
    assert rules_for("0.5.4").speculative_reserve_mib("NGRAM") == 0
    assert rules_for("0.5.4").speculative_headroom() and not rules_for("0.5.8").speculative_headroom()
    spec, hw = spec_from_hf_config_file(MIMO), load_hardware("h100-sxm")
    plain = sglang_count(spec, hw, SglangFlags(engine=engine_ref("sglang@0.5.4"),
                                               weights=Weights(), mem_fraction_static="0.8"))
    spec_c = sglang_count(spec, hw, SglangFlags(
        engine=engine_ref("sglang@0.5.4"), weights=Weights(), mem_fraction_static="0.8",
        speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1))
    # EAGLE with topk 1: draft tokens = steps + 1; 48 requests
    assert spec_c.kv_cache_tokens == plain.kv_cache_tokens + 48 * 3 * 1 + 48 * 4 + 100
    assert spec_c.max_running_requests == 48


def test_sglang_refuses_the_releases_not_read():
    spec, hw = spec_from_hf_config_file(MIMO), load_hardware("h100-sxm")
    with pytest.raises(KvcalcError, match="0.4.6"):
        sglang_count(spec, hw, SglangFlags(engine=engine_ref("sglang@0.4.0"), weights=Weights(),
                                           speculative_algorithm="NEXTN"))
    with pytest.raises(KvcalcError, match="speculative_algorithm"):
        SglangFlags(engine=engine_ref("sglang@0.5.23"), weights=Weights(),
                    speculative_num_steps=3)


# -- TensorRT-LLM ----------------------------------------------------------------------
def _trtllm(spec, **given):
    from kvcalc.serving.trtllm import TrtllmFlags, count

    flags = TrtllmFlags(engine=engine_ref("tensorrt-llm"), weights=Weights(weight_dtype="fp8"),
                        layout=Layout(tp=8), max_seq_len=8192, **given)
    return count(spec, load_hardware("h200"), flags)


@pytest.mark.parametrize("vanilla, layers", [(False, 1), (True, 1)])
def test_trtllm_mtp_layers_in_the_pool(vanilla, layers):
    """`_torch/speculative/utils.py::get_num_spec_layers` (NVIDIA/TensorRT-LLM at
    011d0933dcb5e592f5fa2626beaf42a96324c578): MTP-Eagle keeps one MTP layer in the pool,
    vanilla MTP the checkpoint's num_nextn_predict_layers (1 for DeepSeek-V3); each a
    latent of kv_lora_rank + qk_rope_head_dim = 576 bf16 values a token; the layer's
    weights load with the model's."""
    spec = spec_from_hf_config_file(DATA / "hf" / "deepseek-ai__DeepSeek-V3.json")
    base = _trtllm(spec)
    mtp = _trtllm(spec, speculative_config={"decoding_type": "MTP",
                                            "num_nextn_predict_layers": 3,
                                            "use_mtp_vanilla": vanilla})
    assert mtp.bytes_per_token - base.bytes_per_token == layers * 576 * 2
    draft = draft_for(spec, "mtp", 3)
    grown = mtp.memory["model_weights_inside_torch"] - base.memory["model_weights_inside_torch"]
    assert grown == draft.weight_bytes(Weights(weight_dtype="fp8"), 8)


def test_trtllm_reads_speculative_config_from_the_options_file(tmp_path):
    from kvcalc.serving.speculative import llm_api_speculative_config
    from kvcalc.serving.trtllm.options import read_llm_api_options

    f = tmp_path / "extra.yaml"
    f.write_text("speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 3\n"
                 "kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n")
    assert llm_api_speculative_config(read_llm_api_options(f), str(f)) == {
        "decoding_type": "Eagle3", "max_draft_len": 3}
    f.write_text("kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n")
    assert llm_api_speculative_config(read_llm_api_options(f), str(f)) is None
