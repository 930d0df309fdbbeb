"""`kvcalc check`: every public log in tests/data/vllm read back term by term beside
kvcalc's own count, the calibration file it writes and `fit --calibration` reading it,
and a clear one-line answer for logs that are not vLLM's, stop early, refuse, or mix
several ranks. Expected figures are the logs' own (tests/data/vllm/*.yaml), never
kvcalc's output."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yamlload
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from kvcalc.serving.vllm.calibration import read_calibration
from kvcalc.serving.vllm.check import check_log, gpu_preset_for
from kvcalc.serving.vllm.settings import GiB
from kvcalc.serving.vllm.log import parse_vllm_log
from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.hfconfig import spec_from_hf_config_file
from kvcalc.presets import load_hardware, load_model, model_from_mapping

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "vllm"
HF = Path(__file__).parent / "data" / "hf"
RAW = [p for p in sorted(DATA.glob("*.yaml"))
       if yamlload.safe_load(p.read_text()).get("log_kind") != "summary"]
README_LOG = DATA / "logs" / "qwen2-7b-a100-0.25-dl.log"


def _case(path: Path) -> dict:
    return yamlload.safe_load(path.read_text())


def _spec(case: dict):
    if "hf_config" in case:
        return spec_from_hf_config_file(HF / case["hf_config"])
    if "preset" in case:
        return load_model(case["preset"])
    return model_from_mapping(case["model"], case["model_name"], require_source=False)


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def _check(case: dict):
    log = parse_vllm_log(case["log"])
    hw = load_hardware(case["gpu"])
    if "visible_memory_gib" in case["logged"] and "total" not in log.terms:
        hw = dataclasses.replace(hw, visible_memory_bytes=round(case["logged"]["visible_memory_gib"] * GiB))
    return check_log(log, _spec(case), hw, vllm_version=case["vllm_version"])


@pytest.mark.parametrize("path", RAW, ids=[p.stem for p in RAW])
def test_every_logged_term_is_reproduced_beside_kvcalcs(path: Path) -> None:
    case = _case(path)
    logged = case["logged"]
    result = _check(case)
    out = result.as_dict()
    assert out["vllm_version"] == case["vllm_version"]
    for term, key in (("weights", "weights_gib"), ("activation_peak", "activation_peak_gib"),
                      ("non_torch", "non_torch_gib"), ("kv_cache", "kv_cache_gib"),
                      ("cuda_graphs", "cuda_graphs_gib")):
        if term in out["terms"] and key in logged:
            assert abs(out["terms"][term]["logged_bytes"] - logged[key] * GiB) <= GiB // 200, term
            assert isinstance(out["terms"][term]["kvcalc_bytes"], int)
    if "kv_cache_tokens" in out and out["kv_cache_tokens"]["logged"] is not None:
        assert out["kv_cache_tokens"]["logged"] == logged["kv_cache_tokens"]
    assert out["refused"]["logged"] == logged["refused"]
    # kvcalc's count on the settings the log shows: within 5% of the logged tokens, or
    # refusing as vLLM did, where kvcalc models every term (not weights or KV taken
    # from the log) and the log names everything the count needs (a quantization the
    # YAML states but the log does not print comes with MODEL's own config).
    if (case.get("weights_from_log") or case.get("kv_memory_from_log") or "weight_dtype" in case
            or "usage" in case["settings"]):  # the LLM class's batch defaults: not printed
        return
    assert out["refused"]["kvcalc"] == logged["refused"], out["refusal"]
    if logged.get("kv_cache_tokens") and not logged["refused"]:
        assert out["kv_cache_tokens"]["kvcalc"] == pytest.approx(logged["kv_cache_tokens"], rel=0.05)


def test_check_names_the_term_that_differs_and_by_how_much() -> None:
    # vllm#10517's 20K log prints non-torch 0.35 GiB; kvcalc's V0 figure is 0.25 GiB.
    result = _check(_case(DATA / "llama31-8b-rtx3090-20k.yaml"))
    off = result.differing
    assert off and off[0].name == "non_torch"
    assert off[0].logged == round(0.35 * GiB) and off[0].kvcalc < off[0].logged


# --- the command ------------------------------------------------------------------------
def test_check_json_has_the_promised_keys() -> None:
    r = run("check", str(README_LOG), "qwen2-7b", "--gpu", "a100-80gb", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["vllm_version"] == "0.10.1.1" and out["model"] == "Qwen2-7B-Instruct"
    assert out["terms"]["kv_cache"]["logged_bytes"] == round(5.01 * GiB)
    assert set(out["terms"]["weights"]) == {"logged_bytes", "kvcalc_bytes"}
    assert out["kv_cache_tokens"]["logged"] == 93_872
    assert out["kv_cache_tokens"]["kvcalc"] == pytest.approx(93_872, rel=0.05)
    assert out["max_concurrency"]["logged"] == 5.73
    assert out["settings"]["max_num_batched_tokens"] == 2048  # the log's chunked-prefill line


def test_check_table_says_what_it_compared(tmp_path: Path) -> None:
    r = run("check", str(README_LOG), "qwen2-7b", "--gpu", "a100-80gb")
    assert r.exit_code == 0, r.output
    assert "vLLM 0.10.1.1 (v1)" in r.stdout and "kv cache tokens" in r.stdout
    assert "93,872" in r.stdout


def test_the_calibration_file_round_trips_into_fit(tmp_path: Path) -> None:
    # PR vllm#10511's log prints every term: fit --calibration must subtract exactly those.
    case = _case(DATA / "llama3-8b-h100-pr10511.yaml")
    log = tmp_path / "vllm.log"
    log.write_text(case["log"])
    out = tmp_path / "h100.yaml"
    r = run("check", str(log), "llama3-8b", "--gpu", "h100-sxm", "--vllm-version", "0.6.5",
            "-o", str(out))
    assert r.exit_code == 0, r.output
    cal = read_calibration(out)
    assert cal.vllm_version == "0.6.5" and cal.engine == "v0"
    assert cal.activation_peak_bytes == round(1.26 * GiB)
    assert cal.non_torch_bytes == round(1.79 * GiB)
    assert cal.visible_memory_bytes == round(79.22 * GiB)
    r = run("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
            "--calibration", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    answer = json.loads(r.stdout)
    mem = answer["memory"]
    assert any("measured terms from" in n for n in answer["notes"])
    assert mem["non_torch"] == round(1.79 * GiB) and mem["activation_peak"] == round(1.26 * GiB)
    assert mem["weights"] == round(14.96 * GiB)
    # 71.29 - 14.96 - 1.26 - 1.79 = 53.28 GiB, the log's 53.29 to its rounding.
    assert abs(mem["kv_cache"] - round(53.29 * GiB)) <= GiB // 50


def test_an_existing_calibration_file_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "c.yaml"
    out.write_text("keep me\n")
    r = run("check", str(README_LOG), "qwen2-7b", "--gpu", "a100-80gb", "-o", str(out))
    assert r.exit_code == 2 and out.read_text() == "keep me\n"


@pytest.mark.parametrize("text, words", [
    ("source: x\nvllm_version: '0.10'\nactivation_peak: 3\n", "unknown key 'activation_peak'"),
    ("vllm_version: '0.10'\n", "source is missing"),
    ("source: x\nvllm_version: '0.10'\nnon_torch_bytes: -1\n", "non_torch_bytes must be"),
    ("source: x\nvllm_version: '1.2'\n", "vllm_version must look like"),
    ("- a list\n", "a calibration file is a mapping"),
    ("source: x\nvllm_version: '0.10'\nsampler: quick\n", "sampler must be"),
])
def test_calibration_keys_are_strict(tmp_path: Path, text: str, words: str) -> None:
    f = tmp_path / "cal.yaml"
    f.write_text(text)
    r = run("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--calibration", str(f))
    assert r.exit_code == 2 and words in r.output and r.output.count("\n") == 1, r.output


@pytest.mark.parametrize("text, words", [
    ("hello\nworld\n", "does not look like a vLLM, SGLang or TensorRT-LLM start-up log"),
    ("INFO 03-21 [api_server.py:1043] vLLM API server version 0.8.5\n"
     "INFO non-default args: {'model': 'Qwen/Qwen3-8B'}\n", "stops before vLLM printed any memory"),
    ("INFO [gpu_worker.py:298] Available KV cache memory: 6.51 GiB\n",
     "does not print vLLM's version"),
])
def test_bad_logs_get_one_line_and_exit_2(tmp_path: Path, text: str, words: str) -> None:
    f = tmp_path / "bad.log"
    f.write_text(text)
    r = run("check", str(f), "qwen3-8b-preset-does-not-matter", "--gpu", "h100-sxm")
    if "version" in words and "stops" not in words:
        r = run("check", str(f), "llama3-8b", "--gpu", "h100-sxm")
    assert r.exit_code == 2 and words in r.output and r.output.count("\n") == 1, r.output


def test_a_missing_log_file_or_gpu_is_one_line(tmp_path: Path) -> None:
    r = run("check", str(tmp_path / "nope.log"), "llama3-8b", "--gpu", "h100-sxm")
    assert r.exit_code == 2 and "no such file" in r.output
    r = run("check", str(README_LOG), "qwen2-7b")
    assert r.exit_code == 2 and "give --gpu" in r.output


def test_a_refusal_is_reported_not_raised(tmp_path: Path) -> None:
    f = tmp_path / "refused.log"
    f.write_text(_case(DATA / "llama31-8b-rtx3090-29k.yaml")["log"])
    r = run("check", str(f), "llama3.1-8b", "--gpu", "rtx3090", "--vllm-version", "0.6.4.post1",
            "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["refused"] == {"logged": True, "kvcalc": True}
    assert out["max_model_len_fit"]["logged"] == 23_648


def test_interleaved_ranks_are_read_with_a_note(tmp_path: Path) -> None:
    # Two TP workers' lines run together on one line, as a terminal shows them.
    f = tmp_path / "tp.log"
    f.write_text(
        "(APIServer pid=1) INFO vLLM API server version 0.10.1.1\n"
        "(APIServer pid=1) INFO non-default args: {'model': 'Qwen2-7B-Instruct', "
        "'max_model_len': 16384, 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.5}\n"
        "(VllmWorker TP1 pid=3) INFO Available KV cache memory: 31.85 GiB(VllmWorker TP0 pid=2) "
        "INFO Available KV cache memory: 31.83 GiB\n"
        "(EngineCore_0 pid=4) INFO [kv_cache_utils.py:849] GPU KV cache size: 1,192,160 tokens\n")
    r = run("check", str(f), "qwen2-7b", "--gpu", "a100-80gb", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["terms"]["kv_cache"]["logged_bytes"] == round(31.83 * GiB)  # rank 0's
    assert any("ranks printed different" in n for n in out["notes"])


def test_gpu_names_as_drivers_print_them() -> None:
    assert gpu_preset_for("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert gpu_preset_for("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert gpu_preset_for("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert gpu_preset_for("NVIDIA RTX A5000") is None


def test_check_from_stdin_and_the_log_names_its_gpu() -> None:
    text = README_LOG.read_text() + "GPU 0: NVIDIA A100-SXM4-80GB\n"
    r = CliRunner().invoke(app, ["check", "-", "qwen2-7b", "--format", "json"], input=text)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["gpu"] == "a100-80gb"


def test_check_starts_without_numpy_or_torch() -> None:
    code = ("import sys; from typer.testing import CliRunner; from kvcalc.cli import app;"
            f"r = CliRunner().invoke(app, ['check', {str(README_LOG)!r}, 'qwen2-7b', '--gpu', "
            "'a100-80gb']); assert r.exit_code == 0, r.output;"
            "print(' '.join(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


_LINES = [line for p in (*RAW, *sorted((DATA / "check").glob("*.yaml")))
          for line in _case(p)["log"].splitlines()]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_LINES + ["garbage ()", "(Worker_TP3 pid=9) ", "\x1b[0m"]),
                max_size=12), st.sampled_from(["table", "json"]))
def test_check_on_shuffled_public_lines_is_a_report_or_one_line(lines, fmt) -> None:
    import os
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    try:
        r = run("check", name, "llama3.1-8b", "--gpu", "h100-sxm", "--vllm-version", "0.11",
                "--format", fmt)
    finally:
        os.unlink(name)
    assert r.exit_code in (0, 2), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if r.exit_code == 2:
        assert r.output.startswith("kvcalc: error: ") and r.output.count("\n") == 1, r.output


def test_check_is_pure_python_api() -> None:
    # Anything the command does, the library does: the same result without the CLI.
    case = _case(DATA / "qwen2-7b-a100-0.25-dl.yaml")
    result = check_log(parse_vllm_log(case["log"]), load_model("qwen2-7b"),
                       load_hardware("a100-80gb"))
    assert result.settings.sampler == "flashinfer" and result.settings.max_num_batched_tokens == 2048
    with pytest.raises(KvcalcError, match="give vllm_version"):
        check_log(parse_vllm_log("Available KV cache memory: 1.00 GiB\n"),
                  load_model("qwen2-7b"), load_hardware("a100-80gb"))


# --------------------------------------------------------------------------------
# The calibration file records the layout, GPU, release and model it was learnt on
# --------------------------------------------------------------------------------
TP2_LOG = DATA / "qwen2-7b-2xa100-tp2-0.5-dl.yaml"  # `-tp 2` on two A100 80GB, 0.10.1.1


def _calibration(tmp_path: Path, case_file: Path, model: str, gpu: str) -> Path:
    log = tmp_path / f"{case_file.stem}.log"
    log.write_text(_case(case_file)["log"])
    out = tmp_path / f"{case_file.stem}.cal.yaml"
    r = run("check", str(log), model, "--gpu", gpu, "-o", str(out))
    assert r.exit_code == 0, r.output
    return out


def test_the_calibration_file_records_tp_pp_gpu_release_and_model(tmp_path: Path) -> None:
    case = _case(TP2_LOG)
    cal = read_calibration(_calibration(tmp_path, TP2_LOG, "qwen2-7b", "a100-80gb"))
    assert (cal.tp, cal.pp) == (case["settings"]["tp"], 1) == (2, 1)
    assert cal.gpu == case["gpu"] == "a100-80gb"
    assert cal.vllm_version == case["vllm_version"] == "0.10.1.1"
    assert cal.model_params == 7_615_616_512  # Qwen2-7B-Instruct's safetensors total
    assert cal.weights_bytes == round(case["logged"]["weights_gib"] * GiB)


def test_fit_takes_a_calibration_only_for_its_own_layout_gpu_and_model(tmp_path: Path) -> None:
    out = _calibration(tmp_path, TP2_LOG, "qwen2-7b", "a100-80gb")
    where = ["--max-model-len", "16384", "--calibration", str(out), "--format", "json"]
    r = run("fit", "--preset", "qwen2-7b", "--gpu", "a100-80gb", "--tp", "2", *where)
    assert r.exit_code == 0, r.output
    # The log's weights per device, 7.1217 GiB, in place of kvcalc's model
    assert json.loads(r.stdout)["memory"]["weights"] == round(7.1217 * GiB)
    for args, words in [
        (["--preset", "qwen2-7b", "--gpu", "a100-80gb"], "learnt at tp=2 pp=1, not tp=1 pp=1"),
        (["--preset", "qwen2-7b", "--gpu", "h100-sxm", "--tp", "2"],
         "learnt on a100-80gb, not h100-sxm"),
        (["--preset", "llama3.1-8b", "--gpu", "a100-80gb", "--tp", "2"],
         "(7,615,616,512 parameters), not llama3.1-8b (8,030,261,248)"),
    ]:
        r = run("fit", *args, *where)
        assert r.exit_code == 2 and r.stdout == "", r.output
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("kvcalc: error: --calibration")
        assert words in r.stderr, r.stderr


def test_a_calibration_file_without_tp_and_pp_is_refused(tmp_path: Path) -> None:
    """kvcalc's files before they recorded the layout: refused in one line that says how
    to write it again (read as tp 1, a tp-2 log's weights would be half a GPU's)."""
    out = _calibration(tmp_path, TP2_LOG, "qwen2-7b", "a100-80gb")
    old = tmp_path / "old.yaml"
    old.write_text("".join(line for line in out.read_text().splitlines(keepends=True)
                           if not line.startswith(("tp:", "pp:", "model_params:"))))
    for cmd in (["fit", "--preset", "qwen2-7b", "--gpu", "a100-80gb", "--tp", "2"],
                ["plan", "--preset", "qwen2-7b", "--gpu", "a100-80gb", "--gpus", "2"]):
        r = run(*cmd, "--calibration", str(old))
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert "records no tp and pp" in r.stderr and "kvcalc check LOG -o FILE" in r.stderr


# --------------------------------------------------------------------------------
# Start-ups that failed: the cause the log gives, and the fix
# --------------------------------------------------------------------------------
CHECK_ONLY = DATA / "check"
FAILED = [p for p in sorted(CHECK_ONLY.glob("*.yaml")) if _case(p)["logged"]["refused"]]


def _log_file(tmp_path: Path, case_file: Path) -> Path:
    f = tmp_path / f"{case_file.stem}.log"
    f.write_text(_case(case_file)["log"])
    return f


@pytest.mark.parametrize("path", FAILED, ids=[p.stem for p in FAILED])
def test_a_failed_start_up_gets_its_cause_and_fix_not_a_stop(tmp_path: Path, path: Path) -> None:
    # No MODEL and no --gpu: none of these logs names both, and the cause needs neither.
    case = _case(path)
    f = _log_file(tmp_path, path)
    r = run("check", str(f), "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    failure = out["failure"]
    assert failure["cause"] == case["cause"] and out["refused"]["logged"] is True
    assert failure["vllm_says"] in " ".join(case["log"].split())
    r = run("check", str(f))
    assert r.exit_code == 0 and "stops before" not in r.output, r.output
    assert "cause: " in r.stdout and "fix: " in r.stdout


def _failure(path: Path, tmp_path: Path) -> dict:
    r = run("check", str(_log_file(tmp_path, path)), "--format", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["failure"]


def test_max_model_len_beyond_the_context_names_the_context(tmp_path: Path) -> None:
    case = _case(CHECK_ONLY / "qwen25-72b-tp8-max-model-len-longvt.yaml")
    f = _failure(CHECK_ONLY / "qwen25-72b-tp8-max-model-len-longvt.yaml", tmp_path)
    # The log: 131072 asked for, max_position_embeddings 32768.
    assert f"--max-model-len {case['logged']['context']} or less" in f["fix"]
    assert f"{case['logged']['max_model_len']:,}" in f["why"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in f["fix"]


def test_free_memory_names_what_the_other_process_holds(tmp_path: Path) -> None:
    case = _case(CHECK_ONLY / "mixtral-8x7b-fp8-h200-free-memory.yaml")
    logged = case["logged"]
    f = _failure(CHECK_ONLY / "mixtral-8x7b-fp8-h200-free-memory.yaml", tmp_path)
    held = logged["visible_memory_gib"] - logged["free_gib"]  # 139.72 - 7.34
    assert f"another process holds {held:.2f} GiB" in f["why"]
    assert f"{logged['requested_gib']:.2f} GiB" in f["why"]
    # 7.34 / 139.72 = 0.05 of the device: no utilization serves from that; stop the process.
    assert "stop the other process" in f["fix"] and "nvidia-smi" in f["fix"]


def test_free_memory_with_room_left_gives_the_utilization_that_fits() -> None:
    # vllm#20305 (0.9.1): 31.44 of 47.38 GiB free, 0.95 asked: 31.44 / 47.38 = 0.6636.
    log = parse_vllm_log(
        "ERROR 06-30 13:53:19 [multiproc_executor.py:492] ValueError: Free memory on device "
        "(31.44/47.38 GiB) on startup is less than desired GPU memory utilization (0.95, 45.01 "
        "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n"
        "ERROR 06-30 13:53:19 [core.py:515] EngineCore failed to start.\n")
    from kvcalc.serving.vllm.check import diagnose

    d = diagnose(log)
    assert d.kind == "free_memory" and "--gpu-memory-utilization to 0.66 or less" in d.fix
    assert "15.94 GiB" in d.cause  # 47.38 - 31.44


def test_sampler_and_graph_capture_oom_name_the_warm_up_and_its_fix(tmp_path: Path) -> None:
    f = _failure(CHECK_ONLY / "sampler-oom-8-workers.yaml", tmp_path)
    assert "1024 dummy requests" in f["why"] and "--max-num-seqs (to 512" in f["fix"]
    f = _failure(CHECK_ONLY / "cuda-graph-capture-oom-tp4.yaml", tmp_path)
    assert "capturing CUDA graphs" in f["why"] and "--enforce-eager" in f["fix"]


def test_missing_model_names_the_id_the_log_asked_for(tmp_path: Path) -> None:
    f = _failure(CHECK_ONLY / "llama3-8b-fp8-missing-model.yaml", tmp_path)
    assert f["figures"]["model"] == "neuralmagic/Meta-Llama-3-8B-Instruct-FP8-dynamic"
    assert "neuralmagic/Meta-Llama-3-8B-Instruct-FP8-dynamic" in f["why"] and "HF_TOKEN" in f["fix"]


def test_a_kv_refusal_is_diagnosed_beside_kvcalcs_count(tmp_path: Path) -> None:
    # vllm#10517's 29K run: refused, the largest that fits 23,648 tokens.
    f = tmp_path / "refused.log"
    f.write_text(_case(DATA / "llama31-8b-rtx3090-29k.yaml")["log"])
    r = run("check", str(f), "llama3.1-8b", "--gpu", "rtx3090", "--vllm-version", "0.6.4.post1",
            "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["failure"]["cause"] == "kv_cache_too_small"
    assert "--max-model-len 23648 or less" in out["failure"]["fix"]
    assert out["terms"]  # kvcalc's count still stands beside the logged terms


def test_a_failed_log_cannot_write_a_calibration_file(tmp_path: Path) -> None:
    f = _log_file(tmp_path, CHECK_ONLY / "sampler-oom-8-workers.yaml")
    out = tmp_path / "cal.yaml"
    r = run("check", str(f), "-o", str(out))
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "nothing to calibrate" in r.output
    assert not out.exists()


# --------------------------------------------------------------------------------
# The weights' format as the log states it (issue 38 point 7)
# --------------------------------------------------------------------------------
def _fp8_dynamic_config(tmp_path: Path) -> Path:
    """RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic: Llama-3.3-70B-Instruct's config with
    the quantization_config llm-compressor's FP8_DYNAMIC scheme writes (fp8 weights with a
    scale per output channel, dynamic per-token fp8 activations, every Linear but lm_head:
    compressed-tensors' float-quantized format)."""
    from kvcalc.presets import presets_dir

    # the preset's published config, where kvcalc is installed from (a wheel holds it too)
    base = presets_dir() / "hf" / "meta-llama__Llama-3.3-70B-Instruct.json"
    cfg = json.loads(base.read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                        "symmetric": True, "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                  "symmetric": True, "dynamic": True}}}}
    path = tmp_path / "RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic.json"
    path.write_text(json.dumps(cfg))
    return path


def _summary_log(case: dict):
    """The log llm-d-benchmark's page summarises, as a VllmLog: its figures, and the flags
    its pods ran with (--max-model-len, --tensor-parallel-size, --block-size 128,
    --enable-prefix-caching; the checkpoint's quantization, "compressed-tensors (FP8)" as
    the page's tp 1 run names it)."""
    from kvcalc.serving.vllm.log import StartupFailure, VllmLog

    logged, s = case["logged"], case["settings"]
    terms = {"total": "visible_memory_gib", "budget": "budget_gib", "weights": "weights_gib",
             "activation_peak": "activation_peak_gib", "non_torch": "non_torch_gib",
             "kv_cache": "kv_cache_gib"}
    failure = (StartupFailure("no_kv_memory", "No available memory for the cache blocks")
               if logged["refused"] else None)
    return VllmLog(
        vllm_version=case["vllm_version"], engine="v1", model=case["model_name"], gpu_name=None,
        flags={"max_model_len": s["max_model_len"],
               "gpu_memory_utilization": s["gpu_memory_utilization"],
               "tensor_parallel_size": s["tp"], "block_size": s["block_size"],
               "enable_prefix_caching": True, "dtype": "bfloat16",
               "quantization": "compressed-tensors"},
        terms={t: round(logged[k] * GiB) for t, k in terms.items() if k in logged},
        num_gpu_blocks=None, kv_cache_tokens=None, max_concurrency=None, concurrency_len=None,
        refused=logged["refused"], refusal=failure.words if failure else "",
        max_model_len_fit=None, ranks=("",), failure=failure)


@pytest.mark.parametrize("name", ["llama33-70b-fp8-2xh100-tp2-llmd.yaml",
                                  "llama33-70b-fp8-h100-refused-llmd.yaml"])
def test_fp8_dynamic_weights_are_counted_from_the_checkpoints_config(tmp_path: Path, name) -> None:
    from kvcalc.hfconfig import spec_from_hf_config_file

    case = _case(DATA / name)
    logged = case["logged"]
    spec = spec_from_hf_config_file(_fp8_dynamic_config(tmp_path))
    result = check_log(_summary_log(case), spec, load_hardware(case["gpu"]))
    out = result.as_dict()
    weights = out["terms"]["weights"]
    assert "status" not in weights  # counted by kvcalc.quant, not taken from the log
    # 33.88 GiB a device at tp 2, 67.72 at tp 1, as the logs say (bf16 would be 65.7 / 131.4).
    assert abs(weights["kvcalc_bytes"] - logged["weights_gib"] * GiB) <= GiB // 50
    assert out["refused"]["kvcalc"] == logged["refused"]
    if not logged["refused"]:
        assert out["terms"]["kv_cache"]["kvcalc_bytes"] == pytest.approx(
            logged["kv_cache_gib"] * GiB, rel=0.05)
    assert "weights" not in {d["name"] for d in out["differs"]}


def test_a_quantized_log_with_a_plain_config_takes_the_logged_weights() -> None:
    # The preset has no quantization_config: the log's 33.88 GiB, said so, not bf16's 65.7.
    case = _case(DATA / "llama33-70b-fp8-2xh100-tp2-llmd.yaml")
    result = check_log(_summary_log(case), load_model(case["preset"]), load_hardware(case["gpu"]))
    out = result.as_dict()
    assert out["terms"]["weights"]["status"] == "from the log"
    assert out["terms"]["weights"]["kvcalc_bytes"] == round(case["logged"]["weights_gib"] * GiB)
    assert out["terms"]["kv_cache"]["kvcalc_bytes"] == pytest.approx(
        case["logged"]["kv_cache_gib"] * GiB, rel=0.05)
    assert any("compressed-tensors weights" in n and "no quantization_config" in n
               for n in out["notes"])


def test_a_quantized_log_without_weights_or_a_config_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "awq.log"
    f.write_text("(EngineCore pid=1) INFO [core.py:105] Initializing a V1 LLM engine (v0.19.0) "
                 "with config: model='x', dtype=torch.float16, max_seq_len=4096, "
                 "quantization=awq_marlin, kv_cache_dtype=auto\n"
                 "(EngineCore pid=1) INFO [gpu_worker.py:437] Available KV cache memory: "
                 "0.67 GiB\n")
    r = run("check", str(f), str(HF / "Qwen__Qwen2.5-7B-Instruct.json"), "--gpu", "rtx4070")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "awq_marlin weights" in r.output and "config.json" in r.output


AWQ_019 = CHECK_ONLY / "qwen25-7b-awq-0.19-graphs.yaml"


def _awq_config(tmp_path: Path) -> Path:
    """Qwen/Qwen2.5-7B-Instruct-AWQ: the base config with the AWQ checkpoint's
    quantization_config (the YAML's, int4 gemm g128 with zero points) and its fp16 dtype."""
    case = _case(AWQ_019)
    cfg = json.loads((HF / case["hf_config"]).read_text())
    cfg["quantization_config"] = case["quantization_config"]
    cfg["torch_dtype"] = "float16"
    path = tmp_path / "Qwen__Qwen2.5-7B-Instruct-AWQ.json"
    path.write_text(json.dumps(cfg))
    return path


def test_an_awq_log_is_counted_from_the_awq_config_and_its_graphs_are_not_a_miss(tmp_path) -> None:
    # The GPU is not named: any preset serves, the rows checked here do not depend on it.
    case = _case(AWQ_019)
    logged = case["logged"]
    r = run("check", str(_log_file(tmp_path, AWQ_019)), str(_awq_config(tmp_path)), "--gpu",
            "rtx4070", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["vllm_version"] == "0.19.0"
    assert out["settings"]["gpu_memory_utilization"] == 0.7  # the log's own line, a number
    weights = out["terms"]["weights"]
    assert "status" not in weights
    assert abs(weights["kvcalc_bytes"] - logged["weights_gib"] * GiB) <= GiB // 50
    # The estimate and the capture: logged by 0.19, subtracted by neither.
    graphs = out["terms"]["cuda_graphs"]
    assert graphs["status"] == "not subtracted" and graphs["kvcalc_bytes"] == 0
    assert abs(graphs["logged_bytes"] - logged["cuda_graphs_gib"] * GiB) <= GiB // 200
    captured = out["terms"]["cuda_graphs_captured"]
    assert captured["status"] == "not subtracted"
    assert abs(captured["logged_bytes"] - logged["cuda_graphs_captured_gib"] * GiB) <= GiB // 200
    assert not {"cuda_graphs", "cuda_graphs_captured", "weights"} & {
        d["name"] for d in out["differs"]}
    r = run("check", str(_log_file(tmp_path, AWQ_019)), str(_awq_config(tmp_path)),
            "--gpu", "rtx4070")
    assert "logged, not subtracted" in r.stdout and "cuda graphs captured" in r.stdout


def test_the_0_19_log_with_a_plain_config_says_it_took_the_logged_weights(tmp_path) -> None:
    r = run("check", str(_log_file(tmp_path, AWQ_019)), str(HF / "Qwen__Qwen2.5-7B-Instruct.json"),
            "--gpu", "rtx4070", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["terms"]["weights"]["status"] == "from the log"
    assert any("awq_marlin weights" in n for n in out["notes"])


def test_a_subtracted_graph_estimate_is_compared() -> None:
    # LMCache#3430 (0.21.0, "CUDA graph memory profiling is enabled"): its 0.52 GiB estimate
    # is in the budget, so kvcalc's figure stands beside it.
    result = _check(_case(DATA / "qwen3-8b-a5000-lmcache.yaml"))
    graphs = next(t for t in result.terms if t.name == "cuda_graphs")
    assert graphs.status == "" and graphs.kvcalc > 0
    assert abs(graphs.logged - round(0.52 * GiB)) <= GiB // 200


def test_a_calibration_from_a_0_19_log_holds_no_graphs_it_did_not_subtract(tmp_path) -> None:
    """0.19 logs its CUDA-graph estimate and leaves the graphs to the headroom: the file
    `check -o` writes says 0 for them, so `fit --calibration` subtracts none either."""
    out = tmp_path / "cal.yaml"
    r = run("check", str(_log_file(tmp_path, AWQ_019)), str(_awq_config(tmp_path)), "--gpu",
            "rtx4070", "-o", str(out))
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert "cuda_graph_bytes: 0" in lines
    assert any(line.startswith("weights_bytes: ") for line in lines)
