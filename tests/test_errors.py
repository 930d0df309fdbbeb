"""The library's errors name its parameters, the command line says its flags (issue #42):
no `raise` below kvcalc/cli words a message with a flag (`--max-model-len`) unless the
flag is on the short list below, each with its reason; a bad parameter given to the
library is a ParameterError naming it, and the same call on the command line names the
flag."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvcalc
from kvcalc.cli import app
from kvcalc.errors import ParameterError, as_flags, flag_of

PACKAGE = Path(kvcalc.__file__).resolve().parent
FLAG = re.compile(r"--[a-z][a-z0-9-]*")

# (module, flag): why its raise may say the flag.
ALLOWED = {
    ("hfconfig/__init__.py", "--families"):
        "advice to run a command (`kvcalc presets --families`), not a parameter",
    ("plot.py", "--plot"):
        "kvcalc.plot draws only for the commands' --plot; no library function takes it",
    ("serving/sglang/__init__.py", "--speculative-algorithm"):
        "SGLang's own flag, said beside the parameter (SglangFlags' check: \"... needs "
        "speculative_algorithm (SGLang's --speculative-algorithm)\")",
    ("serving/sglang/__init__.py", "--lora-paths"):
        "SGLang's own flag, which kvcalc does not take (it reads no adapters)",
}


def _raised_flags():
    """(module, flag, line) for each flag in a string of a `raise` outside kvcalc/cli."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith("cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            for part in ast.walk(node.exc):  # f-strings' text parts are constants too
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    for flag in FLAG.findall(part.value):
                        yield module, flag, node.lineno


def test_the_library_raises_no_flag_names():
    found = sorted(set(_raised_flags()))
    wrong = [f"{m}:{line}: {flag}" for m, flag, line in found if (m, flag) not in ALLOWED]
    assert not wrong, "say the parameter, ParameterError('{name} ...', 'name'):\n" + "\n".join(
        wrong)
    assert {(m, flag) for m, flag, _ in found} == set(ALLOWED)  # no stale entry


def test_the_walk_sees_fstrings_and_continued_messages(tmp_path):
    source = ('raise E(f"a {x} "\n        "give --max-model-len")\nraise E("--tp " + y)\n'
              'raise E("no flag -- here")\n')
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Raise)]
    said = [FLAG.findall(c.value) for n in nodes for c in ast.walk(n.exc)
            if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    assert [f for x in said for f in x] == ["--max-model-len", "--tp"]


MODEL = "llama3-8b"
CASES = [  # (the library call, its parameter, the command and the flag it says)
    (lambda: kvcalc.fit(model=MODEL, kv_offloading_size="-1"), "kv_offloading_size",
     ["fit", "--preset", MODEL, "--kv-offloading-size", "-1"], "--kv-offloading-size"),
    (lambda: kvcalc.fit(model=MODEL, speculative_config="[1]"), "speculative_config",
     ["fit", "--preset", MODEL, "--speculative-config", "[1]"], "--speculative-config"),
    (lambda: kvcalc.plan(model=MODEL, gpu="h100-sxm", gpus=1, max_model_len=4096,
                         speculative_config='{"method": "nope"}'), "speculative_config",
     ["plan", MODEL, "--gpu", "h100-sxm", "--gpus", "1", "--max-model-len", "4096",
      "--speculative-config", '{"method": "nope"}'], "--speculative-config"),
    (lambda: kvcalc.bench(model=MODEL, gpu="h100-sxm", input_len=1024, output_len=128,
                          num_prompts=8, host_hit=0.5), "host_hit",
     ["bench", MODEL, "--gpu", "h100-sxm", "--input-len", "1024", "--output-len", "128",
      "--num-prompts", "8", "--host-hit", "0.5"], "--host-hit"),
]


@pytest.mark.parametrize("call,parameter,argv,flag", CASES,
                         ids=[c[1] + "-" + c[2][0] for c in CASES])
def test_a_bad_parameter_is_named_and_the_command_says_its_flag(call, parameter, argv, flag):
    with pytest.raises(ParameterError) as caught:
        call()
    said = str(caught.value)
    assert parameter in said and "--" not in said and parameter in caught.value.parameters
    assert caught.value.worded(flag_of) == as_flags(caught.value)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2
    assert f"kvcalc: error: {caught.value.worded(flag_of)}\n" in r.output
    assert flag in r.output


def test_a_plan_that_meets_no_target_names_it_and_the_command_says_its_flag():
    from kvcalc.plan import NothingFits

    args = dict(model="llama3.1-8b", gpu="h100-sxm", gpus=1, max_model_len=32768)
    with pytest.raises(NothingFits) as caught:
        kvcalc.plan(**args, ttft_ms=100)
    assert str(caught.value).startswith("no layout meets ttft_ms even with one request")
    r = CliRunner().invoke(app, ["plan", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "1",
                                 "--max-model-len", "32768", "--ttft-ms", "100"])
    assert r.exit_code == 1  # a question answered no
    assert r.output == f"kvcalc: {caught.value.worded(flag_of)}\n"
    assert r.output.startswith("kvcalc: no layout meets --ttft-ms even with one request")
