"""kvcalc sweep: SPEC parsing, rows equal to kvcalc.figures(), properties, CSV, plot and CLI."""

from __future__ import annotations

import csv
import importlib.util
import io
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvcalc import figures
from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.report.csv_json import rows_to_csv
from kvcalc.layers import Latent, MoE
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.sweep.compute import chunks, iter_rows
from kvcalc.sweep.csv import write_csv
from kvcalc.sweep.grammar import parse_spec
from kvcalc.sweep.plan import plan_sweep
from kvcalc.sweep.plot_selection import PlotSelection

ROOT = Path(__file__).resolve().parent.parent

# A small device, so that some rows fit and some do not, and a high-FLOP one
# next to it is not needed: big batches make decode compute-bound on this one.
GPU = Hardware(name="test-gpu", memory_bytes=24 * 2**30,
               memory_bandwidth_bytes_per_s=1_000_000_000_000,
               flops_per_s={"fp32": 20_000_000_000_000, "bf16": 150_000_000_000_000,
                            "fp8": 300_000_000_000_000, "int8": 300_000_000_000_000})

ADHOC = ModelSpec.uniform(name="adhoc", layers=32, d_model=4096, heads=32, kv_heads=32,
                          head_dim=128, d_ff=16384, vocab=32000, mlp="plain")
MISTRAL = ModelSpec.uniform(name="mistral-like", layers=32, d_model=4096, heads=32, kv_heads=8,
                            head_dim=128, d_ff=14336, vocab=32000, sliding_window=4096)
GEMMA2 = ModelSpec.uniform(name="gemma2-like", layers=42, d_model=3584, heads=16, kv_heads=8,
                           head_dim=256, d_ff=14336, vocab=256000, norms_per_layer=4,
                           tied_embeddings=True, sliding_window=4096, global_every=2)
MIXTRAL = ModelSpec.uniform(name="mixtral-like", layers=32, d_model=4096, heads=32, kv_heads=8,
                            head_dim=128, d_ff=14336, vocab=32000,
                            moe=MoE(experts=8, active=2, expert_d_ff=14336))
DEEPSEEK_V2 = ModelSpec.uniform(
    name="deepseek-v2-like", layers=60, d_model=5120, heads=128, kv_heads=128, head_dim=192,
    d_ff=12288, vocab=102400,
    mla=Latent(heads=128, kv_lora_rank=512, rope_dim=64, nope_dim=128, v_dim=128,
               q_lora_rank=1536),
    moe=MoE(experts=160, active=6, expert_d_ff=1536, shared_experts=2), dense_layers=1)
T5 = ModelSpec.uniform(name="t5-like", layers=24, encoder_layers=24, d_model=1024, heads=128,
                       kv_heads=128, head_dim=128, d_ff=65536, vocab=32128, mlp="plain",
                       tied_embeddings=True, relative_attention_buckets=32)
GPT3 = ModelSpec.uniform(name="gpt3-like", layers=96, d_model=12288, heads=96, kv_heads=96,
                         head_dim=128, d_ff=4 * 12288, vocab=50257, mlp="plain", qkv_bias=True,
                         out_bias=True, mlp_bias=True, norm="layernorm", norm_bias=True,
                         tied_embeddings=True, learned_pos=2048)


def run(*args: str):
    return CliRunner().invoke(app, list(args))


# --------------------------------------------------------------------------------
# SPEC parsing
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("text, values", [
    ("8", [8]),
    (" 8 ", [8]),
    ("1,8,32", [1, 8, 32]),
    ("32, 8 ,1", [32, 8, 1]),
    ("1024:4096:+1024", [1024, 2048, 3072, 4096]),  # stop reached: included
    ("1:10:+4", [1, 5, 9]),  # stop not reached
    ("5:5:+3", [5]),
    ("1024:131072:*2", [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]),
    ("1:100:*3", [1, 3, 9, 27, 81]),
    ("3:3:*2", [3]),
])
def test_spec_values(text, values):
    spec = parse_spec(text, "--x")
    assert spec.values() == values
    assert spec.count == len(values) == len(spec)
    assert spec.at(np.arange(spec.count)).tolist() == values
    assert (spec.min, spec.max) == (min(values), max(values))


def test_spec_from_python_values():
    assert parse_spec(8).values() == [8]
    assert parse_spec([1, 8, 32]).values() == [1, 8, 32]


