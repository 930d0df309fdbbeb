"""`kvcalc check` and `kvcalc sweep` as library functions (issue #42 point 1): each
command's JSON is its function's `as_dict()`, exactly, on the golden cases (the sweeps of
tests/golden.py, whose CSV files the function writes too, and the public start-up logs
`kvcalc check` reads: one that started, each failed one, each engine's); the functions
take their parameters by keyword, and an error names the parameter, which the command line
says as its flag. The command's output is the contract: the function is held to it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yamlload
from typer.testing import CliRunner

import golden
import kvcalc
from kvcalc.cli import app
from kvcalc.errors import ParameterError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
README_LOG = DATA / "vllm" / "logs" / "qwen2-7b-a100-0.25-dl.log"


def _cli(argv: list[str]):
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    return r.stdout


# --- sweep ---------------------------------------------------------------------------------
def _sweep_parameters(argv: list[str]) -> dict:
    """sweep's flags as kvcalc.sweep's parameters: --preset is `model`, a flag its name
    with '_' for '-', each SPEC as its text."""
    assert argv[0] == "sweep"
    pairs = zip(argv[1::2], argv[2::2])
    return {"model" if flag == "--preset" else flag[2:].replace("-", "_"): value
            for flag, value in pairs}


@pytest.mark.parametrize("name", sorted(golden.SWEEPS))
def test_sweep_json_and_csv_are_the_functions_on_the_golden_cases(name):
    argv = golden.SWEEPS[name]
    answer = kvcalc.sweep(**_sweep_parameters(argv))
    assert answer.as_dict() == json.loads(_cli([*argv, "--format", "json"]))
    buf = io.BytesIO()
    assert answer.write_csv(buf) == answer.rows
    assert buf.getvalue().decode() == (golden.GOLDEN / f"{name}.csv").read_text()


def test_sweep_is_keyword_only_and_its_errors_name_the_parameter():
    with pytest.raises(TypeError):
        kvcalc.sweep("llama3-8b")
    cases = [
        ({"seq_len": "0"}, r"^seq_len '0': the value must be positive, got 0 \(SPEC: "),
        ({"batch": "x", "seq_len": 1024}, r"^batch 'x': 'x' is not a whole number"),
        ({"tp": 3, "seq_len": 1024}, r"^kv_heads=8, tp=3: tp=3 must divide the query heads "
                                     r"\(32\) \(skip_invalid leaves such combinations out\)$"),
        ({"gpu": "none", "memory_fraction": 0.5, "reserve_bytes": 2**30},
         r"^memory_fraction and reserve_bytes apply to a device's memory, and gpu none has "
         r"none: name a device with gpu, or leave it out$"),
        ({"memory_fraction": 1.5}, r"^memory_fraction must be in \(0, 1\], got 1.5$"),
        ({"gpu": "none", "engine": "vllm", "seq_len": 1024},
         r"^engine times the rows on a device: give gpu NAME$"),
    ]
    for given, words in cases:
        with pytest.raises(ParameterError, match=words) as e:
            kvcalc.sweep(model="llama3-8b", **given)
        assert "--" not in str(e.value)


@pytest.mark.parametrize("argv, line", [
    (["--gpu", "none", "--memory-fraction", "0.5", "--reserve", "1GiB"],
     "--memory-fraction and --reserve apply to a device's memory, and --gpu none has none: "
     "name a device with --gpu, or leave it out"),
    (["--tp", "3", "--seq-len", "1024"], "kv_heads=8, tp=3: tp=3 must divide the query heads "
                                         "(32) (--skip-invalid leaves such combinations out)"),
    (["--gpu", "none", "--engine", "vllm"], "--engine times the rows on a device: give --gpu NAME"),
])
def test_the_sweep_command_says_the_parameter_as_its_flag(argv, line):
    r = CliRunner().invoke(app, ["sweep", "--preset", "llama3-8b", *argv])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"kvcalc: error: {line}"]


# --- check ---------------------------------------------------------------------------------
def _log(path: Path, tmp_path: Path) -> Path:
    """A public case's log as a file (its YAML holds the text under `log`)."""
    if path.suffix == ".log":
        return path
    f = tmp_path / f"{path.stem}.log"
    f.write_text(yamlload.safe_load(path.read_text())["log"])
    return f


FAILED = [*(p for p in sorted((DATA / "vllm" / "check").glob("*.yaml"))
            if yamlload.safe_load(p.read_text())["logged"]["refused"]),
          *sorted((DATA / "sglang" / "check").glob("*.yaml")),
          *sorted((DATA / "trtllm" / "check").glob("*.yaml"))]
