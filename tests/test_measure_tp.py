"""kvcalc measure --tp: ranks of torch.distributed (gloo here), shards against the formulas."""

from __future__ import annotations

import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.formulas.cache import kv_cache  # noqa: E402
from kvcalc.measure import MeasureConfig, run  # noqa: E402
from kvcalc.measure import tp as tp_mod  # noqa: E402
from kvcalc.spec import ModelSpec  # noqa: E402

# gloo ranks on the CPU, also where a GPU is present (this file's tests are the CPU path).
TINY = dict(heads=8, head_dim=16, seq_len=64, batch=2, iters=3, warmup=1, l2="none",
            device="cpu")


@pytest.fixture(autouse=True)
def small_streams(monkeypatch):
    """Small streamed ceilings keep each run quick (they are then not memory figures)."""
    from kvcalc.measure import terms

    monkeypatch.setattr(terms, "stream_bytes", lambda cache_bytes, working_set=0: 2**20)


def test_rank_heads_split_and_replicate():
    # 8 query heads, 2 K/V heads: tp 2 splits them, tp 4 replicates each over two ranks.
    assert [tuple(map(list, tp_mod.rank_heads(8, 2, 2, r))) for r in range(2)] == [
        ([0, 1, 2, 3], [0]), ([4, 5, 6, 7], [1])]
    assert [list(tp_mod.rank_heads(8, 2, 4, r)[1]) for r in range(4)] == [[0], [0], [1], [1]]
    assert [list(tp_mod.rank_heads(8, 8, 4, r)[1]) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]


@pytest.mark.slow  # gloo ranks in processes of their own
@pytest.mark.parametrize("step", ["attention", "layer"])
@pytest.mark.parametrize("kv", [8, 1])
def test_tp2_gloo_shards_match_formulas_and_reduce_for_real(step, kv):
    t0 = time.perf_counter()
    res = run(MeasureConfig(kv_heads=kv, step=step, tp=(2,), **TINY))
    assert time.perf_counter() - t0 < 60
    rows = res.rows
    assert [r["rank"] for r in rows] == [0, 1] and {r["backend"] for r in rows} == {"gloo"}
    # K/V bytes held per rank, by hand: batch 2 x 64 tokens x (8 / 2 heads, or the single
    # head replicated) x 16 x (K, V) x 4 B; and as formulas.kv_cache(tp=2) counts it.
    held = 2 * 64 * (4 if kv == 8 else 1) * 16 * 2 * 4
    one_layer = ModelSpec.uniform(name="one", layers=1, d_model=128, heads=8, kv_heads=kv,
                                  head_dim=16, d_ff=1, vocab=1)
    per_device = kv_cache(one_layer, 64, 2, "fp32", tp=2).bytes_per_device
    assert [r["kv_bytes_held"] for r in rows] == [held, held] == [per_device] * 2
    # The all-reduced output was checked against float64 on rank 0.
    assert all(r["correct"] and r["rel_error"] < 1e-5 for r in rows)
    # Message: attention step (batch, heads x head_dim), layer step (batch, d_model); fp32.
    assert [r["allreduce_bytes"] for r in rows] == [2 * 128 * 4] * 2
    for r in rows:
        assert 0 < r["allreduce_median_s"] <= r["median_s"]
        # predicted all-reduce: measured latency + 2(2-1)/2 x bytes / measured bus bandwidth
        assert r["allreduce_predicted_s"] == pytest.approx(
            r["allreduce_latency_s"] + 1_024 / r["allreduce_bus_bytes_per_s"])
        assert r["predicted_s"] == pytest.approx(
            r["predicted_kv_s"] + r["predicted_activations_s"] + r["predicted_extra_compute_s"]
            + r["predicted_weights_s"]  # F.linear streaming the weights, arithmetic included
            + r["predicted_overhead_s"] + r["allreduce_predicted_s"])
        assert r["step_median_s"] >= max(x["median_s"] for x in rows) * 0.5
        # The all-reduce split: waiting for the slower rank, then the collective itself.
        assert r["allreduce_wait_median_s"] >= 0 and r["allreduce_transfer_median_s"] >= 0
        assert r["local_predicted_s"] == pytest.approx(r["predicted_s"] - r["allreduce_predicted_s"])
    if kv == 1:
        assert "replicated" in rows[0]["note"]


@pytest.mark.slow  # gloo ranks in processes of their own
def test_tp1_has_no_allreduce_and_tp2_halves_the_cache():
    res = run(MeasureConfig(kv_heads=8, tp=(1, 2), **TINY))
    one, *two = res.rows
    assert (one["tp"], one["allreduce_predicted_s"], one["predicted_allreduce_s"]) == (1, 0.0, 0.0)
    assert [r["kv_bytes_held"] for r in two] == [one["kv_bytes_held"] // 2] * 2
    assert two[0]["predicted_speedup_vs_tp_min"] == pytest.approx(
        one["step_predicted_s"] / two[0]["step_predicted_s"])


def _raises(rank, tp, init_method, result_path, timeout_s):
    if rank == 1:
        raise KvcalcError("boom on purpose")
    tp_mod._init(rank, tp, init_method, timeout_s, "cpu")
    import torch.distributed as dist

    dist.barrier()  # would wait for rank 1 forever without spawn's clean-up and the timeout


def _killed(rank, tp, init_method, result_path, timeout_s):
    tp_mod._init(rank, tp, init_method, timeout_s, "cpu")
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    import torch.distributed as dist

    dist.barrier()


@pytest.mark.slow  # gloo ranks in processes of their own
def test_a_failing_rank_is_named_and_nothing_hangs():
    # Each launch returns within twice its own timeout: a hang never returns, and the
    # margin is for starting two torch processes (about 30 s each launch on this 2-core
    # VM under a load average of 12, where both launches together once took 65 s).
    for target, message in ((_raises, r"^tp 2: rank 1 failed: boom on purpose"),
                            (_killed, r"^tp 2: rank 1 was killed by signal SIGKILL")):
        t0 = time.perf_counter()
        with pytest.raises(KvcalcError, match=message):
            tp_mod.launch(target, 2, (), timeout_s=20)
        assert time.perf_counter() - t0 < 2 * 20, message


@pytest.mark.parametrize("kw, message", [
    (dict(kv_heads=8, tp=(3,)), "^tp 3 must divide heads"),
    (dict(kv_heads=8, tp=(2,), step="both"), "^tp times one step: give step attention"),
    (dict(kv_heads=8, tp=(2,), compare=True), "drop compare"),
])
def test_tp_refusals(kw, message):
    cfg = {**TINY, **kw}
    with pytest.raises(KvcalcError, match=message):
        run(MeasureConfig(**cfg))


def test_one_gpu_says_tp_needs_as_many(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with pytest.raises(KvcalcError, match=r"^tp 2 needs 2 GPUs \(one per rank\); this machine has 1"):
        run(MeasureConfig(**{**TINY, "kv_heads": 8, "tp": (2,), "device": "cuda"}))


@pytest.mark.slow  # gloo ranks in processes of their own
def test_torchrun_ranks_report_once():
    import shutil
    import subprocess
    import sys

    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    out = subprocess.run(
        ["torchrun", "--nproc-per-node", "2", "-m", "kvcalc", "measure", "--heads", "8",
         "--kv-heads", "2", "--head-dim", "16", "--seq-len", "64", "--batch", "2", "--tp", "2",
         "--iters", "3", "--warmup", "1", "--l2", "none", "--device", "cpu", "--format", "csv"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("device,")  # header + one row per rank, once
