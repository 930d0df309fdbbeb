"""The published GPU measurements in tests/data/published: the whole set is valid, and
spot rows match their sources as read by hand (values and settings copied from the
quoted pages, not from the loader)."""

from __future__ import annotations

import copy
import re

import pytest
import yamlload

from published import (
    PUBLISHED_DIR,
    PublishedDataError,
    decode_ms_per_token,
    load,
    validate,
)

ROWS = load()
BY_ID = {row.id: row for row in ROWS}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_DECIMAL_COMMA = re.compile(r"\d+,\d+")  # a table printed with decimal commas ("56,78")


def test_the_set_is_large_and_spans_engines():
    assert len(ROWS) >= 60
    engines = {row.engine for row in ROWS}
    assert len(engines) >= 5
    for engine in engines:  # an engine is in the set with at least three figures
        assert sum(row.engine == engine for row in ROWS) >= 3, engine


def test_every_value_is_a_number_in_its_quote():
    # The value is read from the quoted row, never rounded or derived; a source that
    # prints decimal commas (oobabooga's blog table) is read with a decimal point.
    for row in ROWS:
        numbers = _NUMBER.findall(row.quote) + [
            n.replace(",", ".") for n in _DECIMAL_COMMA.findall(row.quote)]
        assert any(float(n) == row.value for n in numbers), row.id


def test_one_file_per_source():
    sources = [yamlload.safe_load(p.read_text(encoding="utf-8"))["source"]
               for p in sorted(PUBLISHED_DIR.glob("*.yaml"))]
    assert len(sources) == len(set(sources))


def test_readme_counts_rows_per_source():
    readme = (PUBLISHED_DIR / "README.md").read_text(encoding="utf-8")
    for path in sorted(PUBLISHED_DIR.glob("*.yaml")):
        count = sum(row.file == path.name for row in ROWS)
        assert re.search(rf"^\| `{re.escape(path.name)}` \|.*\| {count} \|$", readme,
                         re.MULTILINE), path.name


# Spot rows, each checked by hand against its source (README tables quoted in the YAML).
def test_llama_cpp_rtx4090_llama2_7b_q4_0():
    # XiongjieDai/GPU-Benchmarks-on-LLM-Inference, "Average eval speed" on LLaMA 2:
    # "| 4090 24GB | **149.37**| 60.78 | OOM | OOM |"
    row = BY_ID["xd-llama2-7b-q4_0-rtx4090-tg"]
    assert (row.engine, row.model, row.gpu, row.weights) == ("llama.cpp", "llama2-7b", "rtx4090", "q4_0")
    assert row.value == 149.37 and row.bits_per_weight == 4.5
    assert decode_ms_per_token(row) == pytest.approx(6.6948, abs=1e-4)  # 1000 / 149.37


def test_llama_cpp_llama_bench_rows_state_their_lengths():
    # llama-bench "tg 128": 128 tokens generated after an empty prompt; "pp 512": one
    # 512-token prompt (PR #4766, RTX 4090, CodeLlama-7B F16: 61.03 and 11048.22 t/s).
    tg, pp = BY_ID["llamacpp-pr4766-f16-rtx4090-tg128"], BY_ID["llamacpp-pr4766-f16-rtx4090-pp512"]
    assert (tg.prompt_len, tg.gen_len, tg.value) == (0, 128, 61.03)
    assert (pp.prompt_len, pp.metric, pp.value) == (512, "prefill_tokens_per_s", 11048.22)


def test_gpt_fast_a100_rows():
    # gpt-fast README: "| Llama-2-7B | Base | 104.9 | 1397.31 |", batch 1, 5-token prompt,
    # 8xA100-80GB at 330 W; the tensor-parallel Llama-2-70B row on 8 GPUs is 62.50 tok/s.
    base = BY_ID["gpt-fast-llama2-7b-bf16-tok"]
    assert (base.gpu, base.batch, base.prompt_len, base.gpus, base.value) == ("a100-80gb", 1, 5, 1, 104.9)
    gbs = BY_ID["gpt-fast-llama2-7b-bf16-gbs"]
    assert (gbs.metric, gbs.unit, gbs.value) == ("achieved_bytes_per_s", "GB/s", 1397.31)
    tp8 = BY_ID["gpt-fast-llama2-70b-bf16-tp8-tok"]
    assert (tp8.model, tp8.gpus, tp8.value) == ("llama2-70b", 8, 62.50)
    assert decode_ms_per_token(tp8) == pytest.approx(16.0)  # 1000 / 62.5
    int4 = BY_ID["gpt-fast-llama2-7b-int4-tok"]
    assert (int4.weights, int4.group_size, int4.bits_per_weight) == ("int4", 32, 5)


