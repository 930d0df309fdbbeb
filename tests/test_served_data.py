"""The published serving measurements in tests/data/served: the whole set is valid, it spans
enough independent publishers to leave one out, and spot rows match their sources as read by
hand (values and settings copied from the quoted pages and logs, not from the loader)."""

from __future__ import annotations

import copy
import math
import re
from collections import Counter

import pytest
import yamlload

from served import (
    ENGINES,
    METRICS,
    SERVED_DIR,
    ServedDataError,
    lengths,
    lengths_files,
    lengths_pool,
    load,
    numbers_in,
    runs,
    validate,
)

ROWS = load()
BY_ID = {row.id: row for row in ROWS}
RUNS = runs(ROWS)


def test_the_set_is_large_and_spans_publishers_engines_and_gpus():
    assert len(ROWS) >= 80
    publishers = Counter(row.publisher for row in ROWS)
    assert len(publishers) >= 4, publishers  # leave-one-source-out needs several sources
    assert {row.engine for row in ROWS} == set(ENGINES)
    assert len({row.gpu for row in ROWS}) >= 4


def test_every_value_is_a_number_in_its_quote():
    # The value is read from the quoted line, never rounded or derived.
    for row in ROWS:
        assert row.value in numbers_in(row.quote), row.id


def test_numbers_in_reads_thousands_separators_and_trailing_zeros():
    assert numbers_in("| 1024/1024 | 6,430 | 6,924 | 1,620 |") == [1024, 1024, 6430, 6924, 1620]
    assert numbers_in("Mean TTFT (ms):                          64.00") == [64.0]


def test_ids_are_unique_and_every_metric_is_a_vllm_name():
    assert len(BY_ID) == len(ROWS)
    assert {row.metric for row in ROWS} <= set(METRICS)
    for run_id, rows in RUNS.items():
        assert len({row.metric for row in rows}) == len(rows), run_id


def test_a_run_is_one_configuration():
    # Every row of a run (one result block) carries the same configuration and load.
    config = ("engine", "engine_version", "model", "weights", "gpu", "gpus", "tp", "pp", "dp",
              "ep", "client", "dataset", "input_len", "output_len", "num_prompts",
              "request_rate", "concurrency", "file", "publisher")
    for run_id, rows in RUNS.items():
        assert len({tuple(getattr(r, k) for k in config) for r in rows}) == 1, run_id


def test_one_file_per_source():
    sources = [yamlload.safe_load(p.read_text(encoding="utf-8"))["source"]
               for p in sorted(SERVED_DIR.glob("*.yaml"))]
    assert len(sources) == len(set(sources))


def test_the_load_is_always_stated():
    for row in ROWS:
        # open loop (a finite rate) or closed loop (a concurrency cap) or all at once
        # (rate inf, no cap): then the number of requests must be known, or the load is not
        if row.concurrency is None and math.isinf(row.request_rate) and row.client != "trtllm-bench":
            assert row.num_prompts is not None, row.id


def test_readme_counts_rows_per_file():
    readme = (SERVED_DIR / "README.md").read_text(encoding="utf-8")
    for path in sorted(SERVED_DIR.glob("*.yaml")):
        count = sum(row.file == path.name for row in ROWS)
        nruns = len({row.run for row in ROWS if row.file == path.name})
        assert re.search(rf"^\| `{re.escape(path.name)}` \|.*\| {nruns} \| {count} \|$", readme,
                         re.MULTILINE), path.name


def test_readme_totals_match():
    readme = " ".join((SERVED_DIR / "README.md").read_text(encoding="utf-8").split())
    files = {row.file for row in ROWS}
    publishers = {row.publisher for row in ROWS}
    excluded = sum(row.excluded is not None for row in ROWS)
    assert (f"{len(ROWS)} rows from {len(RUNS)} runs in {len(files)} files by "
            f"{len(publishers)} publishers") in readme
    assert f"({excluded} of them kept out of the scored set" in readme
    for counter, label in ((Counter(r.publisher for r in ROWS), "By publisher"),
                           (Counter(r.engine for r in ROWS), "By engine"),
                           (Counter(r.gpu for r in ROWS), "By GPU"),
                           (Counter(r.metric for r in ROWS), "By metric")):
        line = label + ": " + ", ".join(f"{k} {n}" for k, n in counter.most_common()) + "."
        assert line in readme, line


