"""The commands as library functions (kvcalc.answers, issue #42 point C): each command's
`--format json` is its function's `as_dict()`, exactly, on the golden cases
(tests/golden.py) and on the plain fit; the function takes its parameters by keyword, in
the library's units, and an error names the parameter, which the command line says as its
flag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import golden
import kvcalc
from kvcalc.errors import ParameterError

ROOT = Path(__file__).resolve().parent.parent


def _parameters(argv: list[str]) -> dict:
    """fit's flags as kvcalc.fit's parameters: --preset and --config are `model`, a flag
    is its name with '_' for '-', a whole number an int (the sizes here have no units)."""
    out, it = {}, iter(argv)
    for flag in it:
        value = next(it)
        name = "model" if flag in ("--preset", "--config") else flag[2:].replace("-", "_")
        out[name] = int(value) if value.isdigit() else value
    return out


PLAIN = {  # the plain fit: batch requests of seq_len tokens, the floor beside the count
    "plain-llama3-70b-tp4": ["--preset", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4",
                             "--seq-len", "8192"],
    "plain-gpt3-does-not-fit": ["--preset", "gpt3"],
    "plain-batch-and-slo": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--seq-len",
                            "4096", "--batch", "4", "--ttft-ms", "500", "--tpot-ms", "20"],
    "engine-auto": ["--preset", "gpt-oss-120b", "--gpu", "h100-sxm", "--max-model-len", "auto"],
}


def _cli_json(argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "kvcalc", "fit", *argv, "--format", "json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode in (0, 1), r.stderr  # 1: a valid question answered no
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", sorted(golden.FIT_LAYOUTS))
def test_fit_json_is_the_functions_as_dict_on_the_golden_cases(name):
    """The golden file is `kvcalc fit ... --format json`; kvcalc.fit gives it too."""
    argv = golden.FIT_LAYOUTS[name]
    want = json.loads((golden.GOLDEN / f"fit-{name}.json").read_text())
    answer = kvcalc.fit(**_parameters(argv))
    assert answer.as_dict() == want
    assert answer.fits == want["fits"]


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_fit_json_is_the_functions_as_dict_on_the_plain_fit(name):
    argv = PLAIN[name]
    answer = kvcalc.fit(**_parameters(argv))
    assert answer.as_dict() == _cli_json(argv)


def test_the_json_has_numbers_and_named_shortfalls():
    """gpu_memory_utilization is a number; a start-up that does not fit says by how much,
    never as negative bytes (issue #42)."""
    d = kvcalc.fit(model="gpt3").as_dict()  # 349 GB of weights on one 80 GB H100
    assert d["engine"]["gpu_memory_utilization"] == 0.9
    assert d["free_for_kv_bytes_per_device"] == 0
    # usable 80 GiB less the bf16 weights, 349,208,518,656 B
    assert d["kv_cache_shortfall_bytes_per_device"] == 349_208_518_656 - 80 * 2**30
    memory = d["engine"]["memory"]
    assert memory["kv_cache"] == 0
    over = sum(memory[k] for k in ("weights", "activation_peak", "non_torch", "cuda_graphs"))
    assert d["engine"]["kv_cache_shortfall_bytes"] == over - memory["budget"] > 0
    assert all(v >= 0 for v in memory.values())
    fixes = kvcalc.fit(model="llama3.3-70b", gpu="h100-sxm", tp=2,
                       max_model_len=32768).as_dict()["fixes"]
    util = [f["value"] for f in fixes if f["setting"] == "gpu_memory_utilization"]
    assert util and all(isinstance(u, float) for u in util)


@pytest.mark.parametrize("engine", ["sglang", "tensorrt-llm"])
def test_another_engines_count_has_no_negative_bytes(engine):
    """GPT-3's weights exceed an H100 under SGLang's and TensorRT-LLM's counts too: the
    memory terms are sizes, and the shortfall is named."""
    d = kvcalc.fit(model="gpt3", engine=engine).as_dict()
    assert d["fits"] is False
    assert all(v >= 0 for v in d["memory"].values())
    if engine == "sglang":  # its free memory after the weights went negative
        assert d["kv_cache_shortfall_bytes"] == d["memory"]["weights"] - d["memory"][
            "avail_mem_at_start"] > 0


def test_the_function_is_keyword_only_and_names_its_parameters():
    with pytest.raises(TypeError):
        kvcalc.fit("llama3-8b")
    with pytest.raises(ParameterError, match=r"^max_model_len must be positive, got 0$"):
        kvcalc.fit(model="llama3-8b", max_model_len=0)
    with pytest.raises(ParameterError, match=r"^batch sizes the plain fit; the engine count is "
                                             r"per max_model_len request"):
        kvcalc.fit(model="llama3-8b", max_model_len=8192, batch=2)
    with pytest.raises(ParameterError, match=r"^ttft_ms must be a positive number"):
        kvcalc.fit(model="llama3-8b", ttft_ms=-1)
    with pytest.raises(ParameterError, match=r"^fit needs a device: gpu NAME"):
        kvcalc.fit(model="llama3-8b", gpu="none")
    with pytest.raises(ParameterError, match=r"^batch sizes the plain fit; SGLang"):
        kvcalc.fit(model="llama3-8b", engine="sglang", batch=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_model_length'"):
        kvcalc.fit(model="llama3-8b", max_model_length=8192)


OTHER_ENGINES = {  # another engine's count: its own flags, by name
    "sglang": (["--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang",
                "--mem-fraction-static", "0.8", "--context-length", "32768"],
               {"mem_fraction_static": "0.8", "context_length": 32768}),
    "sglang-slo": (["--preset", "qwen2-7b", "--gpu", "h100-sxm", "--engine", "sglang@0.5.4",
                    "--tpot-ms", "30"], {}),
    "tensorrt-llm": (["--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine",
                      "tensorrt-llm", "--max-batch-size", "64", "--max-seq-len", "16384"],
                     {"max_batch_size": 64, "max_seq_len": 16384}),
}


@pytest.mark.parametrize("name", sorted(OTHER_ENGINES))
def test_fit_json_is_the_functions_as_dict_for_the_other_engines(name):
    argv, own = OTHER_ENGINES[name]
    common = _parameters([a for pair in zip(argv[::2], argv[1::2]) for a in pair
                          if pair[0].replace("-", "_")[2:] not in own])
    answer = kvcalc.fit(**common, **own)
    assert answer.count is not None
    assert answer.as_dict() == _cli_json(argv)


@pytest.mark.parametrize("argv, line", [
    (["--max-model-len", "0"], "kvcalc: error: --max-model-len must be positive, got 0"),
    (["--max-model-len", "8192", "--batch", "2"],
     "kvcalc: error: --batch sizes the plain fit; the engine count is per --max-model-len "
     "request and serves up to --max-num-seqs at once: give --max-num-seqs, or drop the "
     "engine parameters"),
    (["--ttft-ms", "-1"], "kvcalc: error: --ttft-ms must be a positive number of "
                          "milliseconds, got -1.0"),
    (["--max-model-len", "8192", "--reserve", "1GiB"],
     "kvcalc: error: --memory-fraction and --reserve shape the plain fit; with engine "
     "parameters use --gpu-memory-utilization (the engine subtracts activations, non-torch "
     "memory and CUDA graphs itself)"),
])
def test_the_command_line_says_the_parameter_as_its_flag(argv, line):
    r = subprocess.run([sys.executable, "-m", "kvcalc", "fit", "--preset", "llama3-8b", *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [line]


ESTIMATES = {name: case for name, case in golden.cases().items() if case[0][0] == "estimate"}


def test_estimate_json_is_the_functions_as_dict_on_the_golden_cases(monkeypatch):
    """`kvcalc estimate MODEL --format json` is kvcalc.estimate(model=MODEL).as_dict(),
    the function at its own defaults being the command at its (an H100 SXM, timed and
    counted as vLLM runs it), for every golden estimate case: every model preset and
    every kept config.json. kvcalc.figures, the lower-level form, gives the same at those
    settings."""
    assert len(ESTIMATES) >= 100
    for name, (argv, _, where) in sorted(ESTIMATES.items()):
        assert argv[1] in ("--preset", "--config") and argv[3:] == ["--format", "json"]
        want = json.loads((golden.GOLDEN / f"{name}.json").read_text())
        monkeypatch.chdir(where)  # config paths are relative to it
        est = kvcalc.estimate(model=argv[2])
        assert json.loads(json.dumps(est.as_dict())) == want, name
        low = kvcalc.figures(argv[2], hardware="h100-sxm", engine="vllm")
        assert json.loads(json.dumps(low.as_dict())) == want, name


def test_estimate_is_the_commands_function_keyword_only():
    """kvcalc.estimate is kvcalc.answers.estimate.estimate: keyword-only, the command's
    defaults, the package's function even after the module kvcalc.estimate is imported."""
    import inspect
    import sys

    import kvcalc.estimate  # noqa: F401  (the module; the package keeps the function)
    from kvcalc.answers import estimate as answers

    assert kvcalc.estimate is answers.estimate and callable(kvcalc.estimate)
    assert sys.modules["kvcalc.estimate"] is not kvcalc.estimate
    parameters = inspect.signature(kvcalc.estimate).parameters.values()
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters)
    assert inspect.signature(kvcalc.estimate).parameters["gpu"].default == "h100-sxm"
    with pytest.raises(TypeError):
        kvcalc.estimate("llama3-8b")


def _int_flags(engine: str) -> list[str]:
    """The engine's own flags whose field in its flags record takes a whole number."""
    import typing

    from kvcalc.serving.flags import OWNER
    from kvcalc.serving.sglang import SglangFlags
    from kvcalc.serving.trtllm import TrtllmFlags

    hints = typing.get_type_hints(SglangFlags if engine == "sglang" else TrtllmFlags)
    return sorted(n for n, owners in OWNER.items() if owners == (engine,) and n in hints
                  and int in (typing.get_args(hints[n]) or (hints[n],))
                  and bool not in (typing.get_args(hints[n]) or (hints[n],)))


@pytest.mark.parametrize("engine", ["sglang", "tensorrt-llm"])
def test_another_engines_flag_of_the_wrong_type_is_named(engine):
    """SGLang's and TensorRT-LLM's flags reach the library by name, past the CLI's
    parsers: a whole-number flag given "auto" or 0.5 (the page once sent context_length
    "auto") is a ParameterError naming it, never a TypeError from deep in the count."""
    names = _int_flags(engine)
    assert {"sglang": "context_length", "tensorrt-llm": "max_seq_len"}[engine] in names
    for name in names:
        for bad in ("auto", 0.5, True):
            with pytest.raises(ParameterError) as e:
                kvcalc.fit(model="llama3.1-8b", engine=engine, **{name: bad})
            assert e.value.parameters == (name,)
            assert str(e.value).startswith(f"{name} takes a whole number")


@pytest.mark.parametrize("model, argv, parameters", [
    ("llama3-8b", ["--compare"], dict(compare=True)),
    ("llama3-8b", ["--kv-heads", "4", "--compare"], dict(kv_heads=4, compare=True)),
    ("llama3-8b", ["--engine", "sglang"], dict(engine="sglang")),
    ("qwen3-30b-a3b", ["--data-parallel-size", "2", "--enable-expert-parallel"],
     dict(data_parallel_size=2, enable_expert_parallel=True)),
    ("llama3-8b", ["--gpu", "none", "--seq-len", "8192"], dict(gpu="none", seq_len=8192)),
    ("llama3-8b", ["--gpu", "a100-80gb", "--reserve", "2GiB", "--memory-fraction", "0.9"],
     dict(gpu="a100-80gb", reserve_bytes=2 * 2**30, memory_fraction=0.9)),
])
def test_estimate_json_is_the_commands_function(model, argv, parameters):
    """`kvcalc estimate` beyond its defaults (another engine's count, vLLM's layout, the
    MHA/GQA/MQA comparison, no device) is kvcalc.estimate's as_dict()."""
    from typer.testing import CliRunner

    from kvcalc.cli import app

    r = CliRunner().invoke(app, ["estimate", model, *argv, "--format", "json"])
    assert r.exit_code == 0, r.output
    want = json.loads(json.dumps(kvcalc.estimate(model=model, **parameters).as_dict()))
    assert json.loads(r.stdout) == want


def test_estimates_refusals_name_its_parameters():
    estimate = kvcalc.estimate

    with pytest.raises(ParameterError, match=r"^memory_fraction and reserve_bytes apply to a "
                       r"device's memory, and gpu none has none"):
        estimate(model="llama3-8b", gpu="none", memory_fraction=0.5, reserve_bytes=1)
    with pytest.raises(ParameterError, match=r"^data_parallel_size with engine sglang: "):
        estimate(model="llama3-8b", engine="sglang", data_parallel_size=2)
    with pytest.raises(ParameterError, match=r"^enable_expert_parallel is vLLM's flag"):
        estimate(model="llama3-8b", engine="sglang", enable_expert_parallel=True)
