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
    assert {"vllm", "sglang", "tensorrt-llm", "llama.cpp", "transformers", "exllamav2",
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
    # vLLM's int4 share is fitted on its AWQ rows (the same Marlin kernels); SGLang has no
    # published int4 rows: its figure says it is extrapolated.
    # (neither has int4 prompt rows: that share is extrapolated for both).
    r = _invoke(*EXAMPLE, "--engine", "vllm")
    lat = json.loads(r.stdout)["latency"]["engine"]
    assert "int4 bandwidth" not in lat and "no published int4 prefill rows" in lat
    r = _invoke(*EXAMPLE, "--engine", "sglang")
    assert r.exit_code == 0, r.output
    lat = json.loads(r.stdout)["latency"]["engine"]
    assert lat.startswith("sglang: int4 weights at")
    assert "(extrapolated: no published int4 bandwidth, int4 prefill rows)" in lat
    table = _invoke(*EXAMPLE[:-2], "--engine", "llama.cpp")
    text = " ".join(table.stdout.split())  # the caption wraps at the terminal's width
    assert table.exit_code == 0 and "on llama.cpp: int4 weights at" in text
    # The headline names the engine its time is for.
    ms = f"{got['llama.cpp'] * 1e3:.4g} ms/token"
    assert "on rtx4090 it fits" in text and f"with llama.cpp {ms}" in text


@pytest.mark.parametrize("flag, message", [
    ("nonsense", "unknown engine 'nonsense'; known engines: autoawq, exllamav2"),
    ("autoawq@9.9.9", "--engine autoawq@9.9.9: no published rows of that version; autoawq's "
                      "are:"),
    # a memory engine's release is checked by its own rules (kvcalc.serving)
    ("vllm@9.9.9", "--engine vllm@9.9.9: vllm_version must look like 0.MINOR[.PATCH]"),
    ("sglang@0.3.0", "--engine sglang@0.3.0: kvcalc encodes SGLang's rules from 0.4.0 on"),
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


def test_formats_on_shared_kernels_take_that_familys_terms():
    # vLLM serves AWQ and GPTQ checkpoints on its Marlin int4 kernels, TensorRT-LLM on its
    # groupwise weight-only int4 layer: one fitted figure for the three, not extrapolated.
    from kvcalc.presets import load_hardware

    hw = load_hardware("a100-40gb")
    for name in ("vllm", "tensorrt-llm"):
        e = load_engine(name)[0]
        assert e.same_kernels == {"awq": "int4", "gptq": "int4"}
        assert e.efficiency("awq") == e.efficiency("gptq") == e.efficiency("int4")
        assert e.efficiency("int4")[1] and e.efficiency("int4") != e.efficiency("float")
        assert e.layer_s(hw, "awq") == e.layer_s(hw, "int4")
    toy = Engine(name="x", source="s", bandwidth_efficiency={"float": 0.9, "int4": 0.5},
                 format_layer_cycles={"int4": 1000.0}, same_kernels={"awq": "int4"})
    assert toy.efficiency("awq") == (0.5, True) and toy.efficiency("gptq") == (0.9, False)
    assert toy.layer_s(hw, "awq") == pytest.approx(1000 / 1.41e9)
    with pytest.raises(KvcalcError, match=r"same_kernels.q9: not a format family"):
        Engine(name="x", source="s", bandwidth_efficiency={"float": 0.5},
               same_kernels={"awq": "q9"})


def test_engine_file_keys_are_checked_by_name(tmp_path, monkeypatch):
    with pytest.raises(KvcalcError, match=r"bandwidth_efficiency.int3: not a format family"):
        Engine(name="x", source="s", bandwidth_efficiency={"int3": 0.5})
    with pytest.raises(KvcalcError, match=r"host_layer_s must be seconds in \[0, 1\)"):
        Engine(name="x", source="s", bandwidth_efficiency={"float": 0.5}, host_layer_s=-1.0)
    with pytest.raises(KvcalcError, match=r"layer_cycles must be in \[0, 1e9\)"):
        Engine(name="x", source="s", bandwidth_efficiency={"float": 0.5}, layer_cycles=-1)
    with pytest.raises(KvcalcError, match=r"format_layer_cycles.q9: not a format family"):
        Engine(name="x", source="s", bandwidth_efficiency={"float": 0.5},
               format_layer_cycles={"q9": 1.0})


# --------------------------------------------------------------------------------
# Against the published rows (tests/data/published)
# --------------------------------------------------------------------------------
ROWS = pm.scored(published.load())
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
    # Issue #26's mark: 85% of the scored rows within +-15% on their engine, the rows held
    # out of the fit meeting it apart (reports/published.md says which miss and why).
    # Against the published measurements, not kvcalc's own output; on the datasheet
    # roofline alone fewer than 30% are within.
    assert _within(ROWS) >= 0.85
    assert _within([r for r in ROWS if r.id in HELD]) >= 0.85
    roofline = sum(abs(pm.measured_ms(r) / pm.predicted_ms(r, None) - 1) <= 0.15 for r in ROWS)
    assert roofline / len(ROWS) < 0.3


def test_excluded_rows_say_why_and_are_not_scored():
    rows = published.load()
    excluded = [r for r in rows if r.excluded]
    assert excluded and all(len(r.excluded) > 40 for r in excluded)
    assert not {r.id for r in excluded} & {r.id for r in ROWS}
    # AutoAWQ's prefill rows time a cold first forward (examples/benchmark.py), by rule.
    awq = [r for r in rows if r.engine == "autoawq" and r.metric == "prefill_tokens_per_s"]
    assert awq and all(r.excluded for r in awq)


def _toy(**terms) -> Engine:
    return Engine(name="toy", source="test", bandwidth_efficiency={"float": 0.5},
                  prefill_mfu={"float": 0.25}, **terms)


def test_per_layer_gpu_cost_is_cycles_at_the_boost_clock():
    from kvcalc.presets import load_hardware

    e = _toy(layer_cycles=252_000)
    # 252,000 cycles at the RTX 4090's 2.52 GHz: 100 us; at the A100's 1.41 GHz: 178.7 us.
    assert e.layer_s(load_hardware("rtx4090")) == pytest.approx(100e-6)
    assert e.layer_s(load_hardware("a100-80gb")) == pytest.approx(252_000 / 1.41e9)
    # A preset without a clock: the 1.8 GHz reference.
    assert e.layer_s(load_hardware("t4")) == pytest.approx(140e-6)


def test_engine_time_by_hand():
    """One decode step and one prefill on a toy engine, each term by hand."""
    from kvcalc.estimate import workload_for
    from kvcalc.speed.latency import latency
    from kvcalc.presets import load_hardware, load_model

    spec, hw = load_model("llama2-7b"), load_hardware("a100-80gb")
    e = _toy(layer_cycles=141_000, host_step_s=0.001, request_s=0.002)
    w = workload_for(spec, seq_len=1, batch=1, weight_dtype="bf16", prompt_len=1)
    lat = latency(spec, w, hardware=hw, engine=e)
    # Decode at 1 token: bytes (weights 13,476,839,424 + KV + activations) at half of
    # 2,039 GB/s, plus 32 layers x 141,000 cycles / 1.41 GHz = 3.2 ms; the 1 ms host step
    # overlaps. The bytes are the step's own (checked by test_latency); the terms add.
    data_s = lat.decode_bytes / (2_039e9 * 0.5)
    assert lat.tpot_s == pytest.approx(data_s + 32 * 100e-6)
    # Prefill of one token: FLOPs at a quarter of 312 TFLOP/s plus the same bytes read
    # plus the layers' 3.2 ms plus the request's 2 ms, in series.
    assert lat.ttft_s == pytest.approx(lat.prefill_flops / (312e12 * 0.25)
                                       + lat.prefill_bytes / (2_039e9 * 0.5) + 3.2e-3 + 2e-3)


def test_llama_cpp_prompts_run_at_the_fp16_accumulate_rate():
    from kvcalc.presets import load_hardware

    e = load_engine("llama.cpp")[0]
    assert e.fp16_accumulate
    # GeForce: FP16 accumulate at twice the FP32-accumulate rate (Ada whitepaper: 330.3
    # against 165.2 TFLOP/s); datacenter parts have one rate.
    assert e.peak_flops(load_hardware("rtx4090"), "bf16") == 330_300_000_000_000
    assert e.peak_flops(load_hardware("a100-80gb"), "bf16") == 312_000_000_000_000
    assert load_engine("vllm")[0].peak_flops(load_hardware("rtx4090"), "bf16") == 165_200_000_000_000


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


def test_fit_times_for_vllm_by_default_as_estimate():
    base = ["--preset", "llama3-8b", "--gpu", "h100-sxm"]
    fit = ["fit", *base, "--max-model-len", "8192", "--tpot-ms", "8", "--format", "json"]
    got = {}
    for flags in ([], ["--engine", "vllm"], ["--engine", "roofline"], ["--mfu", "0.5"]):
        r = _invoke(*fit, *flags)
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        got[tuple(flags)] = (d["slo_timed_on"], d["max_batch_for_slo"])
    assert got[()] == got[("--engine", "vllm")] and got[()][0] == "vllm"
    assert got[("--engine", "roofline")][0] == got[("--mfu", "0.5")][0] == "roofline"
    assert got[()][1] != got[("--engine", "roofline")][1]  # vLLM's terms, not the roofline
    # An engine whose memory kvcalc counts decides fit's count without a latency target
    # (kvcalc.serving); one it only times is refused without one; `roofline` alone is
    # not an engine.
    assert _invoke(*fit[:-4], "--engine", "vllm").exit_code == 0
    r = _invoke(*fit[:-4], "--engine", "llama.cpp")
    assert r.exit_code == 2 and "--engine llama.cpp only times the batch --ttft-ms" in r.stderr
    assert "kvcalc counts the memory of vllm, sglang, tensorrt-llm" in r.stderr
    assert _invoke(*fit[:-4], "--engine", "roofline").exit_code == 0


def test_sweep_and_plan_time_for_vllm_by_default_as_estimate():
    base = ["--preset", "llama3-8b", "--gpu", "h100-sxm"]
    # sweep: the engine's columns unless --engine roofline; without a device, none.
    sweep = ["sweep", "--preset", "llama3-8b", "--seq-len", "1024", "--format", "json"]
    rows = json.loads(_invoke(*sweep, "--gpu", "h100-sxm").stdout)
    assert [r["engine"] for r in rows] == ["vllm"]
    assert "engine" not in json.loads(_invoke(*sweep, "--gpu", "h100-sxm", "--engine",
                                              "roofline").stdout)[0]
    assert "engine" not in json.loads(_invoke(*sweep, "--gpu", "none").stdout)[0]
    # plan: vLLM's terms by default, the datasheet roofline when asked.
    plan = ["plan", *base, "--max-model-len", "8192", "--format", "json"]
    assert json.loads(_invoke(*plan).stdout)["engine"] == "vllm"
    assert json.loads(_invoke(*plan, "--engine", "roofline").stdout)["engine"] == \
        "datasheet roofline"


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


def test_serving_questions_are_timed_for_vllm_by_default():
    base = ["estimate", "--preset", "llama3-8b", "--seq-len", "4096", "--format", "json"]
    lat = json.loads(_invoke(*base).stdout)["latency"]
    assert lat["engine"].startswith("vllm: float weights at")
    # `roofline`, or a share given, is the datasheet roofline at those shares.
    for flags, mfu, bw in ((["--engine", "roofline"], 0.5, 0.8), (["--mfu", "0.4"], 0.4, 0.8),
                           (["--bandwidth-efficiency", "0.7"], 0.5, 0.7)):
        lat = json.loads(_invoke(*base, *flags).stdout)["latency"]
        assert "engine" not in lat and (lat["mfu"], lat["bandwidth_efficiency"]) == (mfu, bw)
    r = _invoke(*base, "--engine", "vllm", "--mfu", "0.4")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "--mfu and --bandwidth-efficiency set the datasheet roofline" in r.stderr
    # A CPU is timed on its roofline; a run without a device has no times.
    cpu = json.loads(_invoke(*base, "--gpu", "epyc-9654").stdout)["latency"]
    assert "engine" not in cpu
    assert json.loads(_invoke(*base, "--gpu", "none").stdout).get("latency") is None
