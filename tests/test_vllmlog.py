"""kvcalc.serving.vllm.log: every figure each public log in tests/data/vllm printed is read
back as the YAML beside it records it (the YAML's `logged:` was written from the log by
hand), and no text at all, however garbled, gets anything but a record or one
KvcalcError."""

from __future__ import annotations

from pathlib import Path

import pytest
import yamlload
from hypothesis import HealthCheck, given, settings, strategies as st

from kvcalc.serving.vllm.log import GiB, parse_vllm_log
from kvcalc.errors import KvcalcError

DATA = Path(__file__).parent / "data" / "vllm"
RAW = [p for p in sorted(DATA.glob("*.yaml"))
       if yamlload.safe_load(p.read_text()).get("log_kind") != "summary"]
# logged: key -> (the parser's term or field, tolerance)
_GIB_TERMS = {"weights_gib": "weights", "activation_peak_gib": "activation_peak",
              "non_torch_gib": "non_torch", "kv_cache_gib": "kv_cache",
              "cuda_graphs_gib": "cuda_graphs", "visible_memory_gib": "total",
              "budget_gib": "budget"}
HALF_CENT = GiB // 200  # vLLM prints two decimals of GiB


def _case(path: Path) -> dict:
    return yamlload.safe_load(path.read_text())


def test_most_logs_are_raw_logs_the_parser_reads() -> None:
    assert len(RAW) >= 15


@pytest.mark.parametrize("path", RAW, ids=[p.stem for p in RAW])
def test_each_printed_figure_is_read_back(path: Path) -> None:
    case = _case(path)
    log, want = parse_vllm_log(case["log"]), case["logged"]
    checked = 0
    for key, term in _GIB_TERMS.items():
        if key in want and term in log.terms:
            assert abs(log.terms[term] - want[key] * GiB) <= HALF_CENT, (key, log.terms[term] / GiB)
            checked += 1
    for key in ("num_gpu_blocks", "kv_cache_tokens", "max_model_len_fit"):
        if key in want and getattr(log, key) is not None:
            assert getattr(log, key) == want[key], key
            checked += 1
    if want.get("max_concurrency") and log.max_concurrency is not None:
        assert log.max_concurrency == pytest.approx(want["max_concurrency"], abs=0.005)
    assert log.refused == want["refused"], log.refusal
    assert checked >= 1 or log.refused, "nothing read from the log"
    if {"kv_cache_gib", "kv_cache_tokens", "num_gpu_blocks"} & want.keys():
        assert log.sized_kv_cache  # the log reaches the sizing, and the parser sees it


@pytest.mark.parametrize("path", RAW, ids=[p.stem for p in RAW])
def test_the_release_and_flags_printed_are_read(path: Path) -> None:
    case = _case(path)
    log = parse_vllm_log(case["log"])
    if log.vllm_version is not None:
        assert log.vllm_version == case["vllm_version"]
    settings_ = case["settings"]
    for key, flag in (("max_model_len", "max_model_len"), ("tp", "tensor_parallel_size")):
        if flag in log.flags:
            assert int(log.flags[flag]) == settings_[key], flag
    if "gpu_memory_utilization" in log.flags and "gpu_memory_utilization" in settings_:
        assert float(log.flags["gpu_memory_utilization"]) == float(settings_["gpu_memory_utilization"])
    if "sampler" in settings_ and "sampler" in log.flags:
        assert {"flashinfer": "flashinfer", "native": "sort"}[log.flags["sampler"]] == settings_["sampler"]


def test_the_readme_log_is_the_yaml_log() -> None:
    # tests/data/vllm/logs/ keeps a log as a file for the README's `kvcalc check` example.
    for path in (DATA / "logs").glob("*.log"):
        assert path.read_text() == _case(DATA / f"{path.stem}.yaml")["log"]


# --- the line formats, by release --------------------------------------------------------
def test_v0_0_7_to_0_10_one_line_terms() -> None:
    log = parse_vllm_log(
        "INFO 03-21 20:15:45 [worker.py:267] the current vLLM instance can use total_gpu_memory "
        "(79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB\n"
        "INFO 03-21 20:15:45 [worker.py:267] model weights take 12.55GiB; non_torch_memory takes "
        "0.16GiB; PyTorch activation peak memory takes 2.38GiB; the rest of the memory reserved "
        "for KV Cache is 56.18GiB.\n"
        "INFO 03-21 20:15:46 [executor_base.py:111] # cuda blocks: 7191, # CPU blocks: 512\n")
    assert log.engine == "v0" and log.num_gpu_blocks == 7191
    assert {k: round(v / GiB, 2) for k, v in log.terms.items()} == {
        "total": 79.19, "budget": 71.27, "weights": 12.55, "activation_peak": 2.38,
        "non_torch": 0.16, "kv_cache": 56.18}
    assert log.flags["gpu_memory_utilization"] == "0.90"


