"""`kvcalc bench --against RESULT.json` (kvcalc.served.against): real published result files
read to the values in them, set beside kvcalc's prediction under vllm bench serve's names;
a file that is not a result, or a run of another model, length or GPU count, is one line.

The files are tests/data/bench_results (README.md there: where each comes from). The
measured numbers asserted here were read by eye from the files; kvcalc's predictions are
not asserted (they change with the engines' terms), only their shape."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.served import METRICS
from kvcalc.served.against import read_result

DATA = Path(__file__).parent / "data" / "bench_results"
VLLM = DATA / "lambdalabs-vllm-1xH100-80GB-SXM-Meta-Llama-3-8B-Instruct_tp1_len2048-prompt10.json"
SGLANG = DATA / "datacrunch-h200-sglang-llama_3_3_70b_online_output.jsonl"
SGLANG_OFFLINE = DATA / "datacrunch-h200-sglang-llama_3_3_70b_offline_output.jsonl"
# The names vllm bench serve writes in its --save-result JSON (vllm/benchmarks/serve.py)
VLLM_BENCH_NAMES = {"request_throughput", "output_throughput", "total_token_throughput",
                    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                    "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
                    "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"}
VLLM_ARGS = ["bench", "llama3-8b", "--gpu", "h100-sxm", "--against", str(VLLM)]
SGLANG_ARGS = ["bench", "llama3.3-70b", "--gpu", "h200", "--tp", "4", "--against", str(SGLANG)]


def run(args):
    return CliRunner().invoke(app, args)


def one_line_error(args, message):
    r = run(args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("kvcalc: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr, r.stderr
    return r.stderr


def test_the_vllm_result_is_read_to_its_own_values():
    (got,) = read_result(VLLM)
    assert got.client == "vllm bench serve" and got.backend == "vllm" and got.line is None
    assert got.model_id == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert (got.num_prompts, got.completed) == (10, 10)
    assert math.isinf(got.request_rate) and got.max_concurrency is None
    assert (got.total_input_tokens, got.total_output_tokens) == (1369, 1867)
    assert got.duration_s == 5.3666093360079685
    assert got.input_range == (4, 399) and got.output_range == (3, 741)
    assert got.tp is None  # the repository's file name says tp1; the file does not
    m = got.metrics
    assert m["request_throughput"] == 1.8633739431904777
    assert m["output_throughput"] == 347.8919151936622
    assert m["mean_ttft_ms"] == 62.426355000934564
    assert m["median_tpot_ms"] == 7.558259615148475
    assert m["p99_itl_ms"] == 75.27785668207798
    # this client wrote no total_token_throughput and no e2el (its latency keys are
    # not vLLM's names): they are not compared, nothing is derived
    assert set(m) == VLLM_BENCH_NAMES - {"total_token_throughput", "mean_e2el_ms",
                                         "median_e2el_ms", "p99_e2el_ms"}


def test_the_sglang_jsonl_is_one_run_a_line_under_vllms_names():
    runs = read_result(SGLANG)
    assert [r.line for r in runs] == [1, 2, 3, 4, 5, 6, 7]
    assert all(r.client == "bench_serving" and r.backend == "sglang" for r in runs)
    assert [r.request_rate for r in runs] == [1.0, 2.0, 4.0, 8.0, 16.0, 4.0, 8.0]
    assert [r.completed for r in runs] == [300, 600, 1200, 2400, 3200, 1200, 2400]
    first = runs[0]
    assert first.model_id is None and first.dataset == "random"
    assert (first.input_len, first.output_len, first.range_ratio) == (1024, 1024, 0.0)
    assert (first.total_input_tokens, first.total_output_tokens) == (152612, 160347)
    assert first.metrics == {"median_ttft_ms": 85.74514742940664,
                             "median_itl_ms": 13.638956006616354,
                             "output_throughput": 537.4142851849319,
                             "mean_e2el_ms": 7840.616212638561,  # its mean_e2e_latency_ms
                             "median_e2el_ms": 7819.046192569658}
    sharegpt = runs[5]
    assert sharegpt.dataset == "sharegpt" and sharegpt.input_len is None
    assert sharegpt.total_input_tokens == 269081


def test_sglang_writes_an_infinite_rate_as_infinity():
    runs = read_result(SGLANG_OFFLINE)
    assert len(runs) == 7 and all(math.isinf(r.request_rate) for r in runs)
    assert (runs[1].input_len, runs[1].output_len, runs[1].completed) == (1024, 512, 4000)
    assert runs[0].metrics["output_throughput"] == 4520.698730654741


def test_the_table_sets_each_measured_metric_beside_kvcalcs():
    r = run(VLLM_ARGS)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "metric" in out and "measured" in out and "kvcalc" in out and "ratio" in out
    assert "mean_ttft_ms" in out and "62.43" in out and "347.89" in out
    assert "mean_e2el_ms" not in out  # not measured in this file
    assert "note: the file records no GPU count" in out


def test_json_carries_vllm_bench_serves_names():
    r = run([*VLLM_ARGS, "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["model"] == "llama3-8b" and d["gpu"] == "h100-sxm" and d["engine"] == "vllm"
    (one,) = d["runs"]
    assert set(one["kvcalc"]) == VLLM_BENCH_NAMES
    assert set(one["measured"]) <= VLLM_BENCH_NAMES and set(one["ratio"]) <= set(one["measured"])
    assert one["measured"]["mean_ttft_ms"] == 62.426355000934564
    assert one["measured"]["p99_tpot_ms"] == 33.804889221253696
    assert (one["num_prompts"], one["request_rate"], one["max_concurrency"]) == (10, "inf", None)
    assert (one["input_len"], one["output_len"], one["tp"]) == (137, 187, 1)  # 1369/10, 1867/10
    for m, ratio in one["ratio"].items():
        assert ratio == pytest.approx(one["kvcalc"][m] / one["measured"][m])


def test_csv_columns_are_vllm_bench_serves_names(tmp_path):
    out = tmp_path / "against.csv"
    r = run([*SGLANG_ARGS, "--request-rate", "4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    header = list(rows[0])
    assert header[header.index("side") + 1:] == list(METRICS)
    assert set(header[header.index("side") + 1:]) == VLLM_BENCH_NAMES
    assert [(x["line"], x["side"]) for x in rows] == [
        ("3", "measured"), ("3", "kvcalc"), ("3", "ratio"),
        ("6", "measured"), ("6", "kvcalc"), ("6", "ratio")]
    assert rows[0]["median_ttft_ms"] == "106.06311704"  # 106.06311704032123 to 12 digits
    assert rows[0]["mean_ttft_ms"] == ""  # this client wrote no mean TTFT
    # the file is not silently overwritten
    again = run([*SGLANG_ARGS, "--request-rate", "4", "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.stderr


def test_a_jsonl_keeps_the_runs_that_match_what_is_asked():
    r = run([*SGLANG_ARGS, "--request-rate", "4", "--input-len", "1024", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [x["line"] for x in d["runs"]] == [3] and d["skipped_runs"] == 6
    (one,) = d["runs"]
    assert one["measured"]["output_throughput"] == 2047.9108281108272
    assert one["input_len"] == round(615860 / 1200)  # the run's mean, not the stated 1,024
    assert any("random_range_ratio 0" in n for n in one["notes"])
    assert one["tp"] == 4


def test_a_run_kvcalc_refuses_is_kept_with_the_reason():
    r = run([*SGLANG_ARGS, "--request-rate", "16", "--format", "json"])
    assert r.exit_code == 0, r.output
    (one,) = json.loads(r.stdout)["runs"]
    assert one["measured"]["output_throughput"] == 4288.049348197696
    if one["refusal"] is not None:  # kvcalc's count of the engine's capacity decides
        assert one["kvcalc"] == {} and one["ratio"] == {} and "saturates" in one["refusal"]


def test_another_model_is_one_line_naming_both_and_the_preset_for_it():
    msg = one_line_error(["bench", "llama3.1-8b", "--against", str(VLLM)],
                         "ran meta-llama/Meta-Llama-3-8B-Instruct, not llama3.1-8b")
    assert "kvcalc's preset for it: llama3-8b" in msg


def test_another_length_is_one_line():
    one_line_error([*VLLM_ARGS, "--input-len", "1024"],
                   "ran inputs of 136.9 tokens on average, not --input-len 1,024")
    one_line_error([*SGLANG_ARGS, "--output-len", "128"],
                   "no run in ")
    one_line_error([*SGLANG_ARGS, "--concurrency", "8"], "no concurrency cap")
    one_line_error([*VLLM_ARGS, "--num-prompts", "100"], "ran 10 requests, not --num-prompts 100")


def test_another_gpu_count_or_engine_is_one_line(tmp_path):
    d = json.loads(VLLM.read_text())
    d["tensor_parallel_size"] = 2  # as `vllm bench serve --metadata` would record it
    f = tmp_path / "tp2.json"
    f.write_text(json.dumps(d))
    one_line_error(["bench", "llama3-8b", "--tp", "1", "--against", str(f)],
                   "ran on 2 GPUs (its tensor-parallel size), not --tp 1")
    r = run(["bench", "llama3-8b", "--against", str(f), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["runs"][0]["tp"] == 2
    one_line_error([*SGLANG_ARGS, "--engine", "vllm"], "ran against sglang (its backend)")


@pytest.mark.parametrize("text, message", [
    ('{"model": "llama", "layers": 32}', "is not a vllm bench serve or bench_serving result: "
                                         "it lacks 'completed' and 'duration'"),
    ('[1, 2, 3]', "it holds a JSON list"),
    ('{"backend": "vllm", "completed": 10,', "not JSON"),
    ('{"completed": 1, "duration": 2.0, "mean_ttft_ms": 5}\n{"completed": ', "line 2 is not JSON"),
    ('{"reason": "Server process terminated unexpectedly"}', "it records a failed run"),
    ("", "it is empty"),
])
def test_a_file_that_is_not_a_result_is_one_line(tmp_path, text, message):
    f = tmp_path / "result.json"
    f.write_text(text)
    one_line_error(["bench", "llama3-8b", "--against", str(f)], message)


def test_a_missing_file_is_one_line(tmp_path):
    one_line_error(["bench", "llama3-8b", "--against", str(tmp_path / "nope.json")],
                   "no such file")


def test_the_library_call_needs_no_cli():
    from kvcalc.presets import load_hardware, load_model
    from kvcalc.served.against import against

    got = against(SGLANG, load_model("llama3.3-70b"), load_hardware("h200"), tp=4,
                  request_rate=[1.0])
    (c,) = got.runs
    assert c.run.line == 1 and c.measured["median_itl_ms"] == 13.638956006616354
    assert set(c.kvcalc) == VLLM_BENCH_NAMES
    assert got.engine.name == "sglang"  # from the file's backend
    with pytest.raises(KvcalcError, match="no run in"):
        against(SGLANG, load_model("llama3.3-70b"), load_hardware("h200"), tp=4,
                request_rate=[3.0])
