"""LoRA adapters' slots in vLLM's and SGLang's memory counts (kvcalc.serving.lora), each
figure by hand from the shapes the engines' source allocates (file and function cited),
for Llama-3.1-8B (32 layers, hidden 4,096, 32 query and 8 K/V heads of 128, MLP 14,336,
vocabulary 128,256)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving import engine_ref
from kvcalc.serving.layout import Layout
from kvcalc.serving.lora import LoraSlots, lora_bytes, lora_modules
from kvcalc.serving.sglang import SglangFlags, count as sglang_count
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.weights import Weights

H, Q, KV, FF, V, L = 4096, 32 * 128, 8 * 128, 14336, 128256, 32


def _linear_slot(r: int, tp: int = 1) -> int:
    """One slot of one layer: A (rank x input; row-parallel o/down split over tp) and B
    (output x rank; column-parallel q/k/v/gate/up split over tp), vLLM 0.33
    `base_linear.py::create_lora_weights`, SGLang 0.5.23 `mem_pool.py::get_lora_A_shape`."""
    a = r * (H + H + H + Q // tp + H + H + FF // tp)
    b = r * ((Q + KV + KV) // tp + H + 2 * FF // tp + H)
    return a + b


@pytest.mark.parametrize("tp", [1, 2])
def test_sglang_buffers_by_hand(tp):
    slots = LoraSlots(slots=8, rank=64, target_modules=None)
    got, notes = lora_bytes(load_model("llama3.1-8b"), slots, tp=tp, model_dtype="bf16")
    assert got == 2 * 8 * L * _linear_slot(64, tp) and notes == []


def test_vllm_adds_the_embedding_and_lm_head_slots_by_release():
    """0.33 `VocabParallelEmbeddingWithLoRA`: A vocab x r, B hidden x r;
    `LogitsProcessorWithLoRA`: A r x hidden, B vocab x r. 0.10.1.1 `lora/layers.py`: 256
    extra rows on the embedding's A, the lm_head's B padded to 256, and an extra-vocabulary
    table of 256 x hidden (model dtype) on each."""
    spec, r = load_model("llama3.1-8b"), 16
    linear = 2 * L * _linear_slot(r)
    now = lora_bytes(spec, LoraSlots(1, r, embeddings=True), tp=1, model_dtype="bf16")[0]
    assert now == linear + 2 * ((V * r + H * r) + (r * H + V * r))
    old = lora_bytes(spec, LoraSlots(1, r, embeddings=True, extra_vocab=256, vocab_padding=256),
                     tp=1, model_dtype="bf16")[0]
    padded = -(-V // 256) * 256
    assert old == linear + 2 * (((V + 256) * r + H * r) + (r * H + padded * r)) + 2 * 2 * 256 * H
    from kvcalc.serving.vllm.rules import rules_for

    assert rules_for("0.10.1.1").lora_extra_vocab() == (256, 256)
    assert rules_for("0.12.0").lora_extra_vocab() == (0, 1)


def test_vllm_slots_are_in_the_weights_and_leave_fewer_blocks():
    """`GPUModelRunner.load_model`: `load_lora_model` runs inside the DeviceMemoryProfiler
    whose consumed memory "Model loading took" logs (0.10.1.1-0.33)."""
    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    plain = serving_capacity(spec, hw, EngineSettings(max_model_len=8192))
    lora = serving_capacity(spec, hw, EngineSettings(max_model_len=8192, enable_lora=True,
                                                     max_loras=8, max_lora_rank=64))
    slots = lora_bytes(spec, LoraSlots(8, 64, embeddings=True), tp=1, model_dtype="bf16")[0]
    assert lora.memory["weights"] - plain.memory["weights"] == slots
    assert lora.memory["kv_cache"] == plain.memory["kv_cache"] - slots


def test_sglang_buffers_come_out_of_the_pool_budget():
    """`ModelRunner.initialize` (0.4.10-0.5.23): the LoRA pool is built after the weights and
    before `init_memory_pool` reads the free memory: the KV pool is smaller by the buffers,
    the logged weights are not."""
    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    base = dict(engine=engine_ref("sglang@0.5.8"), weights=Weights(), layout=Layout(),
                mem_fraction_static="0.85")
    plain = sglang_count(spec, hw, SglangFlags(**base))
    lora = sglang_count(spec, hw, SglangFlags(**base, enable_lora=True, max_lora_rank=64,
                                              lora_target_modules="all"))
    buffers = 2 * 8 * L * _linear_slot(64)
    assert lora.memory["lora_buffers"] == buffers
    assert lora.memory["weights"] == plain.memory["weights"]
    assert lora.memory["kv_cache"] == pytest.approx(plain.memory["kv_cache"] - buffers,
                                                    abs=plain.bytes_per_token)
    with pytest.raises(KvcalcError, match="give max_lora_rank and lora_target_modules"):
        sglang_count(spec, hw, SglangFlags(**base, enable_lora=True, max_lora_rank=64))


def test_target_modules_open_packed_names():
    assert lora_modules("qkv_proj,o_proj") == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert lora_modules("all") is None
    with pytest.raises(KvcalcError):
        lora_modules("all q_proj")


def _run(*args):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("engine, flag, theirs", [
    ("sglang", "--max-loras", "--max-loras-per-batch"),
    ("vllm", "--max-loras-per-batch", "--max-loras"),
    ("tensorrt-llm", "--enable-lora", "no such flag")])
def test_another_engines_lora_flag_is_one_error(engine, flag, theirs):
    args = ["fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine", engine, flag]
    if flag != "--enable-lora":
        args.append("4")
    r = _run(*args)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and theirs in r.stderr


def test_vllm_lora_flags_need_enable_lora_and_a_release_that_has_them():
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-loras", "4")
    assert r.exit_code == 2 and "--enable-lora" in r.stderr
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--enable-lora",
             "--lora-target-modules", "q_proj", "--vllm-version", "0.18")
    assert r.exit_code == 2 and "0.19" in r.stderr
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
             "--enable-lora", "--max-loras", "8", "--max-lora-rank", "64", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert any("LoRA: 8 adapter slot(s) of rank 64" in n for n in d["notes"])
    spec = load_model("llama3.1-8b")
    assert d["lora"]["lora_bytes"] == lora_bytes(spec, LoraSlots(8, 64, embeddings=True), tp=1,
                                                 model_dtype="bf16")[0]


def test_plan_counts_the_features_and_writes_them_in_the_launch_line():
    """plan's layouts are counted with the draft and the LoRA slots (fewer KV tokens than
    without), and its `vllm serve` line carries the flags as vLLM spells them (parsed by
    vLLM itself in tests/test_plan_vllm.py's tier)."""
    from kvcalc.plan import plan

    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    features = {"enable_lora": True, "max_loras": 4, "max_lora_rank": 32,
                "lora_target_modules": "q_proj,v_proj"}
    plain = plan(spec, hw, max_model_len=8192)
    with_lora = plan(spec, hw, max_model_len=8192, features=features)
    assert with_lora.command.endswith("--enable-lora --max-loras 4 --max-lora-rank 32 "
                                      "--lora-target-modules q_proj v_proj")
    assert "--enable-lora" not in plain.command
    assert with_lora.best.kv_cache_tokens < plain.best.kv_cache_tokens
    r = _run("plan", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
             "--max-loras-per-batch", "4")
    assert r.exit_code == 2 and "--max-loras" in r.stderr and r.stderr.count("\n") == 1
