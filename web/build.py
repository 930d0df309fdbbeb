"""Build the page: `python web/build.py OUT` lays out a static site in OUT that runs kvcalc
in the browser (README: "The page"). Serve it with `python -m http.server -d OUT`.

OUT gets the page (index.html, page.js, page.css, kvcalc_page.py), the kvcalc wheel built
from this checkout (pip wheel, as CI builds it), the JSON Schema of each command's answer
from that wheel (schemas/COMMAND.json, as `kvcalc schema COMMAND` prints it), Pyodide's core from the npm package
web/package-lock.json pins (`npm ci` in web/ when web/node_modules lacks it), and
site.json naming the wheel. Nothing else is fetched: the page needs no package beyond
Python's standard library and kvcalc (presets come parsed in the wheel's index).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WEB = Path(__file__).resolve().parent
REPO = WEB.parent
PAGE_FILES = ("index.html", "page.js", "page.css", "kvcalc_page.py")
# Pyodide's core: the loader, the wasm runtime, the standard library and the lock file
# loadPyodide reads; no package from its repository is loaded.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json")
MARK = "site.json"  # what makes a folder one this script built (and may empty)


def pyodide_dir(node_modules: Path) -> Path:
    """Pyodide's npm package, installed by `npm ci` in web/ when missing."""
    folder = node_modules / "pyodide"
    if not all((folder / f).is_file() for f in PYODIDE_FILES):
        if node_modules != WEB / "node_modules":
            raise SystemExit(f"build: {folder} lacks Pyodide's files")
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("build: npm not found: it installs Pyodide (web/package-lock.json)")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True)
    return folder


def build_wheel(source: Path, into: Path) -> Path:
    """kvcalc's wheel, built from `source` as CI builds it (pip wheel, no dependencies)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into),
                    str(source)], check=True)
    wheels = sorted(into.glob("kvcalc-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"build: expected one kvcalc wheel in {into}, found {len(wheels)}")
    return wheels[0]


def publish_schemas(wheel: Path, out: Path) -> list[str]:
    """The wheel's kvcalc/schemas/*.json in out/schemas/, so the site serves the schema of
    each answer the page shows (fit's, plan's); their names."""
    import zipfile

    (out / "schemas").mkdir(exist_ok=True)
    names = []
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            folder, _, name = member.rpartition("/")
            if folder == "kvcalc/schemas" and name.endswith(".json"):
                (out / "schemas" / name).write_bytes(z.read(member))
                names.append(name)
    return sorted(names)


def build(out: Path, *, wheel: Path | None = None, source: Path = REPO,
          node_modules: Path = WEB / "node_modules") -> dict:
    """Lay the site out in `out` (emptied first when it is a site this script built)."""
    if out.exists() and any(out.iterdir()):
        if not (out / MARK).is_file():
            raise SystemExit(f"build: {out} is not empty and holds no {MARK}: not emptying it")
        shutil.rmtree(out)
    pyodide = pyodide_dir(node_modules)
    with tempfile.TemporaryDirectory(prefix="kvcalc-page-") as tmp:
        made = wheel or build_wheel(source, Path(tmp))
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(made, out / made.name)
        publish_schemas(made, out)
        for name in PAGE_FILES:
            shutil.copy2(WEB / name, out / name)
        (out / "pyodide").mkdir()
        for name in PYODIDE_FILES:
            shutil.copy2(pyodide / name, out / "pyodide" / name)
        version = json.loads((pyodide / "package.json").read_text())["version"]
        site = {"wheel": made.name, "pyodide": version}
        (out / MARK).write_text(json.dumps(site, indent=1) + "\n")
    return site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to lay the site out in")
    parser.add_argument("--wheel", type=Path, help="a kvcalc wheel already built (default: "
                        "build one from --source)")
    parser.add_argument("--source", type=Path, default=REPO,
                        help="the tree to build the wheel from (default: this checkout)")
    parser.add_argument("--node-modules", type=Path, default=WEB / "node_modules",
                        help="where Pyodide's npm package is (default: web/node_modules)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    site = build(args.out, wheel=args.wheel, source=args.source,
                 node_modules=args.node_modules)
    print(f"build: {args.out} ({site['wheel']}, Pyodide {site['pyodide']}) in "
          f"{time.monotonic() - start:.1f} s; serve it: python -m http.server -d {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