def test_linear_spec_stays_lazy():
    spec = parse_spec("1024:1048576:+1024")
    assert spec.count == 1024 and spec.last == 1048576
    huge = parse_spec("1:10000000000:+1")  # ten billion values, never built
    assert huge.count == 10_000_000_000
    assert huge.at(np.array([0, 9_999_999_999])).tolist() == [1, 10_000_000_000]


@pytest.mark.parametrize("text, fragment", [
    ("", "empty"),
    ("   ", "empty"),
    ("0", "positive"),
    ("-1", "not a whole number"),
    ("1.5", "not a whole number"),
    ("1e3", "not a whole number"),
    ("abc", "not a whole number"),
    ("1,,2", "missing"),
    ("1,", "missing"),
    ("8,8", "twice"),
    ("1:10", "three parts"),
    ("1:2:3:4", "three parts"),
    ("1:10:2", "must begin with +"),
    ("1:10:+0", "step is zero"),
    ("1:10:+", "missing"),
    ("1:10:+x", "not a whole number"),
    ("10:1:+1", "stop 1 is before start 10"),
    ("10:1:*2", "before start"),
    ("1:10:*1", "at least 2"),
    ("1:10:*0", "at least 2"),
    ("1:10:*1.5", "not a whole number"),
    ("0:10:+1", "positive"),
])
def test_bad_specs(text, fragment):
    with pytest.raises(KvcalcError) as e:
        parse_spec(text, "--seq-len")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--seq-len") and fragment in msg, msg


def test_row_limit_needs_force():
    with pytest.raises(KvcalcError, match="50,000,000-row limit.*pass force$"):
        plan_sweep(ADHOC, "1:100000000:+1", 1)
    plan = plan_sweep(ADHOC, "1:100000000:+1", 1, force=True)  # planned, not built
    assert plan.rows == 100_000_000


# --------------------------------------------------------------------------------
# Rows equal figures(...).as_row()
# --------------------------------------------------------------------------------
def same_row(got: dict, want: dict) -> list[str]:
    """Columns that differ: ints, strings and bools exactly (and same type), floats to 1e-12."""
    assert list(got) == list(want), (list(got), list(want))
    bad = []
    for k, w in want.items():
        g = got[k]
        if isinstance(w, float):
            if not (isinstance(g, float) and abs(g - w) <= 1e-12 * abs(w)):
                bad.append(f"{k}: {g!r} != {w!r}")
        elif type(g) is not type(w) or g != w:
            bad.append(f"{k}: {g!r} ({type(g).__name__}) != {w!r} ({type(w).__name__})")
    return bad


