"""Start-up of the analytical commands against the floor: `python -c "import typer, rich"`.

    python3 benchmarks/bench_startup.py [--repeat 21]

Runs each command `--repeat` times, interleaved (so a busy machine slows them alike),
and prints the median wall time of each and its ratio to the floor. The goal is
<= 1.5x for `kvcalc estimate --preset gpt3` (table and JSON) and for a Hub id in the
local Hugging Face cache (one built here by tests/hubcache.py, in a temporary HF_HOME).
Each command is also set against a bare typer app that runs one command with one int
option (and `--help` against a bare typer app's `--help`), and against the floor run with
Python's cyclic collector off as kvcalc starts (kvcalc/cli/__init__.py): a bare program could do that too, and the
ratio to it is kvcalc's own work alone.
stdout goes to /dev/null; the kvcalc under test is the checkout this file lives in, with
the presets index an installed wheel carries (written to presets/_parsed.marshal, which git
ignores, when the checkout has none).

Bytecode is cached for every run (PYTHONDONTWRITEBYTECODE is dropped and the .pyc
files go to a temporary PYTHONPYCACHEPREFIX, warmed by one untimed run of each
command), as for a pip-installed kvcalc: without it the checkout's modules would be
compiled on every start while typer's and rich's would not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = [sys.executable, "-c", "import typer, rich"]
# The floor as kvcalc starts it (kvcalc/cli/__init__.py): the cyclic collector off during
# the imports and frozen at exit. kvcalc's ratio to it is its own work alone.
GC_FLOOR = [sys.executable, "-c", "import gc\ngc.disable()\nimport typer, rich\ngc.freeze()"]
# `--help` is drawn by typer's rich help (rich.markdown, pygments): its fair floor is
# the help of a bare typer app with one command, not an import.
HELP_FLOOR = [sys.executable, "-c", "import typer\napp = typer.Typer()\n@app.command()\n"
              "def main(x: int = 1):\n    'A command.'\napp(['--help'], prog_name='bare')"]
# What any typer program pays to run a command with one option.
COMMAND_FLOOR = [sys.executable, "-c", "import typer, rich\napp = typer.Typer()\n@app.command()\n"
                 "def main(x: int = 1):\n    'A command.'\napp(['--x', '2'], prog_name='bare')"]
COMMANDS = {
    "estimate (table)": ["estimate", "--preset", "gpt3"],
    "estimate --format json": ["estimate", "--preset", "gpt3", "--format", "json"],
    "estimate Qwen/Qwen3-0.6B (cached Hub id)": ["estimate", "Qwen/Qwen3-0.6B"],
    "presets": ["presets"],
    "--help": ["--help"],
}


def _hub_cache() -> str:
    """A Hugging Face cache (HF_HOME) holding Qwen/Qwen3-0.6B as the Hub does: its
    published config.json and its tensors in two sparse safetensors shards
    (tests/hubcache.py; the headers are real, the data a hole). A cached Hub id is read
    without huggingface_hub (issue #42)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import json

    import hubcache

    home = Path(tempfile.mkdtemp(prefix="kvcalc-bench-hf-"))
    cfg = json.loads((ROOT / "presets" / "hf" / "Qwen__Qwen3-0.6B.json").read_text())
    tensors = hubcache.qwen3_tensors(cfg)
    half = len(tensors) // 2
    folder = hubcache.model_folder(home / "download", cfg, {
        "model-00001-of-00002.safetensors": tensors[:half],
        "model-00002-of-00002.safetensors": tensors[half:]})
    hubcache.hf_cache(home / "hf", "Qwen/Qwen3-0.6B", folder)
    return str(home / "hf")


def _time(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   check=True, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21, help="runs of each command (default 21)")
    args = parser.parse_args()
    index = ROOT / "presets" / "_parsed.marshal"
    if not index.exists():  # a wheel carries it (hatch_build.py); time the checkout alike
        subprocess.run([sys.executable, "-m", "kvcalc.presets"], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        print(f"wrote {index.relative_to(ROOT)} (git ignores it), as an installed wheel has it")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="80", HF_HOME=_hub_cache(),
               PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="kvcalc-bench-pyc-"))
    runs = {"floor: python -c 'import typer, rich'": FLOOR,
            "the floor, collector off as kvcalc runs": GC_FLOOR,
            "a bare typer app's --help": HELP_FLOOR,
            "a bare typer app running a command": COMMAND_FLOOR,
            **{f"kvcalc {name}": [sys.executable, "-m", "kvcalc", *a] for name, a in COMMANDS.items()}}
    for cmd in runs.values():  # warm the page cache and .pyc files
        _time(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, cmd in runs.items():
            times[name].append(_time(cmd, env))
    floor = statistics.median(next(iter(times.values())))
    help_floor = statistics.median(times["a bare typer app's --help"])
    command_floor = statistics.median(times["a bare typer app running a command"])
    gc_floor = statistics.median(times["the floor, collector off as kvcalc runs"])
    for name, ts in times.items():
        med = statistics.median(ts)
        line = (f"{name:44s} median {med * 1e3:7.1f} ms  min {min(ts) * 1e3:7.1f} ms  "
                f"{med / floor:4.2f}x the floor")
        if name == "kvcalc --help":
            line += f" ({med / help_floor:4.2f}x a bare typer app's --help)"
        elif name.startswith("kvcalc"):
            line += (f" ({med / command_floor:4.2f}x a bare typer app's command, "
                     f"{med / gc_floor:4.2f}x the floor with the collector off)")
        print(line)


if __name__ == "__main__":
    main()
