"""One verdict (issue #22): estimate, fit and sweep answer "does it fit?" with vLLM's own
start-up count; where it refuses, every printed fix is counted again and starts, and the
setting just short of it does not. Quantized checkpoints are one thing everywhere."""

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.serving.vllm.verdict import engine_verdict
from kvcalc.formulas.cache import valid_tps
from kvcalc.presets import load_hardware, load_model

ROOT = Path(__file__).resolve().parent.parent


def kvcalc(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # kvcalc from the checkout beside tests/, else from wherever the tier put it (CI's
    # wheel tier copies tests/ alone)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", **(env or {})}
    env.pop("VLLM_ALLOW_LONG_MAX_MODEL_LEN", None)
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT)


# The questions of issue #22 (gpt-oss-120b at 131,072 on one H100 starts since vLLM 0.33's
# smaller sampler and non-torch terms, kvcalc.serving.vllm.memory), and more each side.
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


def test_weights_over_the_budget_decide_without_the_count(monkeypatch):
    """The shortcut that skips a count where the first stage's weights alone exceed the
    budget (kvcalc.serving.vllm.capacity.cannot_hold_weights) never changes an answer: it
    says so only where the whole count refuses too, and the fixes and smallest tp of
    every preset on a small and a large device, at tp 1 and its context (at most 32K),
    equal those made with every count."""
    from kvcalc.serving.vllm import capacity as serving, verdict
    from kvcalc.presets import model_names

    devices = [load_hardware("rtx4090"), load_hardware("h100-sxm")]
    said = 0
    for name in model_names():
        spec = load_model(name)
        for hw in devices:
            for s in (EngineSettings(max_model_len=min(spec.max_context or 4096, 32768)),):
                if s.tp not in valid_tps(spec):
                    continue
                if serving.cannot_hold_weights(spec, hw, s):
                    said += 1
                    cap = serving_capacity(spec, hw, s)
                    assert not cap.fits and cap.deciding.kv_cache < 0, (name, hw.name, s)
                verdict._RECENT.clear()
                fast = engine_verdict(spec, hw, s, with_fixes=True)
                fast_tp = verdict.smallest_tp(spec, hw, s)
                with monkeypatch.context() as m:
                    m.setattr(verdict, "cannot_hold_weights", lambda *a: False)
                    verdict._RECENT.clear()
                    slow = engine_verdict(spec, hw, s, with_fixes=True)
                    slow_tp = verdict.smallest_tp(spec, hw, s)
                assert [(f.setting, f.value) for f in fast.fixes] == \
                    [(f.setting, f.value) for f in slow.fixes], (name, hw.name, s)
                assert (fast_tp and fast_tp.settings.tp) == (slow_tp and slow_tp.settings.tp)
    assert said > 20  # the shortcut is taken (70B+ models on a 24 GB card, ...)


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
    py = api.estimate(model=model, seq_len=4096, tp=tp, gpu=gpu)
    assert est["weight_bytes"] == int(row["weight_bytes"]) == py.weight_bytes == stored
    assert est["inputs"]["weight_dtype"] == row["weight_dtype"] == fit["weight_dtype"] \
        == py.weight_label == label
    assert f"weights ({label})" in kvcalc("estimate", *args).stdout
    # The floor and the engine hold the same stored bytes per device (the engine adds
    # vLLM's RoPE cos/sin cache, max_position x head_dim in bf16, for non-MLA models)
    spec = load_model(model)
    rope = 0 if spec.mla is not None else 2 * spec.max_context * spec.head_dim
    assert fit["engine"]["memory"]["weights"] == fit["weight_bytes_per_device"] + rope
    assert api.floor(model, gpu, 4096, tp=tp).weight_bytes == fit["weight_bytes_per_device"]
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
    from kvcalc.serving.room import largest_batch, serves
    from kvcalc.serving.vllm.verdict import room_of

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
    r = _in_process("fit", *args, "--format", "json")
    assert r.exit_code == 1, r.output
    out = json.loads(r.stdout)
    assert out["max_num_seqs"] == 256 and 0 < out["num_gpu_blocks"] < 256
    assert out["refusal"].startswith(
        f"max_num_seqs (256) exceeds available Mamba cache blocks ({out['num_gpu_blocks']})")
    (seqs,) = [f["value"] for f in out["fixes"] if f["setting"] == "max_num_seqs"]
    assert _in_process("fit", *args, "--max-num-seqs", str(seqs)).exit_code == 0
    assert _in_process("fit", *args, "--max-num-seqs", str(seqs + 1)).exit_code == 1
    assert _in_process("fit", *args, "--enforce-eager").exit_code == 0
    assert _in_process("fit", *args, "--vllm-version", "0.18").exit_code == 0
    # estimate's verdict says the same (Mamba-2.8B on an 8 GB RTX 4060 at vLLM's defaults).
    est = _in_process("estimate", "--preset", "mamba-2.8b", "--gpu", "rtx4060", "--seq-len",
                      "8192", "--format", "json")
    engine = json.loads(est.stdout)["fit"]["engine"]
    assert engine["num_gpu_blocks"] < engine["max_num_seqs"] and engine["serves"] is False
    # and so do the sweep's rooms (one Room of columns, the rule folded into `starts`)
    import numpy as np

    from kvcalc.serving.room import serves
    from kvcalc.serving.vllm.verdict import rooms

    spec, hw = load_model("mamba-2.8b"), load_hardware("rtx4060")
    r = rooms(spec, hw, EngineSettings(max_model_len=8192), [4096, 8192])
    assert not serves(r, np.array([1, 1])).any()
    eager = rooms(spec, hw, EngineSettings(max_model_len=8192, enforce_eager=True), [8192])
    assert serves(eager, np.array([1])).all()


