"""Requests carrying images under load (kvcalc.served.images): the tokens they add to each
prompt and the vision encoder's time in the step of the first prompt chunk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yamlload
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.hfconfig import spec_from_hf_config
from kvcalc.presets import load_hardware, load_model
from kvcalc.served import Load, bench
from kvcalc.served.images import image_load, vision_flops

HF = Path(__file__).parent / "data" / "hf"
QWEN = str(HF / "Qwen__Qwen2.5-VL-7B-Instruct.json")
LLAVA = str(HF / "llava-hf__llava-1.5-7b-hf.json")


def spec(path):
    return spec_from_hf_config(json.loads(Path(path).read_text()), Path(path).stem)


def test_qwen25_vl_encoder_flops_by_hand():
    # 1024 x 768 -> 756 x 1036 pixels: 54 x 74 = 3,996 patches of 14, 999 tokens
    p, h, i, d = 3996, 1280, 3420, 3584
    linear = 32 * 2 * p * (4 * h * h + 3 * h * i)
    attention = 4 * 4 * p * p * h + 28 * 4 * p * 64 * h  # 4 full layers, 28 of 8 x 8 windows
    merger = 2 * 999 * ((4 * h) ** 2 + 4 * h * d)
    assert image_load(spec(QWEN), 1, 1024, 768) == (999, linear + attention + merger)
    assert image_load(spec(QWEN), 3, 1024, 768)[1] == 3 * (linear + attention + merger)


def test_llava_encoder_flops_by_hand():
    g = spec(LLAVA).extra["image"]
    p, h, i, d = 577, 1024, 4096, 4096  # CLIP-L/14 at 336 and its class token
    want = 24 * 2 * p * (4 * h * h + 2 * h * i) + 24 * 4 * p * p * h + 2 * 576 * (h * d + d * d)
    assert vision_flops(g, 577, 576, 4096) == want
    assert image_load(spec(LLAVA), 2, 10, 10)[0] == 1152  # any size: 576 each


def test_images_add_prefill_and_encoder_time_to_ttft():
    vl, hw = spec(QWEN), load_hardware("h100-sxm")
    tokens, flops = image_load(vl, 1, 1024, 768)
    plain = bench(vl, hw, Load(input_len=256, output_len=64, num_prompts=4, concurrency=1))
    text = bench(vl, hw, Load(input_len=256 + tokens, output_len=64, num_prompts=4,
                              concurrency=1))
    images = bench(vl, hw, Load(input_len=256 + tokens, output_len=64, num_prompts=4,
                                concurrency=1, encode_flops=flops))
    t0, t1, t2 = (r.metrics["mean_ttft_ms"] for r in (plain, text, images))
    assert t0 < t1 < t2  # the image's tokens, then the encoder on top
    # one request at a time: the encoder's time is all the difference
    from kvcalc.engines import load_engine
    from kvcalc.estimate import workload_for
    from kvcalc.served.step import StepTimes, served_terms
    from kvcalc.serving import engine_ref, schedule_for

    w = workload_for(vl, seq_len=vl.max_context, batch=1, kv_dtype="bf16")
    steps = StepTimes(vl, hw, load_engine("vllm")[0], w, None, served_terms("vllm"),
                      schedule_for(engine_ref("vllm")))
    assert t2 - t1 == pytest.approx(1e3 * flops / (steps.peak * steps.mfu), rel=1e-6)


def test_bench_cli_takes_images():
    args = ["bench", QWEN, "--gpu", "h100-sxm", "--concurrency", "1", "--input-len", "256",
            "--output-len", "64", "--num-prompts", "4", "--format", "json"]
    r = CliRunner().invoke(app, [*args, "--images-per-request", "2", "--image-size", "1024x768"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["input_len"] == 256 + 2 * 999
    r = CliRunner().invoke(app, [*args, "--images-per-request", "1"])
    assert r.exit_code == 2 and "give --image-size" in r.stderr
    r = CliRunner().invoke(app, [*args, "--image-size", "10x10"])
    assert r.exit_code == 2 and "give both" in r.stderr
    r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                 "--concurrency", "1", "--images-per-request", "1",
                                 "--image-size", "10x10"])
    assert r.exit_code == 2 and "text model" in r.stderr
    with pytest.raises(KvcalcError, match="text model"):
        image_load(load_model("llama3.1-8b"), 1, 10, 10)
    # a fixed-token family needs no size
    r = CliRunner().invoke(app, ["bench", LLAVA, "--gpu", "h100-sxm", "--concurrency", "1",
                                 "--input-len", "128", "--output-len", "16", "--num-prompts",
                                 "2", "--images-per-request", "1"])
    assert r.exit_code == 0 and "1 image(s) of 576 tokens" in r.stdout


# -- A published measurement: vllm#41267 (tests/data/images) ---------------------------
TRACE = yamlload.safe_load((Path(__file__).parent / "data" / "images"
                        / "vllm-41267-qwen25-vl-7b-h100-1080p.yaml").read_text())
TIME_TOL = 0.15  # the band kvcalc's served terms are fitted to (presets/served/terms.yaml)


def _trace_ttft_ms(*, engine_only: bool) -> float:
    """kvcalc's TTFT (ms) for the trace's one request: the image's tokens and the text's
    (the logged prompt tokens), the encoder's FLOPs in its first step; `engine_only`
    leaves out kvcalc's per-request host time (ServedTerms.request_s), as the trace's
    scheduled-to-first-token span does."""
    from kvcalc.served import served_terms
    from kvcalc.serving import engine_ref

    vl = spec(HF / TRACE["model_config"])
    _, flops = image_load(vl, 1, *TRACE["image"])
    terms = served_terms("vllm")
    if engine_only:
        terms = dataclasses.replace(terms, request_s=0.0)
    got = bench(vl, load_hardware(TRACE["gpu"]),
                Load(input_len=TRACE["prompt_tokens"], output_len=TRACE["output_len"],
                     num_prompts=1, concurrency=TRACE["batch"], warmup=False,
                     encode_flops=flops),
                engine=engine_ref(TRACE["engine"]), max_model_len=32768, terms=terms)
    return got.metrics["mean_ttft_ms"]


def test_a_1080p_image_is_2691_of_the_traces_2718_prompt_tokens():
    """1920 x 1080 resized to 1932 x 1092 (multiples of 28, within max_pixels): 69 x 39
    merged cells, 2,691 tokens; the trace's other 27 are the chat template's text."""
    tokens, _ = image_load(spec(HF / TRACE["model_config"]), 1, *TRACE["image"])
    assert tokens == 69 * 39 == 2691
    assert 0 < TRACE["prompt_tokens"] - tokens < 64


@pytest.mark.xfail(strict=True, reason=(
    "kvcalc runs the vision encoder at the text prefill's matmul efficiency: 16.3 TFLOPs, "
    "24.6 ms, and the 2,718-token prefill 57.8 ms, 82.4 ms from scheduling to the first "
    "token against the trace's 126 ms (0.65); the trace leaves about 68 ms for Qwen2.5-VL's "
    "ViT (small 1280-wide matmuls, 8 x 8-patch windows, run eager)"))
def test_engine_time_of_one_1080p_image_request_within_the_band():
    assert _trace_ttft_ms(engine_only=True) == pytest.approx(
        TRACE["measured_ms"]["engine"], rel=TIME_TOL)


@pytest.mark.xfail(strict=True, reason=(
    "kvcalc's per-request host time (request_s, 40 ms) is fitted on text requests; the "
    "trace spends 167 ms before the engine queues the request (HTTP, the image's decode "
    "and the processor's resize on the CPU), so kvcalc's TTFT is 122 ms against 293 (0.42)"))
def test_ttft_of_one_1080p_image_request_within_the_band():
    assert _trace_ttft_ms(engine_only=False) == pytest.approx(
        TRACE["measured_ms"]["ttft"], rel=TIME_TOL)