# Spot rows, each checked by hand against its source (the values below were read on the
# pages and in the logs, not produced by the loader).
def test_gpustack_qwen3_32b_h100_engines():
    # docs/performance-lab/qwen3-32b/h100.md, section 1: 'vllm serve Qwen/Qwen3-32B',
    # "Mean TPOT (ms): 88.09", "Total Token throughput (tok/s): 2352.82", 1000 ShareGPT
    # prompts at once; SGLang "Output token throughput (tok/s): 814.03"; TensorRT-LLM
    # "Mean TTFT (ms): 65281.52".
    row = BY_ID["gpustack-qwen3-32b-h100-vllm-sharegpt-mean-tpot"]
    assert (row.engine, row.engine_version, row.model, row.gpu, row.gpus) == (
        "vllm", "0.11.0", "qwen3-32b", "h100-sxm", 1)
    assert (row.dataset, row.num_prompts, row.concurrency, row.request_rate) == (
        "sharegpt", 1000, None, math.inf)
    assert row.value == 88.09
    assert BY_ID["gpustack-qwen3-32b-h100-vllm-sharegpt-tot-tput"].value == 2352.82
    sglang = BY_ID["gpustack-qwen3-32b-h100-sglang-sharegpt-out-tput"]
    assert (sglang.engine, sglang.engine_version, sglang.value) == ("sglang", "0.5.5.post1", 814.03)
    trt = BY_ID["gpustack-qwen3-32b-h100-trtllm-sharegpt-mean-ttft"]
    assert (trt.engine, trt.engine_version, trt.value) == ("tensorrt-llm", "1.2.0rc1", 65281.52)


def test_gpustack_random_32k_and_the_latency_sweep():
    # qwen3-32b/h100.md, baseline "# random 32K input": 100 requests, "Total input tokens:
    # 3200000", "Mean TPOT (ms): 43.42", "Total Token throughput (tok/s): 2771.81".
    row = BY_ID["gpustack-qwen3-32b-h100-vllm-random-32000-100-mean-tpot"]
    assert (row.input_len, row.output_len, row.num_prompts, row.total_input_tokens) == (
        32000, 100, 100, 3200000)
    assert row.value == 43.42
    assert BY_ID["gpustack-qwen3-32b-h100-vllm-random-32000-100-tot-tput"].value == 2771.81
    # qwen3-8b/h100-latency.md, baseline "# BS=1": "Maximum request concurrency: 1",
    # "Median TPOT (ms): 7.22"; section 1 SGLang at concurrency 4: "Mean TTFT (ms): 27.70".
    bs1 = BY_ID["gpustack-qwen3-8b-h100-latency-vllm-sharegpt-c1-baseline-median-tpot"]
    assert (bs1.model, bs1.hf_id, bs1.concurrency, bs1.num_prompts, bs1.value) == (
        "Qwen/Qwen3-8B", "Qwen/Qwen3-8B", 1, 100, 7.22)
    assert BY_ID["gpustack-qwen3-8b-h100-latency-sglang-sharegpt-c4-mean-ttft"].value == 27.70


def test_sglang_cookbook_qwen3_235b_b200():
    # docs/autoregressive/Qwen/Qwen3.md 5.1.1.3: --num-prompts 500 --max-concurrency 100,
    # "Output token throughput (tok/s): 2738.78", "Median TPOT (ms): 34.04"; 5.1.1.2
    # (--max-concurrency 16): "Mean TTFT (ms): 215.70". B200 (8x), TP 8, sglang 0.5.6.
    row = BY_ID["sglang-cookbook-qwen3-235b-a22b-b200-tp8-random-1000-1000-c100-median-tpot"]
    assert (row.engine_version, row.gpu, row.gpus, row.tp, row.num_prompts, row.concurrency) == (
        "0.5.6", "b200", 8, 8, 500, 100)
    assert (row.input_len, row.output_len, row.range_ratio) == (1000, 1000, 0.0)
    assert row.value == 34.04
    assert BY_ID["sglang-cookbook-qwen3-235b-a22b-b200-tp8-random-1000-1000-c100-out-tput"].value == 2738.78
    assert BY_ID["sglang-cookbook-qwen3-235b-a22b-b200-tp8-random-1000-1000-c16-mean-ttft"].value == 215.70


