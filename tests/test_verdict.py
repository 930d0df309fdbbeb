"""One verdict (issue #22): estimate, fit and sweep answer "does it fit?" with vLLM's own
start-up count; where it refuses, every printed fix is counted again and starts, and the
setting just short of it does not. Quantized checkpoints are one thing everywhere."""

import csv
import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvcalc.capacity.engine import EngineSettings
from kvcalc.capacity.serving import serving_capacity
from kvcalc.capacity.verdict import engine_verdict
from kvcalc.formulas.cache import valid_tps
from kvcalc.presets import load_hardware, load_model

ROOT = Path(__file__).resolve().parent.parent


def kvcalc(*args: str) -> subprocess.CompletedProcess:
    # kvcalc from the checkout beside tests/, else from wherever the tier put it (CI's
    # wheel tier copies tests/ alone)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    env.pop("VLLM_ALLOW_LONG_MAX_MODEL_LEN", None)
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT)


# The questions of issue #22 (gpt-oss-120b at 131,072 on one H100 starts since vLLM 0.33's
# smaller sampler and non-torch terms, kvcalc.capacity.memory), and more each side.
QUESTIONS = [
    (["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--tp", "2", "--seq-len", "32768"], False),
    (["--preset", "gpt-oss-120b", "--gpu", "h100-sxm", "--seq-len", "131072"], True),
    (["--preset", "gemma3-27b", "--gpu", "rtx4090"], False),
    (["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--tp", "4", "--seq-len", "32768"], True),
    (["--preset", "llama3.1-8b", "--gpu", "rtx3090", "--seq-len", "131072"], False),
    (["--preset", "qwen3-32b", "--gpu", "h100-sxm", "--seq-len", "40960", "--batch", "2"], False),
]


@pytest.mark.parametrize("args, fits", QUESTIONS, ids=lambda a: " ".join(a) if isinstance(a, list) else str(a))
def test_estimate_fit_and_sweep_give_one_verdict(args, fits):
    est = kvcalc("estimate", *args, "--format", "json")
    assert est.returncode == 0, est.stderr  # estimate answers; its headline says no
    assert json.loads(est.stdout)["fit"]["fits"] is fits
    fit = kvcalc("fit", *args, "--format", "json")
    assert fit.returncode == (0 if fits else 1), fit.stderr  # no: 1, not bad input's 2
    assert json.loads(fit.stdout)["fits"] is fits
    sweep = kvcalc("sweep", *args)
    assert sweep.returncode == 0, sweep.stderr
    (row,) = list(csv.DictReader(io.StringIO(sweep.stdout)))
    assert row["fits"] == str(fits)
    headline = kvcalc("estimate", *args).stdout
    words = " ".join(headline.split())
    assert ("does not start" in words) is not fits
    if not fits:
        table = kvcalc("fit", *args).stdout
        for term in ("driver-visible memory", "weights", "activation peak", "non-torch",
                     "CUDA graphs", "KV for ", "shortfall", "would start with"):
            assert term in table


def _serves(spec, hw, s: EngineSettings, batch: int = 1) -> bool:
    """The engine starts with s and holds `batch` requests at once, by serving_capacity."""
    try:
        cap = serving_capacity(spec, hw, s)
    except Exception:  # a length over the context: vLLM refuses it
        return False
    return cap.fits and cap.max_concurrency >= batch and batch <= cap.max_num_seqs


@pytest.mark.parametrize("model, gpu, tp, length", [
    ("llama3.3-70b", "h100-sxm", 2, 32768),
    ("llama3.1-8b", "rtx3090", 1, 131072),
    ("gemma3-27b", "rtx4090", 1, 131072),
    ("qwen3-32b", "h100-sxm", 1, 40960),
])
def test_every_fix_starts_and_the_setting_short_of_it_does_not(model, gpu, tp, length):
    spec, hw = load_model(model), load_hardware(gpu)
    s = EngineSettings(max_model_len=length, tp=tp)
    assert not _serves(spec, hw, s)
    v = engine_verdict(spec, hw, s, with_fixes=True)
    assert not v.serves and v.fixes
    for f in v.fixes:
        fixed = {"tp": dict(tp=f.value), "max_model_len": dict(max_model_len=f.value),
                 "gpu_memory_utilization": dict(gpu_memory_utilization=f.value),
                 "kv_dtype": dict(kv_dtype=f.value),
                 "weight_dtype": dict(weight_dtype=f.value)}[f.setting]
        assert _serves(spec, hw, replace(s, **fixed)), f
        if f.setting == "tp":  # every valid tp from the current one up to it: refused
            assert all(not _serves(spec, hw, replace(s, tp=t))
                       for t in valid_tps(spec) if tp <= t < f.value)
        if f.setting == "max_model_len":  # the longest: one token more is refused
            assert not _serves(spec, hw, replace(s, max_model_len=f.value + 1))
        if f.setting == "gpu_memory_utilization":  # the least: 0.01 less is refused
            less = f"{float(f.value) - 0.01:.2f}"
            assert not _serves(spec, hw, replace(s, gpu_memory_utilization=less))


