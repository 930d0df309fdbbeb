"""Run `python -m kvcalc ARGS` with its stderr on a pseudo-terminal (so rich draws its
progress as on a user's screen) and note when each of some texts first shows: the shared
harness of the tests that hold `measure`'s progress to appearing at once."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a model of a few thousand parameters in the presets' YAML schema (--config)
TINY_MODEL = """\
name: tiny
layers: 2
d_model: 32
heads: 4
kv_heads: 2
head_dim: 8
d_ff: 48
vocab: 50
"""


def start_up_s(env: dict) -> float:
    """How long `kvcalc measure --help` takes here now: the same interpreter, typer and
    rich, no torch (the floor a progress bar is held to)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "kvcalc", "measure", "--help"], capture_output=True,
                   cwd=ROOT, env=env, timeout=60, check=True)
    return time.monotonic() - t0


def run_on_a_terminal(args: list[str], keys: tuple[bytes, ...], env: dict,
                      wall_s: float) -> tuple[dict[bytes, float], bytes]:
    """`kvcalc ARGS` with stderr on a 200-column pty: when each of `keys` first showed
    (seconds from the start) and what went to stdout. Fails the test past `wall_s` or
    on a non-zero exit."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    seen: dict[bytes, float] = {}
    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "kvcalc", *args], stdout=out, stderr=slave,
                             stdin=subprocess.DEVNULL, cwd=ROOT, env=env)
        os.close(slave)
        screen = b""
        try:
            while True:
                if time.monotonic() - t0 > wall_s:
                    pytest.fail(f"kvcalc {' '.join(args)} ran over {wall_s} s")
                ready, _, _ = select.select([master], [], [], 0.02)
                chunk = b""
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:  # the child closed the terminal
                        chunk = b""
                if chunk:
                    screen += chunk
                    for key in keys:
                        if key in screen and key not in seen:
                            seen[key] = time.monotonic() - t0
                elif p.poll() is not None:
                    break
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
            os.close(master)
        assert p.returncode == 0, screen.decode(errors="replace")[-2000:]
        out.seek(0)
        return seen, out.read()
