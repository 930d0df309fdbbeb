"""Helpers for .ci/run and .ci/upgrade: the versions the project is tested with.

    python3 .ci/versions.py lowest             the lowest version of every requirement in
                                               pyproject.toml (dependencies and all extras),
                                               as pip constraints: name==lower
    python3 .ci/versions.py changes OLD NEW    packages whose version differs between two
                                               `pip freeze` files
    python3 .ci/versions.py outcomes OLD NEW   tests whose outcome differs between two
                                               pytest --junitxml files, and the totals
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pip carries a copy of the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
_REQ = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*(.*)$")


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return reqs


def lowest() -> list[str]:
    """name==X for every requirement with a lower bound >=X (one line per package)."""
    out: dict[str, str] = {}
    for req in requirements():
        name, spec = _REQ.match(req).groups()
        bound = re.search(r">=\s*([0-9][^,;\s]*)", spec)
        if bound is None:
            raise SystemExit(f"{req!r} in pyproject.toml has no lower bound (>=)")
        key = name.lower().replace("_", "-")
        if out.setdefault(key, bound.group(1)) != bound.group(1):
            raise SystemExit(f"{name} has two lower bounds in pyproject.toml")
    return [f"{k}=={v}" for k, v in sorted(out.items())]


def _freeze(path: str) -> dict[str, str]:
    pins = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def changes(old: str, new: str) -> list[str]:
    a, b = _freeze(old), _freeze(new)
    rows = []
    for name in sorted(a.keys() | b.keys()):
        if a.get(name) != b.get(name):
            rows.append(f"{name}: {a.get(name, '(none)')} -> {b.get(name, '(none)')}")
    return rows


def _outcomes(path: str) -> dict[str, str]:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name')}"
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
            elif child.tag == "skipped":
                xfail = (child.get("type") or "").endswith("xfail")
                status = "xfailed" if xfail else "skipped"
        out[name] = status
    return out


def outcomes(old: str, new: str) -> list[str]:
    a, b = _outcomes(old), _outcomes(new)
    rows = [f"{n}: {a.get(n, '(absent)')} -> {b.get(n, '(absent)')}"
            for n in sorted(a.keys() | b.keys()) if a.get(n) != b.get(n)]
    for label, run in (("before", a), ("after", b)):
        counts: dict[str, int] = {}
        for s in run.values():
            counts[s] = counts.get(s, 0) + 1
        rows.append(f"{label}: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)))
    return rows


def main(argv: list[str]) -> None:
    if argv[:1] == ["lowest"]:
        print("\n".join(lowest()))
    elif argv[:1] == ["changes"] and len(argv) == 3:
        print("\n".join(changes(*argv[1:])) or "no version changed")
    elif argv[:1] == ["outcomes"] and len(argv) == 3:
        print("\n".join(outcomes(*argv[1:])))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
