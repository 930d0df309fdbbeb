"""Wheel build hook: presets/_parsed.marshal, made when the wheel is built.

The index holds each shipped preset's size, CRC-32 and its YAML parsed once, so an
installed kvcalc reads presets without importing PyYAML (see kvcalc/presets.py). It
is made here from the YAML files being packed, never committed, so it cannot go
stale. An editable install (a checkout) has none and parses the YAML itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_SCRIPT = "import sys; from kvcalc.presets import build_index; sys.stdout.buffer.write(build_index())"


class PresetsIndexHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        self._tmp = tempfile.mkdtemp(prefix="kvcalc-index-")
        path = os.path.join(self._tmp, "_parsed.marshal")
        # pip's isolated build environment reaches its packages (PyYAML) through
        # PYTHONPATH: keep it, with the source tree first.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (self.root, os.environ.get("PYTHONPATH", "")) if p)}
        result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=self.root, env=env,
                                capture_output=True)
        if result.returncode:
            raise RuntimeError("building presets/_parsed.marshal failed:\n"
                               + result.stderr.decode("utf-8", "replace"))
        with open(path, "wb") as f:
            f.write(result.stdout)
        build_data["force_include"][path] = "kvcalc/presets/_parsed.marshal"

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        if getattr(self, "_tmp", None):
            shutil.rmtree(self._tmp, ignore_errors=True)