def test_dennislee22_qwen2_7b_a100_sweep():
    # README Test 4 (KV cache 5.01 GiB, --gpu-memory-utilization 0.25), --num-prompts 50:
    # "Output token throughput (tok/s): 2338.38", "Median TPOT (ms): 18.55"; --num-prompts 1:
    # "Mean TPOT (ms): 11.76". vLLM 0.10.1.1 per the startup log.
    row = BY_ID["dennislee22-qwen2-7b-a100-80gb-kv025-n50-out-tput"]
    assert (row.engine_version, row.model, row.gpu, row.num_prompts, row.request_rate) == (
        "0.10.1.1", "qwen2-7b", "a100-80gb", 50, math.inf)
    assert (row.input_len, row.output_len, row.prefix_caching) == (1024, 1024, True)
    assert row.value == 2338.38
    assert BY_ID["dennislee22-qwen2-7b-a100-80gb-kv025-n50-median-tpot"].value == 18.55
    assert BY_ID["dennislee22-qwen2-7b-a100-80gb-kv025-n1-mean-tpot"].value == 11.76
    # the 1000-prompt runs lost requests ("Successful requests: 894") and are kept out
    lost = BY_ID["dennislee22-qwen2-7b-a100-80gb-kv025-n1000-out-tput"]
    assert lost.completed == 894 and lost.excluded


def test_skypilot_deepseek_r1_h200():
    # sgl/logs/sgl-0.4.5.post3-deepseek-r1.log, third sweep, 1000/2000 tokens, 50 prompts at
    # 10 requests/s: "Output token throughput (tok/s): 1329.14" (the README's table),
    # "Mean ITL (ms): 36.34"; sgl/logs/vllm-deepseek-r1.log: "Output token throughput
    # (tok/s): 1042.17", "Median TTFT (ms): 310.15".
    row = BY_ID["skypilot-deepseek-r1-h200-tp8-sglang-1000-2000-n50-out-tput"]
    assert (row.engine, row.engine_version, row.gpu, row.gpus, row.request_rate) == (
        "sglang", "0.4.5.post3", "h200", 8, 10)
    assert (row.range_ratio, row.prefix_caching, row.value) == (1.0, False, 1329.14)
    assert BY_ID["skypilot-deepseek-r1-h200-tp8-sglang-1000-2000-n50-mean-itl"].value == 36.34
    vllm = BY_ID["skypilot-deepseek-r1-h200-tp8-vllm-1000-2000-n50-out-tput"]
    assert (vllm.engine_version, vllm.value) == ("0.8.4", 1042.17)
    assert BY_ID["skypilot-deepseek-r1-h200-tp8-vllm-1000-2000-n50-median-ttft"].value == 310.15


def test_tensorrt_llm_perf_overview_cells():
    # GPT-OSS 120B table, row "| 1024/1024 | 25,870 | 26,609 | 6,798 | 4,715 |", column
    # "H200 TP1 (FP8)": 6,798 output tokens/s per GPU, 3000 requests.
    row = BY_ID["trtllm-perf-gpt-oss-120b-h200-tp1-fp8-1024-1024"]
    assert (row.gpu, row.gpus, row.per, row.num_prompts, row.value) == ("h200", 1, "gpu", 3000, 6798)
    # Deepseek R1 0528, "B200 DEP4 (FP4)", 1024/1024: 6,430; attention DP 4 with EP 4
    dsr1 = BY_ID["trtllm-perf-deepseek-r1-b200-dep4-fp4-1024-1024"]
    assert (dsr1.gpus, dsr1.tp, dsr1.dp, dsr1.ep, dsr1.weights, dsr1.kv_dtype, dsr1.value) == (
        4, 1, 4, 4, "nvfp4", "fp8", 6430)
    # LLaMA v3.3 70B on RTX 6000 Pro, "2 GPUs TP1,PP2 (FP4)", 32768/1024: 67
    rtx = BY_ID["trtllm-perf-llama3.3-70b-rtx-pro-6000-blackwell-tp1-pp2-fp4-32768-1024"]
    assert (rtx.gpus, rtx.pp, rtx.num_prompts, rtx.value) == (2, 2, 1000, 67)


def test_nim_llama33_70b_table():
    # "Version: 1.8.0", "2 x H100 80G", "fp8 TP2", "5000 Input Tokens / 500 Output Tokens":
    # "| 100 | 7996.25 | 92.91 | 917.26 |", "| 1 | 406.77 | 18.58 | 51.67 |"
    row = BY_ID["nim-llama3.3-70b-h100-tp2-fp8-5000-500-c100-mean-ttft"]
    assert (row.concurrency, row.input_len, row.output_len, row.gpus, row.value) == (
        100, 5000, 500, 2, 7996.25)
    assert BY_ID["nim-llama3.3-70b-h100-tp2-fp8-5000-500-c1-mean-tpot"].value == 18.58
    assert BY_ID["nim-llama3.3-70b-h100-tp2-fp8-5000-500-c250-out-tput"].value == 920.12


