"""Failed SGLang and TensorRT-LLM start-ups: `kvcalc check LOG` names the cause the log
gives and the fix, as tests/test_check.py does for vLLM's.

Against the public failed logs (tests/data/sglang/check, tests/data/trtllm/check and the
refused Triton log of tests/data/trtllm: each quoted with its source, release and cause) and
against each message as the engines' source prints it (SGLang's 0.4.3.post2 and 0.5.4
wheels, NVIDIA/TensorRT-LLM's py_executor_creator.py, model_engine.py and
resource_manager.py), never against kvcalc's own output.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yamlload
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.serving.failure import GiB, KINDS
from kvcalc.serving.sglang.fail import diagnose as sglang_diagnose
from kvcalc.serving.sglang.log import is_sglang_log, read_sglang_log
from kvcalc.serving.trtllm.check import clamp_note, diagnose_log
from kvcalc.serving.trtllm.log import is_trtllm_log, read_log

DATA = Path(__file__).parent / "data"
SGLANG = sorted((DATA / "sglang" / "check").glob("*.yaml"))
TRTLLM = [*sorted((DATA / "trtllm" / "check").glob("*.yaml")),
          DATA / "trtllm" / "mistral-7b-a10g-tp4-refused-backend366.yaml"]
MiB = 1 << 20


def _case(path: Path) -> dict:
    return yamlload.safe_load(path.read_text())


def _flat(text: str) -> str:
    return " ".join(text.split())


def _cause(case: dict) -> str:
    return case.get("cause") or "kv_cache_too_small"  # the Triton refusal (no cause: key)


def run(*args: str):
    return CliRunner().invoke(app, list(args))


# --- the public logs, read ------------------------------------------------------------------
def test_the_public_failed_logs_cover_the_causes_and_are_sourced():
    sg = {_case(p)["cause"] for p in SGLANG}
    assert sg >= {"max_model_len_over_context", "free_memory", "no_kv_memory",
                  "oom_cuda_graphs", "oom_loading"}
    trt = {_cause(_case(p)) for p in TRTLLM}
    assert trt >= {"oom_kv_cache", "oom_warmup", "oom_loading", "kv_cache_too_small"}
    for folder, paths in (("sglang", SGLANG), ("trtllm", TRTLLM[:-1])):
        readme = (DATA / folder / "README.md").read_text()
        for p in paths:
            assert f"check/{p.name}" in readme, p.name
            assert _case(p)["source"], p.name
            assert _case(p)["logged"]["refused"] is True


@pytest.mark.parametrize("path", SGLANG, ids=[p.stem for p in SGLANG])
def test_each_failed_sglang_log_is_read_with_its_cause(path: Path):
    case = _case(path)
    assert is_sglang_log(case["log"]) and not is_trtllm_log(case["log"])
    log = read_sglang_log(case["log"])
    f = log.failure
    assert f is not None and f.kind == case["cause"], f
    assert "\n" not in f.words and f.words in _flat(case["log"])
    want = case["logged"]
    if "tried_mib" in want or "tried_gib" in want:  # torch's figures, to the print's 0.005
        tried = want.get("tried_gib", 0) * GiB or want["tried_mib"] * MiB
        assert abs(f.figures["tried_bytes"] - tried) <= 0.005 * MiB
        assert abs(f.figures["total_bytes"] - want["total_gib"] * GiB) <= 0.005 * GiB
        free = want.get("free_gib", 0) * GiB or want["free_mib"] * MiB
        assert abs(f.figures["free_bytes"] - free) <= 0.005 * GiB
    if case["cause"] == "max_model_len_over_context":
        assert (f.figures["context_length"], f.figures["context"]) == (
            want["context_length"], want["context"])
    for key in ("avail_mem_start_gb", "avail_mem_after_weights_gb", "weights_mem_gb"):
        if key in want:
            assert log.figures[key] == want[key], key
    s = case["settings"]
    for key in ("mem_fraction_static", "cuda_graph_max_bs", "tp_size"):
        if key in s and key in log.command:  # the quoted launch command's flags
            assert log.command[key] == s[key], key


@pytest.mark.parametrize("path", TRTLLM, ids=[p.stem for p in TRTLLM])
def test_each_failed_trtllm_log_is_read_with_its_cause(path: Path):
    case = _case(path)
    assert is_trtllm_log(case["log"])
    log = read_log(case["log"])
    f = log.failure
    assert f is not None and f.kind == _cause(case), f
    assert log.refused and "\n" not in f.words
    want = case["logged"]
    if "component" in want:
        assert f.figures["component"] == want["component"]
        assert abs(f.figures["total_bytes"] - want["total_gib"] * GiB) <= 0.005 * GiB
        assert abs(f.figures["free_before_bytes"] - want["free_before_gib"] * GiB) <= 0.005 * GiB
    if "tried_mib" in want:
        assert abs(f.figures["tried_bytes"] - want["tried_mib"] * MiB) <= 0.005 * MiB
        assert abs(f.figures["total_bytes"] - want["total_gib"] * GiB) <= 0.005 * GiB
    if "max_tokens" in want:  # Triton's refusal: its four numbers
        assert (f.figures["max_tokens"], f.figures["beam_width"], f.figures["tokens_per_block"],
                f.figures["max_blocks_per_seq"]) == (want["max_tokens"], want["beam_width"],
                                                     want["tokens_per_block"],
                                                     want["blocks_per_seq"])
    s = case["settings"]
    for key in ("max_num_tokens", "max_batch_size", "max_seq_len", "tp_size"):
        if key in log.command:
            assert log.command[key] == s[key], key


def test_the_components_created_before_the_failure_are_read_as_logged():
    # trtllm#5872: "Model: 139.55 / 110.70", ... up to "Drafter: 110.33 / 110.33".
    f = read_log(_case(TRTLLM[-2])["log"]).failure
    names = [n for n, _, _ in f.figures["created"]]
    assert names == ["Model", "Sampler",
                     "Initial KV cache (temporary for KV cache size estimation)", "Drafter"]
    _, before, after = f.figures["created"][0]
    assert abs(before - 139.55 * GiB) <= 0.005 * GiB and abs(after - 110.70 * GiB) <= 0.005 * GiB
    # mlcommons#2501 lists the later release's ExecutorMemoryType values instead.
    case = _case(DATA / "trtllm" / "check" / "gpt-oss-b300-kv-cache-oom-mlcommons2501.yaml")
    created = read_log(case["log"]).failure.figures["created"]
    assert [n for n, _, _ in created][:3] == ["model", "sampler", "_no_capture_init_kv_cache"]


# --- the cause and the fix, with the figure that would let it start ---------------------------
def _sglang(name: str):
    return sglang_diagnose(read_sglang_log(_case(DATA / "sglang" / "check" / name)["log"]))


def test_a_fraction_too_small_for_the_weights_names_the_smallest_that_works():
    # InferenceX#2128: SGLang's own floor is 0.9113 ("minimum viable = 1 - available/pre");
    # kvcalc's from the two GB figures the log printed (12.25 after, 125.65 used): 0.9112.
    # The range those two-decimal figures allow reaches 0.91121, so SGLang's `pre` is a
    # little more than the free memory before loading it prints: within 0.0002.
    d = _sglang("deepseek-v4-pro-fp8-8xh200-weights-leave-no-kv-inferencex2128.yaml")
    floor = d.counted["mem_fraction_static_floor"]
    assert abs(floor - float(d.figures["minimum_viable"])) <= 0.0002
    assert floor == pytest.approx(1 - 12.25 / (12.25 + 125.65), abs=1e-4)
    assert d.counted["mem_fraction_static"] > float(d.figures["floor_printed"])  # above 0.912
    assert f"--mem-fraction-static to {d.counted['mem_fraction_static']:.2f}" in d.fix
    assert "higher, not lower" in d.fix
    # The LLaDA run: 32.70 GB left after 60.64 GB of weights at 0.40: positive only above
    # 1 - 32.70 / 93.34 = 0.6497.
    d = _sglang("llada2-mini-rtx-pro-6000-not-enough-memory.yaml")
    assert d.counted["free_before_weights_gb"] == pytest.approx(32.70 + 60.64)
    assert d.counted["mem_fraction_static_floor"] == pytest.approx(1 - 32.70 / 93.34, abs=1e-4)
    assert 0.65 < d.counted["mem_fraction_static"] <= 0.67
    assert d.counted["headroom_gb"] == pytest.approx(93.34 * (1 - d.counted["mem_fraction_static"]),
                                                     abs=0.01)


def test_a_graph_capture_oom_lowers_the_fraction_and_the_graph_batch_it_ran_with():
    # sglang#23769: --mem-fraction-static 0.88 --cuda-graph-max-bs 8; 672 MiB asked, 200.75 free.
    d = _sglang("deepseek-v4-pro-fp8-16xh200-graph-oom-sglang23769.yaml")
    assert "--cuda-graph-max-bs 4 (from 8)" in d.fix
    assert "--mem-fraction-static 0.83 (from 0.88)" in d.fix
    assert "--disable-cuda-graph" in d.fix
    assert f"lacked {672 - 200.75:.2f} MiB" in d.cause


def test_context_and_memory_refusals_name_the_figure_and_the_switch():
    d = _sglang("qwen25-7b-context-length-dynamo-notes.yaml")
    assert "--context-length 32768 or less" in d.fix and "65,536" in d.cause
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in d.fix
    d = _sglang("qwen25-72b-int4-unbalanced-sglang1533.yaml")
    assert "another process" in d.cause and "nvidia-smi" in d.fix
    d = _sglang("glm-5-fp8-mi355x-tp8-load-oom-amd-issues.yaml")
    assert "284.05 GB free at start-up" in d.cause and "Transformers backend" in d.cause


def test_trtllm_fixes_name_its_own_flags_and_the_figures_that_fit():
    def diag(path):
        log = read_log(_case(path)["log"])
        return diagnose_log(log)

    d = diag(DATA / "trtllm" / "check"
             / "deepseek-v3-w4fp8-8xh20-extra-resources-oom-trtllm5950.yaml")
    assert "--max_num_tokens 16384 (from 32768)" in d.fix and "--max_batch_size 64" in d.fix
    assert "16.95 GiB was free before it, of 95.00 GiB" in d.cause
    d = diag(DATA / "trtllm" / "check" / "qwen3-235b-a22b-fp8-8xh200-kv-cache-oom-trtllm5872.yaml")
    assert "--kv_cache_free_gpu_memory_fraction 0.8 (from 0.9)" in d.fix  # the 0.9 default
    # Triton's refusal: 29,184 tokens hold sequences of 29,184 // (1 x 128) x 128 tokens.
    d = diag(TRTLLM[-1])
    assert d.counted["max_seq_len"] == 29184 // 128 * 128
    assert "--max_seq_len 29184 or less" in d.fix and "34,816" in d.cause


# --- each message as the source prints it -----------------------------------------------------
@pytest.mark.parametrize("text, kind, figures", [
    # 0.5.4 model_runner.py init_memory_pool (the f-string rendered)
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current "
     "value: self.server_args.mem_fraction_static=0.88", "no_kv_memory",
     {"mem_fraction_static": "0.88"}),
    # 0.5.4 init_torch_distributed
    ("ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
     "processes. min_per_gpu_memory=16.28, local_gpu_memory=46.81, local_gpu_memory * "
     "0.9=42.129", "free_memory", {"min_free_gb": 16.28, "local_free_gb": 46.81}),
    # 0.4.3.post2 configs/model_config.py (ValueError)
    ("ValueError: User-specified context_length (131072) is greater than the derived "
     "context_length (32768). This may lead to incorrect model outputs or CUDA errors. Note "
     "that the derived context_length may differ from max_position_embeddings in the model's "
     "config. To allow overriding this maximum, set the env var "
     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "max_model_len_over_context",
     {"context_length": 131072, "context": 32768}),
    # sglang#1467's capture failure: not memory (0.3's Possible solutions)
    ("Exception: Capture cuda graph failed: Triton Error [CUDA]: an illegal memory access was "
     "encountered\nPossible solutions:\n1. disable cuda graph by --disable-cuda-graph\n",
     "unknown", {"step": "cuda_graphs"}),
    # transformers' cached_file, for a folder without its config (hf_transformers_utils.get_config)
    ("OSError: /models/Qwen3-8B does not appear to have a file named config.json. Checkout "
     "'https://huggingface.co//models/Qwen3-8B/tree/None' for available files.",
     "missing_model", {"model": "/models/Qwen3-8B", "file": "config.json"}),
])
def test_sglang_messages_as_the_source_prints_them(text, kind, figures):
    f = read_sglang_log(text).failure
    assert f.kind == kind and f.figures == figures
    assert sglang_diagnose(read_sglang_log(text)).label == KINDS[kind]


def test_sglang_warns_instead_with_the_override_set():
    # With SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 the same words are a warning.
    text = ("[2026-02-14 02:07:50] Warning: User-specified context_length (65536) is greater "
            "than the derived context_length (32768). This may lead to incorrect model outputs "
            "or CUDA errors.")
    assert read_sglang_log(text).failure is None


@pytest.mark.parametrize("text, kind", [
    # py_executor_creator.py _maybe_explain_if_oom, with memory_type_friendly_names
    ("RuntimeError: Executor creation failed due to insufficient GPU memory.\n\nThe following "
     "component could not be created: Initial KV Cache (temporary for KV cache size "
     "estimation)\nTotal GPU memory (GiB): 79.19\nFree GPU memory before component creation "
     "attempt (GiB): 3.10\n", "oom_kv_cache"),
    ("RuntimeError: Executor creation failed due to insufficient GPU memory.\n\nThe following "
     "component could not be created: Model\nTotal GPU memory (GiB): 23.52\n", "oom_loading"),
    ("RuntimeError: Executor creation failed due to insufficient GPU memory.\n\nThe following "
     "component could not be created: Model resources created during usage\n", "oom_profile"),
    ("RuntimeError: Executor creation failed due to insufficient GPU memory.\n\nThe following "
     "component could not be created: Sampler\n", "oom_sampler"),
    # resource_manager.py get_max_atten_window_upper_bound
    ("AssertionError: Impossible to fit in any sequence in kvCache", "kv_cache_too_small"),
])
def test_trtllm_messages_as_the_source_prints_them(text, kind):
    log = read_log(text)
    assert log.failure.kind == kind and log.refused
    d = diagnose_log(log)
    if kind == "oom_kv_cache":  # the estimation's small cache: reduce max_num_tokens
        assert "--max_num_tokens" in d.fix
    if kind == "oom_sampler":
        assert "--max_seq_len" in d.fix


def test_a_max_seq_len_beyond_the_model_is_cut_not_refused():
    # model_engine.py: "Specified {self.max_seq_len=} is larger than what the model can support
    # ({inferred_max_seq_len}). Setting max_seq_len to {inferred_max_seq_len}. "
    text = ("[TRT-LLM] [W] Specified self.max_seq_len=262144 is larger than what the model can "
            "support (131072). Setting max_seq_len to 131072. ")
    log = read_log(text)
    assert log.failure is None and not log.refused
    assert log.clamp == {"max_seq_len_given": 262144, "max_seq_len_model": 131072,
                         "max_seq_len": 131072}
    assert "cut --max_seq_len 262,144 to the model's 131,072" in clamp_note(log)


# --- the command line ----------------------------------------------------------------------
@pytest.mark.parametrize("path", SGLANG + TRTLLM, ids=[p.stem for p in SGLANG + TRTLLM])
def test_check_names_the_cause_and_fix_without_model_or_gpu(tmp_path: Path, path: Path):
    case = _case(path)
    f = tmp_path / "failed.log"
    f.write_text(case["log"])
    r = run("check", str(f), "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["engine"] == ("sglang" if "sglang" in path.parts else "tensorrt-llm")
    assert out["refused"] is True and out["failure"]["cause"] == _cause(case)
    assert out["failure"]["engine_says"] in _flat(case["log"])
    r = run("check", str(f))
    text = _flat(r.stdout)  # the table's width wraps lines anywhere
    assert r.exit_code == 0 and "cause: " in text and "fix: " in text, r.output
    assert "did not start" in text


def test_check_sets_the_count_beside_a_refused_log_and_adds_the_cause(tmp_path: Path):
    # The Triton refusal with its model and GPU: the figures beside kvcalc's, then the cause.
    case = _case(TRTLLM[-1])
    f = tmp_path / "refused.log"
    f.write_text(case["log"])
    r = run("check", str(f), case["preset"], "--gpu", case["gpu"], "--engine",
            "tensorrt-llm@1.0", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert {row["figure"] for row in out["figures"]} >= {"kv_cache_bytes", "max_tokens"}
    assert out["failure"]["cause"] == "kv_cache_too_small"
    assert out["failure"]["counted"]["max_seq_len"] == 29184


def test_with_the_model_the_fraction_for_one_full_context_request(tmp_path: Path):
    # The LLaDA run's figures (32.70 GB left of 93.34 GB free before loading), counted for
    # Llama-3.1-8B as a stand-in model whose SGLang cell a public log pins: 27.13 + 27.13 GB
    # of K and V for 444,500 tokens (tests/data/sglang/llama31-8b-h100-tp1-docs-0.4.1.yaml),
    # context 131,072. SGLang's rule (profile_max_num_token): pool = after - before x (1 - F);
    # one request needs F >= 1 - (after - context x cell) / before.
    case = _case(DATA / "sglang" / "check" / "llada2-mini-rtx-pro-6000-not-enough-memory.yaml")
    f = tmp_path / "failed.log"
    f.write_text(case["log"])
    r = run("check", str(f), "llama3.1-8b", "--gpu", "rtx-pro-6000-blackwell", "--format", "json")
    assert r.exit_code == 0, r.output
    counted = json.loads(r.stdout)["failure"]["counted"]
    cells = [(2 * 27.13 + s) * GiB / 444_500 for s in (-0.01, 0.01)]  # the print's rounding
    wants = {math.ceil(100 * (1 - (32.70 - 131_072 * cell / GiB) / 93.34)) / 100
             for cell in cells}
    assert counted["mem_fraction_static_one_request"] in wants
    assert counted["context_len"] == 131_072
    assert abs(counted["kv_bytes_per_token"] - 2 * 27.13 * GiB / 444_500) <= 0.02 * GiB / 444_500


def test_the_library_names_the_cause_for_any_engines_log():
    from kvcalc.serving.startup import failed_startup, log_engine

    for path, engine in ((SGLANG[0], "sglang"), (TRTLLM[0], "tensorrt-llm"),
                         (DATA / "vllm" / "check" / "qwen25-72b-tp8-max-model-len-longvt.yaml",
                          "vllm")):
        case = _case(path)
        assert (log_engine(case["log"]) or "vllm") == engine
        d = failed_startup(case["log"])
        assert d.engine == engine and d.kind == case["cause"] and d.fix
    # a start-up that came up has no failure
    ok = _case(DATA / "sglang" / "llama31-8b-h100-tp1-docs-0.4.1.yaml")["log"]
    assert failed_startup(ok) is None