def test_v1_0_29_plus_consumed_line_splits_weights_from_non_torch() -> None:
    # "peak activation" holds the CUDA-graph estimate from 0.29 (gpu_worker.py, 0.33 l. 748).
    log = parse_vllm_log(
        "(EngineCore pid=1) INFO 08-22 [gpu_model_runner.py:5405] Model loading took 14.00 GiB "
        "memory and 6.3 seconds\n"
        "(EngineCore pid=1) INFO [gpu_model_runner.py:6576] Estimated CUDA graph memory: 0.25 GiB total\n"
        "(EngineCore pid=1) INFO [gpu_worker.py:789] Free memory on device (30.27/31.4 GiB) on "
        "startup. Desired GPU memory utilization is (0.92, 28.88 GiB). Actual usage is 15.03 GiB "
        "for consumed memory (weights + non-torch), 1.59 GiB for peak activation, and 0.09 GiB for "
        "CUDAGraph memory. Current kv cache memory in use is 12.26 GiB.\n")
    t = {k: round(v / GiB, 2) for k, v in log.terms.items()}
    assert t == {"total": 31.4, "budget": 28.88, "weights": 14.0, "activation_peak": 1.34,
                 "non_torch": 1.03, "cuda_graphs": 0.25, "kv_cache": 12.26}


def test_interleaved_ranks_keep_rank_zero_and_say_when_ranks_differ() -> None:
    log = parse_vllm_log(
        "(Worker_TP1 pid=2) INFO [gpu_worker.py:298] Available KV cache memory: 9.00 GiB"
        "(Worker_TP0 pid=1) INFO [gpu_worker.py:298] Available KV cache memory: 8.50 GiB\n"
        "(EngineCore_DP0 pid=3) INFO [kv_cache_utils.py:864] GPU KV cache size: 10,000 tokens\n")
    assert log.terms["kv_cache"] == round(8.5 * GiB)
    assert any("ranks printed different kv cache" in n for n in log.notes)
    assert set(log.ranks) == {"Worker_TP1", "Worker_TP0", "EngineCore_DP0"}


def test_wrapped_lines_and_ansi_colours_are_undone() -> None:
    log = parse_vllm_log(
        "\x1b[1;36m(EngineCore_0 pid=1257)\x1b[0;0m (RayWorkerWrapper pid=374, ip=10.254.6.219) "
        "INFO 09-03 04:42:46 [gpu_worker.py:276] Available KV cache me\nmory: 11.03 GiB\n"
        "(APIServer pid=121) INFO 09-03 04:36:09 [utils.py:326] non-default args: {'model_tag': "
        "'Qwen2-7B-Instruct', 'port': 8081, 'model': 'Qwen\n2-7B-Instruct', 'max_model_len': 16384}\n")
    assert log.terms["kv_cache"] == round(11.03 * GiB)
    assert log.flags["model"] == "Qwen2-7B-Instruct" and log.flags["max_model_len"] == 16384


@pytest.mark.parametrize("text, fit", [
    ("ValueError: The model's max seq len (29000) is larger than the maximum number of tokens "
     "that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization`", 23648),
    ("ValueError: To serve at least one request with the models's max seq len (40960), \n"
     "(5.62 GiB KV cache is needed, which is larger than the available KV cache memory (4.50 "
     "GiB). \nBased on the available memory, the estimated maximum model length is 32768.", 32768),
])
def test_refusals_of_v0_and_v1_name_the_largest_length(text: str, fit: int) -> None:
    log = parse_vllm_log(text)
    assert log.refused and log.max_model_len_fit == fit and log.sized_kv_cache


@pytest.mark.parametrize("text", [
    "", "hello world\n", "\x00\x01\x02 binary", "INFO starting the web server on port 80\n",
    "llama_model_loader: - kv 11: llama.feed_forward_length u32 = 8192\n",
    "[2025-10-16 TP0] KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB\n",  # SGLang
])
def test_not_vllm_is_one_clear_error(text: str) -> None:
    with pytest.raises(KvcalcError, match="does not look like a vLLM start-up log"):
        parse_vllm_log(text)


