"""`kvcalc measure --calibrate` and `--step model`: the hardware file, the calibrated
latency (hand arithmetic), and the loop from measurement to prediction on this CPU
(and on a GPU where one is present)."""

from __future__ import annotations

import json
import math

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.speed.latency import latency
from kvcalc.presets import hardware_from_yaml_file
from kvcalc.spec import Calibration, ModelSpec
from kvcalc.workload import Workload
from kvcalc.ground.dtypes import dtype

GOOD = """\
name: box
source: measured
memory_bytes: 100_000_000_000
memory_bandwidth_bytes_per_s: 20_000_000_000
flops_per_s: {fp32: 100_000_000_000}
calibration:
  engine: torch-eager
  device_type: cpu
  dtype: fp32
  measured_at: '2026-11-26T00:00:00Z'
  measured_with: test
  read_bytes_per_s: 20_000_000_000
  read_bytes_per_s_by_size: {1073741824: 20_000_000_000}
  linear_bytes_per_s:
    1000: {1: 10_000_000_000, 100: 1_000_000_000}
    4000: {1: 16_000_000_000, 100: 4_000_000_000}
  attention_kv_bytes_per_s: 8_000_000_000
  prefill_flops_per_s: 100_000_000_000
  layer_overhead_s: 0.0001
  step_overhead_s: 0.00002
"""


def _file(tmp_path, text=GOOD):
    p = tmp_path / "box.yaml"
    p.write_text(text)
    return p


def test_calibrated_hardware_file_reads(tmp_path):
    hw = hardware_from_yaml_file(_file(tmp_path))
    cal = hw.calibration
    assert isinstance(cal, Calibration) and cal.engine == "torch-eager" and not cal.overlapped
    assert cal.linear_bytes_per_s[4000][100] == 4_000_000_000


@pytest.mark.parametrize("change, message", [
    (("  dtype: fp32\n", "  dtype: fp32\n  colour: red\n"), r"unknown key 'calibration.colour'"),
    (("  engine: torch-eager\n", "  engine: vllm\n"), r"calibration.engine must be one of torch-eager"),
    (("  attention_kv_bytes_per_s: 8_000_000_000\n", "  attention_kv_bytes_per_s: 0\n"),
     r"calibration.attention_kv_bytes_per_s must be a positive integer"),
    (("  layer_overhead_s: 0.0001\n", "  layer_overhead_s: 5\n"),
     r"calibration.layer_overhead_s must be seconds in \[0, 1\)"),
    (("    1000: {1: 10_000_000_000, 100: 1_000_000_000}\n", "    1000: {}\n"),
     r"calibration.linear_bytes_per_s.1000 needs at least one entry"),
    (("  step_overhead_s: 0.00002\n", ""), r"missing required key: calibration.step_overhead_s"),
])
def test_bad_calibration_is_one_line_naming_the_key(tmp_path, change, message):
    with pytest.raises(KvcalcError, match=message) as e:
        hardware_from_yaml_file(_file(tmp_path, GOOD.replace(*change)))
    assert "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path / "box.yaml"))


def test_linear_rate_interpolates_in_log_rows_then_log_width(tmp_path):
    cal = hardware_from_yaml_file(_file(tmp_path)).calibration
    assert cal.linear_rate(1, 1000) == 10e9 and cal.linear_rate(100, 4000) == 4e9
    # 10 rows: halfway in log between 1 and 100: 10e9 + 0.5 x (1e9 - 10e9) = 5.5e9.
    assert cal.linear_rate(10, 1000) == pytest.approx(5.5e9)
    # 2000 wide at 1 row: log(2000/1000) / log(4000/1000) = 1/2 of the way: 13e9.
    assert cal.linear_rate(1, 2000) == pytest.approx(13e9)
    assert cal.linear_rate(1000, 100) == 1e9  # clamped at both ends


