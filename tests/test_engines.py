"""`--engine`: serving engines' latency terms (presets/engines), checked against the
published GPU measurements they were fitted on and the rows held out of the fit."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import published
import published_model as pm
from kvcalc.cli import app
from kvcalc.engines import Engine, engine_names, load_engine
from kvcalc.errors import KvcalcError

EXAMPLE = ["estimate", "--preset", "llama3-8b", "--gpu", "rtx4090", "--weight-dtype", "int4",
           "--group-size", "32", "--seq-len", "512", "--format", "json"]


def _invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_engines_named_by_the_issue_are_there():
    assert {"vllm", "tensorrt-llm", "llama.cpp", "transformers", "exllamav2",
            "mlc-llm"} <= set(engine_names())


def test_llama_cpp_and_vllm_give_different_times_with_their_terms():
    got = {}
    for name in ("llama.cpp", "vllm"):
        r = _invoke(*EXAMPLE, "--engine", name)
        assert r.exit_code == 0, r.output
        lat = json.loads(r.stdout)["latency"]
        assert lat["engine"].startswith(f"{name}: int4 weights at")
        got[name] = lat["tpot_s"]
    assert got["llama.cpp"] != got["vllm"]
    # vLLM has no published int4 rows: the figure says it is extrapolated.
    r = _invoke(*EXAMPLE, "--engine", "vllm")
    assert "extrapolated" in json.loads(r.stdout)["latency"]["engine"]
    table = _invoke(*EXAMPLE[:-2], "--engine", "llama.cpp")
    text = " ".join(table.stdout.split())  # the caption wraps at the terminal's width
    assert table.exit_code == 0 and "on llama.cpp: int4 weights at" in text
    # The headline names the engine its time is for.
    ms = f"{got['llama.cpp'] * 1e3:.4g} ms/token"
    assert f"on rtx4090 with llama.cpp {ms}" in text


@pytest.mark.parametrize("flag, message", [
    ("nonsense", "unknown engine 'nonsense'; known engines: autoawq, exllamav2"),
    ("vllm@9.9.9", "--engine vllm@9.9.9: no published rows of that version; vllm's are:"),
])
def test_unknown_engine_or_version_is_one_line(flag, message):
    r = _invoke(*EXAMPLE[:-2], "--engine", flag)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith(f"kvcalc: error: {message}") and r.stderr.count("\n") == 1


def test_a_format_the_engine_does_not_run_is_refused_with_the_reason():
    r = _invoke("estimate", "--preset", "llama3-8b", "--gpu", "rtx4090", "--weight-dtype", "awq",
                "--engine", "llama.cpp")
    assert r.exit_code == 2
    assert "--engine llama.cpp cannot run awq weights: llama.cpp runs GGUF quants" in r.stderr
    from kvcalc.engines import check_runs

    with pytest.raises(KvcalcError, match="vLLM has no EXL2 kernels"):
        check_runs(load_engine("vllm")[0], "exl2")


def test_a_calibration_file_and_an_engine_never_mix(tmp_path):
    from test_calibrate import GOOD

    path = tmp_path / "box.yaml"
    path.write_text(GOOD)
    r = _invoke("estimate", "--preset", "gpt2", "--gpu", str(path), "--engine", "vllm")
    assert r.exit_code == 2 and "is a calibration of torch-eager" in r.stderr


def test_engine_file_keys_are_checked_by_name(tmp_path, monkeypatch):
    with pytest.raises(KvcalcError, match=r"bandwidth_efficiency.int3: not a format family"):
        Engine(name="x", source="s", bandwidth_efficiency={"int3": 0.5})
    with pytest.raises(KvcalcError, match=r"host_layer_s must be seconds in \[0, 1\)"):
        Engine(name="x", source="s", bandwidth_efficiency={"float": 0.5}, host_layer_s=-1.0)


# --------------------------------------------------------------------------------
# Against the published rows (tests/data/published)
# --------------------------------------------------------------------------------
ROWS = [r for r in published.load() if pm.measured_ms(r) is not None]
HELD = pm.held_out(ROWS)


def test_each_engine_file_names_its_rows_and_keeps_the_held_out_ones_out():
    ids = {r.id for r in ROWS}
    for name in engine_names():
        e = load_engine(name)[0]
        fitted = {i.strip() for i in e.fitted_on.split(",") if i.strip()}
        held = {i.strip() for i in e.held_out.split(",") if i.strip()}
        assert fitted and fitted <= ids and held <= ids and not fitted & held
        assert held == {r.id for r in ROWS if r.engine == name and r.id in HELD}
        assert sum(e.rows.values()) == len(fitted)


def _within(rows, mark=0.15):
    ok = sum(abs(pm.measured_ms(r) / pm.predicted_ms(r, pm.engine(r.engine)) - 1) <= mark
             for r in rows)
    return ok / len(rows)


def test_published_rows_within_15_percent_on_their_engine():
    # Issue #26 asks 85%; today's engine model reaches 74% of all rows and 64% of those held
    # out (reports/published.md says which miss and why). This guards that level, against
    # the published measurements, not kvcalc's own output; on the datasheet roofline
    # alone 19% are within.
    assert _within(ROWS) >= 0.72
    assert _within([r for r in ROWS if r.id in HELD]) >= 0.6
    roofline = sum(abs(pm.measured_ms(r) / pm.predicted_ms(r, None) - 1) <= 0.15 for r in ROWS)
    assert roofline / len(ROWS) < 0.3


def test_sweep_rows_are_estimate_rows_with_the_engine_time():
    from kvcalc.estimate import estimate, workload_for
    from kvcalc.presets import load_hardware, load_model
    from kvcalc.sweep import iter_rows, plan_sweep
    from kvcalc.workload import Memory

    spec, hw, eng = load_model("llama3-70b"), load_hardware("h100-sxm"), load_engine("vllm")[0]
    plan = plan_sweep(spec, "1024,131072", "1,64", tp="1,4", hardware=hw, engine=eng)
    rows = list(iter_rows(plan))
    assert len(rows) == 8 and all(r["engine"] == "vllm" for r in rows)
    for r in rows:
        w = workload_for(spec, seq_len=r["seq_len"], batch=r["batch"], tp=r["tp"])
        want = estimate(spec, w, memory=Memory(hardware=hw), engine=eng).as_row()
        assert r == want
    # tp 4 pays two all-reduces per layer: the published vLLM rows' fitted cost.
    r1, r4 = rows[0], rows[4]
    assert (r1["tp"], r4["tp"]) == (1, 4) and r4["tpot_s"] < r1["tpot_s"]


def test_sweep_engine_needs_a_device():
    r = _invoke("sweep", "--preset", "llama3-8b", "--seq-len", "1024", "--gpu", "none",
                "--engine", "vllm")
    assert r.exit_code == 2 and "--engine times the rows on a device" in r.stderr


def test_presets_lists_the_engines_and_shows_one():
    r = _invoke("presets", "--engines", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = {e["name"]: e for e in json.loads(r.stdout)}
    assert set(rows) == set(engine_names())
    # Every share is physical: no kernel streams DRAM at its datasheet rate.
    assert all(0 < v <= 0.95 for e in rows.values() for v in e["bandwidth_efficiency"].values())
    shown = _invoke("presets", "show", "llama.cpp")
    assert shown.exit_code == 0 and shown.stdout.startswith("# Generated by benchmarks/fit_engines.py")