def test_tensorrt_llm_ttft_rows():
    # TensorRT-LLM performance.md, Low Latency, A100 GPUs (FP16):
    # "| LLaMA 70B | 1 | 4 | 2048 | 377 |"
    row = BY_ID["trtllm-v0.5-llama2-70b-fp16-a100-tp4-isl2048-ttft"]
    assert (row.metric, row.gpus, row.prompt_len, row.batch, row.value) == ("ttft_ms", 4, 2048, 1, 377)
    assert BY_ID["trtllm-v0.5-llama2-7b-fp8-h100-isl128-ttft"].weights == "fp8"


def test_batched_throughput_is_converted_per_step():
    # AutoAWQ README, Mistral 7B GEMM at batch 8: "Decode tokens/s" 1185.25 is summed
    # over the batch (examples/benchmark.py multiplies by batch_size), so one step of 8
    # tokens takes 8000 / 1185.25 = 6.7496 ms.
    row = BY_ID["autoawq-mistral7b-gemm-b8-64-decode"]
    assert (row.batch, row.per, row.value) == (8, "batch", 1185.25)
    assert decode_ms_per_token(row) == pytest.approx(6.7496, abs=1e-4)


def test_sglang_rows_one_request_at_a_time():
    # sgl-cookbook docs/autoregressive/Qwen/Qwen3.md: "Hardware: NVIDIA B200 GPU (8x)",
    # "Tensor Parallelism: 8", "sglang version: 0.5.6", --max-concurrency 1,
    # "Median TPOT (ms):                        10.12"; 6101 input and 4210 generated tokens
    # over 10 requests.
    row = BY_ID["sglang-cookbook-qwen3-235b-a22b-b200-tp8-c1"]
    assert (row.engine, row.engine_version, row.gpu, row.gpus, row.batch) == (
        "sglang", "0.5.6", "b200", 8, 1)
    assert (row.metric, row.value, row.prompt_len, row.gen_len) == ("ms_per_token", 10.12, 610, 421)
    # GPUStack: SGLang v0.5.3.post3, Qwen3-8B-FP8 on one H100 SXM, concurrency 4: 5.58 ms.
    fp8 = BY_ID["gpustack-sglang-qwen3-8b-fp8-h100-c4"]
    assert (fp8.engine, fp8.weights, fp8.batch, fp8.value) == ("sglang", "fp8", 4, 5.58)


def test_int4_rows_of_vllm_and_tensorrt_llm():
    # inference-bench results/v2_a100_vllm_marlin.jsonl: "tpot_p50": 0.0055 (seconds) for
    # vLLM 0.20.1 on an A100-40GB, --quantization awq_marlin, one request at a time.
    marlin = BY_ID["ree2raz-vllm-qwen2.5-7b-awq-marlin-a100-40gb-c1"]
    assert (marlin.weights, marlin.kernel, marlin.gpu, marlin.engine_version) == (
        "awq", "Marlin", "a100-40gb", "0.20.1")
    assert (marlin.metric, marlin.unit) == ("s_per_token", "s")
    assert decode_ms_per_token(marlin) == pytest.approx(5.5)
    # Model Optimizer benchmark.md, H200, TensorRT-LLM v0.15, 2048 in / 128 out, batch 1:
    # Llama3.1-8B INT4 AWQ (TP1) 231.75 tokens/sec, one request's 128 tokens over its time.
    awq = BY_ID["modelopt-trtllm-llama3.1-8b-int4-awq-h200-b1"]
    assert (awq.engine, awq.weights, awq.gpu, awq.gpus, awq.value) == (
        "tensorrt-llm", "awq", "h200", 1, 231.75)
    assert (awq.prompt_len, awq.gen_len, awq.metric) == (2048, 128, "output_tokens_per_s")
    import published_model

    assert published_model.measured_ms(awq) == pytest.approx(1000 * 128 / 231.75)  # 552.3 ms
    with pytest.raises(ValueError, match="not a decode speed"):
        decode_ms_per_token(awq)


