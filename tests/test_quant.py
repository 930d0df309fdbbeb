"""kvcalc.quant: weights as stored, against published checkpoint totals
(tests/data/quant/README.md gives each figure's source), transformers' own FP8
modules built on the meta device, and small cases worked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.formulas.params import param_counts, weight_params_per_device
from kvcalc.hfconfig import spec_from_hf_config, spec_from_hf_config_file
from kvcalc.presets import presets_dir
from kvcalc.quant.formats import Quantization, adhoc, quantization_from_hf, quantization_of
from kvcalc.quant.weights import weight_bytes, weight_bytes_per_device

ROOT = Path(__file__).parents[1]
# The published configs behind the presets ship inside kvcalc: found where it is installed.
PRESETS = presets_dir() / "hf"
DATA = Path(__file__).parent / "data" / "hf"
ALL_CONFIGS = sorted([*PRESETS.glob("*.json"), *DATA.glob("*.json")])
GIB = 1 << 30


def _spec(path: Path, **overrides):
    cfg = json.loads(path.read_text())
    cfg.update(overrides)
    return spec_from_hf_config(cfg, path.stem, str(path)), cfg


def _fp8_block() -> Quantization:
    return quantization_from_hf({"quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128]}})


# --------------------------------------------------------------------------------
# Unquantized: exactly param_counts in the model dtype, key by key
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: p.stem)
def test_unquantized_is_param_counts_times_dtype(path):
    spec = spec_from_hf_config_file(path)
    w = weight_bytes(spec, None, "bf16")
    # hyper-connections stay fp32 (transformers' _keep_in_fp32_modules_strict: DeepSeek-V4)
    expected = {k: (4 if k == "hyper_connections" else 2) * n
                for k, n in param_counts(spec).breakdown.items()}
    got = {k: b for k, b in w.breakdown.items() if k != "buffers"}
    assert got == expected
    assert weight_bytes_per_device(spec, None, 1) == w.total


# --------------------------------------------------------------------------------
# Published checkpoints
# --------------------------------------------------------------------------------
def test_bitnet_online_weighs_its_stored_bf16_and_offline_is_refused():
    """BitNet's quantization_config (transformers' BitNetHfQuantizer): "online"
    (microsoft/bitnet-b1.58-2B-4T-bf16) keeps bf16 weights and ternarises them when run,
    so the checkpoint weighs its 2,412,820,480 parameters in bf16; "offline" packs four
    ternary values a uint8, a layout kvcalc does not model: refused, saying so."""
    path = DATA / "microsoft__bitnet-b1.58-2B-4T-bf16.json"
    cfg = json.loads(path.read_text())
    assert quantization_from_hf(cfg) is None
    spec = spec_from_hf_config_file(path)
    assert weight_bytes(spec, quantization_of(spec), "bf16").total == 2 * 2_412_820_480 + \
        weight_bytes(spec, None, "bf16").breakdown.get("buffers", 0)
    offline = {"quantization_config": {**cfg["quantization_config"],
                                       "quantization_mode": "offline"}}
    with pytest.raises(KvcalcError, match="packed 2-bit ternary"):
        quantization_from_hf(offline)


@pytest.mark.parametrize("stem, total_size", [
    ("openai__gpt-oss-20b", 13_761_264_768),
    ("openai__gpt-oss-120b", 65_248_815_744),
])
def test_gpt_oss_mxfp4_equals_index_total_size(stem, total_size):
    """model.safetensors.index.json metadata.total_size: bf16 attention, router,
    embeddings and expert biases; experts as uint8 blocks + e8m0 scales per 32."""
    spec, cfg = _spec(PRESETS / f"{stem}.json")
    q = quantization_from_hf(cfg)
    assert q.layout == "mxfp4" and q.experts_only
    assert spec.extra["quantization"] == q
    w = weight_bytes(spec, q)
    assert w.total == total_size
    # 4.25 bits a routed-expert weight: 4-bit values plus one byte per 32
    experts = param_counts(spec).breakdown["moe/experts"]
    biases = spec.layers * cfg["num_local_experts"] * (2 * spec.d_ff + spec.d_model)  # gate_up, down
    assert w.parts["values"] * 8 == (experts - biases) * 4


def test_deepseek_r1_fp8_equals_published_inventory():
    """DeepSeek-R1's 163 safetensors files: 684,531,386,000 tensor elements (fp8
    weights, fp32 128x128 block scales, bf16 embeddings/norms/router/MTP projection,
    fp32 e_score_correction_bias), 641.29 GiB of tensors; the Hub's 684,489,845,504
    is the same without the scale tensors."""
    spec, cfg = _spec(PRESETS / "deepseek-ai__DeepSeek-R1.json")
    q = quantization_from_hf(cfg)
    w = weight_bytes(spec, q, mtp_layers=cfg["num_nextn_predict_layers"])
    assert w.stored_elements == 684_531_386_000
    # fp32: the block scales and one e_score_correction_bias per MoE layer (MTP's included)
    scale_elements = w.elements["fp32"] - (spec.moe_layers + 1) * cfg["n_routed_experts"]
    assert scale_elements * 4 == w.parts["scales"]
    assert w.stored_elements - scale_elements == 684_489_845_504
    assert round(w.total / GIB, 2) == 641.29
    # without the MTP module: what an engine loads to serve (no speculative decoding)
    served = weight_bytes(spec, q)
    assert served.total < w.total
    assert served.breakdown["embedding"] == 2 * spec.vocab * spec.d_model


@pytest.mark.parametrize("stem, hub_elements", [
    ("Qwen__Qwen3-235B-A22B", 235_107_904_512),  # Qwen3-235B-A22B-Instruct-2507-FP8
    ("Qwen__Qwen3-30B-A3B", 30_533_947_392),  # Qwen3-30B-A3B-Instruct-2507-FP8
])
def test_qwen3_moe_fp8_equals_hub_count(stem, hub_elements):
    """The Hub's safetensors count of the FP8 repositories (same geometry as the bf16
    configs here): fp8 projections with fp32 128x128 scales, bf16 routers (mlp.gate),
    norms, embeddings and lm_head."""
    spec, _ = _spec(PRESETS / f"{stem}.json")
    w = weight_bytes(spec, _fp8_block())
    assert w.stored_elements == hub_elements
    routed = Quantization("fp8", "fp8_block", 8, block=(128, 128), routers=True)
    assert weight_bytes(spec, routed).stored_elements != hub_elements


def test_qwen25_7b_awq_matches_vllm_loaded_weights():
    """vLLM 0.7.3 (tests/data/vllm/qwen25-7b-awq-rtx4060.yaml) logs 5.2032 GiB for
    Qwen2.5-7B-Instruct-AWQ: the checkpoint (int4 gemm, g128, fp16 scales and packed
    zeros, fp16 embeddings and lm_head) plus vLLM's fp16 RoPE cos/sin cache; the
    Marlin kernels' per-layer workspaces make up the last ~0.007 GiB."""
    spec, _ = _spec(DATA / "Qwen__Qwen2.5-7B-Instruct.json")
    q = quantization_from_hf({"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
        "version": "gemm", "modules_to_not_convert": None}})
    w = weight_bytes(spec, q, "fp16")
    rope = 2 * spec.max_context * spec.head_dim
    assert abs((w.total + rope) / GIB - 5.2032) < 0.01