def test_vllm_blog_fp8_kv_cache_tables():
    # Table 4 (Llama-3.1-8B): "| BF16 | 763.6 | 15.18 | 672.6 | 450.3 |",
    # "| FP8 | 742.8 | 12.93 | 585.2 | 517.5 |"; Table 5 (gpt-oss-20b): "| BF16 | 468.9 | ..."
    row = BY_ID["vllm-blog-fp8kv-llama3.1-8b-h100-kvbf16-c8-median-itl"]
    assert (row.model, row.kv_dtype, row.concurrency, row.num_prompts, row.value) == (
        "llama3.1-8b", "bf16", 8, 150, 15.18)
    assert BY_ID["vllm-blog-fp8kv-llama3.1-8b-h100-kvfp8-c8-out-tput"].value == 517.5
    assert BY_ID["vllm-blog-fp8kv-gpt-oss-20b-h100-kvbf16-c8-median-ttft"].value == 468.9


# Validation: a good document, broken one way at a time.
GOOD = {
    "source": "https://example.org/bench",
    "title": "a benchmark",
    "publisher": "someone",
    "accessed": "2026-11-29",
    "engine": "vllm",
    "runs": {"one-run": {
        "engine_version": "0.11.0", "model": "llama3.1-8b", "weights": "bf16", "gpu": "h100-sxm",
        "gpus": 1, "tp": 1, "client": "vllm bench serve", "dataset": "random", "input_len": 1024,
        "output_len": 128, "num_prompts": 100, "request_rate": "inf", "concurrency": 8,
    }},
    "rows": [{"id": "one", "run": "one-run", "quote": "Median TPOT (ms):  7.22",
              "metric": "median_tpot_ms", "value": 7.22}],
}


def _broken(edit):
    doc = copy.deepcopy(GOOD)
    edit(doc, doc["runs"]["one-run"], doc["rows"][0])
    return doc


@pytest.mark.parametrize("edit, message", [
    (lambda d, c, r: c.pop("gpus"), "missing field"),
    (lambda d, c, r: c.update(speed=1), "unknown field"),
    (lambda d, c, r: r.update(metric="mean_e2el_ms"), "unknown metric"),
    (lambda d, c, r: c.update(engine="lmdeploy"), "unknown engine"),
    (lambda d, c, r: c.update(gpu="rtx9090"), "not a kvcalc hardware preset"),
    (lambda d, c, r: c.update(model="llama9-7b"), "not a kvcalc preset"),
    (lambda d, c, r: c.update(model="org/model"), "not a kvcalc preset"),
    (lambda d, c, r: r.update(value=7.2), "not a number in its quote"),
    (lambda d, c, r: r.update(value=0), "positive number"),
    (lambda d, c, r: r.update(value="7.22"), "positive number"),
    (lambda d, c, r: r.update(quote=" "), "missing quote"),
    (lambda d, c, r: r.update(run="two-run"), "runs do not define"),
    (lambda d, c, r: d.update(source="somewhere"), "https:// URL"),
    (lambda d, c, r: d.pop("publisher"), "missing field"),
    (lambda d, c, r: c.update(weights="q3_x"), "unknown weights"),
    (lambda d, c, r: c.update(gpus=2), "is not tp x pp x dp"),
    (lambda d, c, r: c.update(ep=2), "ep must be"),
    (lambda d, c, r: c.update(client="curl"), "unknown client"),
    (lambda d, c, r: c.update(dataset="sharegpt"), "ShareGPT requests keep"),
    (lambda d, c, r: c.update(input_len=None), "needs input_len"),
    (lambda d, c, r: c.update(request_rate=0), "request_rate"),
    (lambda d, c, r: c.update(request_rate="fast"), "request_rate"),
    (lambda d, c, r: c.update(concurrency=0), "concurrency must be"),
    (lambda d, c, r: c.update(completed=101), "exceeds num_prompts"),
    (lambda d, c, r: c.update(engine_version="unknown"), "needs a note"),
    (lambda d, c, r: r.update(per="gpu", metric="median_tpot_ms"), "per must be"),
    (lambda d, c, r: d["rows"].append(dict(r, id="two")), "two median_tpot_ms rows"),
    (lambda d, c, r: d["rows"].append(dict(r)), "duplicate id"),
    (lambda d, c, r: c.update(engine_options=["--enforce-eager"]), "must be a mapping"),
    (lambda d, c, r: c.update(engine_options={"cuda_graph_max_bs": 8}), "not a vllm setting"),
])
def test_validate_rejects(edit, message):
    with pytest.raises(ServedDataError, match=message):
        validate({"bad.yaml": _broken(edit)})


