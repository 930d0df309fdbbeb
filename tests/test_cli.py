"""The analytical CLI: the public JSON, CSV piping, error handling, fast start-up."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import pytest
import typer
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.cli.options import TextFormat
from kvcalc.errors import KvcalcError
from kvcalc.cli.parsing import OptionProblem, reader

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def kvcalc(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """The real console entry point, stdout and stderr kept apart."""
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_estimate_gpt3_json_public_interface():
    r = kvcalc("estimate", "--preset", "gpt3", "--seq-len", "2048", "--kv-dtype", "fp16",
               "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # 2 (K,V) x 96 layers x 96 heads x 128 x 2048 tokens x 2 bytes, written out by hand.
    assert out["kv_cache_bytes"] == 9_663_676_416
    assert out["kv_bytes_per_token"] == 2 * 96 * 96 * 128 * 2
    assert out["kv_cache_bytes_per_device"] == 9_663_676_416
    assert isinstance(out["params"]["total"], int) and isinstance(out["params"]["attention"], int)
    assert abs(out["params"]["total"] - 175e9) / 175e9 < 0.005
    # Attention: 4 x d^2 weights + 4 x d biases per layer.
    assert out["params"]["attention"] == 96 * (4 * 12288 * 12288 + 4 * 12288)
    for key in ("flops", "bytes", "arithmetic_intensity"):
        assert key in out["decode"]
    # One token per layer: q, k, v, o (4 d^2) and the MLP (2 x d x 4d) as multiply-adds, the
    # tied lm_head (vocab x d), and attention over 2048 positions (2 x heads x 2048 x 256).
    d = 12288
    matmul_params = 96 * (4 * d * d + 2 * d * 4 * d) + 50257 * d
    assert out["decode"]["flops"] == 2 * matmul_params + 96 * 2 * 96 * 2048 * (128 + 128)
    assert out["roofline"]["bound"] == "memory"
    # Shazeer's terms at b=1, n=2048, d=12288, h=g=96, k=128.
    assert out["shazeer"]["terms"] == {"1/d": 1 / 12288, "n*g/(d*h)": 2048 / 12288, "1/b": 1.0}
    assert out["shazeer_batched"]["terms"] == {"1/k": 1 / 128, "1/(b*n)": 1 / 2048}


@pytest.mark.parametrize("model", [["--preset", "gpt3"], ["gpt3"],
                                   ["tests/data/hf/meta-llama__Llama-2-7b-hf.json"]])
def test_estimate_gpt3_table_starts_without_torch_or_pandas(model):
    """Nor huggingface_hub: only a Hub id loads it (MODEL as a preset or a file does not)."""
    code = ("import sys; from typer.testing import CliRunner; from kvcalc.cli import app;"
            f"r = CliRunner().invoke(app, ['estimate', *{model!r}]);"
            "assert r.exit_code == 0, r.output;"
            "print(' '.join(m for m in ('torch', 'pandas', 'numpy', 'huggingface_hub') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_csv_and_json_pipe_cleanly(fmt):
    r = kvcalc("estimate", "--preset", "llama3-8b", "--seq-len", "8192", "--batch", "4",
               "--format", fmt)
    assert r.returncode == 0, r.stderr
    if fmt == "json":
        json.loads(r.stdout)
    else:
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert len(rows) == 1
        # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 (K,V) x 2 bytes x 8192 x 4.
        assert int(rows[0]["kv_cache_bytes"]) == 32 * 8 * 128 * 2 * 2 * 8192 * 4


def test_compare_gives_mha_gqa_mqa_with_reductions():
    r = kvcalc("estimate", "--preset", "llama2-7b", "--compare", "--kv-heads", "8",
               "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [int(row["kv_heads"]) for row in rows] == [32, 8, 1]
    assert [float(row["kv_bytes_reduction"]) for row in rows] == [1.0, 4.0, 32.0]


def test_tp_replication_visible_in_json():
    r = kvcalc("estimate", "--preset", "llama3-70b", "--seq-len", "8192", "--tp", "16",
               "--format", "json")
    out = json.loads(r.stdout)
    assert out["kv_heads_per_device"] == 1
    assert out["kv_cache_bytes_per_device"] * 8 == out["kv_cache_bytes"]
    # K and V x 80 layers x 8 K/V heads x 128 x 8192 tokens x 2 bytes (bf16), batch 1.
    assert out["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 8192 * 2 == 2_684_354_560
    # 16 devices, 8 heads: one head per device, each head held by two devices.
    assert out["kv_cache_bytes_per_device"] == 2 * 80 * 1 * 128 * 8192 * 2 == 335_544_320
    assert out["kv_cache_bytes_all_devices"] == 16 * 335_544_320 == 5_368_709_120
    assert any("replicated" in n for n in out["notes"])


def test_fit_llama3_70b_on_h100():
    r = kvcalc("fit", "--preset", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4",
               "--seq-len", "8192", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["max_batch"] > 0 and out["max_seq_len"] > 0
    # Llama-3-70B: 70,553,706,496 parameters (HF safetensors total), bf16, split 4 ways
    # (8 K/V heads divide by 4, so every weight divides evenly); H100 SXM: 80 GiB.
    weights_dev = 2 * 70_553_706_496 // 4
    free = 80 * 2**30 - weights_dev
    assert out["usable_bytes_per_device"] == 80 * 2**30 == 85_899_345_920
    assert out["weight_bytes_per_device"] == weights_dev == 35_276_853_248
    assert out["free_for_kv_bytes_per_device"] == free == 50_622_492_672
    per_seq = 80 * 2 * 128 * 2 * 2 * 8192  # 2 of 8 KV heads per device, bf16
    assert out["max_batch"] == out["free_for_kv_bytes_per_device"] // per_seq
    assert out["max_batch"] == 50_622_492_672 // 671_088_640 == 75
    # One sequence: 80 layers x 2 (K,V) x 2 heads x 128 x 2 bytes = 81,920 bytes per token.
    assert out["max_seq_len"] == 50_622_492_672 // 81_920 == 617_950
    # The floor at tp 2: 70,553,706,496 B of weights + one 8192-token sequence (80 x 2 x
    # 4 heads x 128 x 2 x 8192 = 1,342,177,280) fit in 80 GiB.
    assert 70_553_706_496 + 1_342_177_280 <= 80 * 2**30
    # The verdict is the engine's: at tp 2 it has 0.9 of the 79.19 GiB the driver shows
    # (76,555,644,568 B, ceil), less 70.56 GB of weights (with vLLM's RoPE cache), the
    # profile's 1.97 GB activation peak, 0.59 GB non-torch and 1.41 GB of CUDA graphs
    # (the terms fit --tp 2 prints): 2.02 GB left, over the one request's 1,342,177,280 B.
    left = 76_555_644_568 - 70_555_803_648 - 1_972_895_744 - 590_348_288 - 1_412_694_016
    assert left == 2_023_902_872 > 1_342_177_280
    assert out["fits"] is True and out["floor_fits"] is True
    assert out["min_tp_that_fits"] == 2


def test_fit_with_no_tp_that_fits_writes_null_not_zero():
    # 100M tokens of Gemma-2-9B do not fit at any tp: 0 would read as a tp degree.
    args = ("fit", "--preset", "gemma2-9b", "--seq-len", "100000000")
    r = kvcalc(*args, "--format", "json")
    assert r.returncode == 1, r.stderr  # a valid question answered no
    out = json.loads(r.stdout)
    assert out["fits"] is False and out["min_tp_that_fits"] is None
    r = kvcalc(*args, "--format", "csv")
    row = next(csv.DictReader(io.StringIO(r.stdout)))
    assert row["fits"] == "False" and row["min_tp_that_fits"] == ""
    r = kvcalc("estimate", *args[1:], "--format", "json")
    assert json.loads(r.stdout)["fit"]["min_tp_that_fits"] is None
    table = kvcalc(*args).stdout
    assert any("smallest tp that fits" in line and "none" in line for line in table.splitlines())


def test_output_file_is_not_overwritten(tmp_path):
    target = tmp_path / "gpt3.json"
    assert kvcalc("estimate", "--preset", "gpt3", "--format", "json", "-o", str(target)).returncode == 0
    before = target.read_text()
    r = kvcalc("estimate", "--preset", "gpt3", "--batch", "2", "--format", "json", "-o", str(target))
    assert r.returncode == 2 and "--force" in r.stderr
    assert target.read_text() == before
    r = kvcalc("estimate", "--preset", "gpt3", "--batch", "2", "--format", "json", "-o",
               str(target), "--force")
    assert r.returncode == 0 and json.loads(target.read_text())["inputs"]["batch"] == 2


BAD_INPUT = [
    (["estimate", "--preset", "llama-7b"], "did you mean"),
    (["estimate", "--layers", "32", "--d-model", "4096", "--heads", "32", "--kv-heads", "3"],
     "divisible"),
    (["estimate", "--preset", "gpt3", "--seq-len", "0"], "seq_len"),
    (["estimate", "--preset", "gpt3", "--seq-len", "-5"], "seq_len"),
    (["estimate", "--preset", "gpt3", "--batch", "100000000000"], "batch"),
    (["estimate", "--preset", "gpt3", "--kv-dtype", "fp12"], "unknown dtype"),
    (["estimate", "--preset", "gpt3", "--gpu", "h1000"], "did you mean"),
    (["estimate", "--config", "/nonexistent/config.json"], "config.json"),
    (["estimate", "--preset", "llama3-70b", "--tp", "3"], "tp=3"),
    (["estimate", "--layers", "32"], "--preset"),
    (["estimate", "--preset", "gpt3", "--nope"], "No such option"),
    (["presets", "show", "lama2-7b"], "did you mean"),
    (["presets", "show", "h100"], "h100-sxm"),
    (["estimate", "--preset", "gpt3", "--memory-fraction", "nan"], "fraction"),
    (["estimate", "--preset", "gpt3", "--gpu", "none", "--memory-fraction", "7"], "fraction"),
    (["estimate", "--preset", "gpt3", "--format", "csv", "-o", "/dev/null", "--force"], "regular file"),
    (["estimate", "--preset", "gpt3", "--reserve", "1e99"], "absurdly large"),
    (["estimate", "--preset", "gpt3", "--kv-scale-bytes", "99999999999"], "kv_scale_bytes"),
    (["estimate", "--preset", "gpt3", "--encoder-seq-len", "512"], "has no cross-attention"),
    (["estimate", "--preset", "deepseek-v3", "--kv-heads", "8"], "MLA"),
    (["estimate", "--preset", "llama3-8b", "--heads", "12"], "--kv-heads"),
    (["estimate", "--preset", "gpt3", "--format", "csv", "-o", "/"], "folder"),
]


@pytest.mark.parametrize("args, fragment", BAD_INPUT, ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_bad_input_one_line_exit_2(args, fragment):
    r = kvcalc(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), r.stderr
    assert fragment in lines[0]
    assert "Traceback" not in r.stderr


def test_bad_yaml_files(tmp_path):
    unknown = tmp_path / "m.yaml"
    unknown.write_text("name: m\nsource: test\nlayers: 2\nd_model: 64\nheads: 4\nkv_head: 4\n"
                       "kv_heads: 4\nhead_dim: 16\nd_ff: 128\nvocab: 100\n")
    r = kvcalc("estimate", "--config", str(unknown))
    assert r.returncode == 2 and "kv_head" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    evil = tmp_path / "evil.yaml"
    evil.write_text("!!python/object/apply:os.system ['echo pwned']\n")
    r = kvcalc("estimate", "--config", str(evil))
    assert r.returncode == 2 and "pwned" not in r.stdout + r.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("layers: [1, 2\n")
    assert kvcalc("estimate", "--config", str(broken)).returncode == 2


def test_config_json_missing_field_is_named(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                               "intermediate_size": 11008, "vocab_size": 32000}))
    r = kvcalc("estimate", "--config", str(cfg))
    assert r.returncode == 2 and "num_attention_heads" in r.stderr


def test_presets_list_and_show():
    r = kvcalc("presets", "--format", "json")
    out = json.loads(r.stdout)
    names = {m["name"] for m in out["models"]}
    assert {"gpt3", "llama2-7b", "llama2-70b", "mistral-7b", "deepseek-v3", "t5-11b"} <= names
    assert {"h100-sxm", "h200", "a100-80gb"} <= {h["name"] for h in out["hardware"]}
    assert all(m["source"] for m in out["models"] + out["hardware"])
    shown = kvcalc("presets", "show", "gpt3")
    assert shown.returncode == 0 and "source:" in shown.stdout


def test_version_and_module_entry():
    r = kvcalc("--version")
    assert r.returncode == 0 and r.stdout.startswith("kvcalc ")


def test_every_preset_estimates(tmp_path):
    from kvcalc import presets

    for name in presets.model_names():
        r = run("estimate", "--preset", name, "--format", "json")
        assert r.exit_code == 0, (name, r.output)


def test_compare_falls_back_to_mha_vs_mqa_for_a_prime_head_count():
    # Falcon-7B has 71 query heads: no GQA grouping lies between 1 and 71.
    r = kvcalc("estimate", "--preset", "falcon-7b", "--compare", "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [int(row["kv_heads"]) for row in rows] == [71, 1]


def test_heads_and_kv_heads_override_a_preset_together():
    r = kvcalc("estimate", "--preset", "llama2-7b", "--heads", "16", "--kv-heads", "4",
               "--head-dim", "256", "--format", "json")
    out = json.loads(r.stdout)
    assert (out["model"]["heads"], out["model"]["kv_heads"]) == (16, 4)
    # 32 layers x 4 K/V heads x 256 x 2 (K,V) x 2 bytes per token.
    assert out["kv_bytes_per_token"] == 32 * 4 * 256 * 2 * 2
    mha = json.loads(kvcalc("estimate", "--preset", "llama2-7b", "--heads", "16",
                            "--format", "json").stdout)
    assert mha["model"]["kv_heads"] == 16  # an MHA preset stays MHA


def test_sliding_window_shazeer_uses_the_window():
    out = json.loads(kvcalc("estimate", "--preset", "mistral-7b", "--seq-len", "32768",
                            "--batch", "64", "--format", "json").stdout)
    # Every Mistral layer attends over at most 4096 tokens: n*g/(d*h) = 4096*8/(4096*32).
    assert out["shazeer"]["n"] == 4096
    assert out["shazeer"]["terms"]["n*g/(d*h)"] == 0.25


@pytest.mark.parametrize("args", [["presets"], ["estimate", "--preset", "gpt3"],
                                  ["estimate", "--preset", "gpt3", "--format", "csv"],
                                  # help pages are drawn by rich, which exited 1 on it
                                  ["--help"], ["sweep", "--help"], ["estimate", "-h"],
                                  ["fit", "--help"], ["measure", "--help"]])
def test_a_closed_pipe_is_not_a_failure(args):
    # `kvcalc ... | head`: the reader is gone before kvcalc writes; exit 0, no traceback.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "kvcalc", *args], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert r.returncode == 0 and r.stderr == "", r.stderr


# --- input handling: sizes, defaults, files, output paths ---------------------------
AD_HOC = ["estimate", "--layers", "32", "--d-model", "4096", "--heads", "32"]


@pytest.mark.parametrize("args, message", [
    # --heads 0 used to reach d_model % heads (ZeroDivisionError) in every command.
    (["estimate", "--layers", "32", "--d-model", "4096", "--heads", "0"],
     "heads must be positive, got 0"),
    (["fit", "--layers", "32", "--d-model", "4096", "--heads", "0"],
     "heads must be positive, got 0"),
    (["sweep", "--layers", "32", "--d-model", "4096", "--heads", "0"],
     "heads must be positive, got 0"),
    (["estimate", "--preset", "llama3-8b", "--heads", "-8"], "heads must be positive, got -8"),
    # An explicit zero or empty value is an error, not the ad hoc default.
    (AD_HOC + ["--kv-heads", "0"], "kv_heads must be positive, got 0"),
    (AD_HOC + ["--d-ff", "0"], "d_ff must be positive, got 0"),
    (AD_HOC + ["--vocab", "0"], "vocab must be positive, got 0"),
    (AD_HOC + ["--mlp", ""], "mlp must be one of ('gated', 'plain'), got ''"),
    (["estimate", "--preset", "gpt3", "--kv-scale-bytes", "-1"],
     "kv_scale_bytes must be >= 0, got -1"),
    (["fit", "--preset", "gpt3", "--reserve", "9" * 5000], "has over 40 digits"),
    (["fit", "--preset", "gpt3", "--reserve", "1e999999999"], "absurdly large (limit 1 EiB)"),
    (["fit", "--preset", "gpt3", "--reserve", "2EiB"], "absurdly large (limit 1 EiB)"),
    # 200 GiB on an 80 GiB H100 (85,899,345,920 bytes).
    (["fit", "--preset", "llama3-8b", "--reserve", "200GiB"],
     "reserve of 214,748,364,800 B exceeds the memory of h100-sxm (85,899,345,920 B)"),
    (["estimate", "--preset", "llama3-8b", "--reserve", "50GiB", "--memory-fraction", "0.5"],
     "exceeds the usable memory of h100-sxm (85,899,345,920 B x memory fraction 0.5 = "
     "42,949,672,960 B)"),
    (["estimate", "--config", "/dev/zero"], "/dev/zero: not a regular file"),
], ids=lambda a: " ".join(a)[:60] if isinstance(a, list) else None)
def test_bad_values_are_one_line_errors(args, message):
    r = kvcalc(*args, timeout=20)  # --reserve 1e999999999 used to hang
    assert (r.returncode, r.stdout) == (2, "")
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), r.stderr
    assert message in lines[0]


def test_reserve_units_up_to_the_limit_they_name():
    from kvcalc.cli.options import parse_size

    assert parse_size("1EiB") == 2**60
    assert parse_size("1PB") == 10**15
    assert parse_size("2PiB") == 2 * 2**50
    assert parse_size("1.5GiB") == 3 * 2**29
    assert parse_size("1e18") == 10**18
    assert parse_size("0e999999") == 0


def test_a_fifo_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.yaml"
    os.mkfifo(fifo)
    r = kvcalc("estimate", "--config", str(fifo), timeout=20)
    assert r.returncode == 2
    assert r.stderr == f"kvcalc: error: {fifo}: not a regular file (a device, FIFO or socket); " \
                       "give a file on disk\n"


def test_gpu_none_json_has_null_roofline_and_fit():
    out = json.loads(kvcalc("estimate", "--preset", "gpt3", "--gpu", "none", "--format",
                            "json").stdout)
    assert out["roofline"] is None and out["fit"] is None
    mla = json.loads(kvcalc("estimate", "--preset", "deepseek-v3", "--format", "json").stdout)
    assert mla["shazeer"] is None and mla["shazeer_batched"] is None


def test_presets_show_strips_the_name_like_preset_does():
    r = kvcalc("presets", "show", " gpt3 ", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "gpt3"


def test_overriding_a_preset_renames_it_and_says_so_in_the_source():
    r = kvcalc("estimate", "--preset", "llama2-7b", "--layers", "2", "--d-model", "128",
               "--format", "json")
    model = json.loads(r.stdout)["model"]
    assert model["name"] == "llama2-7b[layers=2,d_model=128]"
    assert model["source"] == ("huggingface.co/meta-llama/Llama-2-7b-hf config.json, "
                               "modified by flags: --layers 2, --d-model 128")
    # --kv-heads adds its variant suffix after the overrides, as gpt3[MQA] has it.
    r = kvcalc("estimate", "--preset", "llama2-7b", "--layers", "2", "--kv-heads", "8",
               "--format", "csv")
    row = next(csv.DictReader(io.StringIO(r.stdout)))
    assert (row["model"], row["kv_heads"], row["layers"]) == ("llama2-7b[layers=2][GQA-8]", "8", "2")
    # A flag equal to the preset's value changes nothing, so nothing is renamed.
    r = kvcalc("estimate", "--preset", "llama2-7b", "--layers", "32", "--format", "json")
    assert json.loads(r.stdout)["model"]["name"] == "llama2-7b"
    # The table shows the name as written, not as rich markup.
    r = kvcalc("estimate", "--preset", "llama2-7b", "--layers", "2", "--gpu", "none")
    assert r.returncode == 0 and "llama2-7b[layers=2]" in r.stdout


def test_kv_heads_flag_changes_every_layer_of_a_model_described_layer_by_layer():
    from kvcalc.presets import presets_dir

    config = str(presets_dir() / "hf" / "openai__gpt-oss-20b.json")  # the installed presets
    r = run("estimate", "--config", config, "--kv-heads", "1", "--seq-len", "4096",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["model"]["name"], out["model"]["kv_heads"]) == ("openai/gpt-oss-20b[MQA]", 1)
    # config.json: 24 layers, head_dim 64; now 1 K/V head in each (it has 8): K and V x
    # 24 layers x 1 head x 64 x 2 bytes (bf16).
    assert out["kv_bytes_per_token"] == 2 * 24 * 1 * 64 * 2 == 6144
    # Its shape is its layers: a flag cannot change it through one number.
    r = run("estimate", "--config", config, "--layers", "2")
    assert r.exit_code != 0
    assert "is described layer by layer: layers cannot be changed by a flag" in r.stderr


def test_output_paths_with_brackets_are_printed_as_named(tmp_path):
    (tmp_path / "[").mkdir()
    for name in ("[/]v.json", "[red]a.json"):
        r = subprocess.run([sys.executable, "-m", "kvcalc", "estimate", "--preset", "gpt3",
                            "--format", "json", "-o", name], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        assert (r.returncode, r.stderr) == (0, f"wrote {name}\n")
        assert json.loads((tmp_path / name).read_text())["model"]["name"] == "gpt3"


# --- first run as a newcomer (issue 13) ------------------------------------------------
def test_no_arguments_prints_an_overview_and_exits_0():
    r = kvcalc()
    assert r.returncode == 0 and "kvcalc estimate --preset llama3-8b" in r.stdout and not r.stderr
    assert kvcalc("-h").returncode == 0 and kvcalc("estimate", "-h").returncode == 0
    assert kvcalc("--version").stdout.startswith("kvcalc ")


def test_estimate_opens_with_a_headline_and_fits_80_columns():
    r = subprocess.run([sys.executable, "-m", "kvcalc", "estimate", "--preset", "llama3-8b"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "80"})
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) <= 24 and max(map(len, lines)) <= 80
    # The answer in two lines (issue #42 point B), the table's title on the third.
    assert lines[:2] == [
        "llama3-8b, 8,192 tokens x 1: KV cache 1.07 GB / 1 GiB; 8.03B parameters; on",
        "h100-sxm it fits 53.88 requests at once, with vllm 7.654 ms/token, 131 tokens/s."]
    assert lines[2].startswith("llama3-8b (GQA, 8 K/V heads, 32 layers)")


def test_a_model_that_does_not_fit_says_so_and_what_would_fit():
    r = subprocess.run([sys.executable, "-m", "kvcalc", "estimate", "--preset", "gpt3"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "80"})
    lines = r.stdout.splitlines()
    assert r.returncode == 0  # the answer is no; estimate still answers
    assert lines[:2] == [
        "gpt3, 2,048 tokens x 1 sequence: KV cache 9.66 GB / 9 GiB; 175B parameters; on",
        "h100-sxm it does not fit (KV short by 287 GB / 268 GiB); fits at tp 6."]
    # The rest is in the table: the engine's count, the fix, the time if it ran.
    words = " ".join(r.stdout.split())
    assert "vLLM 0.33 at 2,048 tokens does not start (KV short by 287 GB / 268 GiB)" in words
    assert "would start with --tp 6: 9.23 requests" in words
    assert "per output token if it ran 130.5 ms" in words


def test_every_presets_answer_fits_two_lines_of_80_columns():
    """Each model preset on one device, on eight with a long batch, and with no device:
    the headline wraps to at most two lines at 80 columns, its clauses kept in order
    (what goes first: bytes per token, the engine's name, per-device bytes)."""
    import kvcalc as api
    from kvcalc.presets import model_names
    from kvcalc.report.render import wrap
    from kvcalc.report.tables import headline

    for name in model_names():
        for kw in ({"hardware": "h100-sxm"}, {"hardware": "none"},
                   {"hardware": "h100-sxm", "tp": 8, "batch": 64, "seq_len": 131072}):
            try:
                est = api.figures(name, **kw)
            except KvcalcError:  # tp 8 does not divide falcon-7b's 71 heads
                continue
            text = headline(est)
            lines = wrap(text, 80)
            assert len(lines) <= 2 and max(map(len, lines)) <= 80, (name, kw, lines)
            assert text.startswith(f"{name}, ") and text.endswith(".")
            assert ("parameters" in text) and ("KV cache" in text or "state" in text)
            if kw["hardware"] != "none":
                assert " it fits" in text or " it does not fit" in text


@pytest.mark.parametrize("suffix, check", [
    (".json", lambda t: json.loads(t)["kv_cache_bytes"] > 0),
    (".csv", lambda t: t.startswith("model,attention,")),
    (".md", lambda t: "| KV cache per token |" in t),
])
def test_the_output_suffix_picks_the_format(tmp_path, suffix, check):
    out = tmp_path / f"r{suffix}"
    r = kvcalc("estimate", "--preset", "llama3-8b", "-o", str(out))
    assert r.returncode == 0 and check(out.read_text())


@pytest.mark.parametrize("args, fragment", [
    (["--preset", "gpt3", "--preset", "gpt3"], "--preset is given more than once"),
    (["--preset", "gpt3", "--reserve", "1.5B"], "not a whole number of bytes"),
    (["--preset", "gpt3", "--gpu", "none", "--memory-fraction", "0.9"], "--gpu none has none"),
    (["--preset", "gpt3", "--layers", "x"], "--layers expects a whole number of layers, got 'x'"),
    (["--preset", "gpt3", "--format", "x"], "--format expects one of table, json, csv, md"),
    (["--config", "/"], "is a folder"),
])
def test_bad_input_in_kvcalcs_words(args, fragment):
    r = kvcalc("estimate", *args)
    assert r.returncode == 2 and fragment in r.stderr and r.stderr.count("\n") == 1


def test_closed_stdout_ascii_stdout_and_columns_0():
    base = [sys.executable, "-m", "kvcalc", "estimate", "--preset", "gpt3"]
    r = subprocess.run(" ".join(base) + " >&-", shell=True, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    r = subprocess.run(base + ["--detail"], capture_output=True, cwd=ROOT,
                       env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and b"ms" in r.stdout
    r = subprocess.run(base, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "0"})
    assert r.returncode == 0 and "gpt3" in r.stdout


def test_python_api_takes_preset_names():
    import kvcalc as api

    est = api.estimate(model="gpt3", seq_len=2048, kv_dtype="fp16")  # on an H100 SXM
    assert est.cache.bytes == 9_663_676_416 and est.min_tp_that_fits == 6
    est = api.figures("gpt3", 2048, kv_dtype="fp16", hardware="h100-sxm")
    assert est.cache.bytes == 9_663_676_416 and est.min_tp_that_fits == 6
    assert api.kv_cache("gpt3", 2048, kv_dtype="fp16").bytes == 9_663_676_416


# --- fit as the serving engine counts it (issue: serving capacity) ---------------------
def test_fit_engine_mode_reproduces_a_public_vllm_log():
    """vllm-project/vllm#10517 (vLLM 0.6.4.post1, V0, no chunked prefill): Llama-3.1-8B on
    one RTX 3090 at gpu_memory_utilization 0.9 and max_model_len 20,000 logged 1,952 blocks
    (31,232 tokens), 1.56x concurrency, weights 14.9888 GiB, activations 2.07 GiB,
    non-torch 0.35 GiB, KV cache 3.81 GiB (tests/data/vllm/llama31-8b-rtx3090-20k.yaml)."""
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "rtx3090", "--max-model-len", "20000",
               "--gpu-memory-utilization", "0.9", "--max-num-batched-tokens", "20000",
               "--vllm-version", "0.6.4.post1", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert isinstance(out["kv_cache_tokens"], int) and isinstance(out["num_gpu_blocks"], int)
    assert isinstance(out["max_concurrency"], float)
    assert abs(out["kv_cache_tokens"] / 31_232 - 1) <= 0.10
    assert abs(out["max_concurrency"] / 1.56 - 1) <= 0.10
    gib = 2 ** 30
    logged = {"weights": 14.9888, "activation_peak": 2.07, "non_torch": 0.35, "kv_cache": 3.81}
    for term, value in logged.items():
        assert abs(out["memory"][term] / gib - value) <= 0.5, term
    assert set(out["memory"]) >= {"weights", "activation_peak", "non_torch", "cuda_graphs",
                                  "kv_cache"}


def test_fit_engine_refuses_a_max_model_len_that_does_not_fit():
    # Valid input answered no: exit 1, and the memory table anyway with the fixes.
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "rtx3090", "--max-model-len", "131072")
    assert r.returncode == 1 and r.stderr == ""
    for term in ("weights", "activation peak", "non-torch", "CUDA graphs", "shortfall",
                 "does not start", "would start with", "--max-model-len"):
        assert term in r.stdout
    out = json.loads(kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "rtx3090",
                            "--max-model-len", "131072", "--format", "json").stdout)
    assert out["fits"] is False and "maximum model length" in out["refusal"]