_ALPHABET = st.sampled_from(
    list("0123456789.,:;()[]{}'\"=x- \n\tGiBMTP_") + [
        "Available KV cache memory: ", "GPU KV cache size: ", " tokens", "Model loading took ",
        " GiB", "(Worker_TP1 pid=4) ", "non-default args: {", "'max_model_len': ",
        "Maximum concurrency for ", " tokens per request: ", "x\n", "# GPU blocks: ",
        "Initializing a V1 LLM engine (v", "estimated maximum model length is ",
        "max seq len (", "model weights take ", "GiB; ", "\x1b[1;36m", "Estimated CUDA graph memory: "])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_garbled_logs_give_a_record_or_one_error(text: str) -> None:
    try:
        log = parse_vllm_log(text)
    except KvcalcError as e:
        assert "\n" not in str(e)
        return
    assert all(isinstance(v, int) for v in log.terms.values())


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(RAW), st.data())
def test_truncated_or_shuffled_public_logs_never_raise_anything_else(path: Path, data) -> None:
    lines = _case(path)["log"].splitlines()
    cut = data.draw(st.integers(0, len(lines)))
    kept = data.draw(st.permutations(lines[:cut]))
    try:
        parse_vllm_log("\n".join(kept))
    except KvcalcError:
        pass


# --- start-ups that failed, and logs only `kvcalc check` reads (tests/data/vllm/check/) ----
CHECK_ONLY = sorted((DATA / "check").glob("*.yaml"))


def test_at_least_three_public_failed_start_ups_each_with_its_cause() -> None:
    failed = [_case(p) for p in CHECK_ONLY if _case(p)["logged"]["refused"]]
    assert len(failed) >= 3
    assert {c["cause"] for c in failed} >= {"max_model_len_over_context", "free_memory",
                                            "oom_sampler", "oom_cuda_graphs", "missing_model"}
    readme = (DATA / "README.md").read_text()
    for path in CHECK_ONLY:
        assert f"check/{path.name}" in readme, path.name
        assert _case(path)["source"], path.name


@pytest.mark.parametrize("path", CHECK_ONLY, ids=[p.stem for p in CHECK_ONLY])
def test_each_failed_start_up_is_read_with_the_cause_it_logged(path: Path) -> None:
    case = _case(path)
    log, want = parse_vllm_log(case["log"]), case["logged"]
    assert log.refused == want["refused"], log.refusal
    if not want["refused"]:
        assert log.failure is None
        return
    assert log.failure is not None and log.failure.kind == case["cause"], log.failure
    assert "\n" not in log.failure.words and log.failure.words in " ".join(case["log"].split())
    figures = log.failure.figures
    if case["cause"] == "free_memory":  # "Free memory on device (7.34/139.72 GiB) ... (0.9, 125.75"
        assert abs(figures["free_bytes"] - want["free_gib"] * GiB) <= HALF_CENT
        assert abs(figures["total_bytes"] - want["visible_memory_gib"] * GiB) <= HALF_CENT
        assert abs(figures["requested_bytes"] - want["requested_gib"] * GiB) <= HALF_CENT
        assert log.terms["total"] == figures["total_bytes"]
    if case["cause"] == "max_model_len_over_context":
        assert (figures["max_model_len"], figures["context"]) == (want["max_model_len"],
                                                                  want["context"])
        assert log.flags["max_model_len"] == case["settings"]["max_model_len"]
        assert log.flags["tensor_parallel_size"] == case["settings"]["tp"]
    if case["cause"] == "oom_sampler":
        assert figures["dummy_requests"] == want["dummy_requests"]
    if "gpu_memory_utilization" in case["settings"] and "gpu_memory_utilization" in log.flags:
        assert float(log.flags["gpu_memory_utilization"]) == float(
            case["settings"]["gpu_memory_utilization"])