# --------------------------------------------------------------------------------
# A folder's or Hub checkpoint's quantized headers: one set of bytes, one name
# --------------------------------------------------------------------------------
def _tiny_fp8() -> list:
    """tests/hubcache.py's small Llama with every projection in fp8 e4m3 and one fp32
    weight_scale each (transformers' FP8Linear without weight_block_size)."""
    import hubcache as H

    out = []
    for name, dtype, shape in H.tiny_llama_tensors():
        if "proj" in name:
            out += [(name, "F8_E4M3", shape), (name.replace("weight", "weight_scale"), "F32", [1])]
        else:
            out.append((name, dtype, shape))
    return out


def _tiny_awq() -> list:
    """The same with every projection in AutoAWQ's GEMM layout, 4 bits, groups of 32:
    qweight int32 [in, out/8], qzeros int32 [in/32, out/8], scales fp16 [in/32, out]."""
    import hubcache as H

    out = []
    for name, dtype, shape in H.tiny_llama_tensors():
        if "proj" in name:
            n, k = shape  # out, in
            base = name[: -len("weight")]
            out += [(base + "qweight", "I32", [k, n // 8]),
                    (base + "qzeros", "I32", [k // 32, n // 8]),
                    (base + "scales", "F16", [k // 32, n])]
        else:
            out.append((name, dtype, shape))
    return out


# By hand. Per layer the projections are q 64x64, k and v 32x64, o 64x64, gate and up
# 128x64, down 64x128 (out x in): 36,864 weights; the rest (embedding and lm_head
# 100x64 each, 2 x 2 + 1 norms of 64) are 13,120 bf16 values, 26,240 bytes.
REST_BYTES = 2 * (2 * 6400 + 5 * 64)
# fp8: one byte a weight, 7 fp32 scales a layer
FP8_BYTES = 2 * 36_864 + 2 * 7 * 4 + REST_BYTES  # 100,024
# AWQ int4 g32, per out x in projection: in x out / 2 bytes of values, in/32 x out/8
# int32 zeros, in/32 x out fp16 scales. q and o (64x64): 2,048 + 64 + 256; k and v
# (32x64): 1,024 + 32 + 128; gate and up (128x64) and down (64x128): 4,096 + 128 + 512.
AWQ_BYTES = 2 * (2 * 2368 + 2 * 1184 + 3 * 4736) + REST_BYTES  # 68,864
ROPE_BYTES = 2048 * 16 * 2  # vLLM's cos/sin cache: max_position x head_dim in bf16

QUANTIZED_FOLDERS = [
    ("fp8", _tiny_fp8, {"quant_method": "fp8", "activation_scheme": "dynamic"}, FP8_BYTES,
     "fp8 (per tensor)"),
    ("fp8-noconfig", _tiny_fp8, None, FP8_BYTES, "as stored (F8_E4M3)"),
    ("awq", _tiny_awq, {"quant_method": "awq", "bits": 4, "group_size": 32,
                        "zero_point": True, "version": "gemm"}, AWQ_BYTES, "int4 awq g32"),
]


def _in_process(*args: str):
    """`kvcalc ARGS` run in this process (typer's runner), wide enough for whole lines."""
    from typer.testing import CliRunner

    from kvcalc.cli import app

    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


@pytest.mark.parametrize("name, tensors, qc, stored, label", QUANTIZED_FOLDERS,
                         ids=[c[0] for c in QUANTIZED_FOLDERS])
def test_a_quantized_folder_is_one_thing_in_every_command(tmp_path, name, tensors, qc,
                                                          stored, label):
    """estimate, fit (floor and engine), sweep, plan and the Python API read the headers'
    bytes and give the weights one name; a Hub id cached offline reads the same."""
    import hubcache as H

    import kvcalc as api

    kvcalc_here = _in_process
    cfg = dict(H.TINY_LLAMA, **({"quantization_config": qc} if qc else {}))
    folder = H.model_folder(tmp_path / name, cfg, {"model.safetensors": tensors()})
    args = [str(folder), "--gpu", "l4", "--seq-len", "1024"]
    est = json.loads(kvcalc_here("estimate", *args, "--format", "json").stdout)
    assert est["weight_bytes"] == stored, est.get("weights_source")
    if label != "int4 awq g32":  # the int4 name is kvcalc's own format label
        assert est["inputs"]["weight_dtype"] == label
    label = est["inputs"]["weight_dtype"]
    assert "bf16" not in label
    fit = json.loads(kvcalc_here("fit", *args, "--format", "json").stdout)
    assert fit["weight_bytes_per_device"] == stored and fit["weight_dtype"] == label
    assert fit["engine"]["memory"]["weights"] == stored + ROPE_BYTES
    assert est["fit"]["engine"]["memory"]["weights"] == stored + ROPE_BYTES
    engine = kvcalc_here("fit", str(folder), "--gpu", "l4", "--max-model-len", "1024",
                    "--format", "json")
    assert json.loads(engine.stdout)["memory"]["weights"] == stored + ROPE_BYTES
    assert f"weights {label}," in kvcalc_here("fit", str(folder), "--gpu", "l4",
                                         "--max-model-len", "1024").stdout
    (row,) = list(csv.DictReader(io.StringIO(kvcalc_here("sweep", *args).stdout)))
    assert int(row["weight_bytes"]) == stored and row["weight_dtype"] == label
    plan = json.loads(kvcalc_here("plan", str(folder), "--gpu", "l4", "--max-model-len", "1024",
                             "--format", "json").stdout)
    assert plan["weight_bytes"] == stored and plan["weight_dtype"] == label
    # plan's best line counted by fit holds the same blocks: the engine's weights agree
    best = plan["best"]
    again = json.loads(kvcalc_here("fit", str(folder), "--gpu", "l4", "--max-model-len", "1024",
                              "--gpu-memory-utilization", str(best["gpu_memory_utilization"]),
                              "--max-num-seqs", str(best["max_num_seqs"]),
                              "--max-num-batched-tokens", str(best["max_num_batched_tokens"]),
                              *(["--kv-dtype", "fp8"] if best["kv_cache_dtype"] == "fp8"
                                else []), "--format", "json").stdout)
    assert again["num_gpu_blocks"] == best["num_gpu_blocks"]
    py = api.estimate(model=str(folder), seq_len=1024, gpu="l4")
    assert py.weight_bytes == stored and py.weight_label == label
    assert py.verdict.capacity.memory["weights"] == stored + ROPE_BYTES
    assert api.floor(str(folder), "l4", 1024).weight_bytes == stored


@pytest.mark.skipif(importlib.util.find_spec("huggingface_hub") is None,
                    reason="Hub ids need huggingface_hub (kvcalc[hub])")
def test_a_quantized_hub_checkpoint_reads_as_its_folder(tmp_path):
    """The fp8 folder as a Hub cache offline (tests/hubcache.py): the same bytes, name
    and engine count (subprocesses: huggingface_hub reads the offline switch at import)."""
    import hubcache as H

    folder = H.model_folder(tmp_path / "fp8", dict(H.TINY_LLAMA, quantization_config={
        "quant_method": "fp8", "activation_scheme": "dynamic"}), {"model.safetensors": _tiny_fp8()})
    local = json.loads(_in_process("plan", str(folder), "--gpu", "l4", "--max-model-len", "1024",
                                   "--format", "json").stdout)
    H.hf_cache(tmp_path / "hf", "org/tiny-fp8", folder)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_TOKEN": "",
           "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    hub = json.loads(kvcalc("estimate", "org/tiny-fp8", "--gpu", "l4", "--seq-len", "1024",
                            "--format", "json", env=env).stdout)
    assert hub["weight_bytes"] == FP8_BYTES and hub["inputs"]["weight_dtype"] == "fp8 (per tensor)"
    assert hub["fit"]["engine"]["memory"]["weights"] == FP8_BYTES + ROPE_BYTES
    hub_plan = json.loads(kvcalc("plan", "org/tiny-fp8", "--gpu", "l4", "--max-model-len",
                                 "1024", "--format", "json", env=env).stdout)
    assert (hub_plan["weight_bytes"], hub_plan["weight_dtype"]) == (FP8_BYTES, "fp8 (per tensor)")
    assert hub_plan["best"]["num_gpu_blocks"] == local["best"]["num_gpu_blocks"]
    assert hub_plan["best"]["command"].startswith("vllm serve org/tiny-fp8 ")