# --------------------------------------------------------------------------------
# transformers' FP8 modules on the meta device
# --------------------------------------------------------------------------------
def test_deepseek_r1_dtypes_equal_the_checkpoints_tensors():
    """Every tensor DeepSeek-R1's safetensors files store, by dtype
    (tests/data/quant/deepseek-r1-tensors.json, from its published tensor listing):
    the routers' gate.weight is bf16 [256, 7168] and e_score_correction_bias fp32 [256]
    in each MoE layer, as stored; how a transformers release holds them in memory (5.24
    upcasts the router weight to fp32) is not what the checkpoint weighs."""
    inventory = json.loads((Path(__file__).parent / "data" / "quant" /
                            "deepseek-r1-tensors.json").read_text())["tensors"]
    by_dtype: dict[str, int] = {}
    for t in inventory:
        by_dtype[t["dtype"]] = by_dtype.get(t["dtype"], 0) + math.prod(t["shape"]) * t["count"]
    assert sum(t["count"] for t in inventory) == 91_991  # the listing is complete
    routers = {t["name"].rsplit(".", 2)[-2] + "." + t["name"].rsplit(".", 1)[-1]:
               (t["shape"], t["dtype"]) for t in inventory if ".mlp.gate." in t["name"]}
    assert routers == {"gate.weight": ([256, 7168], "bf16"),
                       "gate.e_score_correction_bias": ([256], "fp32")}
    spec, cfg = _spec(PRESETS / "deepseek-ai__DeepSeek-R1.json")
    w = weight_bytes(spec, quantization_from_hf(cfg), mtp_layers=cfg["num_nextn_predict_layers"])
    assert w.elements == by_dtype