CHECKS = {  # name: (the log, MODEL and flags)
    "vllm-started": (README_LOG, ["qwen2-7b", "--gpu", "a100-80gb"]),
    # a refused Triton start-up with its model and GPU: the figures beside kvcalc's, the cause
    "trtllm-refused-counted": (DATA / "trtllm" / "mistral-7b-a10g-tp4-refused-backend366.yaml",
                               ["mistral-7b", "--gpu", "a10g", "--engine", "tensorrt-llm@1.0"]),
    # SGLang's no-KV-memory failure with a model: the fraction one full request needs
    "sglang-one-request": (DATA / "sglang" / "check"
                           / "llada2-mini-rtx-pro-6000-not-enough-memory.yaml",
                           ["llama3.1-8b", "--gpu", "rtx-pro-6000-blackwell"]),
    "sglang-started": (DATA / "sglang" / "llama31-8b-h100-tp1-docs-0.4.1.yaml",
                       ["llama3.1-8b", "--gpu", "h100-sxm"]),
    # each failed start-up, from the log alone
    **{f"failed-{p.parent.parent.name}-{p.stem}": (p, []) for p in FAILED},
}
_OPTIONS = {"--gpu": "gpu", "--engine": "engine", "--vllm-version": "vllm_version"}


def _check_parameters(args: list[str]) -> dict:
    """check's MODEL and flags as kvcalc.check's parameters."""
    out, rest = {}, list(args)
    if rest and not rest[0].startswith("--"):
        out["model"] = rest.pop(0)
    out.update({_OPTIONS[flag]: value for flag, value in zip(rest[::2], rest[1::2])})
    return out


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_check_json_is_the_functions_as_dict_on_the_public_logs(name, tmp_path):
    path, args = CHECKS[name]
    log = _log(path, tmp_path)
    want = json.loads(_cli(["check", str(log), *args, "--format", "json"]))
    answer = kvcalc.check(log=log.read_text(), **_check_parameters(args))
    assert json.loads(json.dumps(answer.as_dict())) == want  # tuples written as lists
    assert answer.counted == (name.startswith(("vllm", "sglang-started", "trtllm")))


def test_the_calibration_file_is_the_functions(tmp_path):
    """`check LOG -o FILE` writes the answer's calibration text, naming the log's file."""
    out = tmp_path / "a100.yaml"
    _cli(["check", str(README_LOG), "qwen2-7b", "--gpu", "a100-80gb", "-o", str(out)])
    answer = kvcalc.check(log=README_LOG.read_text(), model="qwen2-7b", gpu="a100-80gb")
    assert answer.calibration_text(README_LOG.name) == out.read_text()
    failed = kvcalc.check(log=yamlload.safe_load(FAILED[0].read_text())["log"])
    assert failed.calibration_text("x.log") is None


def test_check_is_keyword_only_and_its_errors_name_the_parameter():
    text = README_LOG.read_text()
    with pytest.raises(TypeError):
        kvcalc.check(text)
    sglang = yamlload.safe_load((DATA / "sglang" / "llama31-8b-h100-tp1-docs-0.4.1.yaml")
                            .read_text())["log"]
    trtllm = yamlload.safe_load((DATA / "trtllm" / "llama2-7b-a10-tp1-trtllm224.yaml")
                            .read_text())["log"]
    cases = [
        (dict(log=text, model="qwen2-7b", gpu="none"),
         r"^check needs the GPU the log ran on: gpu NAME$"),
        (dict(log=text, engine="foo"),
         r"^engine foo: check reads vLLM, SGLang and TensorRT-LLM start-up logs$"),
        (dict(log=sglang, model="llama3.1-8b"),
         r"^SGLang logs do not name the GPU: give gpu NAME \(see `kvcalc presets`\)$"),
        (dict(log=trtllm, gpu="a10"), r"^give model \(a preset, Hub id, model folder or "
                                      r"config.json\): TensorRT-LLM logs do not name it$"),
    ]
    for given, words in cases:
        with pytest.raises(ParameterError, match=words) as e:
            kvcalc.check(**given)
        assert "--" not in str(e.value)


def test_the_check_command_says_the_parameter_as_its_flag():
    r = CliRunner().invoke(app, ["check", str(README_LOG), "qwen2-7b", "--gpu", "none"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["kvcalc: error: check needs the GPU the log ran on: "
                                     "--gpu NAME"]
    r = CliRunner().invoke(app, ["check", str(README_LOG), "--engine", "foo"])
    assert r.stderr.splitlines() == ["kvcalc: error: --engine foo: check reads vLLM, SGLang "
                                     "and TensorRT-LLM start-up logs"]
