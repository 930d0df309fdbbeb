"""`kvcalc measure` on the CPU: public columns in JSON and CSV, --compare, the memory
refusal, no-overwrite of reports, and stdout kept clean of progress. Tiny sizes."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.measure import ceilings

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs the `measure` extra (torch)")

PUBLIC_COLUMNS = [
    "device", "torch_version", "cuda_version", "measured_at", "dtype", "impl", "backend", "heads", "kv_heads", "head_dim",
    "seq_len", "batch", "kv_cache_bytes", "bytes_moved", "flops", "median_s", "p10_s", "p90_s",
    "predicted_s", "achieved_bytes_per_s", "ceiling_bytes_per_s", "fraction_of_ceiling",
    "measured_over_predicted", "step", "bound", "l2_regime", "timer", "cuda_graphs", "note",
    "speedup_vs_mha", "predicted_speedup_vs_mha",
]
TINY = ["--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--seq-len", "64", "--batch", "2",
        "--iters", "3", "--warmup", "1", "--device", "cpu"]


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    """Small ceiling buffers keep each run quick (the figures are then not memory ceilings)."""
    monkeypatch.setitem(ceilings.CEILING_BYTES, "cpu", 4 * 2**20)
    if not HAS_TORCH:
        return  # kvcalc.measure.terms needs torch; without it measure refuses before timing
    from kvcalc.measure import terms

    monkeypatch.setattr(terms, "stream_bytes", lambda cache_bytes, working_set=0: 2**20)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@needs_torch
def test_json_public_columns():
    r = invoke("measure", *TINY, "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert set(out) >= {"rows", "device", "ceilings"}
    assert out["device"]["type"] == "cpu"
    assert out["ceilings"]["copy_bytes_per_s"] > 0 and out["ceilings"]["matmul_flops_per_s"] > 0
    (row,) = out["rows"]
    for col in PUBLIC_COLUMNS:
        assert col in row, col
    assert row["kv_cache_bytes"] == 2 * 64 * 2 * 16 * 2 * 4  # batch*seq*kv*hd*(K,V)*fp32
    # 2 x batch 2 x 8 heads x 64 positions x (16 + 16); K/V plus q and o (2 x 8 x 16 x 4 each).
    assert row["flops"] == 2 * 2 * 8 * 64 * 32 == 65_536
    assert row["bytes_moved"] == 32_768 + 2 * (2 * 8 * 16 * 4) == 34_816
    import torch

    assert row["torch_version"] == torch.__version__
    assert row["impl"] in ("grouped", "sdpa")  # auto: the faster correct one on this CPU
    assert (row["dtype"], row["timer"], row["step"]) == ("fp32", "perf_counter", "attention")
    assert row["cuda_graphs"] is False and row["bound"] in ("memory", "compute", "overhead")
    assert row["p10_s"] <= row["median_s"] <= row["p90_s"]
    assert row["measured_over_predicted"] == pytest.approx(row["median_s"] / row["predicted_s"])


@needs_torch
def test_csv_columns_and_stdout_is_only_csv():
    r = invoke("measure", *TINY, "--format", "csv", "--impl", "all", "--step", "both")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 2 * 3  # two steps x grouped, sdpa, repeat
    for col in PUBLIC_COLUMNS:
        assert col in rows[0], col
    assert {row["impl"] for row in rows} == {"grouped", "sdpa", "repeat"}
    assert {row["step"] for row in rows} == {"attention", "layer"}
    sdpa = next(row for row in rows if row["impl"] == "sdpa")
    assert sdpa["backend"] in ("flash (cpu)", "math") and "SDPA ran" in sdpa["note"]
    repeat = next(row for row in rows if row["impl"] == "repeat")
    assert "repeat_interleave" in repeat["note"]


@needs_torch
def test_compare_rows_and_speedups():
    r = invoke("measure", *TINY, "--compare", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [row["kv_heads"] for row in rows] == [8, 2, 1]
    assert all(row["heads"] == 8 for row in rows)
    for row in rows:
        assert row["speedup_vs_mha"] > 0 and row["predicted_speedup_vs_mha"] > 0
    assert rows[0]["speedup_vs_mha"] == 1.0
    # Written out by hand (TINY: batch 2, 8 heads, head_dim 16, seq_len 64, fp32):
    # FLOPs 2 x 2 x 8 x 64 x (16 + 16); bytes: K/V 2 x 64 x kv x 16 x 2 x 4, plus q and o 1,024 each.
    assert [row["flops"] for row in rows] == [65_536] * 3
    assert [row["bytes_moved"] for row in rows] == [131_072 + 2_048, 32_768 + 2_048, 16_384 + 2_048]
    mha = rows[0]
    for row in rows[1:]:
        # The same FLOPs, fewer bytes. Each prediction is its own measured terms (the attention
        # FLOP/s and overhead at each group's shape), so the predicted speed-up is the ratio of
        # the two sums; the memory terms alone shrink exactly with the K/V bytes.
        assert row["flops"] == mha["flops"]
        assert row["predicted_speedup_vs_mha"] == pytest.approx(mha["predicted_s"] / row["predicted_s"])
        kv_bytes = 2 * 64 * row["kv_heads"] * 16 * 2 * 4
        assert row["predicted_kv_s"] == pytest.approx(kv_bytes / row["kv_read_bytes_per_s"])
        assert row["impl"] == mha["impl"]  # --compare: one implementation for every variant


@needs_torch
def test_table_default_and_progress_not_on_stdout():
    r = invoke("measure", *TINY)
    assert r.exit_code == 0, r.output
    # The caption wraps to the table's width, which a loaded host's longer note changes
    # (CI, 2026-11-26: "auto on" and "cpu" on two lines): words, not lines, are compared.
    words = " ".join(r.stdout.split())
    assert "kvcalc measure" in words and "auto on cpu" in words
    assert "measuring" not in r.stdout and "preparing" not in r.stdout


@needs_torch
def test_oversize_request_refused(monkeypatch):
    def never(*a, **k):
        raise AssertionError("allocated before refusing")

    monkeypatch.setattr(ceilings, "measure_ceilings", never)
    r = invoke("measure", "--heads", "32", "--kv-heads", "8", "--seq-len", str(1 << 30),
               "--device", "cpu", "--format", "json")
    assert r.exit_code == 2
    assert r.stdout == ""
    assert "needs" in r.stderr and "free on cpu" in r.stderr and "try --seq-len" in r.stderr


def test_bad_sizes_exit_2():
    r = invoke("measure", "--heads", "32", "--kv-heads", "7")
    assert r.exit_code == 2 and "divisible" in r.stderr
    r = invoke("measure", "--heads", "32", "--kv-heads", "8", "--batch", "0")
    assert r.exit_code == 2 and "positive" in r.stderr
    r = invoke("measure", "--kv-heads", "8")
    assert r.exit_code == 2 and "--heads" in r.stderr


@needs_torch
def test_cuda_without_gpu_exit_2():
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    r = invoke("measure", "--heads", "8", "--kv-heads", "2", "--device", "cuda")
    assert r.exit_code == 2 and "no CUDA device" in r.stderr


@needs_torch
def test_output_not_overwritten_without_force(tmp_path):
    path = tmp_path / "run.csv"
    path.write_text("keep me\n")
    r = invoke("measure", *TINY, "--format", "csv", "--output", str(path))
    assert r.exit_code == 2 and "exists" in r.stderr and "--force" in r.stderr
    assert path.read_text() == "keep me\n"
    r = invoke("measure", *TINY, "--format", "csv", "--output", str(path), "--force")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert rows[0]["kv_heads"] == "2"
    assert r.stdout == ""  # data went to the file


@needs_torch
def test_output_format_from_suffix(tmp_path):
    path = tmp_path / "run.json"
    r = invoke("measure", *TINY, "--output", str(path))
    assert r.exit_code == 0, r.output
    assert json.loads(path.read_text())["rows"][0]["kv_heads"] == 2


@needs_torch
def test_preset_supplies_heads(monkeypatch):
    r = invoke("measure", "--preset", "llama3-8b", "--seq-len", "16", "--batch", "1", "--iters", "2",
               "--warmup", "0", "--l2", "none", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (row,) = out["rows"]
    assert (row["heads"], row["kv_heads"], row["head_dim"], row["layers"]) == (32, 8, 128, 32)
    assert out["config"]["model"] == "llama3-8b"


def test_preset_mla_refused():
    r = invoke("measure", "--preset", "deepseek-v2")
    assert r.exit_code == 2 and "MLA" in r.stderr


@needs_torch
def test_cache_ceilings(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    r = invoke("measure", *TINY, "--cache-ceilings", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ceilings"]["source"] == "measured"
    assert (tmp_path / "kvcalc" / "ceilings.json").exists()
    r = invoke("measure", *TINY, "--cache-ceilings", "--format", "json")
    assert json.loads(r.stdout)["ceilings"]["source"].startswith("cache file")
    # An entry edited by hand (no dtype) is measured again, not trusted or crashed on.
    path = tmp_path / "kvcalc" / "ceilings.json"
    cache = json.loads(path.read_text())
    for entry in cache.values():
        del entry["dtype"]
    path.write_text(json.dumps(cache))
    r = invoke("measure", *TINY, "--cache-ceilings")
    assert r.exit_code == 0 and "ceilings (measured)" in r.stdout, r.output


def test_help_names_units_and_defaults():
    r = invoke("measure", "--help")
    assert r.exit_code == 0
    for flag in ("--heads", "--kv-heads", "--head-dim", "--seq-len", "--batch", "--dtype",
                 "--device", "--impl", "--step", "--warmup", "--iters", "--preset", "--compare",
                 "--cuda-graphs", "--cache-ceilings", "--format", "--output", "--force"):
        assert flag in r.stdout, flag
    assert "default" in r.stdout


def test_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    r = invoke("measure", *TINY)
    assert r.exit_code == 2 and "pip install 'kvcalc[measure]'" in r.stderr


SWEEP = ["--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--iters", "3", "--warmup", "1",
         "--device", "cpu"]


@needs_torch
def test_sweep_measures_every_point_with_one_set_of_ceilings(tmp_path):
    png = tmp_path / "m.png"
    r = invoke("measure", *SWEEP, "--sweep", "--seq-len", "32:128:*2", "--batch", "1,3",
               "--compare", "--format", "json", "--plot", str(png))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    points = {(row["seq_len"], row["batch"]) for row in out["rows"]}
    assert points == {(s, b) for s in (32, 64, 128) for b in (1, 3)}
    assert len(out["rows"]) == 6 * 3  # MHA, GQA, MQA at each point
    for row in out["rows"]:
        # The cache the run allocated, K and V, fp32: written out by hand.
        assert row["kv_cache_bytes"] == row["batch"] * row["seq_len"] * row["kv_heads"] * 16 * 2 * 4
        assert row["speedup_vs_mha"] is not None
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_torch
def test_sizes_need_sweep_for_a_spec_and_bad_specs_exit_2():
    r = invoke("measure", *SWEEP, "--seq-len", "32:128:*2")
    assert r.exit_code == 2 and "--sweep" in r.stderr
    r = invoke("measure", *SWEEP, "--sweep", "--seq-len", "128:32:*2")
    assert r.exit_code == 2 and "--seq-len" in r.stderr


@needs_torch
def test_absurd_head_width_refused_before_any_allocation():
    # 32 x 4,194,304 = 134,217,728 query width: a 64-token probe alone would need ~34 GiB.
    r = invoke("measure", "--heads", "32", "--kv-heads", "8", "--head-dim", "4194304",
               "--seq-len", "1", "--batch", "1", "--device", "cpu")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("kvcalc: error: --heads x --head-dim = 134,217,728 is absurdly "
                                "large (limit 4,194,304)")


@needs_torch
def test_output_and_plot_on_one_file_refused_before_measuring(tmp_path):
    same = tmp_path / "m.png"
    r = invoke("measure", *TINY, "--plot", str(same), "-o", str(same))
    assert r.exit_code == 2 and "--output and --plot name the same file" in r.stderr
    assert not same.exists()


@needs_torch
def test_redirected_stderr_carries_only_the_error_line():
    # No progress bar off a terminal: an error is exactly one line.
    r = subprocess.run([sys.executable, "-m", "kvcalc", "measure", *TINY, "--device", "cuda"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 0:
        pytest.skip("this machine has CUDA")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("kvcalc: error:")


@needs_torch
def test_warmup_has_a_limit_like_iters():
    r = invoke("measure", *TINY[:-4], "--device", "cpu", "--warmup", "10000000000")
    assert r.exit_code == 2 and "warmup=10000000000 is absurdly large" in r.stderr
    # Given twice, an option is refused, not silently the last one.
    r = invoke("measure", *TINY, "--warmup", "2")
    assert r.exit_code == 2 and "--warmup is given more than once" in r.stderr


@needs_torch
def test_hopeless_request_refused_before_any_sdpa_probe(monkeypatch):
    # 4096 heads x 1024 dims x 65,536 tokens of K and V in fp32 is 2.2 TB: refused on the
    # lean plan, before a probe allocates gigabytes to learn whether SDPA copies K/V.
    def no_probe(*args, **kwargs):
        raise AssertionError("probed before refusing")

    from kvcalc.measure import impls

    monkeypatch.setattr(impls, "probe_sdpa", no_probe)
    r = invoke("measure", "--heads", "4096", "--kv-heads", "4096", "--head-dim", "1024",
               "--seq-len", "65536", "--batch", "1", "--device", "cpu")
    assert r.exit_code == 2 and "needs" in r.stderr and "try" in r.stderr, r.output


@needs_torch
def test_layer_step_refusal_names_d_model():
    r = invoke("measure", "--heads", "32", "--kv-heads", "8", "--d-model", "4000000", "--step",
               "layer", "--seq-len", "16", "--batch", "1", "--device", "cpu")
    assert r.exit_code == 2 and "--d-model" in r.stderr and "weights" in r.stderr, r.output


@needs_torch
def test_bracketed_cache_path_is_printed_not_parsed(tmp_path, monkeypatch):
    cache_home = tmp_path / "[/]x"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    for _ in range(2):  # the second run reads the cache and names its path in the caption
        r = invoke("measure", *TINY, "--cache-ceilings")
        assert r.exit_code == 0, r.output
    assert "[/]x" in r.stdout.replace("\n", "")


@needs_torch
def test_sweep_table_tells_points_apart_and_config_has_the_batches_that_ran():
    args = [*SWEEP[:-2], "--device", "cpu", "--sweep", "--seq-len", "32,64"]
    r = invoke("measure", *args, "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["config"]["seq_len"] == [32, 64]
    assert None not in out["config"]["batch"]
    assert out["config"]["batch"] == sorted({row["batch"] for row in out["rows"]})
    r = invoke("measure", *args)
    assert r.exit_code == 0 and "seq_len" in r.stdout and "batch" in r.stdout


@needs_torch
def test_plot_with_nothing_timed_still_prints_the_rows(tmp_path):
    # The cuDNN backend does not exist on a CPU: the row says why, the plot is skipped.
    png = tmp_path / "p.png"
    r = invoke("measure", *TINY, "--impl", "sdpa-cudnn", "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert "sdpa-cudnn" in r.stdout and "was not drawn" in r.stderr and not png.exists()


@needs_torch
def test_a_preset_changed_by_flags_is_renamed():
    r = invoke("measure", "--preset", "llama3-8b", "--heads", "4", "--kv-heads", "4",
               "--head-dim", "16", "--seq-len", "32", "--batch", "1", "--iters", "2",
               "--warmup", "0", "--device", "cpu", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["model"] == "llama3-8b[heads=4,head_dim=16]"


@needs_torch
def test_tp2_gloo_from_the_command_line():
    r = invoke("measure", *TINY, "--tp", "2", "--step", "layer", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [(row["tp"], row["rank"], row["backend"]) for row in rows] == [(2, 0, "gloo"), (2, 1, "gloo")]
    # d_model 128 fp32 activations of batch 2 per all-reduce; K/V: 2 of 4 heads... each rank 1 of 2.
    assert all(row["allreduce_bytes"] == 2 * 128 * 4 for row in rows)
    assert all(row["kv_bytes_held"] == 2 * 64 * 1 * 16 * 2 * 4 for row in rows)
    r = invoke("measure", *TINY, "--tp", "2")
    assert r.exit_code == 0 and "all-reduce" in r.stdout
    for bad in ("0", "x", "2", ):
        args = ["measure", *TINY, "--tp", bad] + (["--sweep"] if bad == "2" else [])
        r = invoke(*args)
        assert r.exit_code == 2 and r.stderr.startswith("kvcalc: error: ") and len(r.stderr.splitlines()) == 1


# --------------------------------------------------------------------------------
# --step mixed: a decode step with a chunk of a prompt (tests/test_measure_mixed.py
# checks its counts and outputs; here the command's wiring)
# --------------------------------------------------------------------------------
from ptyrun import TINY_MODEL  # noqa: E402 (the tiny model the measure tests share)


@needs_torch
def test_mixed_step_from_the_command_line(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_MODEL)
    args = ["measure", "--config", str(config), "--device", "cpu", "--batch", "2", "--seq-len",
            "16", "--prefill-tokens", "4", "--prefill-start", "3", "--iters", "2", "--warmup", "1"]
    r = invoke(*args, "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    decode, mixed = out["rows"]
    assert (decode["step"], mixed["step"]) == ("decode", "mixed")
    assert (mixed["batch"], mixed["seq_len"], mixed["prefill_tokens"], mixed["prefill_start"]) == (
        2, 16, 4, 3)
    assert decode["prefill_flops"] == 0 < mixed["prefill_flops"]
    assert mixed["decode_flops"] == decode["flops"] and mixed["correct"]
    c = out["ceilings"]
    for row in (decode, mixed):
        # the same quotient as the row's, up to the last bit (JSON round-trips the ceilings)
        assert row["predicted_s"] == pytest.approx(max(row["bytes"] / c["read_bytes_per_s"],
                                                       row["flops"] / c["matmul_flops_per_s"]),
                                                   rel=1e-12)
        assert row["bound"] in ("memory", "compute") and row["dominant"] in ("decode", "prefill")
        assert row["device"] and row["torch_version"] and row["measured_at"]
    assert out["measured_prefill_added_s"] == pytest.approx(mixed["median_s"] - decode["median_s"])
    r = invoke(*args, "--step", "mixed", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["step"] for row in rows] == ["decode", "mixed"]
    assert int(rows[1]["prefill_flops_breakdown_attention"]) == mixed["prefill_flops_breakdown"]["attention"]
    r = invoke(*args, "--format", "md")
    assert r.exit_code == 0 and "--step mixed" in r.stdout and "decode + prefill" in r.stdout
    assert "| mixed | 2 x 16 + 4 @ 3 |" in r.stdout


@pytest.mark.parametrize("args,words", [
    (["--preset", "gpt2", "--prefill-tokens", "-3"], "--prefill-tokens must be >= 0"),
    (["--preset", "mamba-2.8b", "--prefill-tokens", "8"], "--step mixed runs dense decoders"),
    (["--preset", "gpt2", "--prefill-start", "4"], "give --prefill-tokens too"),
    (["--preset", "gpt2", "--prefill-tokens", "4", "--heads", "8"], "--heads: not with --step mixed"),
    (["--heads", "4", "--step", "layer", "--prefill-tokens", "4"], "go with --step mixed"),
    (["--prefill-tokens", "4"], "--step mixed needs --preset NAME or --config FILE"),
    (["--preset", "gpt2", "--prefill-tokens", "4", "--gpu", "h100-sxm"], "--gpu: not with"),
])
def test_mixed_step_bad_input_is_one_line(args, words):
    # each refused before torch is imported: the same without the `measure` extra
    r = invoke("measure", "--device", "cpu", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("kvcalc: error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert words in r.stderr


@needs_torch
def test_mixed_step_too_big_for_memory_is_one_line():
    r = invoke("measure", "--preset", "llama3-70b", "--device", "cpu", "--batch", "64",
               "--seq-len", "100000", "--prefill-tokens", "8192")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("kvcalc: error: --step mixed: llama3-70b at batch 64 x 100,000")
    assert "usable" in r.stderr


@needs_torch
def test_measure_json_is_the_functions_as_dict(monkeypatch):
    """`kvcalc measure --format json` is kvcalc.measure(...).as_dict(): the command parses
    its flags into the function's parameters (its defaults where a flag is not given),
    calls it and prints its record. Timings differ run to run, so a real run of each is
    held alike in shape and in every field that is not timed, and the command's printing
    of one record is held to that record's as_dict() exactly."""
    import inspect

    import kvcalc
    from kvcalc.measure import answer

    given = dict(heads=8, kv_heads=2, head_dim=16, seq_len=64, batch=2, iters=3, warmup=1,
                 device="cpu")
    result = kvcalc.measure(**given)
    r = invoke("measure", *TINY, "--format", "json")
    assert r.exit_code == 0, r.output
    mine, lib = json.loads(r.stdout), json.loads(json.dumps(result.as_dict()))
    assert list(mine) == list(lib) == ["device", "ceilings", "config", "rows"]
    moment = ("measured_at", "free_memory_bytes")  # when it ran, what was free then

    def settled(d: dict) -> dict:
        return {k: v for k, v in d.items() if k not in moment}

    for part in ("config", "device", "ceilings"):
        assert list(mine[part]) == list(lib[part]), part
    assert settled(mine["config"]) == settled(lib["config"])
    assert settled(mine["device"]) == settled(lib["device"])
    untimed = ("impl", "backend", "heads", "kv_heads", "head_dim", "seq_len", "batch", "dtype",
               "kv_cache_bytes", "bytes_moved", "flops", "step", "attention", "correct")
    for row, twin in zip(mine["rows"], lib["rows"], strict=True):
        assert list(row) == list(twin)
        assert {k: row[k] for k in untimed} == {k: twin[k] for k in untimed}

    calls = []

    def called(**parameters):
        calls.append({k: v for k, v in parameters.items() if k not in ("progress", "notice")})
        return result

    monkeypatch.setattr(answer, "measure", called)
    r = invoke("measure", *TINY, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == lib
    defaults = {n: p.default for n, p in inspect.signature(kvcalc.measure).parameters.items()
                if n not in ("progress", "notice")}
    assert calls == [{**defaults, **given}]


def test_kvcalc_measure_is_public_names_its_parameters_and_loads_no_torch():
    """kvcalc.measure is the package's (not the kvcalc.measure package, which importing
    does not rebind); its refusals name its parameters, which the command says as flags;
    reaching it imports no torch."""
    code = ("import sys, kvcalc\n"
            "f = kvcalc.measure\n"
            "import kvcalc.measure.config\n"
            "assert kvcalc.measure is f and 'measure' in kvcalc.__all__\n"
            "try:\n"
            "    f(kv_heads=8)\n"
            "except kvcalc.ParameterError as e:\n"
            "    print(e)\n"
            "print('torch' in sys.modules)\n")
    import os
    from pathlib import Path

    import kvcalc

    env = {**os.environ, "PYTHONPATH": str(Path(kvcalc.__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert out.splitlines() == ["give heads (and kv_heads), or preset NAME", "False"]
    r = invoke("measure", "--kv-heads", "8")
    assert r.exit_code == 2 and "give --heads (and --kv-heads), or --preset NAME" in r.stderr