def test_plain_fit_says_what_it_leaves_out():
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "activation peak" in json.loads(r.stdout)["leaves_out"]


def test_fit_latency_targets_give_the_largest_batch_meeting_both():
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--seq-len", "4096",
               "--ttft-ms", "500", "--tpot-ms", "20", "--format", "json")
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)["max_batch_for_slo"]
    ok = json.loads(kvcalc("estimate", "--preset", "llama3.1-8b", "--seq-len", "4096",
                           "--batch", str(b), "--format", "json").stdout)["latency"]
    over = json.loads(kvcalc("estimate", "--preset", "llama3.1-8b", "--seq-len", "4096",
                             "--batch", str(b + 1), "--format", "json").stdout)["latency"]
    assert ok["ttft_s"] <= 0.5 and ok["tpot_s"] <= 0.02
    assert over["ttft_s"] > 0.5 or over["tpot_s"] > 0.02


def test_weight_dtype_with_group_size_and_weights_as_stored():
    r = kvcalc("estimate", "--preset", "llama3.1-8b", "--weight-dtype", "int4", "--group-size",
               "128", "--format", "json")
    out = json.loads(r.stdout)
    assert out["weight_quantization"] == "adhoc int4 g128"
    # 4-bit values plus an fp16 scale and a 4-bit zero per 128 weights: under 0.3 B a weight
    # for the quantized matrices, embeddings and lm_head kept in bf16.
    assert out["weight_bytes"] < out["params"]["total"] * 2 // 2
    stored = json.loads(kvcalc("estimate", "--preset", "gpt-oss-20b", "--format", "json").stdout)
    assert stored["weight_bytes"] == 13_761_264_768  # the checkpoint's total_size
    r = kvcalc("estimate", "--preset", "llama3.1-8b", "--group-size", "128")
    assert r.returncode == 2 and "--group-size needs a quantized --weight-dtype" in r.stderr