def test_calibrated_latency_by_hand(tmp_path):
    hw = hardware_from_yaml_file(_file(tmp_path))
    # 2 layers, d 1000, MHA 10 x 100, plain MLP 1000 -> 4000 -> 1000, vocab 1000, untied.
    spec = ModelSpec.uniform(name="hand", layers=2, d_model=1000, heads=10, kv_heads=10,
                             head_dim=100, d_ff=4000, vocab=1000, mlp="plain", norm="rmsnorm")
    w = Workload(seq_len=100, batch=1, kv_dtype=dtype("fp32"), weight_dtype=dtype("fp32"))
    lat = latency(spec, w, hardware=hw)
    # Matmul weights per layer: q,k,v,o 4 x 1000 x 1000 at 1000 wide (10 GB/s), up 1000 x 4000
    # at 1000 wide, down 4000 x 1000 at 4000 wide (16 GB/s); lm_head 1000 x 1000 at 1000 wide.
    # Elements: at 1000 wide 2 x 8e6 + 1e6 = 17e6, at 4000 wide 2 x 4e6 = 8e6; all 25e6.
    s_per_byte = (17e6 / 10e9 + 8e6 / 16e9) / 25e6
    kv_read = 2 * 2 * 10 * 100 * 100 * 4  # 2 layers x (K, V) x 10 heads x 100 x 100 tokens x 4 B
    kv_write = 2 * 2 * 10 * 100 * 4
    from kvcalc.formulas.step import decode_step

    step = decode_step(spec, 100, 1, dtype("fp32"), dtype("fp32"), dtype("fp32"), 1, 0, None,
                       prefill=False)
    b = step.bytes_breakdown
    assert (b["kv_read"], b["kv_write"]) == (kv_read, kv_write)
    memory = b["weights"] * s_per_byte + (kv_read + kv_write) / 8e9 + b["activations"] / 20e9
    assert lat.decode_memory_s == pytest.approx(memory, rel=1e-12)
    assert lat.decode_overhead_s == pytest.approx(2e-5 + 2 * 1e-4)
    # A CPU adds the fixed costs; the same terms on a GPU overlap them.
    assert lat.tpot_s == pytest.approx(max(memory, lat.decode_compute_s) + 2.2e-4)
    gpu = hardware_from_yaml_file(_file(tmp_path, GOOD.replace("device_type: cpu", "device_type: cuda")))
    assert latency(spec, w, hardware=gpu).tpot_s == pytest.approx(max(memory, 2.2e-4))
    assert lat.as_dict()["calibration"].startswith("torch-eager on box (fp32")


def test_estimate_json_says_the_latency_is_calibrated(tmp_path):
    from typer.testing import CliRunner

    from kvcalc.cli import app

    r = CliRunner().invoke(app, ["estimate", "--preset", "gpt2", "--gpu", str(_file(tmp_path)),
                                 "--seq-len", "256", "--format", "json"])
    assert r.exit_code == 0, r.output
    lat = json.loads(r.stdout)["latency"]
    assert lat["calibration"].startswith("torch-eager on box") and lat["decode_overhead_s"] > 0


