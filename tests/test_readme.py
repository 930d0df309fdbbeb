"""Every example in README.md runs as written: the shell recipes and the Python block.

The two set-up commands (pip) are what CI itself runs, so they are not repeated here.
Each shell example runs in a temporary folder (tests/ linked in, reports/ made) with a
`kvcalc` on PATH that is this Python's `python -m kvcalc`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

if not README.is_file():  # pragma: no cover - a copy of tests/ without the README
    pytest.skip("README.md is not beside tests/", allow_module_level=True)

TEXT = README.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", TEXT, flags=re.S)


def _shell_examples() -> list[str]:
    out = []
    for lang, body in BLOCKS:
        if lang != "bash":
            continue
        body = re.sub(r"\\\n\s*", "", body)  # join continuation lines
        for line in body.splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command.startswith("kvcalc"):
                out.append(command)
    return out


SHELL = _shell_examples()
PYTHON = [body for lang, body in BLOCKS if lang == "python"]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_the_readme_has_examples():
    assert len(SHELL) >= 15 and PYTHON
    assert TEXT.lstrip().startswith("# kvcalc\n\n```bash\npython3 -m pip install . && kvcalc estimate")


def test_ci_runs_the_readmes_test_command_from_the_pins():
    """The README's second set-up command is the one .ci/run runs, and it installs from
    the constraints file, which pins every package it names to one exact version."""
    if not (ROOT / ".ci" / "run").is_file():
        pytest.skip("a copy of tests/ and the README without the repository's .ci/")
    setup = TEXT.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(setup) == 2 and "pytest" in setup[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup[1] in ci.splitlines()
    assert "-c .ci/constraints.txt" in setup[1]
    pins = [line for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][^\s,;<>=]*", p) for p in pins)
    names = [p.split("==")[0].lower().replace("_", "-") for p in pins]
    assert len(names) == len(set(names))
    for needed in ("torch", "transformers", "pyyaml", "typer", "numpy", "pytest", "hatchling"):
        assert needed in names


# The README's Hub id, answered offline: a Hugging Face cache made here holds its
# config.json and a sparse safetensors file (tests/hubcache.py), and so does the folder
# the README's folder example names.
HUB_ID = "Qwen/Qwen3-0.6B"
HAS_HUB = importlib.util.find_spec("huggingface_hub") is not None


def _hub_model(tmp_path: Path) -> dict:
    import hubcache
    from kvcalc.presets import presets_dir

    cfg = json.loads((presets_dir() / "hf" / "Qwen__Qwen3-0.6B.json").read_text())
    shards = {"model.safetensors": hubcache.qwen3_tensors(cfg)}
    hubcache.model_folder(tmp_path / "work" / "Qwen3-0.6B", cfg, shards)
    download = hubcache.model_folder(tmp_path / "download", cfg, shards)
    hubcache.hf_cache(tmp_path / "hf", HUB_ID, download)
    return {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
            "HF_HUB_OFFLINE": "1"}


@pytest.fixture
def shell_env(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "kvcalc"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m kvcalc \"$@\"\n")
    shim.chmod(0o755)
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "work" / "reports").mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100"}
    # The kvcalc under test: the checkout's when it is importable from here, else the
    # installed one.
    if (ROOT / "kvcalc" / "__init__.py").is_file():
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=pytest.mark.slow) if c.startswith("kvcalc measure") else c
    for c in SHELL])  # the measure examples run real decode steps: seconds each
def test_shell_example(command: str, shell_env: dict, tmp_path: Path):
    if command.startswith("kvcalc measure") and not HAS_TORCH:
        pytest.skip("measure needs torch")
    if HUB_ID in command and not HAS_HUB:
        pytest.skip("Hub ids need huggingface_hub (kvcalc[hub])")
    if "Qwen3-0.6B" in command:  # the Hub id, or its folder
        shell_env = {**shell_env, **_hub_model(tmp_path)}
    if "--plot" in command and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("plots need matplotlib")
    for tool in re.findall(r"\|\s*(\w+)", command):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path / "work",
                       env=shell_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{command}\n{r.stderr}"
    assert "Traceback" not in r.stderr
    assert r.stdout or "wrote" in r.stderr


@pytest.mark.parametrize("code", PYTHON)
def test_python_example(code: str, shell_env: dict, tmp_path: Path):
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "work", env=shell_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "the README's Python example prints its results"


def _outputs_shown() -> list[tuple[list[str], str]]:
    """Each ```text block that follows a ```bash block (with only ```text blocks between):
    the bash block's kvcalc commands and the text the README says they print."""
    out, commands = [], None
    for lang, body in BLOCKS:
        if lang == "bash":
            body = re.sub(r"\\\n\s*", "", body)
            commands = [c.strip() for c in body.splitlines() if c.strip().startswith("kvcalc")]
        elif lang == "text" and commands:
            out.append((commands, body))
        else:
            commands = None
    return out


SHOWN = _outputs_shown()


@pytest.mark.parametrize("commands,shown", SHOWN, ids=[f"{c[0][:60]}" for c, _ in SHOWN])
def test_shown_output_is_what_the_command_prints(commands, shown, shell_env: dict,
                                                 tmp_path: Path):
    """A README block of output is what its command prints today: each line of it is in
    the command's output (lines the README leaves out may be missing, and a line may be
    wrapped at another width, so both are compared with whitespace runs as one space):
    outputs went stale before."""
    printed = []
    wide = {**shell_env, "COLUMNS": "250"}  # no table cell wrapped, whatever the README's width
    for command in commands:
        if command.startswith("kvcalc measure"):
            pytest.skip("measure's output is a measurement of this machine")
        r = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path / "work",
                           env=wide, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
        printed.append(r.stdout + r.stderr)
    text = " ".join(" ".join(printed).split())
    stale = [line for line in shown.splitlines()  # "...": lines the README leaves out
             if line.strip().strip("─") not in ("", "...")  # rules: as wide as the table
             and " ".join(line.split()) not in text]
    assert not stale, (f"the README shows lines {commands[0]!r} no longer prints:\n"
                       + "\n".join(stale[:10]))