def test_presets_families_lists_the_model_types_config_reads():
    r = kvcalc("presets", "--families", "--format", "json")
    assert r.returncode == 0, r.stderr
    types = {row["model_type"] for row in json.loads(r.stdout)}
    assert len(types) >= 30
    assert {"gemma3", "gpt_oss", "llama4", "qwen3_moe", "qwen3_next", "jamba", "mamba",
            "falcon_mamba", "lfm2", "deepseek_v3", "llava", "mistral3"} <= types


def test_gpu_takes_a_hardware_yaml_file(tmp_path):
    """A device of one's own, in the presets' schema: the same figures as the preset it
    copies; unknown keys are refused by name."""
    from kvcalc.presets import presets_dir

    mine = tmp_path / "my3090.yaml"
    text = (presets_dir() / "hardware" / "rtx3090.yaml").read_text()
    mine.write_text(text.replace("name: rtx3090", "name: my3090") if "name:" in text else text)
    args = ["fit", "--preset", "llama3.1-8b", "--max-model-len", "20000", "--format", "json"]
    want = json.loads(kvcalc(*args, "--gpu", "rtx3090").stdout)["kv_cache_tokens"]
    got = kvcalc(*args, "--gpu", str(mine))
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["kv_cache_tokens"] == want
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "bandwidth_gbs: 900\n")
    r = kvcalc(*args, "--gpu", str(bad))
    assert r.returncode == 2 and "unknown key 'bandwidth_gbs'" in r.stderr


