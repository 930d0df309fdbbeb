"""Every module of kvcalc imports on the Python running the tests, and a module that needs
an optional extra fails only for that extra's package. CI's Python 3.10 tier runs a few
test files, not the whole suite (.ci/run); this one reaches the modules those files'
commands do not."""

from __future__ import annotations

import importlib
import pkgutil

import kvcalc

# the optional extras' top-level packages (pyproject.toml [project.optional-dependencies])
EXTRAS = {"torch", "transformers", "mcp", "huggingface_hub", "matplotlib", "pandas", "pyarrow",
          "jsonschema"}


def test_every_module_imports_or_needs_only_an_extra():
    failures = []
    for mod in pkgutil.walk_packages(kvcalc.__path__, "kvcalc."):
        if mod.name.endswith(".__main__"):  # runs the CLI
            continue
        try:
            importlib.import_module(mod.name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in EXTRAS:
                failures.append(f"{mod.name}: {e!r}")
        except Exception as e:  # a syntax or import-time error on this Python
            failures.append(f"{mod.name}: {e!r}")
    assert not failures, "\n".join(failures)