def test_validate_accepts_the_good_document_an_hf_id_and_a_per_gpu_throughput():
    assert [r.id for r in validate({"good.yaml": GOOD})] == ["one"]
    hf = _broken(lambda d, c, r: c.update(model="Qwen/Qwen3-8B", hf_id="Qwen/Qwen3-8B"))
    assert validate({"good.yaml": hf})[0].model == "Qwen/Qwen3-8B"
    per_gpu = _broken(lambda d, c, r: r.update(quote="| 1024/1024 | 6,798 |", metric="output_throughput",
                                              value=6798, per="gpu"))
    row = validate({"good.yaml": per_gpu})[0]
    assert (row.per, row.unit, row.request_rate) == ("gpu", "tok/s", math.inf)
    eager = _broken(lambda d, c, r: c.update(engine_options={"enforce_eager": True}))
    assert validate({"good.yaml": eager})[0].engine_options == {"enforce_eager": True}


def test_violet_quartz_rtx4090_qwen2_5_7b():
    # violet-quartz/vllm-serving-experiments @ c007f08, notes.md 2.3, '并发为 1': vLLM 0.25.1,
    # one RTX 4090, 200 ShareGPT prompts at --max-concurrency 1, "Mean TTFT (ms): 27.44",
    # "Median TPOT (ms): 15.91", "Total input tokens: 43560"; run1/results.md's concurrency-64
    # row: mean TPOT 27.7 ms, output 2039.2 tok/s, 400 prompts, prefix caching off.
    row = BY_ID["violet-quartz-qwen2.5-7b-rtx4090-sharegpt-completions-c1-mean-ttft"]
    assert (row.engine, row.engine_version, row.model, row.hf_id, row.gpu, row.gpus) == (
        "vllm", "0.25.1", "qwen2-7b", "Qwen/Qwen2.5-7B-Instruct", "rtx4090", 1)
    assert (row.dataset, row.num_prompts, row.concurrency, row.total_input_tokens) == (
        "sharegpt", 200, 1, 43560)
    assert row.value == 27.44 and row.excluded is None
    assert BY_ID["violet-quartz-qwen2.5-7b-rtx4090-sharegpt-completions-c1-median-tpot"].value == 15.91
    # the later runs re-sent the same prompts with prefix caching on: their TTFT is kept out
    assert BY_ID["violet-quartz-qwen2.5-7b-rtx4090-sharegpt-completions-c8-mean-ttft"].excluded
    c64 = BY_ID["violet-quartz-qwen2.5-7b-rtx4090-sharegpt-chat-c64-mean-tpot"]
    assert (c64.value, c64.num_prompts, c64.concurrency, c64.prefix_caching) == (27.7, 400, 64, False)
    assert BY_ID["violet-quartz-qwen2.5-7b-rtx4090-sharegpt-chat-c64-out-tput"].value == 2039.2


def test_zhjunqin_rtx3090_llama3_8b_vllm_and_trtllm():
    # zhjunqin/LLM-Learning @ 17aa102, inference/benchmark/README.md: vLLM 0.4.1 on one RTX 3090,
    # ShareGPT at 1 request/s, 100 prompts: 'P50 TTFT (ms)' 68.75, 'P50 TPOT (ms)' 24.68,
    # 22925 input tokens; TRT-LLM 0.9.0 (Triton, max batch 40) at 2 requests/s: P50 TTFT
    # 103.35, output 339.68 tok/s.
    row = BY_ID["zhjunqin-llama3-8b-rtx3090-vllm-sharegpt-rate1-median-ttft"]
    assert (row.engine, row.engine_version, row.model, row.gpu, row.weights) == (
        "vllm", "0.4.1", "llama3-8b", "rtx3090", "bf16")
    assert (row.request_rate, row.concurrency, row.num_prompts, row.total_input_tokens) == (
        1, None, 100, 22925)
    assert row.value == 68.75
    assert BY_ID["zhjunqin-llama3-8b-rtx3090-vllm-sharegpt-rate1-median-tpot"].value == 24.68
    trt = BY_ID["zhjunqin-llama3-8b-rtx3090-trtllm-sharegpt-rate2-median-ttft"]
    assert (trt.engine, trt.engine_version, trt.value) == ("tensorrt-llm", "0.9.0", 103.35)
    assert trt.engine_options["max_batch_size"] == 40
    assert BY_ID["zhjunqin-llama3-8b-rtx3090-trtllm-sharegpt-rate2-out-tput"].value == 339.68
    # the P50 TPOT equal to its P90 at 5 requests/s is kept out
    assert BY_ID["zhjunqin-llama3-8b-rtx3090-vllm-sharegpt-rate5-median-tpot"].excluded


