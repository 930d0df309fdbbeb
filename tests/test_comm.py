"""kvcalc.speed.comm: all-reduce counts, bytes and ring time, against hand arithmetic."""

import pytest

from kvcalc.speed.comm import (allreduce_message_bytes, allreduces_per_step, decode_allreduce,
                         ring_allreduce_s)
from kvcalc.errors import KvcalcError
from kvcalc.presets import load_model


def test_ring_time_by_hand():
    # 8 MB over 4 devices at 100 GB/s: 2 x 3/4 x 8e6 / 1e11 = 120 us, plus 10 us latency.
    assert ring_allreduce_s(8_000_000, 4, 1e11, 10e-6) == pytest.approx(130e-6)
    # Two devices: each sends half the message twice, i.e. the whole message once.
    assert ring_allreduce_s(1_000, 2, 1_000) == pytest.approx(1.0)
    assert ring_allreduce_s(10**9, 1, 1.0) == 0.0
    with pytest.raises(KvcalcError):
        ring_allreduce_s(1, 2, 0)


def test_llama_decode_allreduce_by_hand():
    spec = load_model("llama3-8b")  # 32 layers of attention + MLP, d_model 4,096
    assert allreduces_per_step(spec) == 64
    assert allreduce_message_bytes(spec, 8, "bf16") == 8 * 4_096 * 2 == 65_536
    c = decode_allreduce(spec, batch=8, tp=4, act_dtype="bf16", link_bytes_per_s=450 * 10**9)
    # 64 x 2 x 3/4 x 65,536 B on each device's link; 64 x that / 450 GB/s.
    assert c.bytes_on_link == 64 * 98_304 == 6_291_456
    assert c.time_s == pytest.approx(6_291_456 / 450e9)
    assert decode_allreduce(spec, 8, 1, "bf16", 1).time_s == 0.0


def test_estimate_carries_the_allreduce_term_and_says_when_it_dominates():
    from dataclasses import replace

    from kvcalc import figures
    from kvcalc.presets import load_hardware

    spec = load_model("llama3-8b")
    h100 = load_hardware("h100-sxm")  # NVLink 4: 450 GB/s one direction
    d = figures(spec, 8192, 8, tp=2, hardware=h100).as_dict()
    a = d["allreduce"]
    # 64 all-reduces of 8 x 4,096 x 2 B; on two devices each sends the whole message once.
    assert (a["count"], a["message_bytes"], a["bytes_on_link"]) == (64, 65_536, 4_194_304)
    # Each also pays the preset's 9.5 us latency.
    assert a["time_s"] == pytest.approx(64 * 9.5e-6 + 4_194_304 / 450e9)
    assert a["step_time_with_allreduce_s"] == pytest.approx(d["roofline"]["time_s"] + a["time_s"])
    assert a["dominates"] is False
    assert figures(spec, 8192, 8, tp=1, hardware=h100).as_dict()["allreduce"] is None
    assert figures(spec, 8192, 8, tp=2).as_dict()["allreduce"] is None  # no hardware
    # A 1 GB/s link: 4,194,304 B take 4.2 ms, more than the step's memory time.
    slow = replace(h100, interconnect_bandwidth_bytes_per_s=10**9, interconnect="a slow link",
                   allreduce_latency_s=0.0)
    e = figures(spec, 8192, 8, tp=2, hardware=slow)
    assert e.as_dict()["allreduce"]["dominates"] is True
    assert any("over a slow link" in n and "the all-reduce dominates" in n for n in e.notes())


def test_latency_from_the_preset_by_hand():
    """The H100 preset's published small-message latency (sglang PR #2904: vLLM's custom
    all-reduce, 512 B, 9.5 us at tp 2) is paid by every all-reduce of a decode step."""
    from kvcalc import figures
    from kvcalc.presets import load_hardware

    h100 = load_hardware("h100-sxm")
    assert h100.allreduce_latency_s == 9.5e-6 and "2904" in h100.allreduce_latency_source
    spec = load_model("llama3-70b")  # 80 layers: 160 all-reduces of 1 x 8,192 x 2 B
    a = figures(spec, 8192, 1, tp=4, hardware=h100).as_dict()["allreduce"]
    assert (a["count"], a["message_bytes"]) == (160, 16_384)
    bandwidth = 160 * 2 * 3 / 4 * 16_384 / 450e9
    assert a["bandwidth_s"] == pytest.approx(bandwidth)
    assert a["time_s"] == pytest.approx(160 * 9.5e-6 + bandwidth)
    # At batch 1 the latency is 99% of it: a bandwidth-only model would be 175x too fast.
    assert a["time_s"] / a["bandwidth_s"] > 100
    # A device without a latency figure says so.
    a100 = figures(spec, 8192, 1, tp=4, hardware=load_hardware("a100-80gb")).as_dict()
    assert a100["allreduce"]["latency_s"] == 0.0
    assert "latency not included" in a100["allreduce"]["model"]


def test_fp8_weights_all_reduce_16_bit_outputs():
    """W8A8 quantizes each GEMM's input, not what the layers exchange: vLLM's
    apply_fp8_linear (model_executor/layers/quantization/utils/w8a8_utils.py) quantizes
    the input with ops.scaled_fp8_quant and has the GEMM write its output in input.dtype,
    and SGLang's fp8_utils.apply_fp8_linear returns output.to(dtype=input_dtype): the
    row-parallel layer's output, which tensor parallelism all-reduces, stays in the
    model's 16-bit dtype. So an fp8 checkpoint at TP 8 all-reduces as many bytes as a
    bf16 one, and its steps take as long on the link."""
    from kvcalc import figures
    from kvcalc.presets import load_hardware
    from kvcalc.speed.roofline import compute_dtype_for

    spec = load_model("llama3.3-70b")  # d_model 8,192
    h100 = load_hardware("h100-sxm")
    fp8 = figures(spec, 8192, 4, tp=8, hardware=h100, weight_dtype="fp8").as_dict()["allreduce"]
    bf16 = figures(spec, 8192, 4, tp=8, hardware=h100).as_dict()["allreduce"]
    assert compute_dtype_for("fp8") == "fp8"  # the GEMMs themselves run at the fp8 rate
    assert fp8["message_bytes"] == bf16["message_bytes"] == 4 * 8_192 * 2
    assert fp8["time_s"] == bf16["time_s"]