CASES = {
    # name: (spec, plan keyword arguments)
    "mha-gqa-mqa": (ADHOC, dict(kv_heads="1,4,32", tp="1,2,4,8")),  # tp 8 > kv_heads 1, 4
    "mistral-window": (MISTRAL, dict(kv_heads="1,8", kv_dtype="bf16,int4", tp="1,8")),
    "gemma2-alternating": (GEMMA2, dict(kv_heads="2,8,16", kv_dtype="fp8", tp="1,4")),
    "mixtral-moe": (MIXTRAL, dict(kv_heads="8", tp="1,2", weight_dtype="fp8")),
    "deepseek-mla": (DEEPSEEK_V2, dict(tp="1,8", kv_dtype="bf16,int4")),
    "t5-encoder-decoder": (T5, dict(kv_heads="1,128", encoder_seq_len=777)),
    "t5-encoder-follows": (T5, dict(kv_heads="16")),
    "gpt3-int4-scales": (GPT3, dict(kv_heads="1,96", kv_dtype="int4", weight_dtype="int4",
                                     tp="1,3", scale_bytes=2, memory_fraction=0.9,
                                     reserve_bytes=2 * 10**9)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rows_equal_estimate_on_random_samples(case):
    spec, kwargs = CASES[case]
    hardware = None if case == "t5-encoder-follows" else GPU
    plan = plan_sweep(spec, "1:70000:+997", "1,2,3,7,64,100,300,900,2700,4096",
                      hardware=hardware, **kwargs)
    rng = random.Random(f"kvcalc-{case}")
    seen_bounds, seen_fits, checked = set(), set(), 0
    for chunk in chunks(plan, chunk_rows=250):
        corners = [0, min(plan.batch.count - 1, len(chunk) - 1), len(chunk) - 1]
        for i in rng.sample(range(len(chunk)), min(8, len(chunk))) + corners:
            got = chunk.row(i)
            c = chunk.combo
            est = figures(c.spec, got["seq_len"], got["batch"], c.workload.kv_dtype,
                          plan.weight_dtype, c.workload.tp, hardware, plan.scale_bytes,
                          plan.encoder_seq_len, plan.memory_fraction, plan.reserve_bytes)
            want = est.as_row()
            assert not same_row(got, want), (case, got["seq_len"], got["batch"],
                                             same_row(got, want))
            seen_bounds.add(want.get("roofline_bound"))
            seen_fits.add(want.get("fits"))
            checked += 1
    assert checked >= 30
    if case in ("mha-gqa-mqa", "mistral-window", "gemma2-alternating"):  # both branches met
        assert seen_bounds == {"memory", "compute"} and seen_fits == {True, False}


def test_every_row_of_a_small_grid_and_its_csv_text():
    """Every row equals estimate; the CSV is byte-identical to report.rows_to_csv."""
    plan = plan_sweep(MISTRAL, "1,4095,4096,4097,50000", "1,3,4096", kv_heads="1,8,32",
                      tp="1,2", kv_dtype="bf16,int4", hardware=GPU)
    want = [figures(c.spec, s, b, c.workload.kv_dtype, "bf16", c.workload.tp, GPU).as_row()
            for c in plan.combos for s in plan.seq_len.values() for b in plan.batch.values()]
    got = list(iter_rows(plan))
    assert len(got) == len(want) == plan.rows == 3 * 2 * 2 * 5 * 3
    assert all(not same_row(g, w) for g, w in zip(got, want))
    buf = io.BytesIO()
    assert write_csv(plan, buf) == plan.rows
    assert buf.getvalue().decode() == rows_to_csv(want)
    # Chunk boundaries anywhere (here every 7 rows) do not change the text.
    small = io.BytesIO()
    write_csv(plan, small, chunk_rows=7)
    assert small.getvalue() == buf.getvalue()


def test_columns_are_estimates():
    est = figures(ADHOC, 1024, 2, hardware=GPU)
    plan = plan_sweep(ADHOC, 1024, 2, hardware=GPU)
    assert list(plan.columns) == list(est.as_row())
    assert list(plan_sweep(ADHOC, 1024, 2).columns) == list(figures(ADHOC, 1024, 2).as_row())


def test_a_row_reads_the_estimates_figures(monkeypatch):
    """as_row() computes nothing: with the formulas unplugged it gives the same row (the
    cache, decode step, roofline and fit were computed once, by estimate)."""
    import sys

    est = figures(ADHOC, 1024, 2, hardware=GPU)
    want = est.as_row()

    def unplugged(*args, **kwargs):
        raise AssertionError("as_row() computed a figure again")

    module = sys.modules["kvcalc.estimate"]
    for name in ("kv_cache", "decode_step", "param_counts", "plain_fit", "latency"):
        monkeypatch.setattr(module, name, unplugged)
    assert est.as_row() == want and est.as_dict()["kv_cache_bytes"] == want["kv_cache_bytes"]


def test_mla_has_no_kv_heads_to_sweep():
    with pytest.raises(KvcalcError, match="MLA.*no K/V heads to sweep"):
        plan_sweep(DEEPSEEK_V2, 1024, 1, kv_heads="1,8")
    plan = plan_sweep(DEEPSEEK_V2, 1024, 1)
    assert [c.kv_heads for c in plan.combos] == [128]


def test_invalid_kv_heads_tp_pairs():
    spec = ADHOC.replace(heads=40, kv_heads=40, d_model=5120)
    with pytest.raises(KvcalcError, match="kv_heads=5, tp=2.*skip_invalid leaves"):
        plan_sweep(spec, 1024, 1, kv_heads="5,8", tp="1,2")
    plan = plan_sweep(spec, 1024, 1, kv_heads="5,8", tp="1,2", skip_invalid=True)
    assert [(c.kv_heads, c.workload.tp) for c in plan.combos] == [(5, 1), (8, 1), (8, 2)]
    assert len(plan.skipped) == 1 and "kv_heads=5, tp=2" in plan.skipped[0]
    with pytest.raises(KvcalcError, match="divisible"):
        plan_sweep(spec, 1024, 1, kv_heads="3")


def test_values_past_int64_stay_exact():
    """Rows whose bytes or FLOPs pass 2^63 - 1 are computed with Python ints."""
    big = ModelSpec.uniform(name="big", layers=126, d_model=16384, heads=128, kv_heads=128,
                            head_dim=128, d_ff=53248, vocab=128256)
    plan = plan_sweep(big, "1024,1073741824", "1,1000000", hardware=GPU)
    rows = list(iter_rows(plan))
    assert max(r["decode_flops"] for r in rows) > 2**63
    for r in rows:
        want = figures(big, r["seq_len"], r["batch"], hardware=GPU).as_row()
        assert not same_row(r, want), same_row(r, want)
    text = io.BytesIO()
    write_csv(plan, text)
    parsed = list(csv.DictReader(io.StringIO(text.getvalue().decode())))
    assert [int(p["kv_cache_bytes"]) for p in parsed] == [r["kv_cache_bytes"] for r in rows]


# --------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(1, 96),
    heads_log=st.integers(0, 6),
    head_dim=st.sampled_from([64, 80, 128, 256]),
    window=st.sampled_from([0, 0, 512, 4096]),
    global_every=st.sampled_from([0, 2, 6]),
    kv_dtype=st.sampled_from(["bf16", "fp8", "int4", "fp32"]),
    tp_log=st.integers(0, 3),
    seq=st.lists(st.integers(1, 200_000), min_size=2, max_size=6, unique=True),
    batch=st.lists(st.integers(1, 2048), min_size=2, max_size=5, unique=True),
)
def test_monotone_and_gqa_scaling(layers, heads_log, head_dim, window, global_every, kv_dtype,
                                  tp_log, seq, batch):
    heads = 2**heads_log
    spec = ModelSpec.uniform(name="h", layers=layers, d_model=heads * head_dim, heads=heads,
                             kv_heads=heads, head_dim=head_dim, d_ff=4 * heads * head_dim,
                             vocab=50000, sliding_window=window,
                             global_every=global_every if window else 0)
    tp = min(2**tp_log, heads)
    kv = sorted({1, max(1, heads // 4), heads})
    plan = plan_sweep(spec, sorted(seq), sorted(batch), kv_heads=kv, kv_dtype=kv_dtype,
                      tp=tp, hardware=GPU)
    df = pd_concat(plan)
    for _, group in df.groupby(["kv_heads", "batch"]):  # along seq_len
        for col in ("kv_cache_bytes", "kv_cache_bytes_per_device", "decode_bytes",
                    "decode_flops", "roofline_s"):
            assert group[col].is_monotonic_increasing, col
    for _, group in df.groupby(["kv_heads", "seq_len"]):  # along batch
        for col in ("kv_cache_bytes", "decode_bytes", "decode_flops", "roofline_s"):
            assert group[col].is_monotonic_increasing, col
    assert (df["kv_cache_bytes"] <= df["kv_cache_bytes_full"]).all()
    if kv_dtype != "int4" or head_dim % 2 == 0:
        mha = df[df["kv_heads"] == heads].set_index(["seq_len", "batch"])["kv_cache_bytes"]
        for g in kv:
            sub = df[df["kv_heads"] == g].set_index(["seq_len", "batch"])["kv_cache_bytes"]
            assert (sub * heads == mha * g).all()


def pd_concat(plan):
    pd = pytest.importorskip("pandas")

    return pd.concat([c.to_frame() for c in chunks(plan)], ignore_index=True)


def test_sliding_window_cache_stops_growing():
    plan = plan_sweep(MISTRAL, "4096,8192,65536", 1)
    kv = [r["kv_cache_bytes"] for r in iter_rows(plan)]
    full = [r["kv_cache_bytes_full"] for r in iter_rows(plan)]
    assert kv[0] == kv[1] == kv[2] and full[2] == 16 * full[0]
    # K and V x 32 layers x 8 K/V heads x 128 x 4096 window tokens x 2 bytes (bf16).
    assert kv[0] == full[0] == 2 * 32 * 8 * 128 * 4096 * 2 == 536_870_912


def test_sweep_dataframe_api():
    """As the README calls it: kvcalc.sweep.sweep_frame, loaded on first use."""
    pytest.importorskip("pandas")
    import kvcalc.sweep

    df = kvcalc.sweep.sweep_frame(ADHOC, "1024:4096:*2", "1,4", kv_heads="1,32")
    assert len(df) == 12 and list(df.columns) == list(figures(ADHOC, 1, 1).as_row())
    assert df["kv_cache_bytes"].dtype == np.int64


def test_the_spec_grammar_imports_no_numpy():
    """`kvcalc measure` parses SPECs with the sweep's grammar; that alone loads no numpy."""
    code = ("import sys; import kvcalc.sweep; from kvcalc.sweep.grammar import parse_spec; "
            "assert parse_spec([1, 8]).values() == [1, 8]; "
            "print(sorted(m for m in ('numpy', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout == "[]\n", r.stderr


# --------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------
ADHOC_FLAGS = ["--layers", "32", "--d-model", "4096", "--heads", "32"]


def test_cli_csv_columns_and_rows_match_estimate():
    r = run("sweep", *ADHOC_FLAGS, "--seq-len", "1024,2048", "--batch", "1:3:+1",
            "--kv-heads", "1,8", "--tp", "1,2", "--gpu", "h100-sxm")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 2 * 3 * 2 * 2
    # sweep's rows are estimate's, timed on the same engine: vLLM's by default on a GPU,
    # the roofline columns only with --engine roofline.
    for flags in ([], ["--engine", "roofline"]):
        rows = list(csv.DictReader(io.StringIO(run(
            "sweep", *ADHOC_FLAGS, "--seq-len", "1024,2048", "--batch", "1:3:+1", "--kv-heads",
            "1,8", "--tp", "1,2", "--gpu", "h100-sxm", *flags).stdout))) if flags else rows
        one = run("estimate", *ADHOC_FLAGS, "--kv-heads", "8", "--seq-len", "2048", "--batch",
                  "3", "--tp", "2", "--gpu", "h100-sxm", *flags, "--format", "csv")
        assert one.exit_code == 0, one.output
        want = list(csv.DictReader(io.StringIO(one.stdout)))[0]
        assert list(rows[0]) == list(want)
        assert ("engine" in want) == (not flags)
        match = [row for row in rows if (row["kv_heads"], row["seq_len"], row["batch"],
                                         row["tp"]) == ("8", "2048", "3", "2")]
        assert match == [want]


def test_cli_output_file_refuses_overwrite(tmp_path):
    target = tmp_path / "s.csv"
    args = ["sweep", *ADHOC_FLAGS, "--seq-len", "1024:4096:*2", "--gpu", "none", "-o", str(target)]
    r = run(*args)
    assert r.exit_code == 0 and r.stdout == "" and "wrote" in r.stderr
    before = target.read_text()
    assert before.count("\n") == 1 + 3
    r = run(*args[:-2], "--batch", "2", "-o", str(target))
    assert r.exit_code == 2 and "--force" in r.stderr and target.read_text() == before
    r = run(*args[:-2], "--batch", "2", "-o", str(target), "--force")
    assert r.exit_code == 0 and target.read_text() != before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_cli_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "kv.png"
    r = run("sweep", "--preset", "mistral-7b", "--seq-len", "1024:65536:*2", "--batch", "1,8",
            "--kv-heads", "1,8,32", "--gpu", "h100-sxm", "-o", str(tmp_path / "kv.csv"),
            "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run("sweep", "--preset", "mistral-7b", "--seq-len", "1024", "--plot", str(png))
    assert r.exit_code == 2 and "--force" in r.stderr
    same = tmp_path / "same.png"
    r = run("sweep", "--preset", "mistral-7b", "--seq-len", "1024", "-o", str(same),
            "--plot", str(same))
    assert r.exit_code == 2 and "same file" in r.stderr and not same.exists()


@pytest.mark.parametrize("args, fragment", [
    (["--seq-len", "10:1:+1"], "before start"),
    (["--seq-len", ""], "empty"),
    (["--seq-len", "1.5"], "whole number"),
    (["--batch", "0"], "positive"),
    (["--batch", "1:8:+0"], "step is zero"),
    (["--kv-heads", "1:8:*1"], "at least 2"),
    (["--kv-heads", "3"], "divisible"),
    (["--kv-dtype", "bf16,fp12"], "unknown dtype"),
    (["--seq-len", "1:1000:+1", "--batch", "1:100000:+1"], "50,000,000"),
    (["--seq-len", "1:100000000000:+1"], "absurdly large"),
    (["--seq-len", "1:1000000000:+1", "--batch", "1:100:+1"], "--force"),
])
def test_cli_bad_spec_one_line_exit_2(args, fragment):
    r = run("sweep", *ADHOC_FLAGS, *args)
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), r.stderr
    assert fragment in lines[0]


def test_cli_mla_kv_heads_error():
    r = run("sweep", "--preset", "deepseek-v2", "--kv-heads", "1,8")
    assert r.exit_code == 2 and "MLA" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_starts_without_numpy():
    code = ("import sys, kvcalc.cli; "
            "print(' '.join(m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


# --------------------------------------------------------------------------------
# plot_measure
# --------------------------------------------------------------------------------
def test_plot_measure_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    from kvcalc import plot

    rows = []
    for impl in ("sdpa", "naive"):
        for g in (1, 8, 32):
            for n in (1024, 8192, 65536):
                kv = 2 * 32 * g * 128 * 2 * n
                t = kv / 3.0e12 * (1.1 if impl == "sdpa" else 2.5) + 5e-6
                rows.append({"kv_cache_bytes": kv, "median_s": t, "predicted_s": kv / 3.35e12,
                             "achieved_bytes_per_s": kv / t, "ceiling_bytes_per_s": 3.0e12,
                             "impl": impl, "kv_heads": g, "heads": 32, "device": "test-gpu",
                             "step": "attention"})
    out = tmp_path / "m.png"
    plot.plot_measure(rows, out)
    assert out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(KvcalcError, match="exists"):
        plot.plot_measure(rows, out)


def _saved_figure(monkeypatch, plot):
    """Keep the figure plot._save is handed, drawn, instead of only its bytes."""
    saved = []
    real = plot._save

    def keep(fig, path, force):
        saved.append(fig)
        return real(fig, path, force)

    monkeypatch.setattr(plot, "_save", keep)
    return saved


def test_plot_measure_legends_sit_outside_the_axes(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from kvcalc import plot

    saved = _saved_figure(monkeypatch, plot)
    rows = [{"kv_cache_bytes": kv, "median_s": kv / 1e12 * slow, "predicted_s": kv / 3e12,
             "achieved_bytes_per_s": 1e12 / slow, "ceiling_bytes_per_s": 3e12, "impl": impl,
             "kv_heads": g, "heads": 32, "device": "test-gpu", "step": "attention"}
            for impl, slow in (("sdpa", 1.0), ("naive", 3.0)) for g in (1, 8, 32)
            for kv in (10**5, 10**7, 10**9)]
    plot.plot_measure(rows, tmp_path / "m.png")
    (fig,) = saved
    axes = fig.get_axes()
    legends = [leg for sub in fig.subfigs for leg in sub.legends]
    assert len(axes) == 2 and len(legends) == 2 and not any(ax.get_legend() for ax in axes)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the constrained layout, as savefig ran it
    renderer = canvas.get_renderer()
    for ax, leg in zip(axes, legends):
        # Below its panel: clear of the points and of the tick and axis labels.
        assert leg.get_window_extent(renderer).y1 < ax.get_tightbbox(renderer).y0


def test_plot_sweep_labels_mla_by_its_latent(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from kvcalc import plot

    saved = _saved_figure(monkeypatch, plot)
    selection = PlotSelection(plan_sweep(DEEPSEEK_V2, "1024:8192:*2", 1,
                                         hardware=GPU))
    for chunk in chunks(selection.plan):
        selection.add(chunk)
    plot.plot_sweep(selection, tmp_path / "s.png")
    labels = [t.get_text() for t in saved[0].get_axes()[0].get_legend().get_texts()]
    # One shared latent per token per layer, not DeepSeek-V2's 128 (decompressed) K/V heads.
    assert labels[0] == "MLA latent (kv_lora_rank 512 + rope 64)"
    assert not any("K/V head" in label for label in labels)


def test_encoder_length_that_decides_the_fit():
    # A short decoder prompt with a long encoder input: the cross-attention cache is what
    # does not fit, so the sweep's self-check and its rows must use --encoder-seq-len.
    plan = plan_sweep(T5, 128, "1,64", hardware=GPU, encoder_seq_len=1024)
    rows = [row for chunk in chunks(plan) for row in chunk.rows()]
    for row in rows:
        want = figures(T5, 128, row["batch"], "bf16", "bf16", 1, GPU, 0, 1024).as_row()
        assert not same_row(row, want)
    # The floor (weights + KV only) holds one such request, not 64; the verdict (vLLM's
    # count, with its activation peak and CUDA graphs on a 24 GiB device) neither.
    assert [row["floor_fits"] for row in rows] == [True, False]
    assert [row["fits"] for row in rows] == [False, False]


@pytest.mark.parametrize("text, fragment", [
    ("9" * 5000, "the value has 5,000 digits; it is too large"),
    ("1:" + "9" * 5000 + ":+1", "the stop has 5,000 digits"),
    ("1:10:*" + "9" * 5000, "the factor has 5,000 digits"),
    ("1:10:+" + "0" * 5000, "the step is zero"),
    ("9223372036854775808", "9223372036854775808 is too large"),  # INT64_MAX + 1
], ids=["value", "stop", "factor", "zero-step", "int64"])
def test_specs_past_pythons_digit_limit_are_one_line_errors(text, fragment):
    # int() refuses strings over 4,300 digits with a ValueError: checked before it.
    with pytest.raises(KvcalcError) as e:
        parse_spec(text, "--seq-len")
    msg = str(e.value)
    assert "\n" not in msg and fragment in msg and len(msg) < 300, msg
    assert parse_spec("0" * 5000 + "7", "--seq-len").values() == [7]


# --------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------
def test_parquet_holds_the_rows_exactly(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "s.parquet"
    args = ["--preset", "mistral-7b", "--seq-len", "1024:16384:*2", "--batch", "1,7",
            "--kv-heads", "1,8", "--gpu", "h100-sxm"]
    r = subprocess.run([sys.executable, "-m", "kvcalc", "sweep", *args, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out)
    got = table.to_pylist()
    # The same rows as the CSV, every value in its own type and floats in full.
    r = subprocess.run([sys.executable, "-m", "kvcalc", "sweep", *args, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    import json

    want = json.loads(r.stdout)
    assert got == want and len(got) == 5 * 2 * 2
    assert str(table.schema.field("kv_cache_bytes").type) == "int64"
    # Never silently overwritten, like every report.
    r = subprocess.run([sys.executable, "-m", "kvcalc", "sweep", *args, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("kvcalc: error:") and "--force" in r.stderr


def test_parquet_refusals(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    r = run("sweep", "--preset", "gpt3", "--seq-len", "1024", "--format", "parquet")
    assert (r.returncode, r.stdout) == (2, "") and "-o FILE.parquet" in r.stderr
    r = run("estimate", "--preset", "gpt3", "-o", "e.parquet")
    assert r.returncode == 2 and "kvcalc sweep only" in r.stderr
    assert not (tmp_path / "e.parquet").exists()
    if importlib.util.find_spec("pyarrow") is None:  # the no-extras CI pass
        r = run("sweep", "--preset", "gpt3", "--seq-len", "1024", "-o", "s.parquet")
        assert r.returncode == 2 and "pip install 'kvcalc[parquet]'" in r.stderr
        assert r.stderr.count("\n") == 1 and not (tmp_path / "s.parquet").exists()


def test_a_mamba_preset_sweeps_without_kv_heads():
    """A model with no attention has no K/V heads to set: without --kv-heads the sweep
    takes the model as it is (it once set kv_heads 1 and refused its own default). Each
    row's state bytes equal `kvcalc estimate` at that length and batch, and do not grow
    with the length."""
    import json

    args = ["--preset", "mamba-2.8b", "--gpu", "h100-sxm"]
    r = CliRunner().invoke(app, ["sweep", *args, "--seq-len", "1024,65536", "--batch", "1,4",
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert [(row["seq_len"], row["batch"]) for row in rows] == [
        (1024, 1), (1024, 4), (65536, 1), (65536, 4)]
    for row in rows:
        e = CliRunner().invoke(app, ["estimate", *args, "--seq-len", str(row["seq_len"]),
                                     "--batch", str(row["batch"]), "--format", "json"])
        assert e.exit_code == 0, e.output
        want = json.loads(e.stdout)
        assert row["kv_cache_bytes"] == want["kv_cache_bytes"]
        assert row["fits"] == want["fit"]["fits"]
    by_batch = {row["batch"]: row["kv_cache_bytes"] for row in rows if row["seq_len"] == 1024}
    assert all(row["kv_cache_bytes"] == by_batch[row["batch"]] for row in rows)
    assert by_batch[4] == 4 * by_batch[1]