def test_printed_fixes_run_again_start():
    """The fix lines fit prints, given back to fit, exit 0."""
    args = ["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--tp", "2", "--max-model-len",
            "32768"]
    table = kvcalc("fit", *args)
    assert table.returncode == 1
    lines = [line.split(":")[0].split() for line in table.stdout.splitlines()
             if "requests of" in line and "--" in line]
    flags = [[w for w in words if w not in ("would", "start", "with")] for words in lines]
    assert {f[0] for f in flags} >= {"--tp", "--max-model-len", "--gpu-memory-utilization"}
    for flag, value in flags:
        given = dict(zip(args[::2], args[1::2]))
        r = kvcalc("fit", *[w for k, v in {**given, flag: value}.items() for w in (k, v)])
        assert r.returncode == 0, (flag, value, r.stdout)


def test_max_model_len_auto_is_the_longest_that_starts():
    where = ["--preset", "llama3.1-8b", "--gpu", "rtx3090"]
    r = kvcalc("fit", *where, "--max-model-len", "auto", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    spec, hw = load_model("llama3.1-8b"), load_hardware("rtx3090")
    n = out["max_model_len"]
    assert 0 < n < spec.max_context and out["fits"] is True
    # vLLM's message at 131,072 names the same length (the refusal's "estimated maximum")
    refused = serving_capacity(spec, hw, EngineSettings(max_model_len=131072))
    assert f"estimated maximum model length is {n}" in refused.refusal
    assert _serves(spec, hw, EngineSettings(max_model_len=n))
    assert not _serves(spec, hw, EngineSettings(max_model_len=n + 1))
    assert kvcalc("fit", *where, "--max-model-len", "-1", "--format", "json").stdout == r.stdout
    # where the whole context fits, auto is the context
    whole = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len",
                   "auto", "--format", "json")
    assert json.loads(whole.stdout)["max_model_len"] == spec.max_context


def test_kv_cache_memory_skips_the_profile():
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
               "--kv-cache-memory", "8GiB", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["memory"]["kv_cache"] == 8 * 2**30
    # Llama-3.1-8B: 32 layers x 2 (K, V) x 8 heads x 128 x 2 B = 131,072 B a token; a
    # block of 16 tokens 2 MiB: 8 GiB hold 4,096 blocks.
    assert out["num_gpu_blocks"] == 8 * 2**30 // (16 * 131_072) == 4096
    same = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len",
                  "8192", "--kv-cache-memory-bytes", "8G", "--format", "json")
    assert same.stdout == r.stdout  # vLLM's spelling, and its 8G = 8 GiB
    bad = kvcalc("fit", "--preset", "llama3.1-8b", "--kv-cache-memory", "lots")
    assert bad.returncode == 2 and bad.stderr.startswith("kvcalc: error: --kv-cache-memory")