def test_livinfly_a100_mistral_7b_sglang_and_vllm():
    # Livinfly/MLsys-Learning-Record-2 @ 1fd64c9, benchmark/Mistral-7B-Instruct: SGLang
    # 0.4.7.post1's first online record (random 1024/1024, 300 prompts at 1 request/s):
    # "mean_ttft_ms": 76.70844654242198, 152612 input tokens; vLLM 0.9.1's 1,000-request
    # 1024/1024 burst completed 997 with 511075 input tokens.
    row = BY_ID["livinfly-mistral-7b-a100-40gb-sglang-random-1024-1024-rate1-mean-ttft"]
    assert (row.engine, row.engine_version, row.model, row.gpu, row.client) == (
        "sglang", "0.4.7.post1", "mistral-7b", "a100-40gb", "sglang.bench_serving")
    assert (row.request_rate, row.num_prompts, row.completed, row.total_input_tokens) == (
        1, 300, 300, 152612)
    assert (row.range_ratio, row.prefix_caching) == (0.0, None)
    assert row.value == 76.70844654242198
    burst = BY_ID["livinfly-mistral-7b-a100-40gb-vllm-random-1024-1024-all-at-once-median-tpot"]
    assert (burst.engine_version, burst.completed, burst.total_input_tokens) == ("0.9.1", 997, 511075)
    assert math.isinf(burst.request_rate) and burst.concurrency is None
    # the 256/256 SGLang burst, whose two unlabelled files disagree, is kept out, and vLLM run
    # as V0 in 0.9.1 (VLLM_USE_V1=0) too
    assert BY_ID["livinfly-mistral-7b-a100-40gb-sglang-random-256-256-all-at-once-out-tput"].excluded
    assert burst.excluded and "V0" in burst.excluded


def test_datacrunch_h200_llama_sglang():
    # datacrunch-research/h200-benchmarks @ c091ef5, sglang/outputs/llama_3_3_70b_online_output.jsonl
    # line 1 (random 1024/1024, 300 prompts at 1 request/s, Llama-3.3-70B on 4 H200):
    # "median_ttft_ms": 85.74514742940664, "median_itl_ms": 13.638956006616354, 152612 input
    # tokens; llama_405b_online_output.jsonl line 4 (2400 at 8 requests/s, 8 H200):
    # "output_throughput": 1820.6538850305435.
    row = BY_ID["datacrunch-llama3.3-70b-h200-tp4-sglang-random-1024-1024-rate1-median-ttft"]
    assert (row.engine, row.engine_version, row.model, row.gpu, row.gpus, row.tp) == (
        "sglang", "unknown", "llama3.3-70b", "h200", 4, 4)
    assert (row.request_rate, row.num_prompts, row.completed, row.total_input_tokens) == (
        1, 300, 300, 152612)
    assert (row.range_ratio, row.prefix_caching, row.concurrency) == (0.0, False, None)
    assert row.value == 85.74514742940664
    assert BY_ID["datacrunch-llama3.3-70b-h200-tp4-sglang-random-1024-1024-rate1-median-itl"].value == 13.638956006616354
    big = BY_ID["datacrunch-llama3.1-405b-h200-tp8-sglang-random-1024-1024-rate8-out-tput"]
    assert (big.model, big.gpus, big.num_prompts) == ("llama3.1-405b", 8, 2400)
    assert big.value == 1820.6538850305435
    burst = BY_ID["datacrunch-llama3.3-70b-h200-tp4-sglang-random-4096-1024-all-at-once-out-tput"]
    assert math.isinf(burst.request_rate) and burst.num_prompts == 1500
    assert burst.value == 1654.9938601765348


def test_lambda_h100_mistral_7b_vllm_054():
    # LambdaLabsML/vllm-benchmark @ de55d46, results/prompt_320/1xH100-80GB-SXM/
    # Mistral-7B-Instruct-v0.3_tp1_len2000.json: "output_throughput": 3281.190660455182,
    # "median_itl_ms": 27.231118991039693 (benchmark_v0.md's '3281.19/27.23'), 73671 input tokens.
    row = BY_ID["lambda-mistral-7b-h100-sxm-vllm-sharegpt-n320-out-tput"]
    assert (row.engine, row.engine_version, row.model, row.gpu, row.client, row.dataset) == (
        "vllm", "0.5.4", "mistral-7b", "h100-sxm", "vllm benchmark_serving.py", "sharegpt")
    assert (row.num_prompts, row.completed, row.total_input_tokens) == (320, 320, 73671)
    assert math.isinf(row.request_rate) and row.concurrency is None
    assert row.value == 3281.190660455182 and row.excluded is None
    assert BY_ID["lambda-mistral-7b-h100-sxm-vllm-sharegpt-n320-median-itl"].value == 27.231118991039693
    # the zero TTFTs of requests that streamed no token are in the client's TTFT figures
    assert BY_ID["lambda-mistral-7b-h100-sxm-vllm-sharegpt-n10-mean-ttft"].excluded


