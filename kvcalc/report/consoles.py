"""The rich consoles for data (stdout) and diagnostics (stderr), and the width to draw
for. rich is imported on first use, never at start-up.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_consoles: dict[bool, Any] = {}


def console(stderr: bool = False):
    """The rich console for data (stdout) or diagnostics (stderr)."""
    if stderr not in _consoles:
        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                # rich exits 1 here; `kvcalc ... | head` is not a failure, so hand the
                # error to the CLI, which exits 0.
                self.quiet = True
                raise BrokenPipeError

        # Off a terminal (a file, a pipe) nothing wraps lines, so tables get room to be
        # read instead of rich's 80 columns; COLUMNS still wins when set.
        _consoles[stderr] = _Console(stderr=stderr, highlight=False, width=_width(stderr))
    return _consoles[stderr]


def _width(stderr: bool) -> int | None:
    """COLUMNS when it is a sensible number (0 or junk is ignored, below 40 raised to 40);
    else the terminal's width, or 160 columns off a terminal (a file or a pipe), where
    nothing wraps lines."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and 0 < int(cols) < 100_000:
        return max(40, int(cols))
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream is not None and stream.isatty()
    except (ValueError, OSError):
        tty = False
    return None if tty or stderr else 160


def error_console():
    return console(stderr=True)


def terminal_width() -> int:
    """The width to draw for: COLUMNS when sensible, the terminal's, or 160 off one."""
    width = _width(stderr=False)
    if width is None:
        import shutil

        width = shutil.get_terminal_size((80, 24)).columns
    return max(40, width)