# --------------------------------------------------------------------------------
# Quantized checkpoints: one set of bytes, one label
# --------------------------------------------------------------------------------
def _deepseek_r1_bytes() -> int:
    """DeepSeek-R1 as served (no MTP layer), by hand from its config.json: fp8 e4m3
    linears with an fp32 scale per 128x128 block; bf16 embeddings, lm_head, norms and
    routers; an fp32 e_score_correction_bias per MoE layer."""
    def cdiv(a, b):
        return -(-a // b)

    H, V, L, dense, E, I, MI = 7168, 129_280, 61, 3, 256, 18432, 2048  # hidden ... moe_intermediate
    QL, KL, ROPE, NOPE, VH, NH = 1536, 512, 64, 128, 128, 128  # MLA ranks and heads
    moe = L - dense

    def linear(k, n):  # (fp8 elements, fp32 scales) of an n x k weight
        return n * k, cdiv(n, 128) * cdiv(k, 128)

    def total(*mats):
        return tuple(sum(x) for x in zip(*mats))

    attn = total(linear(H, QL), linear(QL, NH * (NOPE + ROPE)), linear(H, KL + ROPE),
                 linear(KL, NH * (NOPE + VH)), linear(NH * VH, H))
    mlp = total(linear(H, I), linear(H, I), linear(I, H))
    expert = total(linear(H, MI), linear(H, MI), linear(MI, H))  # routed and shared alike
    fp8 = L * attn[0] + dense * mlp[0] + moe * (E + 1) * expert[0]
    scales = L * attn[1] + dense * mlp[1] + moe * (E + 1) * expert[1]
    bf16 = 2 * V * H + L * (2 * H + QL + KL) + H + moe * E * H
    return fp8 + 4 * scales + 2 * bf16 + 4 * moe * E


@pytest.mark.parametrize("model, gpu, tp, label, stored", [
    ("deepseek-r1", "h200", 8, "fp8 (block 128x128)", _deepseek_r1_bytes()),
    # model.safetensors.index.json's total_size (tests/test_quant.py)
    ("gpt-oss-120b", "h100-sxm", 1, "mxfp4 experts", 65_248_815_744),
])
def test_quantized_checkpoints_are_one_thing_everywhere(model, gpu, tp, label, stored):
    import kvcalc as api

    args = ["--preset", model, "--gpu", gpu, "--tp", str(tp), "--seq-len", "4096"]
    est = json.loads(kvcalc("estimate", *args, "--format", "json").stdout)
    (row,) = list(csv.DictReader(io.StringIO(kvcalc("sweep", *args).stdout)))
    fit = json.loads(kvcalc("fit", *args, "--format", "json").stdout)
    py = api.estimate(model, 4096, tp=tp, hardware=gpu)
    assert est["weight_bytes"] == int(row["weight_bytes"]) == py.weight_bytes == stored
    assert est["inputs"]["weight_dtype"] == row["weight_dtype"] == fit["weight_dtype"] \
        == py.weight_label == label
    assert f"weights ({label})" in kvcalc("estimate", *args).stdout
    # The floor and the engine hold the same stored bytes per device (the engine adds
    # vLLM's RoPE cos/sin cache, max_position x head_dim in bf16, for non-MLA models)
    spec = load_model(model)
    rope = 0 if spec.mla is not None else 2 * spec.max_context * spec.head_dim
    assert fit["engine"]["memory"]["weights"] == fit["weight_bytes_per_device"] + rope
    assert api.fit(model, gpu, 4096, tp=tp).weight_bytes == fit["weight_bytes_per_device"]
    if tp == 1:
        assert fit["weight_bytes_per_device"] == stored


# --------------------------------------------------------------------------------
# One rule for "it starts and holds N": serves, largest_batch; the state pool
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("model, gpu, tp, length, util", [
    ("llama3.1-8b", "h100-sxm", 1, 32768, "0.9"),  # attention: blocks per request
    ("jamba-1.5-mini", "h100-sxm", 2, 65536, "0.9"),  # hybrid: a state block beside
    ("falcon-mamba-7b", "rtx4090", 1, 8192, "0.8"),  # max_num_seqs over the pool
    ("llama3.3-70b", "h100-sxm", 1, 8192, "0.9"),  # does not start
])
def test_largest_batch_is_the_edge_of_serves(model, gpu, tp, length, util):
    from kvcalc.capacity.verdict import largest_batch, room_of, serves

    spec, hw = load_model(model), load_hardware(gpu)
    s = EngineSettings(max_model_len=length, tp=tp, gpu_memory_utilization=util)
    room = room_of(spec, serving_capacity(spec, hw, s))
    n = largest_batch(room)
    assert (n == 0 or serves(room, n)) and not serves(room, n + 1)
    # With --max-num-seqs lowered to the batch (plan's line), the room at that batch
    # serves it whenever the blocks hold it.
    lowered = largest_batch(room, lower_max_num_seqs=True)
    if lowered:
        assert serves(replace(room, max_num_seqs=lowered, seqs_over_pool=False), lowered)
        assert lowered * room.blocks_per_request <= room.num_blocks


def test_a_state_model_with_max_num_seqs_over_its_pool_does_not_start():
    """vLLM 0.19+ refuses max_num_seqs above a Mamba model's pool of blocks when it
    captures full CUDA graphs (vllm/config/compilation.py, vLLM 0.32: "max_num_seqs (N)
    exceeds available Mamba cache blocks (B)"); --enforce-eager captures none, and 0.18
    capped its graph sizes instead. Falcon-Mamba-7B on an RTX 4090 at utilization 0.8
    keeps fewer blocks than the 256 sequences vLLM's default for a 24 GB card asks."""
    args = ["--preset", "falcon-mamba-7b", "--gpu", "rtx4090", "--max-model-len", "8192",
            "--gpu-memory-utilization", "0.8"]
    r = kvcalc("fit", *args, "--format", "json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["max_num_seqs"] == 256 and 0 < out["num_gpu_blocks"] < 256
    assert out["refusal"].startswith(
        f"max_num_seqs (256) exceeds available Mamba cache blocks ({out['num_gpu_blocks']})")
    (seqs,) = [f["value"] for f in out["fixes"] if f["setting"] == "max_num_seqs"]
    assert kvcalc("fit", *args, "--max-num-seqs", str(seqs)).returncode == 0
    assert kvcalc("fit", *args, "--max-num-seqs", str(seqs + 1)).returncode == 1
    assert kvcalc("fit", *args, "--enforce-eager").returncode == 0
    assert kvcalc("fit", *args, "--vllm-version", "0.18").returncode == 0
    # estimate's verdict says the same (Mamba-2.8B on an 8 GB RTX 4060 at vLLM's defaults).
    est = kvcalc("estimate", "--preset", "mamba-2.8b", "--gpu", "rtx4060", "--seq-len",
                 "8192", "--format", "json")
    engine = json.loads(est.stdout)["fit"]["engine"]
    assert engine["num_gpu_blocks"] < engine["max_num_seqs"] and engine["serves"] is False