def test_shaamil101_trtllm_016_llama31_70b_h100_tp8():
    # shaamil101-etched/trtllm-benchmarks @ aeec9f2, results/result_128_1024_7500.txt (trtllm-bench
    # throughput, 'TensorRT-LLM Version: 0.16.0', 'TP Size: 8', 'Quantization: FP8'):
    # "Token Throughput (tokens/sec): 19787.6318", "Request Throughput (req/sec): 19.3239";
    # results/result_8192_1024_400.txt: "Token Throughput (tokens/sec): 2379.9472".
    row = BY_ID["shaamil-llama3.1-70b-h100-tp8-trtllm-fp8-128-1024-out-tput"]
    assert (row.engine, row.engine_version, row.model, row.hf_id, row.gpu, row.gpus, row.tp) == (
        "tensorrt-llm", "0.16.0", "llama3.3-70b", "meta-llama/Llama-3.1-70B-Instruct",
        "h100-sxm", 8, 8)
    assert (row.weights, row.kv_dtype, row.client, row.dataset, row.per) == (
        "fp8", "fp8", "trtllm-bench", "synthetic", None)
    assert (row.input_len, row.output_len, row.num_prompts, row.completed) == (128, 1024, 7500, 7500)
    assert math.isinf(row.request_rate) and row.concurrency is None
    assert row.value == 19787.6318
    assert BY_ID["shaamil-llama3.1-70b-h100-tp8-trtllm-fp8-128-1024-req-tput"].value == 19.3239
    assert BY_ID["shaamil-llama3.1-70b-h100-tp8-trtllm-fp8-8192-1024-out-tput"].value == 2379.9472
    # 16384/16384 (50 requests) printed no report: no run
    assert "shaamil-llama3.1-70b-h100-tp8-trtllm-fp8-16384-16384" not in RUNS


def test_cssnoeasy_a100_pcie_qwen2_5_7b_vllm_019():
    # cssnoeasy/a100-vllm-benchmark-blog @ e4226b0, docs/reports/a100-tp1-vs-tp2-formal-baseline.md,
    # section 十: "| `tp1-short_short_low-r2` | 2.63 | 68.74 | 108.45 | 134.84 | 11.33 | 2977.45 | 0 |"
    # (vLLM 0.19.0, --dtype float16, --max-model-len 4096, 100 random 512/256 prompts at
    # --max-concurrency 8).
    row = BY_ID["cssnoeasy-qwen2.5-7b-a100-80gb-pcie-tp1-vllm-0.19-random-512-256-c8-r2-p99-tpot"]
    assert (row.engine, row.engine_version, row.model, row.hf_id, row.weights, row.gpu, row.tp) == (
        "vllm", "0.19.0", "qwen2-7b", "Qwen/Qwen2.5-7B-Instruct", "fp16", "a100-80gb", 1)
    assert (row.input_len, row.output_len, row.num_prompts, row.concurrency) == (512, 256, 100, 8)
    assert row.value == 11.33 and row.excluded is None
    assert BY_ID["cssnoeasy-qwen2.5-7b-a100-80gb-pcie-tp1-vllm-0.19-random-512-256-c8-r2-req-tput"].value == 2.63
    # round 2 resent round 1's seed-0 prompts to the same server: its TTFT is a cache hit
    ttft = BY_ID["cssnoeasy-qwen2.5-7b-a100-80gb-pcie-tp1-vllm-0.19-random-512-256-c8-r2-median-ttft"]
    assert ttft.value == 68.74 and "prefix-cache" in ttft.excluded
    # TP 2 ran over PCIe across NUMA nodes, no NVLink: kept out
    tp2 = BY_ID["cssnoeasy-qwen2.5-7b-a100-80gb-pcie-tp2-vllm-0.19-random-512-256-c8-r3-p99-tpot"]
    assert tp2.value == 8.09 and tp2.gpus == 2 and "NVLink" in tp2.excluded


LENGTHS = lengths_files()
_PINNED = re.compile(r"https://github\.com/([^/]+/[^/]+)/blob/([0-9a-f]{40})/\S+\.jsonl?")