# --------------------------------------------------------------------------------
# The loop, measured (torch)
# --------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _loop(tmp_path, device: str, preset: str, seq_len: int, batch: int):
    from typer.testing import CliRunner

    from kvcalc.cli import app

    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"my{device}.yaml"
    r = CliRunner().invoke(app, ["measure", "--calibrate", "--device", device, "-o", str(out)])
    assert r.exit_code == 0, r.output
    hw = hardware_from_yaml_file(out)  # the file --gpu reads, strict keys
    assert hw.calibration.device_type == device and hw.calibration.engine == "torch-eager"
    r = CliRunner().invoke(app, ["measure", "--step", "model", "--preset", preset, "--device",
                                 device, "--gpu", str(out), "--seq-len", str(seq_len), "--batch",
                                 str(batch), "--format", "json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["rows"]
    # The row's prediction is estimate's own, from the same file.
    r2 = CliRunner().invoke(app, ["estimate", "--preset", preset, "--gpu", str(out), "--seq-len",
                                  str(seq_len), "--batch", str(batch), "--weight-dtype",
                                  hw.calibration.dtype, "--kv-dtype", hw.calibration.dtype,
                                  "--format", "json"])
    assert r2.exit_code == 0, r2.output
    assert row["predicted_s"] == pytest.approx(json.loads(r2.stdout)["latency"]["tpot_s"])
    return row


@pytest.mark.slow
def test_calibrate_then_model_step_on_this_cpu(tmp_path):
    # Within +-20% on a quiet host (reports/cpu-*-model-step.csv). Other processes skew a
    # calibration and the step it predicts unequally (a host at load 7 put one try at
    # 3.8x), so: a loose bound that still catches a wrong unit or a missing term, on the
    # best of three tries, each calibrating afresh.
    # One thread: the other pytest worker of a 2-core CI host keeps the other core.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _best_of_three(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _best_of_three(tmp_path):
    ratios = []
    for attempt in range(3):
        row = _loop(tmp_path / str(attempt), "cpu", "gpt2", 256, 1)
        assert row["engine"] == "torch-eager" and row["timer"] == "perf_counter"
        assert row["loaded"] in (True, False, None)
        ratios.append(row["measured_over_predicted"])
        if 1 / 3 < ratios[-1] < 3:
            return
    pytest.fail(f"measured / predicted {ratios}")


def test_model_step_refuses_what_it_does_not_run():
    from typer.testing import CliRunner

    from kvcalc.cli import app

    r = CliRunner().invoke(app, ["measure", "--step", "model", "--preset", "mamba-2.8b",
                                 "--device", "cpu", "--gpu", "epyc-9654"])
    assert r.exit_code == 2 and "--step model runs dense decoders" in r.output
    r = CliRunner().invoke(app, ["measure", "--step", "model", "--calibrate"])
    assert r.exit_code == 2 and "separate runs" in r.output


def test_model_step_matches_the_layer_math():
    # The decode model's layer, in float64 by hand, for one tiny config.
    import torch.nn.functional as F

    from kvcalc.measure.model_step import DecodeModel

    spec = ModelSpec.uniform(name="t", layers=1, d_model=8, heads=2, kv_heads=1, head_dim=4,
                             d_ff=16, vocab=32)
    g = torch.Generator().manual_seed(0)
    m = DecodeModel(spec, 2, 5, torch.device("cpu"), torch.float64, g)
    p = m.layers[0]
    x = m.embed[m.tokens]
    h = F.rms_norm(x, (8,), p["norm1"], m.eps)
    q, k, v = (h @ p["w_qkv"].T).split([8, 4, 4], dim=-1)
    k_all, v_all = p["k"].clone(), p["v"].clone()
    k_all[:, 0, 4], v_all[:, 0, 4] = k, v
    logits = torch.einsum("bhd,bld->bhl", q.view(2, 2, 4), k_all[:, 0]) / 2
    o = torch.einsum("bhl,bld->bhd", logits.softmax(-1), v_all[:, 0]).reshape(2, 8)
    x = x + o @ p["w_o"].T
    h = F.rms_norm(x, (8,), p["norm2"], m.eps)
    gate, up = (h @ p["w_up"].T).chunk(2, dim=-1)
    x = x + (F.silu(gate) * up) @ p["w_down"].T
    want = (F.rms_norm(x, (8,), m.final_norm, m.eps) @ m.lm_head.T).argmax(-1)
    assert torch.equal(m.step(), want)
    assert math.isclose(m.layers[0]["k"][0, 0, 4, 0].item(), k[0, 0].item())


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")  # one worker: timings share no GPU with other tests
def test_calibrate_then_model_step_on_the_gpu(tmp_path):
    row = _loop(tmp_path, "cuda", "llama3.2-1b", 1024, 1)
    assert row["timer"] == "cuda-events" and row["dtype"] == "bf16"
    assert 0.5 < row["measured_over_predicted"] < 2, row


def test_calibrated_tp_adds_the_measured_all_reduces_by_hand(tmp_path):
    text = GOOD.replace("flops_per_s: {fp32: 100_000_000_000}\n",
                        "flops_per_s: {fp32: 100_000_000_000}\n"
                        "interconnect_bandwidth_bytes_per_s: 1_000_000_000\n"
                        "allreduce_latency_s: 0.0005\n")
    hw = hardware_from_yaml_file(_file(tmp_path, text))
    spec = ModelSpec.uniform(name="hand", layers=2, d_model=1000, heads=10, kv_heads=10,
                             head_dim=100, d_ff=4000, vocab=1000, mlp="plain")
    one = dict(seq_len=100, batch=1, kv_dtype=dtype("fp32"), weight_dtype=dtype("fp32"))
    lat2 = latency(spec, Workload(**one, tp=2), hardware=hw)
    lat1 = latency(spec, Workload(**one), hardware=hw)
    # 2 all-reduces per layer x 2 layers, each 0.5 ms + 2(2-1)/2 x 4,000 B / 1 GB/s = 4 us.
    allreduce_s = 4 * (0.0005 + 4000 / 1e9)
    halves = lat1.decode_memory_s / 2  # every byte split over 2 devices (10 heads, tp 2)
    assert lat2.decode_memory_s == pytest.approx(halves + allreduce_s, rel=1e-3)


@pytest.mark.slow
def test_calibrate_all_reduce_over_two_gloo_ranks():
    from kvcalc.measure.calibrate import allreduce_terms

    got = allreduce_terms(torch.device("cpu"), "fp32", 2)
    assert got["backend"] == "gloo" and 0 < got["latency_s"] < 1 and got["bus_bytes_per_s"] > 1e6
