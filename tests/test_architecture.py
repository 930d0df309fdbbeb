"""The shape of the package, checked from its source: imports run one way (down the
layers below), nothing imports in a circle (module to module, or package to package),
at most 15 modules sit at the package root, no module grows past 600 lines, reading one
Hugging Face config loads its family alone, and presets are read through their public
loader.

The layers follow shared/STYLE.md: arithmetic and dtypes at the bottom, then layer
kinds, the model, formulas, model sources, time and capacity, the estimate, output,
the sweep and measurement, and the CLI on top. An import inside a function counts
like one at the top: laziness saves start-up time, it does not change the direction.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kvcalc

PACKAGE = Path(kvcalc.__file__).resolve().parent  # the checkout's, or the installed wheel's
MAX_LINES = 600

# Lowest first. A module may import its own layer (the circle check keeps that honest)
# and the layers below it, never one above. Prefixes match a module and its children.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kvcalc.errors", "kvcalc.ground", "kvcalc.schemas"),
    ("kvcalc.layers",),
    ("kvcalc.spec", "kvcalc.workload"),
    ("kvcalc.formulas", "kvcalc.towers", "kvcalc.speed.comm"),
    ("kvcalc.quant",),
    ("kvcalc.hfconfig", "kvcalc.presets", "kvcalc.model_source", "kvcalc.engines"),
    ("kvcalc.speed", "kvcalc.floor", "kvcalc.serving"),
    ("kvcalc.estimate",),
    ("kvcalc.plan", "kvcalc.served", "kvcalc.answers"),
    ("kvcalc.report", "kvcalc.plot"),
    ("kvcalc.sweep", "kvcalc.measure"),
    ("kvcalc.cli", "kvcalc.__main__"),
)
MAX_ROOT_MODULES = 15  # the entry modules; the rest lives in packages named for what they hold

def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
            if "presets" not in p.relative_to(PACKAGE).parts[:-1]}  # the wheel's data folder


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The kvcalc modules `name` imports anywhere in its source (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from a import b` names module a.b when there is one, else a itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import kvcalc.x.y` where y is a name
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("kvcalc"):
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    # The package's own __init__ re-exports the public API on first use (PEP 562): it is
    # the top, not a layer, and `from kvcalc import x` only loads it on the way to x.
    return {n: _imports(n, p, known) - {"kvcalc"} for n, p in mods.items() if n != "kvcalc"}


def _layer(name: str) -> int:
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    if rank is None:
        raise AssertionError(f"{name} is in no layer of tests/test_architecture.py: place it")
    return rank


def test_every_module_has_a_layer():
    for name in _graph():
        _layer(name)


def test_imports_only_go_down():
    upward = sorted(f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
                    for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a))
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: its strongly connected components of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_no_circle_between_rooms():
    """The house's rooms (each package under kvcalc/, each module at its root) import one
    way too: a package holding both a floor's pieces and what sits on the estimate would
    run back up (report/ held the ground-floor units beside tables that import the
    estimate, which imported those units)."""
    rooms: dict[str, set[str]] = {}
    for a, deps in _graph().items():
        room = ".".join(a.split(".")[:2])
        rooms.setdefault(room, set()).update(
            r for r in (".".join(b.split(".")[:2]) for b in deps) if r != room)
    circles = _circles(rooms)
    assert not circles, "rooms in a circle: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_package_root_holds_few_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the package root: {root}"


def test_presets_are_read_through_their_public_loader():
    """Engine files and served terms are presets: read by kvcalc.presets' public loader
    (preset_names, read_preset, load_preset), never its private helpers."""
    import re

    private = re.compile(r"from kvcalc\.presets import [^\n]*\b_\w+|\bpresets\._\w+")
    found = [f"{name}: {m.group(0)}" for name, path in _modules().items()
             if name != "kvcalc.presets"
             for m in private.finditer(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_no_module_over_600_lines():
    sizes = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in _modules().items()}
    over = {n: s for n, s in sizes.items() if s > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


@pytest.mark.parametrize("source, expected", [
    ("from kvcalc import _num, spec\n", {"kvcalc._num", "kvcalc.spec"}),
    ("from kvcalc.spec import ModelSpec\n", {"kvcalc.spec"}),
    ("def f():\n    from kvcalc.measure import impls\n", {"kvcalc.measure.impls"}),
    ("import kvcalc.spec as s\n", {"kvcalc.spec"}),
    ("from . import impls\n", {"kvcalc.measure.impls"}),
])
def test_the_import_reader_sees_every_form(tmp_path, source, expected):
    """The checks above are only as good as this reader: each import form resolves."""
    path = tmp_path / "mod.py"
    path.write_text(source)
    known = {"kvcalc._num", "kvcalc.spec", "kvcalc.measure", "kvcalc.measure.impls",
             "kvcalc.measure.mod"}
    assert _imports("kvcalc.measure.mod", path, known) == expected


def test_release_comparisons_live_in_each_wings_rules_table():
    """Every comparison of an engine's release sits in that engine's rules table
    (kvcalc/serving/{vllm,sglang,trtllm}/rules.py), nowhere else in the package (issue #38:
    one table of release rules per engine)."""
    import re

    # a release, era or version (or what parses one) against a tuple or a named constant
    compare = re.compile(r"(release|era|version)\w*(\([^()]*\))?\)?\s*(?:[<>]=?|[=!]=)\s*"
                         r"(\(\s*\d+\s*,\s*\d+|[A-Z][A-Z0-9_]{2,}\b)")
    tables = {f"kvcalc.serving.{w}.rules" for w in ("vllm", "sglang", "trtllm")}
    found = []
    for name, path in _modules().items():
        if name in tables:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if compare.search(code) and not code.lstrip().startswith(("'", '"')):
                found.append(f"{name}:{n}: {line.strip()}")
    assert not found, "release comparisons outside the rules tables:\n" + "\n".join(found)


# The modules every hfconfig family reader may import: typed access and the shared blocks,
# and the layer-kind reader. A family importing another family would load it too.
HF_COMMON = {"kvcalc.hfconfig.config", "kvcalc.hfconfig.layer_types"}


def test_hfconfig_families_import_no_other_family():
    from kvcalc.hfconfig import READER_MODULE

    families = {f"kvcalc.hfconfig.{m}" for m in READER_MODULE.values()}
    graph = _graph()
    crossing = sorted(f"{f} imports {d}" for f in families for d in graph[f]
                      if d.startswith("kvcalc.hfconfig") and d not in HF_COMMON)
    assert not crossing, "\n".join(crossing)


def test_reading_a_qwen3_config_loads_at_most_four_hfconfig_modules():
    """Reading one config imports its family's module (and the package, the typed access,
    the layer-kind reader) alone, not every family's (35 modules, about 61 ms, before)."""
    import os
    import subprocess
    import sys

    config = Path(__file__).resolve().parent / "data" / "hf" / "Qwen__Qwen3-8B.json"
    code = ("import sys\n"
            "from kvcalc.hfconfig import spec_from_hf_config_file\n"
            "spec_from_hf_config_file(sys.argv[1])\n"
            "print(*sorted(m for m in sys.modules if m.split('.')[:2] == ['kvcalc', 'hfconfig']))")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    loaded = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True,
                            text=True, check=True, env=env).stdout.split()
    assert "kvcalc.hfconfig.llama" in loaded
    assert len(loaded) <= 4, loaded


# The command modules whose functions are held to MAX_COMMAND_LINES (issue #42: the CLI
# parses, calls, prints). Each command's module joins the list once its functions are
# short; the merge of the branches shrinking check, sweep, plan and bench extends it.
MAX_COMMAND_LINES = 60


def test_no_command_function_over_60_lines():
    """The command line parses, calls the library and prints (issue #42): no function in
    any module of kvcalc/cli/ is over 60 lines."""
    over = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        name = path.name
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_COMMAND_LINES:
                    over.append(f"kvcalc/cli/{name}:{node.lineno} {node.name}: {lines} lines")
    assert not over, f"functions over {MAX_COMMAND_LINES} lines:\n" + "\n".join(over)