def test_a_window_as_long_as_the_context_is_said(tmp_path):
    cfg = json.loads((ROOT / "tests" / "data" / "hf" / "mistralai__Mistral-7B-v0.1.json").read_text())
    cfg.update(sliding_window=8192, max_position_embeddings=4096)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = kvcalc("estimate", "--config", str(path), "--seq-len", "4096", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert any("8,192-token window is not shorter than the model's max context (4,096)" in n
               for n in json.loads(r.stdout)["notes"])


# PyYAML composes recursively: libyaml through 6.0.3 overflows the C stack on 40,000
# levels (exit 139, no message), 6.0.4 refuses at 1,000 levels in its own words. kvcalc
# bounds the nesting itself first, so every release gives kvcalc's line. Run as a
# subprocess: on an old PyYAML a regression would kill the test process.
@pytest.mark.parametrize("flag", ["--config", "--gpu"])
@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")], ids=["flow-list", "flow-map"])
def test_deeply_nested_yaml_is_refused_in_kvcalcs_words(tmp_path, flag, opening, closing):
    import yaml

    deep = tmp_path / "deep.yaml"
    deep.write_text("layers: " + opening * 40_000 + "1" + closing * 40_000 + "\n")
    args = ["estimate", flag, str(deep)] + (["--preset", "gpt3"] if flag == "--gpu" else [])
    r = kvcalc(*args)
    assert r.returncode == 2, (yaml.__version__, r.returncode, r.stderr[-300:])
    assert r.stderr == (f"kvcalc: error: {deep}: malformed YAML: nested too deeply (over 100 "
                        f"levels at line 1, column {9 + 99 * len(opening)})\n"), yaml.__version__
    assert r.stdout == ""


def test_nesting_limit_counts_block_levels_and_lets_real_files_through(tmp_path):
    from kvcalc.errors import KvcalcError
    from kvcalc.ground.yamlread import MAX_NESTING, parse

    # 101 block mappings, each on its own line
    text = "\n".join(" " * i + f"k{i}:" for i in range(MAX_NESTING + 1)) + " 1\n"
    with pytest.raises(KvcalcError, match=r"nested too deeply \(over 100 levels at line 101,"):
        parse(text, "x.yaml")
    # exactly MAX_NESTING levels, with more than MAX_NESTING opening characters in it
    text = "a: " + "[" * (MAX_NESTING - 1) + "1" + "]" * (MAX_NESTING - 1) + "\n# " + "-" * 200
    data = parse(text, "x.yaml")
    for _ in range(MAX_NESTING):  # the mapping, then 99 lists
        data = data["a"] if isinstance(data, dict) else data[0]
    assert data == 1


@pytest.mark.parametrize("flag", ["--show-completion", "--install-completion"])
@pytest.mark.parametrize("shell, message", [
    (None, "cannot tell which shell this is; run it from the shell to complete in "
           "(bash, zsh, fish, powershell, pwsh)"),
    ("tcsh", "kvcalc completes bash, zsh, fish, powershell, pwsh; this shell is tcsh"),
])
def test_completion_without_a_known_shell_is_one_line(monkeypatch, capsys, flag, shell, message):
    """typer printed "Shell  not supported." and exited 1; nothing is installed."""
    import kvcalc.cli as cli

    monkeypatch.setattr(cli, "_detected_shell", lambda: shell)
    with pytest.raises(SystemExit) as e:
        app([flag], standalone_mode=True)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err == f"kvcalc: error: {flag}: {message}\n"


def test_completion_script_for_the_detected_shell():
    import kvcalc.cli as cli

    if cli._detected_shell() != "bash":
        pytest.skip("not run under bash")
    r = kvcalc("--show-completion")
    assert r.returncode == 0 and "complete -o default -F _kvcalc_completion kvcalc" in r.stdout


def test_kvcalc_alone_fits_80_columns():
    r = kvcalc()
    assert r.returncode == 0 and max(map(len, r.stdout.splitlines())) <= 80


def test_fit_json_gives_the_utilization_as_a_number():
    out = json.loads(kvcalc("fit", "--preset", "llama3-8b", "--max-model-len", "8192",
                            "--gpu-memory-utilization", "0.85", "--format", "json").stdout)
    assert out["gpu_memory_utilization"] == 0.85


def test_fit_engine_count_refuses_batch_instead_of_ignoring_it():
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--max-model-len", "4096", "--batch", "4")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("kvcalc: error: --batch sizes the plain fit;")
    assert r.stderr.count("\n") == 1


@pytest.mark.parametrize("target", [["--ttft-ms", "500"], ["--tpot-ms", "20"]])
def test_latency_targets_count_requests_of_the_engines_length(target):
    """--max-model-len 4096 once priced each request at the model's whole 131,072-token
    context (batch 0 where --seq-len 4096 gave 4): both now price 4,096-token requests."""
    def slo(*flags):
        r = kvcalc("fit", "--preset", "llama3.1-8b", *flags, *target, "--format", "json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    plain, engine = slo("--seq-len", "4096"), slo("--max-model-len", "4096")
    assert engine["max_batch_for_slo"] == min(plain["max_batch_for_slo"], engine["max_num_seqs"],
                                              int(engine["max_concurrency"]))
    assert engine["max_batch_for_slo"] > 0


def _at_80_columns(*args):
    r = subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                       text=True, timeout=60, cwd=ROOT, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    return r.stdout


def test_compare_at_80_columns_never_splits_a_number():
    """It once printed "5,698,228,2" over "24": too wide, each variant gets its own table."""
    out = _at_80_columns("estimate", "--preset", "llama2-7b", "--compare")
    for whole in ("6,738,415,616", "5,933,109,248", "5,698,228,224", "15.4 GB / 14.3 GiB",
                  "1.14x less", "32x less"):
        assert whole in out, whole


def test_sweep_table_at_80_columns_shows_every_row():
    """It once showed no rows: each row is a table of its own, names beside values."""
    out = _at_80_columns("sweep", "--preset", "llama3-8b", "--seq-len", "1024,2048",
                         "--format", "table")
    assert "row 1" in out and "row 2" in out
    assert "134217728" in out and "268435456" in out  # each row's KV cache bytes, whole


@pytest.mark.parametrize("command", ["estimate", "fit", "sweep", "measure", "presets"])
def test_help_at_80_columns_names_every_option_whole(command):
    """rich's help panels cut "--gpu-memory-utilizat…" at 80 columns; click's layout
    keeps each option whole and wraps the descriptions."""
    from typer.main import get_command

    out = _at_80_columns(command, "--help")
    assert "…" not in out
    params = get_command(app).commands[command].params
    for p in params:
        for opt in getattr(p, "opts", []):
            if opt.startswith("--"):
                assert opt in out, opt
    # presets prints only: its --format says nothing of an -o it does not have
    if command == "presets":
        assert "-o" not in out


# --- typer, through its public API only -------------------------------------------
# kvcalc's CLI leans on three things typer does; each is checked here so that a typer
# release that changes one fails these tests by name instead of changing kvcalc's
# messages. pyproject.toml bounds typer to the minor series these ran on.

def test_typer_is_a_release_these_tests_cover():
    import re as _re
    from importlib.metadata import requires, version

    import kvcalc as _kvcalc

    # The checkout's pyproject.toml where there is one (an editable install's metadata
    # may predate it), else the installed wheel's metadata.
    pyproject = Path(_kvcalc.__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        spec = _re.search(r'"(typer[^"]*)"', pyproject.read_text()).group(1)
    else:
        spec = next(r for r in requires("kvcalc") if _re.match(r"typer\b", r))
    low = _re.search(r">=([0-9.]+)", spec)
    high = _re.search(r"<([0-9.]+)", spec)
    assert low and high, f"kvcalc must bound typer above and below, not {spec!r}"
    low, high = (tuple(int(x) for x in m.group(1).split("."))[:2] for m in (low, high))
    have = tuple(int(x) for x in _re.findall(r"[0-9]+", version("typer"))[:2])
    assert low <= have < high, (
        f"typer {version('typer')} is outside {spec}: run this file against it, "
        "fix kvcalc/cli/parsing.py where it fails, then move the bound")


def test_no_typer_internals_in_kvcalc():
    """No private module or attribute of typer (typer._click, _runtime_param,
    type_descriptor, registered_commands): those change without notice."""
    from pathlib import Path as _Path

    banned = ("typer._", "_runtime_param", "type_descriptor", "registered_commands",
              "registered_groups", "typer.main.")
    import kvcalc as _kvcalc

    root = _Path(_kvcalc.__file__).resolve().parent
    found = [f"{p.relative_to(root.parent)}: {b}" for p in sorted(root.rglob("*.py"))
             for b in banned if b in p.read_text(encoding="utf-8")]
    assert not found, found


def test_typer_hands_a_parser_problem_through_untouched():
    """typer runs every `parser=` inside click's type; kvcalc's OptionProblem must come
    out as raised (click's "Invalid value" would replace kvcalc's words), a parsed value
    must arrive as the parser returned it, and a choice (kvcalc's --format) as its
    member, or None when not given."""

    got = {}
    tiny = typer.Typer()

    @tiny.command()
    def main(n: Annotated[int, typer.Option("--n", parser=reader(int, "--seq-len"))] = 1,
             fmt: Annotated[Optional[TextFormat], typer.Option(
                 "--format", parser=reader(TextFormat, "--format"))] = None):
        got["n"], got["fmt"] = n, fmt

    ok = CliRunner().invoke(tiny, ["--n", "32k", "--format", "JSON"])
    assert ok.exit_code == 0, ok.output
    assert got["n"] == 32_000 and got["fmt"] is TextFormat.json
    ok = CliRunner().invoke(tiny, ["--n", "2"])
    assert ok.exit_code == 0 and got["fmt"] is None
    bad = CliRunner().invoke(tiny, ["--n", "12q"])
    assert isinstance(bad.exception, OptionProblem), bad.output
    assert str(bad.exception).startswith("--seq-len expects a whole number of tokens")
    bad = CliRunner().invoke(tiny, ["--format", "xml"])
    assert isinstance(bad.exception, OptionProblem), bad.output
    assert str(bad.exception) == "--format expects one of table, json, csv, md; got 'xml'"


def test_analytical_commands_load_neither_pydantic_nor_the_heavy_libraries():
    """The start-up budget (README "Start-up"): typer 0.28 runs options without pydantic,
    and estimate needs no numpy, pandas, torch, matplotlib or the MCP SDK (`python -X
    importtime`)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvcalc", "estimate",
                        "--preset", "gpt3", "--format", "json"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert json.loads(r.stdout)["kv_cache_bytes"] == 9_663_676_416
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "typer" in imported and "kvcalc" in imported
    heavy = {"pydantic", "numpy", "pandas", "torch", "matplotlib", "mcp", "mcp_types"}
    assert not imported & heavy, sorted(imported & heavy)


def test_the_collector_is_off_for_start_up_and_on_for_the_command():
    """The kvcalc process starts with Python's cyclic collector off (its passes over the
    objects every import leaves were a fifth of the start, README "Start-up"), runs the
    command with it on over what the command makes, and freezes what lives at the end.
    A program that imports kvcalc.cli keeps its collector as it was."""
    code = ("import gc, sys\nsys.argv = ['/usr/bin/kvcalc', 'estimate', '--preset', 'gpt3', "
            "'--format', 'json']\nimport kvcalc.cli\nseen = [gc.isenabled()]\n"
            "import kvcalc.estimate\nm = sys.modules['kvcalc.estimate']\n"
            "real = m.estimate\ndef spy(*a, **k):\n    seen.append(gc.isenabled())\n"
            "    seen.append(gc.get_freeze_count())\n    return real(*a, **k)\n"
            "m.estimate = spy\ntry:\n    kvcalc.cli.app(prog_name='kvcalc')\n"
            "except SystemExit as e:\n    seen.append(e.code)\n"
            "seen.append(gc.get_freeze_count())\nprint(seen, file=sys.stderr)")
    last = _gpt3_estimate_json_run(code)
    # off while importing; on in the command, start-up's objects frozen; exit 0; and
    # at the end the command's objects frozen too
    off, on, frozen_in_command, code, frozen_at_end = eval(last)
    assert (off, on, code) == (False, True, 0), last
    assert 10_000 < frozen_in_command < frozen_at_end, last
    r = subprocess.run([sys.executable, "-c", "import gc, kvcalc.cli; print(gc.isenabled(), "
                        "gc.get_freeze_count())"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert r.stdout.split() == ["True", "0"], r.stderr


def test_estimate_never_reads_a_text_signature():
    """A dataclass without a docstring gets one from inspect.signature(cls), and a record
    (init=False) has only object.__init__'s text signature: reading it compiles
    tokenize's regexes, 13 ms of a 150 ms start. kvcalc.ground.record names each record first."""
    code = ("import sys, tokenize; sys.argv = ['kvcalc', 'estimate', '--preset', 'gpt3', "
            "'--format', 'json']\nfrom kvcalc.cli import app\ntry:\n    app(prog_name='kvcalc')\n"
            "except SystemExit:\n    pass\nprint(tokenize._compile.cache_info().currsize, "
            "file=sys.stderr)")
    assert _gpt3_estimate_json_run(code) == "0"


def _gpt3_estimate_json_run(code: str) -> str:
    """Run `code` (which runs `kvcalc estimate --preset gpt3 --format json`) in a fresh
    interpreter; check its JSON; return the last line it wrote to stderr."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert json.loads(r.stdout)["kv_cache_bytes"] == 9_663_676_416, r.stderr
    return r.stderr.strip().splitlines()[-1]


def test_plain_options_reads_every_simple_option_in_kvcalcs_words():
    """Every non-switch option of every command gets kvcalc's reader: a wrong value
    to any of them is one `kvcalc: error:` line naming the flag, never pydantic's."""
    from typer.testing import CliRunner as _Runner

    from kvcalc.cli import app as _app

    for command, flag in [("estimate", "--tp"), ("fit", "--gpu-memory-utilization"),
                          ("sweep", "--kv-scale-bytes"), ("estimate", "--layers"),
                          ("measure", "--iters"), ("presets", "--format")]:
        r = _Runner().invoke(_app, [command, flag, "nonsense!"])
        assert r.exit_code == 2, (command, flag, r.output)
        assert "Input should" not in r.output and "Invalid value" not in r.output