def test_a_0_19_log_says_its_graph_estimate_is_not_subtracted() -> None:
    # "In v0.19, CUDA graph memory profiling will be enabled by default ... To try it now":
    # 0.19.0 logs the estimate (0.05 GiB) and the capture (0.03 GiB) but subtracts neither.
    case = _case(DATA / "check" / "qwen25-7b-awq-0.19-graphs.yaml")
    log, want = parse_vllm_log(case["log"]), case["logged"]
    assert log.vllm_version == case["vllm_version"] == "0.19.0"
    for key, term in _GIB_TERMS.items():
        if key in want:
            assert abs(log.terms[term] - want[key] * GiB) <= HALF_CENT, key
    assert abs(log.graphs_captured - want["cuda_graphs_captured_gib"] * GiB) <= HALF_CENT
    assert log.graph_estimate_subtracted is False
    assert log.kv_cache_tokens == want["kv_cache_tokens"]
    assert log.max_concurrency == pytest.approx(want["max_concurrency"], abs=0.005)
    # What the engine config states: the weights' format, dtype and the flags.
    assert log.flags["quantization"] == "awq_marlin" and log.flags["dtype"] == "float16"
    want_util = case["settings"]["gpu_memory_utilization"]
    assert float(log.flags["gpu_memory_utilization"]) == float(want_util)
    assert log.flags["max_model_len"] == case["settings"]["max_model_len"]
    assert log.flags["model"] == r"D:\Resources\Models\Qwen2.5-7B-Instruct-AWQ"


@pytest.mark.parametrize("line, subtracted", [
    # vllm PR 37296 (a 0.18 run with the variable set): subtracted.
    ("(Worker_TP0 pid=646817) INFO 03-17 17:07:06 [gpu_worker.py:468] CUDA graph memory profiling "
     "is enabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1). This will become the default in "
     "v0.19. The current --gpu-memory-utilization=0.9000 is equivalent to "
     "--gpu-memory-utilization=0.8015 without CUDA graph memory profiling.", True),
    # club-3090#127 (0.21+): the default.
    ("(Worker_TP0 pid=147) INFO 05-14 00:04:17 [gpu_worker.py:475] CUDA graph memory profiling is "
     "enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent "
     "to --gpu-memory-utilization=0.9129 without CUDA graph memory profiling.", True),
])
def test_the_log_says_whether_its_graph_estimate_was_subtracted(line: str, subtracted) -> None:
    log = parse_vllm_log(line + "\n(Worker_TP0 pid=1) INFO [gpu_worker.py:452] Available KV cache "
                         "memory: 25.46 GiB\n")
    assert log.graph_estimate_subtracted is subtracted
    assert log.failure is None and not log.refused


def test_a_graph_capture_oom_after_the_capture_line_is_placed_there() -> None:
    # vllm#15598 (V0 0.8, Ray workers): its capture line, then torch's error (the title).
    log = parse_vllm_log(
        "(RayWorkerWrapper pid=1861983) INFO 03-27 10:29:03 [model_runner.py:1442] Capturing "
        "cudagraphs for decoding. This may lead to unexpected consequences if the model is not "
        "static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' "
        "in the CLI. If out-of-memory error occurs during cudagraph capture, consider decreasing "
        "`gpu_memory_utilization` or switching to eager mode. You can also reduce the "
        "`max_num_seqs` as needed to decrease memory usage.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 6 has a total "
        "capacity of 44.53 GiB of which 448.00 KiB is free.\n")
    assert log.failure.kind == "oom_cuda_graphs"
    assert log.failure.figures["tried_bytes"] == 2 * 2**20
    assert abs(log.failure.figures["total_bytes"] - 44.53 * GiB) <= HALF_CENT
    assert log.failure.figures["free_bytes"] == 448 * 2**10


def test_advice_lines_that_mention_memory_are_no_failure() -> None:
    # The V0 capture line's advice (vllm#15598) and 0.5's "If you are running out of
    # memory" (vllm#7593) are not errors; a started log gets no failure.
    log = parse_vllm_log(
        "INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for decoding. If "
        "out-of-memory error occurs during cudagraph capture, consider decreasing "
        "`gpu_memory_utilization` or switching to eager mode.\n"
        "(VllmWorkerProcess pid=13109) INFO 08-19 07:51:12 model_runner.py:1028] CUDA graphs can "
        "take additional 1~3 GiB memory per GPU. If you are running out of memory, consider "
        "decreasing `gpu_memory\n"
        "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: "
        "6241\n")
    assert log.failure is None and not log.refused
    for path in RAW:
        case = _case(path)
        if not case["logged"]["refused"]:
            assert parse_vllm_log(case["log"]).failure is None, path.name