def test_lengths_files_cover_runs_and_pool():
    # tests/data/served/lengths/README.md: four Lambda runs; the other sources have no lists
    runs_with = {doc["run"] for doc in LENGTHS.values() if doc["run"] is not None}
    assert runs_with == {f"lambda-mistral-7b-h100-sxm-vllm-sharegpt-n{n}" for n in (10, 20, 160, 320)}
    assert all(name.startswith("pool/") for name, doc in LENGTHS.items() if doc["run"] is None)


@pytest.mark.parametrize("name", sorted(LENGTHS))
def test_lengths_file_is_pinned_and_sums_to_its_totals(name):
    doc = LENGTHS[name]
    assert _PINNED.fullmatch(doc["source"]), doc["source"]
    assert doc["accessed"] == "2026-11-30"
    ins, outs = doc["input_lens"], doc["output_lens"]
    assert all(type(n) is int and n >= 0 for n in ins + outs)
    assert len(ins) == len(outs) == doc["num_prompts"]
    assert sum(ins) == doc["total_input_tokens"] and sum(outs) == doc["total_output_tokens"]
    failed = sum(1 for e in doc.get("errors", []) if e)
    assert doc["completed"] == doc["num_prompts"] - failed


@pytest.mark.parametrize("name", sorted(n for n, d in LENGTHS.items() if d["run"] is not None))
def test_lengths_match_their_run_in_the_served_set(name):
    doc = LENGTHS[name]
    assert doc["run"] in RUNS, doc["run"]
    row = RUNS[doc["run"]][0]
    assert row.dataset == "sharegpt"
    # the same repository and commit as the run's source
    repo, commit = _PINNED.fullmatch(doc["source"]).groups()
    assert f"github.com/{repo}/" in row.source and commit in row.source
    pairs = lengths(doc["run"])
    assert len(pairs) == row.completed == doc["completed"]
    assert row.num_prompts == doc["num_prompts"]
    assert sum(i for i, _ in pairs) == row.total_input_tokens
    assert sum(o for _, o in pairs) == row.total_output_tokens


def test_lambda_n10_lengths_as_read():
    # LambdaLabsML/vllm-benchmark @ de55d46, results/prompt_10/1xH100-80GB-SXM/
    # Mistral-7B-Instruct-v0.3_tp1_len2000.json: "input_lens": [14, 30, 28, 12, 375, 29, 487,
    # 369, 5, 236], "output_lens": [129, 890, 273, 169, 0, 928, 10, 26, 8, 57]. The fifth request
    # streamed no text (its ttft 0.0) yet counts as completed (completed 10, and its 375 prompt
    # tokens are in the 1,585 the 0.5 client sums over successful requests only): kept.
    assert lengths("lambda-mistral-7b-h100-sxm-vllm-sharegpt-n10") == (
        (14, 129), (30, 890), (28, 273), (12, 169), (375, 0), (29, 928), (487, 10), (369, 26),
        (5, 8), (236, 57))
    # n320's last request: "output_lens": [..., 316, 221]; its prompts begin as n160's do
    n320 = lengths("lambda-mistral-7b-h100-sxm-vllm-sharegpt-n320")
    assert n320[-1] == (25, 221) and n320[:3] == ((14, 129), (30, 854), (28, 273))
    assert lengths("violet-quartz-qwen2.5-7b-rtx4090-sharegpt-chat-c8") is None


def test_lengths_pool_as_read():
    # LambdaLabsML/vllm-benchmark @ de55d46, results/prompt_320/1xH100-80GB-SXM/
    # Meta-Llama-3.1-8B-FP8_tp1_len8000.json: "input_lens": [13, 25, 27, 10, 329, ...],
    # "output_lens": [120, 1, 1, 194, 0, ...]; Mistral-Nemo-Instruct-2407_tp1_len16000.json:
    # "input_lens": [13, 27, 28, 12, 336, ...], "output_lens": [124, 816, 241, 96, 0, ...]
    pool = lengths_pool()
    llama = pool["pool/lambda-llama3.1-8b-fp8-h100-sxm-vllm-sharegpt-n320-len8000.json"]
    nemo = pool["pool/lambda-mistral-nemo-h100-sxm-vllm-sharegpt-n320-len16000.json"]
    assert llama[:5] == ((13, 120), (25, 1), (27, 1), (10, 194), (329, 0))
    assert nemo[:5] == ((13, 124), (27, 816), (28, 241), (12, 96), (336, 0))
    assert len(llama) == len(nemo) == 320
    assert all(doc["run"] is None for name, doc in LENGTHS.items() if name in pool)
