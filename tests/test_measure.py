"""kvcalc.measure on the CPU: implementations against float64, byte accounting, the
memory guard, timing statistics, ceilings and the library API. Tiny sizes: quick."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")  # the `measure` extra; CI installs it, so these run

from kvcalc.errors import KvcalcError, flag_of  # noqa: E402
from kvcalc.formulas.attention import attention_step  # noqa: E402
from kvcalc.formulas.params import param_counts  # noqa: E402
from kvcalc.formulas.step import decode_step  # noqa: E402
from kvcalc.measure import MeasureConfig, require_torch, run  # noqa: E402
from kvcalc.measure import ceilings, guard, impls, timing  # noqa: E402
from kvcalc.measure.predict import attention_prediction, block, layer_prediction  # noqa: E402
from kvcalc.spec import ModelSpec  # noqa: E402

CPU = torch.device("cpu")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SHAPES = [(8, 8), (8, 2), (8, 1)]  # MHA, GQA, MQA
SMALL_CEILINGS = 4 * 2**20  # bytes per ceiling buffer in tests (not a memory ceiling)


def naive_attention(q, k, v, scale):
    """Float64, one query head at a time, K/V head picked as hq // group: the plainest form."""
    b, h, _, d = q.shape
    g = h // k.shape[1]
    out = torch.empty(b, h, 1, d, dtype=torch.float64)
    for i in range(b):
        for hq in range(h):
            kk = k[i, hq // g].double()
            vv = v[i, hq // g].double()
            s = (q[i, hq, 0].double() @ kk.T) * scale
            out[i, hq, 0] = torch.softmax(s, dim=-1) @ vv
    return out


def inputs(h, kv, d=16, b=2, L=40, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, 1, d, generator=gen).to(dtype)
    k = torch.randn(b, kv, L, d, generator=gen).to(dtype)
    v = torch.randn(b, kv, L, d, generator=gen).to(dtype)
    return q, k, v


# --------------------------------------------------------------------------------
# Correctness of every implementation
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("h,kv", SHAPES)
def test_reference_matches_naive_loop(h, kv):
    q, k, v = inputs(h, kv)
    scale = 16 ** -0.5
    ref = impls.reference_attention(q, k, v, scale)
    assert torch.allclose(ref, naive_attention(q, k, v, scale), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("h,kv", SHAPES)
@pytest.mark.parametrize("name", ["grouped", "sdpa", "repeat", "sdpa-math", "sdpa-flash"])
def test_impl_matches_float64_reference(name, h, kv, dtype):
    q, k, v = inputs(h, kv, dtype=DTYPES[dtype], seed=h * 10 + kv)
    scale = 16 ** -0.5
    out = impls.get_impl(name)(q, k, v, scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    err = impls.relative_error(out, naive_attention(q, k, v, scale))
    assert err < impls.TOLERANCE[dtype], (name, h, kv, dtype, err)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("h,kv", SHAPES)
@pytest.mark.parametrize("name", ["grouped", "sdpa", "repeat"])
def test_layer_step_matches_float64(name, h, kv, dtype):
    gen = torch.Generator().manual_seed(3)
    slot = impls.make_slot("layer", CPU, DTYPES[dtype], batch=2, seq_len=24, heads=h,
                           kv_heads=kv, head_dim=8, d_model=48, generator=gen)
    scale = 8 ** -0.5
    ref = impls.reference_layer(slot, scale)
    out = impls.layer_call(slot, impls.get_impl(name), scale)()
    assert out.shape == (2, 48)
    assert impls.relative_error(out, ref) < impls.TOLERANCE[dtype]


def test_layer_step_writes_one_position_in_place_without_cat():
    gen = torch.Generator().manual_seed(4)
    slot = impls.make_slot("layer", CPU, torch.float32, batch=2, seq_len=10, heads=4,
                           kv_heads=2, head_dim=8, d_model=32, generator=gen)
    k_before, v_before = slot.k.clone(), slot.v.clone()
    k_ptr = slot.k.data_ptr()
    _, ops = impls.traced(impls.layer_call(slot, impls.attention_grouped, 8 ** -0.5))
    assert not any(op.startswith("aten.cat") for op in ops)
    assert slot.k.data_ptr() == k_ptr  # the preallocated buffer, not a new one
    assert torch.equal(slot.k[:, :, :-1], k_before[:, :, :-1])
    assert torch.equal(slot.v[:, :, :-1], v_before[:, :, :-1])
    k_new = (slot.x @ slot.w_qkv.T)[:, 32:48].view(2, 2, 8)
    assert torch.allclose(slot.k[:, :, -1], k_new)


def test_nan_never_passes():
    q, k, v = inputs(4, 2)
    ref = impls.reference_attention(q, k, v, 0.25)
    bad = ref.clone().float()
    bad[0, 0, 0, 0] = float("nan")
    assert impls.relative_error(bad, ref) == math.inf
    assert not impls.relative_error(bad, ref) < 1.0
    assert impls.relative_error(torch.zeros(3), ref) == math.inf  # wrong shape


# --------------------------------------------------------------------------------
# Accounting: allocated bytes equal the formula's
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,elem", [("fp32", 4), ("bf16", 2)])
@pytest.mark.parametrize("h,kv", SHAPES)
def test_cache_bytes_equal_formula(h, kv, dtype, elem):
    batch, seq_len, head_dim = 3, 17, 16
    hand = batch * seq_len * kv * head_dim * 2 * elem
    pred = attention_prediction(batch, seq_len, h, kv, head_dim, dtype)
    assert pred.kv_cache_bytes == hand
    for step in ("attention", "layer"):
        slot = impls.make_slot(step, CPU, DTYPES[dtype], batch, seq_len, h, kv, head_dim,
                               h * head_dim, torch.Generator().manual_seed(0))
        assert slot.cache_bytes() == hand
        if step == "layer":
            blk = block(h, kv, head_dim)
            assert slot.weight_bytes() == layer_prediction(blk, batch, seq_len, dtype).weight_bytes


def test_predictions_by_hand_and_from_formulas():
    # batch 4, seq_len 2048, 32 query heads, 8 K/V heads, head_dim 128, d_model 4096, bf16.
    blk = block(32, 8, 128, 4096)
    a = attention_prediction(4, 2048, 32, 8, 128, "bf16")
    # FLOPs: 2 x batch x heads x positions x (q.k over 128 + p.v over 128).
    assert a.flops == 2 * 4 * 32 * 2048 * (128 + 128) == 134_217_728
    # K and V: batch x positions x kv_heads x (128 + 128) x 2 bytes; q and o: 4 x 32 x 128 x 2.
    assert a.bytes_breakdown == {"kv_read": 4 * 2048 * 8 * 256 * 2, "q": 4 * 32 * 128 * 2,
                                 "o": 4 * 32 * 128 * 2}
    assert a.bytes == 33_554_432 + 32_768 + 32_768
    cost = attention_step(4, 2048, 32, 8, 128, "bf16")
    assert (a.flops, a.bytes) == (cost.flops, cost.bytes)
    lay = layer_prediction(blk, 4, 2048, "bf16")
    # Weights: q and o 4096 x 4096 each, k and v 4096 x (8 x 128) each, 2 bytes.
    attn_weights = 2 * 4096 * 4096 + 2 * 4096 * 8 * 128
    assert attn_weights == 41_943_040
    assert lay.weight_bytes == lay.bytes_breakdown["weights"] == 2 * attn_weights == 83_886_080
    assert lay.bytes_breakdown["kv_read"] == 33_554_432
    assert lay.bytes_breakdown["kv_write"] == 4 * 2 * 8 * 128 * 2 == 16_384  # one new token
    # Each matmul reads its input, writes its output: fused qkv 4096 -> 4096 + 2 x 1024,
    # o 4096 -> 4096; plus attention's q and o; 4 tokens, 2 bytes.
    assert lay.bytes_breakdown["activations"] == (
        2 * 4 * ((4096 + 6144) + (4096 + 4096)) + 2 * 32_768) == 212_992
    # q, k, v and o projections: 2 FLOPs per weight per token, plus the attention.
    assert lay.flops == 4 * 2 * 41_943_040 + 134_217_728 == 469_762_048
    # The same figures through the formulas' whole-model decode step and parameter counts,
    # for a one-layer model of these heads.
    spec = ModelSpec.uniform(name="one", layers=1, d_model=4096, heads=32, kv_heads=8,
                             head_dim=128, d_ff=1, vocab=1)
    one_layer = decode_step(spec, 2048, 4, "bf16", "bf16", "bf16")
    assert lay.bytes_breakdown["kv_read"] == one_layer.bytes_breakdown["kv_read"]
    assert lay.bytes_breakdown["kv_write"] == one_layer.bytes_breakdown["kv_write"]
    assert param_counts(spec).attention == attn_weights


def test_runner_refuses_when_allocation_disagrees_with_formula(monkeypatch):
    real = impls.make_slot

    def wrong(*args, **kwargs):
        s = real(*args, **kwargs)
        s.k = s.k[:, :, :-1]
        return s

    monkeypatch.setattr(impls, "make_slot", wrong)
    with pytest.raises(KvcalcError, match="accounting"):
        run(MeasureConfig(heads=4, kv_heads=2, head_dim=8, seq_len=16, batch=1, iters=1,
                          l2="none"), ceiling_buffer_bytes=SMALL_CEILINGS)


# --------------------------------------------------------------------------------
# The library API
# --------------------------------------------------------------------------------
def test_run_compare_rows_and_speedups():
    res = run(MeasureConfig(heads=8, kv_heads=2, head_dim=16, seq_len=64, batch=2, compare=True,
                            iters=3, warmup=1, l2="none", device="cpu"),
              ceiling_buffer_bytes=SMALL_CEILINGS)
    assert [r["kv_heads"] for r in res.rows] == [8, 2, 1]
    assert [r["attention"] for r in res.rows] == ["MHA", "GQA", "MQA"]
    for r in res.rows:
        assert r["correct"] and r["impl"] in ("grouped", "sdpa") and r["timer"] == "perf_counter"
        assert r["p10_s"] <= r["median_s"] <= r["p90_s"]
        assert r["kv_cache_bytes"] == 2 * 64 * r["kv_heads"] * 16 * 2 * 4
        # 2 x batch 2 x 8 heads x 64 positions x (16 + 16), whatever kv_heads is.
        assert r["flops"] == 2 * 2 * 8 * 64 * 32 == 65_536
        # K/V read once, plus q and o (2 x 8 heads x 16 x 4 bytes each).
        assert r["bytes_moved"] == r["kv_cache_bytes"] + 2 * (2 * 8 * 16 * 4)
        # Predicted by hand from the measured terms: K/V (2 x 2 x 64 x kv x 16 x 4 B) plus q and
        # o (2 x 2 x 8 x 16 x 4 B) over the read ceiling, against 65,536 FLOPs over the
        # attention's FLOP/s at this shape; plus the per-call overhead.
        read = res.ceilings["read_bytes_per_s"]
        kv_bytes = 2 * 2 * 64 * r["kv_heads"] * 16 * 4
        # K/V at the bandwidth the implementation itself streams K/V heads with (measured)
        assert r["predicted_kv_s"] == pytest.approx(kv_bytes / r["kv_read_bytes_per_s"])
        assert r["predicted_activations_s"] == pytest.approx(2_048 / read)
        assert r["predicted_attention_compute_s"] == pytest.approx(
            65_536 / r["attention_flops_per_s_at_shape"])
        # The streamed K/V did one query row per K/V head: 65,536 / g FLOPs; the rest is added.
        g = 8 // r["kv_heads"]
        assert r["predicted_s"] == pytest.approx(
            kv_bytes / r["kv_read_bytes_per_s"] + 2_048 / read
            + (65_536 - 65_536 / g) / r["attention_flops_per_s_at_shape"]
            + r["predicted_overhead_s"])
        assert r["predicted_weights_s"] == 0 and r["predicted_projection_compute_s"] == 0
        assert r["predicted_s"] > 0 and r["bound"] in ("memory", "compute", "overhead")
        assert r["ceiling_bytes_per_s"] == read
        assert r["fraction_of_ceiling"] == pytest.approx(
            r["bytes_moved"] / r["median_s"] / r["ceiling_bytes_per_s"])
        assert r["threads"] >= 1 and r["loaded"] in (True, False)
        assert r["l2_regime"] == "cache fits in LLC (not flushed)"
    # auto raced both CPU candidates at the given kv_heads and kept the faster, saying so;
    # --compare then ran MHA and MQA through the same implementation.
    gqa_note = res.rows[1]["note"]
    assert f"auto on cpu: {res.rows[1]['impl']}, the fastest correct of grouped" in gqa_note
    assert "sdpa" in gqa_note.split("fastest correct of")[1]
    assert len({r["impl"] for r in res.rows}) == 1
    for r in (res.rows[0], res.rows[2]):
        assert "--compare: auto's pick at kv_heads=2 for every variant" in r["note"]
    # MHA 131,072 + 2,048; GQA 32,768 + 2,048; MQA 16,384 + 2,048.
    assert [r["bytes_moved"] for r in res.rows] == [133_120, 34_816, 18_432]
    mha, gqa, mqa = res.rows
    assert mha["speedup_vs_mha"] == 1.0 and mha["predicted_speedup_vs_mha"] == 1.0
    assert gqa["predicted_speedup_vs_mha"] == pytest.approx(mha["predicted_s"] / gqa["predicted_s"])
    assert mqa["speedup_vs_mha"] == pytest.approx(mha["median_s"] / mqa["median_s"])
    assert res.device["type"] == "cpu" and res.ceilings["copy_bytes_per_s"] > 0
    assert set(res.to_dict()) >= {"rows", "device", "ceilings"}


def test_failed_impl_is_reported_not_timed(monkeypatch):
    real = impls.get_impl

    def broken(name):
        if name == "grouped":
            return lambda q, k, v, s: real("grouped")(q, k, v, s) * float("nan")
        return real(name)

    monkeypatch.setattr(impls, "get_impl", broken)
    res = run(MeasureConfig(heads=4, kv_heads=2, head_dim=8, seq_len=16, batch=1, iters=2,
                            impl="grouped,sdpa", l2="none", device="cpu"),
              ceiling_buffer_bytes=SMALL_CEILINGS)
    bad, good = res.rows
    assert not bad["correct"] and bad["median_s"] is None and bad["iters"] == 0
    assert "failed correctness" in bad["note"] and "not timed" in bad["note"]
    assert good["correct"] and good["median_s"] > 0
    assert good["backend"] == "flash (cpu)"


def test_sdpa_backend_and_expansion_are_visible():
    q, k, v = inputs(8, 1)
    _, ops = impls.traced(lambda: impls.get_impl("sdpa-math")(q, k, v, 0.25))
    info = impls.classify(ops)
    assert info.backend == "math" and info.kv_copied  # math expands K/V for GQA
    _, ops = impls.traced(lambda: impls.get_impl("sdpa")(q, k, v, 0.25))
    assert impls.classify(ops).backend in ("flash (cpu)", "math")
    probe = impls.probe_sdpa(CPU, torch.float32, 8, 1, 16)
    assert probe["math"] == "ok" and probe["dispatch"] in ("flash (cpu)", "math")


def test_memory_guard_refuses_before_allocating(monkeypatch):
    def never(*a, **k):
        raise AssertionError("ceilings measured before the memory guard")

    monkeypatch.setattr(ceilings, "measure_ceilings", never)
    monkeypatch.setattr(impls, "make_slot", never)
    with pytest.raises(KvcalcError) as e:
        run(MeasureConfig(heads=32, kv_heads=8, seq_len=1 << 30, batch=4, device="cpu"))
    msg = str(e.value)
    assert msg.startswith("needs ") and "is free on cpu" in msg and "try seq_len" in msg
    assert "try --seq-len" in e.value.worded(flag_of)  # the command line's words


def test_guard_suggestion_fits(monkeypatch):
    monkeypatch.setattr(ceilings, "free_bytes", lambda device: 4 * 10**9)
    # The streamed probes are sized from the LLC: pin this VM's 32 MiB (a 16-core host's
    # larger L3 makes them need more than the 4 GB, leaving no batch to suggest).
    monkeypatch.setattr(ceilings, "cpu_llc_bytes", lambda: 32 * 2**20)
    with pytest.raises(KvcalcError) as e:
        run(MeasureConfig(heads=32, kv_heads=8, seq_len=65536, batch=32, device="cpu"))
    msg = e.value.worded(flag_of)  # as the command line says it
    suggested = int(msg.split("--seq-len ")[1].split()[0])
    assert suggested < 65536
    assert "--batch" in msg
    suggested_batch = int(msg.split("--batch ")[1].split()[0])
    # 85% of 4 GB is usable: 3.4e9 bytes. The fp32 cache alone is 32 sequences x 8 heads
    # x 128 x 2 (K,V) x 4 bytes = 262,144 bytes per token: 16384 tokens (4,294,967,296 B)
    # cannot fit, so the suggestion is at most 8192; likewise 8 sequences of 65536 tokens
    # (8 x 65536 x 8,192 B = 4,294,967,296 B) cannot, so --batch is at most 4.
    assert 32 * 16384 * 8 * 128 * 2 * 4 == 4_294_967_296 > 3.4e9
    assert suggested <= 8192 and suggested_batch <= 4
    assert suggested & (suggested - 1) == 0 and suggested_batch & (suggested_batch - 1) == 0
    # Each suggestion passes the guard, and twice it (the next power of two) does not.
    ok = [dict(seq_len=suggested, batch=32), dict(seq_len=65536, batch=suggested_batch)]
    for sizes in ok:
        assert run(MeasureConfig(heads=32, kv_heads=8, device="cpu", **sizes), check_only=True) is None
    for sizes in (dict(seq_len=2 * suggested, batch=32), dict(seq_len=65536, batch=2 * suggested_batch)):
        with pytest.raises(KvcalcError, match="needs "):
            run(MeasureConfig(heads=32, kv_heads=8, device="cpu", **sizes), check_only=True)


def test_default_sizes_shrink_instead_of_refusing(monkeypatch):
    monkeypatch.setattr(ceilings, "free_bytes", lambda device: 60 * 2**20)
    res = run(MeasureConfig(heads=8, kv_heads=8, head_dim=64, iters=1, warmup=0, l2="none"),
              ceiling_buffer_bytes=SMALL_CEILINGS)
    assert "default sizes reduced" in res.config["notes"][0]


def test_config_validation():
    with pytest.raises(KvcalcError, match="divisible"):
        MeasureConfig(heads=32, kv_heads=7)
    with pytest.raises(KvcalcError, match="positive"):
        MeasureConfig(heads=32, kv_heads=8, seq_len=0)
    with pytest.raises(KvcalcError, match="cannot exceed"):
        MeasureConfig(heads=4, kv_heads=8)
    with pytest.raises(KvcalcError, match="unknown impl"):
        MeasureConfig(heads=4, kv_heads=2, impl="grouped,fast")
    with pytest.raises(KvcalcError, match="dtype"):
        MeasureConfig(heads=4, kv_heads=2, dtype="int8")
    assert MeasureConfig(heads=32, kv_heads=8, compare=True).kv_variants() == [32, 8, 1]
    assert MeasureConfig(heads=32, kv_heads=1, compare=True).kv_variants() == [32, 1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_requested_without_gpu():
    with pytest.raises(KvcalcError, match="no CUDA device"):
        run(MeasureConfig(heads=4, kv_heads=2, device="cuda"))
    with pytest.raises(KvcalcError, match="CUDA"):
        run(MeasureConfig(heads=4, kv_heads=2, cuda_graphs=True))


def test_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(KvcalcError, match=r"kvcalc\[measure\]"):
        require_torch()
    with pytest.raises(KvcalcError, match=r"kvcalc\[measure\]"):
        run(MeasureConfig(heads=4, kv_heads=2))


def test_package_import_does_not_import_torch():
    code = "import sys, kvcalc.measure, kvcalc.measure.predict; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------
# L2 plan, timing statistics, ceilings
# --------------------------------------------------------------------------------
def test_l2_plan():
    mb = 10**6
    assert guard.l2_plan(1000 * mb, 50 * mb, "L2", "auto", "cache")[:2] == (1, 0)
    n, flush, text = guard.l2_plan(25 * mb, 50 * mb, "L2", "auto", "cache")
    assert (n, flush) == (16, 0) and text == "rotated 16 caches, 8.0x L2"  # 8x the L2
    n, flush, text = guard.l2_plan(1000, 50 * mb, "L2", "auto", "cache")
    assert n == 1 and flush == 75 * mb and "flushed" in text
    assert guard.l2_plan(1000, 50 * mb, "L2", "none", "cache")[2] == "cache fits in L2 (not flushed)"
    n, _, text = guard.l2_plan(1000, 50 * mb, "L2", "rotate", "cache")
    assert n == guard.MAX_SLOTS and "capped" in text


def test_summarise_quantiles():
    t = timing.summarise([float(i) for i in range(1, 12)], "perf_counter")
    assert (t.p10_s, t.median_s, t.p90_s) == (2.0, 6.0, 10.0)
    assert timing.summarise([3.0], "cuda-events").p10_s == 3.0


def test_time_calls_rotates_and_flushes():
    calls, flushes = [], []
    t = timing.time_calls([lambda: calls.append(0), lambda: calls.append(1)], device=CPU,
                          warmup=2, iters=5, flush=lambda: flushes.append(1))
    assert calls == [0, 1, 0, 1, 0, 1, 0] and len(flushes) == 7 and t.samples == 5


def test_timed_loop_continues_the_rotation_after_warm_up():
    # 10 warm-up calls over 3 buffers end on buffer 0; restarting at 0 would read it twice
    # in a row, the second time from L2.
    calls = []
    timing.time_calls([lambda i=i: calls.append(i) for i in range(3)], device=CPU,
                      warmup=10, iters=7)
    assert all(a != b for a, b in zip(calls, calls[1:])), calls
    assert calls[10:] == [1, 2, 0, 1, 2, 0, 1]


def test_queue_fill_covers_the_host_launch_loop_within_bounds():
    ghz2 = 2e9
    # 100 calls at 40 us each on the host: 4 ms of launches, 1.5x margin, in cycles.
    assert timing.queue_fill_cycles(40e-6, 100, ghz2) == int(40e-6 * 100 * 1.5 * ghz2)
    assert timing.queue_fill_cycles(0.0, 100, ghz2) == timing.QUEUE_FILL_MIN_CYCLES
    assert timing.queue_fill_cycles(1.0, 1000, ghz2) == int(timing.QUEUE_FILL_MAX_S * ghz2)


def test_ceilings_measured_and_cached(tmp_path):
    meta = ceilings.device_info(CPU)
    c = ceilings.measure_ceilings(CPU, "fp32", SMALL_CEILINGS)
    assert c["copy_bytes"] == 2 * SMALL_CEILINGS  # read + write
    assert c["read_bytes"] == SMALL_CEILINGS
    assert c["copy_bytes_per_s"] > 0 and c["matmul_flops_per_s"] > 0
    path = tmp_path / "kvcalc" / "ceilings.json"
    key = ceilings.cache_key(meta, "fp32")
    ceilings.store_cached(path, key, c)
    got = ceilings.get_ceilings(CPU, meta, "fp32", path)
    assert got["copy_bytes_per_s"] == c["copy_bytes_per_s"]
    assert got["source"].startswith("cache file")


# --------------------------------------------------------------------------------
# CUDA only
# --------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")  # one worker: timings share no GPU with other tests
@pytest.mark.parametrize("name", ["grouped", "sdpa", "repeat", "sdpa-flash"])
@pytest.mark.parametrize("h,kv", SHAPES)
def test_cuda_impls_match_reference(name, h, kv):
    dev = torch.device("cuda")
    q, k, v = (t.to(dev) for t in inputs(h, kv, d=64, L=300, dtype=torch.bfloat16))
    out = impls.get_impl(name)(q, k, v, 0.125)
    ref = impls.reference_attention(q, k, v, 0.125)
    assert impls.relative_error(out, ref) < impls.TOLERANCE["bf16"]


@cuda
@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")  # one worker: timings share no GPU with other tests
def test_cuda_auto_and_events():
    res = run(MeasureConfig(heads=8, kv_heads=2, head_dim=64, seq_len=256, batch=2, iters=5,
                            device="cuda", compare=True, cuda_graphs=True))
    for r in res.rows:
        assert r["timer"] == "cuda-events" and r["cuda_graphs"] and r["correct"]
        assert r["impl"] in ("sdpa-flash", "grouped", "sdpa")


@cuda
@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")  # one worker: timings share no GPU with other tests
def test_cuda_predictions_of_the_default_impl_hold_for_mha_gqa_mqa():
    # The overlapped attention phase (kernels multiply while K/V streams in): on an H200
    # the additive form predicted GQA-8 and MQA 2.5x slower than they ran.
    res = run(MeasureConfig(heads=32, kv_heads=8, compare=True, device="cuda"))
    for r in res.rows:
        assert r["correct"] and 0.75 < r["measured_over_predicted"] < 1.33, r


def test_overlapped_attention_is_the_larger_phase_not_the_sum():
    from kvcalc.measure.predict import overlap_flops_per_s, time_terms

    pred = attention_prediction(4, 1000, 32, 8, 128, "bf16")
    kv = pred.bytes_breakdown["kv_read"] + pred.bytes_breakdown.get("kv_write", 0)
    acts = sum(v for k, v in pred.bytes_breakdown.items() if k in ("q", "o", "activations"))
    # 4 query rows per K/V head fill 4/16 of an MMA tile: 1e15 x 0.25 FLOP/s.
    rate = overlap_flops_per_s("cuda", 1e15, 4)
    assert rate == 2.5e14 and overlap_flops_per_s("cpu", 1e15, 4) is None
    tt = time_terms(pred, 4e12, 1e12, kv_read_bytes_per_s=4e12, group=4, overlap_flops_per_s=rate)
    assert tt.extra_compute_s == pytest.approx(pred.flops / 2.5e14)
    assert tt.attention_s == pytest.approx(max(kv / 4e12 + acts / 4e12, pred.flops / 2.5e14))
    cpu = time_terms(pred, 4e12, 1e12, kv_read_bytes_per_s=4e12, group=4)
    # The CPU form adds the 3/4 of the FLOPs the one-row-per-head stream did not do.
    assert cpu.attention_s == pytest.approx(kv / 4e12 + acts / 4e12 + 0.75 * pred.flops / 1e12)


def test_refusal_reason_is_the_pinned_backends_own():
    # The order a pinned CUDA call warns in: other backends first, then this one's reason.
    messages = ["Memory efficient kernel not used because:",
                "Memory Efficient attention has been runtime disabled.",
                "Flash attention kernel not used because:",
                "Flash attention requires q,k,v to have the same last dimension and to be less "
                "than or equal to 256.",
                "CuDNN attention kernel not used because:",
                "CuDNN attention has been runtime disabled."]
    assert impls.refusal_reason(messages, "flash", "x").startswith("Flash attention requires")
    assert impls.refusal_reason([], "flash", "No available kernel.\nmore") == "No available kernel."


def test_auto_speedups_pair_auto_picks_even_when_the_winners_differ():
    # MHA's auto picked sdpa and GQA's picked grouped (as happens when two are close):
    # the speed-up is auto over auto, 2.0 s / 0.5 s, not missing.
    from kvcalc.measure.runner import _add_speedups

    def row(kv_heads, impl, requested, auto_pick, median_s, predicted_s):
        return {"step": "attention", "kv_heads": kv_heads, "impl": impl, "impl_requested": requested,
                "auto_pick": auto_pick, "median_s": median_s, "predicted_s": predicted_s,
                "speedup_vs_mha": None, "predicted_speedup_vs_mha": None}

    rows = [row(32, "sdpa", "auto", True, 2.0, 1.0), row(32, "grouped", "grouped", False, 3.0, 1.0),
            row(8, "grouped", "grouped", True, 0.5, 0.25), row(8, "sdpa", "sdpa", False, 1.0, 0.25)]
    _add_speedups(rows, heads=32)
    gqa_grouped_named_and_auto, gqa_sdpa = rows[2], rows[3]
    # Named rows pair with the same implementation: grouped 3.0/0.5; sdpa has no MHA row.
    assert gqa_grouped_named_and_auto["speedup_vs_mha"] == 6.0
    assert gqa_sdpa["speedup_vs_mha"] is None
    rows = [row(32, "sdpa", "auto", True, 2.0, 1.0), row(8, "grouped", "auto", True, 0.5, 0.25)]
    _add_speedups(rows, heads=32)
    assert rows[1]["speedup_vs_mha"] == 4.0 and rows[1]["predicted_speedup_vs_mha"] == 4.0


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v1_limit_caps_the_cpu_memory_guard(tmp_path):
    # A 3 GiB limit two levels up from this process's cgroup, 1 GiB used of which
    # 256 MiB is inactive page cache: 3 - 1 + 0.25 GiB left, whatever MemAvailable says.
    gib = 2**30
    _write(tmp_path / "cgroup", "4:memory:/jobs/task\n3:cpuset:/\n")
    mem = tmp_path / "sys" / "memory"
    _write(mem / "jobs" / "memory.limit_in_bytes", f"{3 * gib}\n")
    _write(mem / "jobs" / "memory.usage_in_bytes", f"{gib}\n")
    _write(mem / "jobs" / "memory.stat", f"cache 1\ntotal_inactive_file {gib // 4}\n")
    _write(mem / "jobs" / "task" / "memory.limit_in_bytes", "9223372036854771712\n")  # no limit
    _write(mem / "jobs" / "task" / "memory.usage_in_bytes", "5\n")
    left = ceilings.cgroup_available_bytes(str(tmp_path / "cgroup"), str(tmp_path / "sys"))
    assert left == 3 * gib - gib + gib // 4


def test_cgroup_v2_max_and_no_limit(tmp_path):
    _write(tmp_path / "cgroup", "0::/a\n")
    v2 = tmp_path / "sys"
    _write(v2 / "a" / "memory.max", "max\n")
    _write(v2 / "a" / "memory.current", "100\n")
    assert ceilings.cgroup_available_bytes(str(tmp_path / "cgroup"), str(v2)) is None
    _write(v2 / "memory.max", "1000\n")  # the container's own limit, at the namespace root
    _write(v2 / "memory.current", "400\n")
    assert ceilings.cgroup_available_bytes(str(tmp_path / "cgroup"), str(v2)) == 600
    assert ceilings.cgroup_available_bytes(str(tmp_path / "missing"), str(v2)) is None


# --------------------------------------------------------------------------------
# A hand-edited ceilings cache
# --------------------------------------------------------------------------------
GOOD_CEILINGS = {"copy_bytes_per_s": 2e10, "read_bytes_per_s": 3e10,
                 "matmul_flops_per_s": 1e11, "dtype": "fp32"}


def _cache_with(path, **changes):
    import json

    entry = {**GOOD_CEILINGS, **changes}
    path.write_text(json.dumps({"k": entry}, allow_nan=True))
    return path


def test_deeply_nested_ceilings_cache_is_a_one_line_error(tmp_path):
    path = tmp_path / "ceilings.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(KvcalcError, match="unreadable.*nested too deeply") as e:
        ceilings.load_cached(path, "k")
    assert "\n" not in str(e.value)
    meta = {"type": "cpu", "name": "x", "torch_version": "t"}
    with pytest.raises(KvcalcError, match="nested too deeply"):
        ceilings.get_ceilings(CPU, meta, "fp32", path)


@pytest.mark.parametrize("key, value", [
    ("copy_bytes_per_s", True),  # a bool is an int to isinstance
    ("copy_bytes_per_s", 5e-324),  # bytes / 5e-324 = inf
    ("read_bytes_per_s", 1e-300),
    ("copy_bytes_per_s", 0),
    ("read_bytes_per_s", -3e10),
    ("matmul_flops_per_s", 1e308),
    ("matmul_flops_per_s", 10**400),  # exact JSON int, beyond float
    ("copy_bytes_per_s", 2e15),  # above any device's bandwidth
    ("copy_bytes_per_s", float("nan")),
    ("matmul_flops_per_s", float("inf")),
    ("read_bytes_per_s", "3e10"),
    ("read_bytes_per_s", None),
])
def test_implausible_cached_ceilings_are_remeasured(tmp_path, monkeypatch, key, value):
    path = _cache_with(tmp_path / "ceilings.json", **{key: value})
    assert ceilings.load_cached(path, "k") is None
    measured = {**GOOD_CEILINGS, "source": "measured"}
    monkeypatch.setattr(ceilings, "cache_key", lambda meta, dtype: "k")
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda device, dtype, buf: measured)
    assert ceilings.get_ceilings(CPU, {}, "fp32", path)["source"] == "measured"
    assert ceilings.load_cached(path, "k")[key] == GOOD_CEILINGS[key]  # stored afresh


def test_plausible_cached_ceilings_are_used_as_floats(tmp_path, monkeypatch):
    # Integer rates at the edges of the range are real ceilings: used, as floats.
    path = _cache_with(tmp_path / "ceilings.json", copy_bytes_per_s=10**6,
                       read_bytes_per_s=10**15, matmul_flops_per_s=10**18)
    got = ceilings.load_cached(path, "k")
    assert got["copy_bytes_per_s"] == 1e6 and type(got["copy_bytes_per_s"]) is float
    assert got["matmul_flops_per_s"] == 1e18 and type(got["matmul_flops_per_s"]) is float
    monkeypatch.setattr(ceilings, "cache_key", lambda meta, dtype: "k")
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda *a: pytest.fail("re-measured"))
    assert ceilings.get_ceilings(CPU, {}, "fp32", path)["source"].startswith("cache file")


def test_time_terms_by_hand():
    # Layer step, 4 query / 2 K/V heads of 8, d_model 32, batch 2, 16 tokens, fp32.
    from kvcalc.measure.predict import time_terms

    pred = layer_prediction(block(4, 2, 8, 32), batch=2, seq_len=16, dtype="fp32")
    # weights: 32 x (4 + 2 x 2) x 8 + 32 x 32 = 3,072 params; K/V read 2 x 16 x 2 x 8 x 2 x 4 B;
    # one token written 2 x 2 x 8 x 2 x 4 B; activations (32+64 + 32+32) x 2 + q, o 2 x 2 x 4 x 8.
    assert pred.bytes_breakdown == {"weights": 12_288, "kv_read": 4_096, "kv_write": 256,
                                    "activations": 1_792}
    assert pred.extra == {"projection_flops": 12_288, "attention_flops": 4_096}
    # A plain read ceiling (no arithmetic inside it): every attention FLOP is added.
    t = time_terms(pred, read_bytes_per_s=1_000, attention_flops_per_s=100,
                   projection_flops_per_s=500, overhead_s=1.0)
    assert (t.kv_s, t.weights_s, t.activations_s) == (4.352, 12.288, 1.792)
    assert (t.attention_compute_s, t.extra_compute_s, t.projection_compute_s) == (40.96, 40.96, 24.576)
    # attention: 4.352 + 1.792 + 40.96; projections: max(12.288, 24.576); + 1 overhead.
    assert t.total_s == pytest.approx(47.104 + 24.576 + 1.0)
    assert (t.attention_bound, t.projection_bound, t.bound) == ("compute", "compute", "compute")
    # A fast machine: both phases wait on memory.
    t = time_terms(pred, 1_000, 10**9, 10**9)
    assert t.total_s == pytest.approx((4_352 + 1_792) / 1_000 + 4_096e-9 + 12.288)
    assert t.bound == "memory"
    # K/V and weights at the step's own streaming bandwidths; the K/V stream (one query row
    # per K/V head, group 2) already did half the attention FLOPs: 2,048 are left.
    t = time_terms(pred, 1_000, 10**9, 10**9, kv_read_bytes_per_s=500, weight_read_bytes_per_s=250,
                   group=2)
    assert (t.kv_s, t.weights_s, t.activations_s) == (4_352 / 500, 12_288 / 250, 1.792)
    assert t.extra_compute_s == pytest.approx(2_048e-9)
    # F.linear streaming the weights did their arithmetic: the projections are weights_s alone.
    t = time_terms(pred, 1_000, 10**9, 1.0, weight_read_bytes_per_s=250)
    assert t.projection_compute_s == 12_288 and t.projection_s == 12_288 / 250
    # The attention step, MQA with 8 query heads: 512,000 B of K/V, 4,096 B of q and o,
    # 2 x 8 x 1,000 x 128 = 2,048,000 FLOPs of which the streamed row did 256,000.
    a = attention_prediction(batch=1, seq_len=1_000, heads=8, kv_heads=1, head_dim=64, dtype="fp32")
    t = time_terms(a, read_bytes_per_s=10**9, attention_flops_per_s=10**9, overhead_s=1e-5,
                   kv_read_bytes_per_s=10**9, group=8)
    assert t.attention_compute_s == pytest.approx(2.048e-3) and t.kv_s == pytest.approx(5.12e-4)
    assert t.extra_compute_s == pytest.approx(1.792e-3)
    assert t.total_s == pytest.approx(5.12e-4 + 4.096e-6 + 1.792e-3 + 1e-5) and t.bound == "compute"
    with pytest.raises(KvcalcError):
        time_terms(pred, 1_000, 100)  # the layer step needs the projections' rate