_ROUTER_SUFFIXES = (".mlp.gate.weight", ".mlp.gate.e_score_correction_bias")


def _meta_fp8_elements(cfg: dict) -> tuple[dict[str, int], int]:
    """Elements by dtype of transformers' FP8-quantized model built on the meta device,
    less the routers (returned apart): transformers decides in what dtype it holds a
    router in memory, and that changes between releases (5.24 holds DeepSeek's in fp32)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.quantizers.auto import AutoHfQuantizer

    config = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    quantizer = AutoHfQuantizer.from_config(config.quantization_config, pre_quantized=True)
    quantizer.preprocess_model(model)
    names = {"torch.float8_e4m3fn": "fp8", "torch.float32": "fp32", "torch.bfloat16": "bf16"}
    out: dict[str, int] = {}
    routers = 0
    for name, p in [*model.named_parameters(), *model.named_buffers()]:
        if name.endswith(_ROUTER_SUFFIXES):
            routers += p.numel()
            continue
        if not p.is_floating_point() or name.endswith("inv_freq"):
            continue  # rotary tables and integer buffers: not weights
        key = names[str(p.dtype)]
        out[key] = out.get(key, 0) + p.numel()
    return out, routers


@pytest.mark.parametrize("stem, reduce", [
    ("deepseek-ai__DeepSeek-R1", {"num_hidden_layers": 3, "first_k_dense_replace": 1,
                                  "n_routed_experts": 8}),
    ("Qwen__Qwen3-30B-A3B", {"num_hidden_layers": 2, "num_experts": 8}),
])
def test_fp8_block_matches_transformers_fp8_linear(stem, reduce):
    """transformers' FineGrainedFP8 quantizer converts the same modules (not the routers)
    with the same ceil(rows/128) x ceil(cols/128) fp32 scales. Its fused gate_up experts
    hold as many blocks as the checkpoint's separate gate and up (expert widths are
    multiples of 128 here). The routers' stored dtypes are checked against the
    checkpoint itself (test_deepseek_r1_dtypes_equal_the_checkpoints_tensors)."""
    path = PRESETS / f"{stem}.json"
    cfg = json.loads(path.read_text())
    cfg.update(reduce)
    cfg.setdefault("quantization_config", {"quant_method": "fp8", "activation_scheme": "dynamic",
                                           "weight_block_size": [128, 128]})
    spec = spec_from_hf_config(cfg, stem, str(path))
    w = weight_bytes(spec, quantization_from_hf(cfg))
    mine = dict(w.elements)
    theirs, their_routers = _meta_fp8_elements(cfg)
    # the routers, from the config by hand: one experts x hidden matrix per MoE layer,
    # stored bf16, and DeepSeek's fp32 score-correction bias of one value per expert
    experts = cfg.get("n_routed_experts") or cfg["num_experts"]
    moe_layers = cfg["num_hidden_layers"] - cfg.get("first_k_dense_replace", 0)
    router_bf16 = moe_layers * experts * cfg["hidden_size"]
    router_fp32 = moe_layers * experts if "n_routed_experts" in cfg else 0
    assert their_routers == router_bf16 + router_fp32
    assert mine["fp8"] == theirs["fp8"]
    assert mine["bf16"] - router_bf16 == theirs["bf16"]
    # scales: every fp8 matrix's blocks (kvcalc counts the checkpoint's separate
    # gate/up; equal here), and nothing else in fp32 on transformers' side
    blocks = w.parts["scales"] // 4
    assert blocks == theirs["fp32"] == mine.get("fp32", 0) - router_fp32


# --------------------------------------------------------------------------------
# Small cases by hand
# --------------------------------------------------------------------------------
def _one_matrix(q: Quantization, rows: int, cols: int, dt: str = "bf16") -> int:
    from kvcalc.quant.stored import ELEMENT_BYTES, matrix_tensors

    return sum(n * ELEMENT_BYTES[d] for _, d, n in matrix_tensors(q, rows, cols, dt))


def test_fp8_block_scales_round_up_per_matrix():
    q = _fp8_block()
    # 300 x 200: 60,000 fp8 + ceil(300/128) * ceil(200/128) = 3 * 2 fp32 scales
    assert _one_matrix(q, 300, 200) == 60_000 + 6 * 4
    # DeepSeek's kv_a_proj_with_mqa 576 x 7168: 5 x 56 blocks
    assert _one_matrix(q, 576, 7168) == 576 * 7168 + 5 * 56 * 4


def test_awq_gptq_bnb_mxfp4_layouts_by_hand():
    n, k = 4096, 4096
    awq = quantization_from_hf({"quantization_config": {"quant_method": "awq", "bits": 4,
                                                        "group_size": 128, "version": "GEMM"}})
    # qweight int32 [k, n/8], qzeros int32 [k/128, n/8], scales fp16 [k/128, n]
    assert _one_matrix(awq, n, k) == 4 * k * n // 8 + 4 * 32 * n // 8 + 2 * 32 * n
    gptq = quantization_from_hf({"quantization_config": {"quant_method": "gptq", "bits": 4,
                                                         "group_size": 128, "desc_act": False}})
    # + g_idx int32 [k], stored whatever desc_act says
    assert _one_matrix(gptq, n, k) == 4 * k // 8 * n + 4 * 32 * n // 8 + 2 * 32 * n + 4 * k
    g_all = quantization_from_hf({"quantization_config": {"quant_method": "gptq", "bits": 4,
                                                          "group_size": -1}})
    assert _one_matrix(g_all, n, k) == 4 * k // 8 * n + 4 * n // 8 + 2 * n + 4 * k
    nf4 = quantization_from_hf({"quantization_config": {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}})
    blob = len('{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [4096, 4096]}')
    # weight uint8 n*k/2, absmax fp32 per 64, quant_map fp32 [16], quant state JSON
    assert _one_matrix(nf4, n, k) == n * k // 2 + 4 * n * k // 64 + 4 * 16 + blob
    dq = quantization_from_hf({"quantization_config": {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True}})
    blocks = n * k // 64
    body = n * k // 2 + blocks + 4 * (blocks // 256 + 256) + 4 * 16
    nested = len(', "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.0401')
    # the offset's digits vary (a float32 mean printed by json): a couple of bytes either way
    assert abs(_one_matrix(dq, n, k) - body - blob - nested - 13) <= 2
    mx = adhoc("mxfp4")
    assert _one_matrix(mx, 5760, 2880) == 5760 * 2880 // 2 + 5760 * 2880 // 32


def test_adhoc_int4_group_128_and_choices():
    q = adhoc("int4", 128)
    # values n*k/2, fp16 scale and 4-bit zero per group of 128 inputs
    assert _one_matrix(q, 4096, 4096) == 4096 * 4096 // 2 + 2 * 4096 * 32 + 4096 * 32 // 2
    assert adhoc("int8", None).group_size == 0 and not adhoc("int8").zero_points
    assert adhoc("fp8", 128).block == (128, 128) and adhoc("fp8").layout == "fp8_channel"
    assert adhoc("bf16") is None
    with pytest.raises(KvcalcError, match="group_size applies"):
        adhoc("bf16", 128)
    with pytest.raises(KvcalcError, match="group_size must be a positive"):
        adhoc("int4", 0)
    with pytest.raises(KvcalcError, match="unknown dtype"):
        adhoc("int3")


def test_adhoc_llama_keeps_embeddings_lm_head_and_norms_in_model_dtype():
    spec = spec_from_hf_config_file(PRESETS / "meta-llama__Llama-3.1-8B.json")
    w = weight_bytes(spec, adhoc("int4", 128))
    c = param_counts(spec).breakdown
    for key in ("embedding", "lm_head", "norms"):
        assert w.breakdown[key] == 2 * c[key]
    # every decoder matrix: 4.25 bits (values) + 16/128 (scales) + 4/128 (zeros)
    linear = c["attention/q"] + c["attention/k"] + c["attention/v"] + c["attention/o"] + c["mlp"]
    rest = w.total - 2 * (c["embedding"] + c["lm_head"] + c["norms"])
    assert rest == linear // 2 + linear // 128 * 2 + linear // 128 // 2


def test_not_converted_patterns_follow_transformers():
    spec = spec_from_hf_config_file(PRESETS / "meta-llama__Llama-3.1-8B.json")
    base = {"quant_method": "awq", "bits": 4, "group_size": 128}
    plain = weight_bytes(spec, quantization_from_hf({"quantization_config": base}))
    skip = weight_bytes(spec, quantization_from_hf({"quantization_config": {
        **base, "modules_to_not_convert": ["down_proj"]}}))
    c = param_counts(spec).breakdown
    down = c["mlp"] // 3
    assert skip.breakdown["mlp"] - plain.breakdown["mlp"] > down  # down_proj back to bf16
    assert skip.breakdown["attention/q"] == plain.breakdown["attention/q"]
    one_layer = weight_bytes(spec, quantization_from_hf({"quantization_config": {
        **base, "modules_to_not_convert": ["model.layers.1"]}}))
    every_layer = weight_bytes(spec, quantization_from_hf({"quantization_config": {
        **base, "modules_to_not_convert": ["model.layers"]}}))
    # "model.layers.1" names layer 1 only, not 10..19 (a module boundary)
    assert (one_layer.total - plain.total) * spec.layers == every_layer.total - plain.total
    assert every_layer.total == weight_bytes(spec, None).total
    ct = weight_bytes(spec, quantization_from_hf({"quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "ignore": ["lm_head", "re:.*self_attn.o_proj$"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "channel"}}}}}))
    assert ct.breakdown["attention/o"] == 2 * c["attention/o"]
    assert ct.breakdown["attention/q"] == c["attention/q"] + 4 * spec.heads * spec.head_dim * spec.layers


def test_per_device_splits_and_replicates_kv():
    spec = spec_from_hf_config_file(PRESETS / "meta-llama__Llama-3.1-8B.json")  # 8 kv heads
    q = adhoc("int4", 128)
    w = weight_bytes(spec, q)
    kv = w.breakdown["attention/k"] + w.breakdown["attention/v"]
    assert weight_bytes_per_device(spec, q, 1) == w.total
    assert weight_bytes_per_device(spec, q, 8) == -(-(w.total - kv) // 8) + kv // 8
    # tp 16 > 8 kv heads: each device holds one whole K/V head (replicated twice)
    assert weight_bytes_per_device(spec, q, 16) == -(-(w.total - kv) // 16) + kv // 8
    # unquantized: the same split as formulas.weight_params_per_device, in bytes
    counts = param_counts(spec)
    assert weight_bytes_per_device(spec, None, 16) == 2 * weight_params_per_device(
        spec, counts.total, 16, counts)


def test_quantization_from_hf_errors_name_the_field():
    def err(qc):
        with pytest.raises(KvcalcError) as e:
            quantization_from_hf({"quantization_config": qc}, "cfg.json")
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("cfg.json: quantization_config")
        return msg

    assert "weight_block_size" in err({"quant_method": "fp8", "weight_block_size": [128]})
    assert "bits" in err({"quant_method": "gptq", "bits": 5})
    assert "group_size" in err({"quant_method": "gptq", "bits": 4, "group_size": 0})
    assert "version" in err({"quant_method": "awq", "version": "gemv"})
    assert "quant_method" in err({"quant_method": "hqq"})
    assert "bnb_4bit_quant_type" in err({"quant_method": "bitsandbytes", "load_in_4bit": True,
                                         "bnb_4bit_quant_type": "int4"})
    assert "modules_to_not_convert" in err({"quant_method": "fp8", "modules_to_not_convert": 3})
    assert quantization_from_hf({}) is None


def test_unreadable_quantization_config_still_loads_the_model():
    cfg = json.loads((PRESETS / "meta-llama__Llama-3.1-8B.json").read_text())
    cfg["quantization_config"] = {"quant_method": "hqq"}
    spec = spec_from_hf_config(cfg, "x", "cfg.json")
    assert "quantization" not in spec.extra
    with pytest.raises(KvcalcError, match="hqq"):
        quantization_of(spec)
    assert quantization_of(spec_from_hf_config_file(PRESETS / "meta-llama__Llama-3.1-8B.json")) is None


def test_wrapper_config_reads_top_level_quantization():
    cfg = json.loads((DATA / "llava-hf__llava-1.5-7b-hf.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                  "modules_to_not_convert": ["vision_tower", "multi_modal_projector"]}
    spec = spec_from_hf_config(cfg, "llava-awq", "cfg.json")
    q = quantization_of(spec)
    w = weight_bytes(spec, q, "fp16")
    assert w.towers == 2 * sum(spec.extra["towers"].values())
    assert w.checkpoint == w.total + w.towers
    assert w.total < weight_bytes(spec, None, "fp16").total // 2


# --------------------------------------------------------------------------------
# NVIDIA ModelOpt (issue #40): FP8 and NVFP4, as vLLM's ModelOpt linear methods load them
# --------------------------------------------------------------------------------
QUANT_DATA = Path(__file__).parent / "data" / "quant"
NANO_NVFP4 = "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"


def test_modelopt_layouts_by_hand():
    n, k = 4096, 2688
    fp8 = quantization_from_hf({"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}})
    # weight e4m3 [n, k], weight_scale fp32 [1], input_scale fp32 [1]
    assert _one_matrix(fp8, n, k) == n * k + 4 + 4
    assert fp8.kv_cache_dtype == "fp8"
    nv = quantization_from_hf({"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "ignore": ["lm_head", "model.layers.*.self_attn*"]}})
    # weight uint8 [n, k/2], weight_scale e4m3 [n, k/16], weight_scale_2 and input_scale fp32
    assert _one_matrix(nv, n, k) == n * k // 2 + n * k // 16 + 4 + 4
    assert nv.kv_cache_dtype == "" and nv.dtype_label == "nvfp4"
    with pytest.raises(KvcalcError, match="group_size=32"):
        quantization_from_hf({"quantization_config": {
            "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32}})
    with pytest.raises(KvcalcError, match="MIXED_PRECISION"):
        quantization_from_hf({"quantization_config": {
            "quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}})


def _nano_nvfp4(tmp_path):
    folder = tmp_path / NANO_NVFP4
    folder.mkdir()
    (folder / "config.json").write_text((DATA / f"{NANO_NVFP4}.json").read_text())
    (folder / "hf_quant_config.json").write_text(
        (QUANT_DATA / f"{NANO_NVFP4}.hf_quant_config.json").read_text())
    return spec_from_hf_config_file(folder / "config.json")


def test_modelopt_hf_quant_config_beside_config_json(tmp_path):
    """Nemotron 3 Nano NVFP4: its config.json names no quantization; hf_quant_config.json
    does (NVFP4, group 16, FP8 KV cache, 60 modules kept in BF16)."""
    spec = _nano_nvfp4(tmp_path)
    q = quantization_of(spec)
    assert (q.method, q.layout, q.group_size, q.kv_cache_dtype) == ("modelopt", "nvfp4", 16, "fp8")
    assert len(q.not_converted) == 60
    # Nemotron-H's `mixer` names match kvcalc's module names
    assert not q.converts("layers.5.self_attn.q_proj", "linear")  # excluded attention
    assert not q.converts("layers.4.mixer.in_proj", "linear")  # the Mamba layer before it
    assert q.converts("layers.0.mixer.in_proj", "linear")
    assert q.converts("layers.6.mlp.experts.0.up_proj", "expert")
    assert q.converts("layers.1.mlp.shared_experts.up_proj", "linear")
    assert not q.converts("lm_head", "head")


def test_modelopt_nvfp4_one_moe_layer_by_hand(tmp_path):
    """Nemotron 3 Nano NVFP4's 23 MoE blocks, byte for byte: 128 routed experts and the
    shared expert in NVFP4 (values, an e4m3 scale per 16, two fp32 scalars a matrix), the
    router in BF16; the six attention blocks excluded whole (BF16)."""
    spec = _nano_nvfp4(tmp_path)
    d, f, fs, e = 2688, 1856, 3712, 128

    def nvfp4(rows, cols):
        return rows * cols // 2 + rows * cols // 16 + 8

    wb = weight_bytes(spec, quantization_of(spec))
    assert wb.breakdown["moe/experts"] == 23 * e * (nvfp4(f, d) + nvfp4(d, f))
    assert wb.breakdown["moe/shared_experts"] == 23 * (nvfp4(fs, d) + nvfp4(d, fs))
    assert wb.breakdown["moe/router"] == 23 * 2 * e * d
    assert wb.breakdown["attention/q"] == 6 * 2 * 4096 * d  # every attention block excluded


def _matches_one_by_one(name: str, patterns: tuple) -> bool:
    """kvcalc.quant.formats._matches as it was written before its patterns were compiled
    into one alternation: each pattern matched alone (the reference)."""
    import re

    from kvcalc.quant.formats import _PREFIXES

    for p in patterns:
        regex = p[3:] if p.startswith("re:") else None
        for prefix in _PREFIXES:
            full = name if name == "lm_head" and prefix not in ("", "language_model.") else prefix + name
            if regex is not None:
                if re.match(regex, full):
                    return True
                continue
            try:
                if re.match(rf"(?:{p})(?:(?<=\.)|(?=\.|$))", full) or full.endswith(p):
                    return True
            except re.error:
                if full == p or full.startswith(p + ".") or full.endswith(p):
                    return True
    return False


def test_ignore_lists_match_as_each_pattern_alone_and_quickly():
    """Llama 4 Scout's FP8 ignore list (449 modules) matched as one alternation answers as
    its patterns one by one, over every matrix name kvcalc asks about; and a few odd
    patterns (a regex prefix, an invalid regex, a backreference, a parent module)."""
    import time

    from kvcalc.quant.formats import _matches

    cfg = json.loads((DATA / "RedHatAI__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json").read_text())
    ignore = tuple(cfg["quantization_config"]["ignore"])
    odd = ("re:.*\\.router$", "layers.1.self_attn.(", r"layers\.(\d)\.mlp\.\1", "layers.2",
           "lm_head", "mlp.gate")
    names = [f"layers.{i}.{m}" for i in range(4) for m in (
        "self_attn.q_proj", "self_attn.o_proj", "mlp.gate", "mlp.router", "mlp.experts.0.up_proj",
        "feed_forward.router", "mlp.shared_expert.down_proj")] + ["lm_head", "layers.1.mlp.1"]
    for patterns in (ignore, odd, ignore + odd):
        for name in names:
            assert _matches(name, patterns) == _matches_one_by_one(name, patterns), (name, patterns[:3])
    started = time.process_time()
    for i in range(48):
        for m in ("self_attn.q_proj", "feed_forward.experts.gate_up_proj", "feed_forward.router"):
            _matches(f"layers.{i}.{m}", ignore)
    assert time.process_time() - started < 2.0