def test_decode_ms_per_token_refuses_other_metrics():
    with pytest.raises(ValueError, match="not a decode speed"):
        decode_ms_per_token(BY_ID["trtllm-v0.5-llama2-7b-fp16-a100-isl128-ttft"])
    with pytest.raises(ValueError, match="not a decode speed"):
        decode_ms_per_token(BY_ID["gpt-fast-llama2-7b-bf16-gbs"])


# Validation: a good document, broken one way at a time.
GOOD = {
    "source": "https://example.org/table",
    "title": "a table",
    "accessed": "2026-11-26",
    "engine": "llama.cpp",
    "rows": [{
        "id": "one", "quote": "| 4090 | 149.37 |", "engine_version": None,
        "model": "llama2-7b", "weights": "q4_0", "bits_per_weight": 4.5, "gpu": "rtx4090",
        "gpus": 1, "batch": 1, "per": "sequence", "prompt_len": None, "gen_len": 128,
        "metric": "decode_tokens_per_s", "value": 149.37,
    }],
}


def _broken(edit):
    doc = copy.deepcopy(GOOD)
    edit(doc, doc["rows"][0])
    return doc


@pytest.mark.parametrize("edit, message", [
    (lambda d, r: r.pop("gpus"), "missing field"),
    (lambda d, r: r.update(speed=1), "unknown field"),
    (lambda d, r: r.update(metric="tokens_per_joule"), "unknown metric"),
    (lambda d, r: r.update(engine="nonsense"), "unknown engine"),
    (lambda d, r: r.update(gpu="rtx9090"), "not a kvcalc hardware preset"),
    (lambda d, r: r.update(model="llama9-7b"), "not a kvcalc preset"),
    (lambda d, r: r.update(value=0), "positive number"),
    (lambda d, r: r.update(value=-3.5), "positive number"),
    (lambda d, r: r.update(value="149.37"), "positive number"),
    (lambda d, r: r.update(quote="  "), "missing quote"),
    (lambda d, r: r.pop("quote"), "missing field"),
    (lambda d, r: d.pop("source"), "missing field"),
    (lambda d, r: d.update(source="somewhere on the web"), "https:// URL"),
    (lambda d, r: r.update(weights="q3_x"), "unknown weights"),
    (lambda d, r: r.update(weights="exl2-4.0", bits_per_weight=4.5), "4.0 bits per weight"),
    (lambda d, r: r.pop("per"), "needs per"),
    (lambda d, r: r.update(unit="ms"), "published in tokens/s"),
    (lambda d, r: r.update(batch=0), "batch must be"),
    (lambda d, r: d["rows"].append(dict(r)), "duplicate id"),
])
def test_validate_rejects(edit, message):
    with pytest.raises(PublishedDataError, match=message):
        validate({"bad.yaml": _broken(edit)})


def test_validate_rejects_a_duplicate_across_files():
    with pytest.raises(PublishedDataError, match="duplicate id 'one'"):
        validate({"a.yaml": copy.deepcopy(GOOD), "b.yaml": copy.deepcopy(GOOD)})


def test_validate_accepts_the_good_document_and_a_test_config():
    assert [r.id for r in validate({"good.yaml": GOOD})] == ["one"]
    with_config = _broken(lambda d, r: r.update(model="tests/data/golden/config-Qwen__Qwen3-8B.json"))
    assert validate({"good.yaml": with_config})[0].model.endswith("Qwen3-8B.json")


def test_readme_totals_match():
    readme = (PUBLISHED_DIR / "README.md").read_text(encoding="utf-8")
    files = {row.file for row in ROWS}
    engines = {row.engine for row in ROWS}
    assert f"{len(ROWS)} rows from {len(files)} sources, {len(engines)} engines" in readme
