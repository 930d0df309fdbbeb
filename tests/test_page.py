"""The page (web/): its Python answers each question as the command line does, on CPython
here and in headless Chromium (Pyodide) when a built site, node and Chromium are there.

The browser test loads the site from a local server, asks two questions (a preset on
vLLM with --max-model-len auto from the address; a Hub id on SGLang typed into the form,
its config.json and safetensors headers fetched by range requests from a mock Hub),
opens the address the second left, as a shared link, and asks a third (a Hub id whose
one model.safetensors has no index, on vLLM). Each answer's JSON must equal
`kvcalc fit` / `kvcalc plan --format json` run here, and the page must draw those
numbers. A screenshot of each question goes to KVCALC_PAGE_SCREENSHOT (default: the
test's tmp folder; the second beside it, -2.png) for CI to keep.

Build the site first: `python web/build.py web/_site` (or point KVCALC_PAGE_SITE at one).
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

from tests.hubcache import hf_cache, model_folder

REPO = Path(__file__).resolve().parent.parent
WEB = REPO / "web"
REPO_ID = "kvcalc-test/Tiny-Qwen3"  # the mock Hub's repository: two shards and an index
SINGLE_ID = "kvcalc-test/Tiny-Single"  # and one with model.safetensors alone


def _page_module(tmp_path: Path):
    """web/kvcalc_page.py, writing pasted configs under tmp_path."""
    if not (WEB / "kvcalc_page.py").is_file():
        pytest.skip("web/ is not beside tests/ (a copy of the tests alone)")
    spec = importlib.util.spec_from_file_location("kvcalc_page", WEB / "kvcalc_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.WORK = tmp_path / "page-work"
    return module


def _cli(argv: list[str], env: dict | None = None) -> dict:
    """`kvcalc ARGV` (ending in --format json) as JSON; fit exits 1 when the engine does not
    start, its JSON printed all the same."""
    p = subprocess.run([sys.executable, "-m", "kvcalc", *argv], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, cwd=REPO)
    assert p.returncode in (0, 1) and p.stdout, (argv, p.returncode, p.stderr)
    return json.loads(p.stdout)


def _equal(a, b, where: str = "") -> None:
    """a == b, but a float only to 1e-12 of its size: Pyodide's libm (WebAssembly) may
    round exp, log and pow one bit apart from the host's (the plan's times, 1e-16 apart
    in Chromium); every count, name and flag must be the same."""
    assert type(a) is type(b), (where, a, b)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (where, sorted(a.keys() ^ b.keys()))
        for k in a:
            _equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _same_as_cli(answer: dict, env: dict | None = None) -> None:
    assert "error" not in answer, answer
    _equal(answer["fit"], _cli(answer["commands"]["fit"], env), "fit")
    _equal(answer["plan"], _cli(answer["commands"]["plan"], env), "plan")
    plan = answer["plan"]
    best = plan["best"] if "best" in plan else plan["engines"][0]["best"]
    assert answer["launch"] == best["command"]
    memory = answer["fit"]["memory"]
    for part in answer["bar"]["parts"]:
        if part["key"] in memory:
            assert part["bytes"] == memory[part["key"]], part


def _tiny_repo(root: Path) -> tuple[Path, Path]:
    """(HF_HOME of a cache holding REPO_ID, its snapshot folder): Qwen3-8B's config.json
    and two sparse shards whose headers give its weights."""
    config = json.loads((REPO / "tests/data/hf/Qwen__Qwen3-8B.json").read_text())
    shards = {"model-00001-of-00002.safetensors": [
                  ("model.embed_tokens.weight", "BF16", [151936, 4096]),
                  ("model.layers.weight", "BF16", [36, 4096, 24576])],
              "model-00002-of-00002.safetensors": [
                  ("model.layers.attn", "BF16", [36, 4096, 8192]),
                  ("lm_head.weight", "BF16", [151936, 4096])]}
    folder = model_folder(root / "folder", config, shards)
    home = root / "hf"
    snapshot = hf_cache(home, REPO_ID, folder)
    single = model_folder(root / "single", config, {"model.safetensors": [
        ("model.embed_tokens.weight", "BF16", [151936, 4096]),
        ("model.layers.weight", "F8_E4M3", [36, 4096, 32768])]})
    hf_cache(home, SINGLE_ID, single)
    return home, snapshot


def _hub_files(snapshot: Path) -> dict:
    """What the page fetches for REPO_ID: config.json and each shard's header."""
    index = json.loads((snapshot / "model.safetensors.index.json").read_text())
    headers = []
    for name in dict.fromkeys(index["weight_map"].values()):
        with open(snapshot / name, "rb") as f:
            raw = f.read(1 << 16)
        n = int.from_bytes(raw[:8], "little")
        headers.append({"name": name, "header": raw[8:8 + n].decode(),
                        "data_bytes": (snapshot / name).stat().st_size - 8 - n})
    return {"revision": "main", "config": (snapshot / "config.json").read_text(),
            "headers": headers}


# --- the page's Python on CPython: no browser needed -------------------------------------
def test_preset_on_vllm_answers_as_the_cli(tmp_path):
    page = _page_module(tmp_path)
    answer = json.loads(page.answer({"source": "preset", "model": "llama3.1-8b",
                                     "gpu": "h100-sxm", "engine": "vllm", "context": "auto",
                                     "prompt": "1000", "output": "200"}))
    assert answer["commands"]["fit"] == ["fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                         "--max-model-len", "auto", "--format", "json"]
    # the plan's requests at the page's lengths, as `kvcalc plan --prompt-len --output-len`
    assert answer["commands"]["plan"][-6:] == ["--prompt-len", "1000", "--output-len", "200",
                                               "--format", "json"]
    _same_as_cli(answer)
    assert answer["headline"].startswith("vLLM ") and " starts: " in answer["headline"]
    assert [p["kind"] for p in answer["bar"]["parts"]] == [
        "weights", "activations", "non-torch", "graphs", "kv"]


def test_pasted_config_on_sglang_answers_as_the_cli(tmp_path):
    page = _page_module(tmp_path)
    text = (REPO / "tests/data/hf/Qwen__Qwen3-8B.json").read_text()
    answer = json.loads(page.answer({"source": "config", "config": text,
                                     "config_name": "Qwen/Qwen3-8B", "gpu": "l4",
                                     "engine": "sglang", "context": "32768", "batch": "8",
                                     "kv_dtype": "fp8"}))
    assert answer["fit"]["model"] == "Qwen/Qwen3-8B"
    _same_as_cli(answer)


def test_a_model_that_does_not_start_gets_the_fixes(tmp_path):
    page = _page_module(tmp_path)
    answer = json.loads(page.answer({"source": "preset", "model": "llama3.3-70b",
                                     "gpu": "h100-sxm", "engine": "vllm",
                                     "context": "32768"}))
    assert answer["fit"]["fits"] is False and answer["fixes"]
    assert answer["fixes"][0].startswith("--tp 4: ")
    assert answer["plan"] is None and answer["launch"] is None
    assert "no layout" in answer["plan_error"]
    assert answer["fit"] == _cli(answer["commands"]["fit"])


def test_hub_headers_read_as_the_cli_reads_the_cache(tmp_path):
    home, snapshot = _tiny_repo(tmp_path)
    page = _page_module(tmp_path)
    answer = json.loads(page.answer(
        {"source": "hub", "model": REPO_ID, "gpu": "h100-sxm", "engine": "vllm",
         "context": "32768"}, _hub_files(snapshot)))
    assert answer["commands"]["fit"][:2] == ["fit", REPO_ID]
    _same_as_cli(answer, env={"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
                              "HF_HUB_OFFLINE": "1"})


def test_errors_come_back_as_one_line(tmp_path):
    page = _page_module(tmp_path)
    answer = json.loads(page.answer({"source": "preset", "model": "llama3.1-8b",
                                     "gpu": "h100-sxm", "batch": "many"}))
    assert answer == {"error": "--max-num-seqs expects a whole number, e.g. 8, 1k (= 1,000) "
                               "or 1K (= 1,024); got 'many'"}
    answer = json.loads(page.answer({"source": "preset", "model": "llama3.1-8b",
                                     "engine": "sglang", "context": "32K"}))
    assert answer["commands"]["fit"][-4:] == ["--context-length", "32768", "--format", "json"]


# --- the built site in headless Chromium ----------------------------------------------------
def _site() -> Path:
    return Path(os.environ.get("KVCALC_PAGE_SITE") or WEB / "_site")


def _chromium() -> str | None:
    return os.environ.get("KVCALC_CHROMIUM") or shutil.which("chromium") or next(
        (p for p in ("/usr/bin/chromium",) if os.path.exists(p)), None)


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".mjs": "text/javascript", ".js": "text/javascript",
                      ".wasm": "application/wasm"}

    def log_message(self, *args) -> None:
        pass


class _HubHandler(http.server.BaseHTTPRequestHandler):
    """The Hub's /ORG/NAME/resolve/REV/FILE with range requests and CORS, from the
    snapshots of a Hugging Face cache; it counts the bytes it sends (the page must read
    headers, never weights)."""

    hub: Path  # HF_HUB_CACHE
    sent = [0]

    def log_message(self, *args) -> None:
        pass

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header("Access-Control-Expose-Headers", "Content-Range, Content-Length")

    def do_OPTIONS(self) -> None:  # noqa: N802
        self.send_response(204)
        self._cors()
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        parts = urllib.parse.urlparse(self.path).path.strip("/").split("/")
        repo = self.hub / f"models--{parts[0]}--{parts[1]}" if len(parts) == 5 else None
        path = repo / "snapshots" / (repo / "refs" / "main").read_text().strip() / parts[4] \
            if repo is not None and repo.is_dir() else None
        if path is None or parts[2:4] != ["resolve", "main"] or not path.is_file():
            self.send_response(404)
            self._cors()
            self.end_headers()
            return
        size = path.stat().st_size
        first, last = 0, size - 1
        rng = self.headers.get("Range")
        if rng:
            a, b = rng.removeprefix("bytes=").split("-")
            first, last = int(a), min(int(b), size - 1)
        with open(path, "rb") as f:
            f.seek(first)
            body = f.read(last - first + 1)
        self.send_response(206 if rng else 200)
        self._cors()
        if rng:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.sent[0] += len(body)


def _serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.slow
def test_page_in_headless_chromium(tmp_path):
    # CI sets KVCALC_PAGE_REQUIRED: there a missing piece fails the test instead
    missing = pytest.fail if os.environ.get("KVCALC_PAGE_REQUIRED") else pytest.skip
    site, chromium, node = _site(), _chromium(), shutil.which("node")
    if not (site / "site.json").is_file():
        missing(f"no built site at {site}: python web/build.py {site}")
    if chromium is None:
        missing("no Chromium: apt-get install chromium (or set KVCALC_CHROMIUM)")
    if node is None or not (WEB / "node_modules" / "playwright-core").is_dir():
        missing("no node, or no playwright-core in web/node_modules: npm ci in web/")
    home, snapshot = _tiny_repo(tmp_path)
    hub_env = {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_OFFLINE": "1"}
    hub_handler = type("Hub", (_HubHandler,), {"hub": home / "hub", "sent": [0]})
    shot = Path(os.environ.get("KVCALC_PAGE_SCREENSHOT") or tmp_path / "page.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    shots = [str(shot), str(shot.with_name(shot.stem + "-2" + shot.suffix))]
    site_server, site_url = _serve(functools.partial(_SiteHandler, directory=str(site)))
    hub_server, hub_url = _serve(hub_handler)
    try:
        first = "src=preset&model=llama3.1-8b&gpu=h100-sxm&engine=vllm&ctx=auto&in=1000&out=200"
        plan = {"chromium": chromium, "url": f"{site_url}/?hub={hub_url}#{first}",
                "screenshots": shots, "timeout_ms": 240000,
                "form": {"source": "hub", "model": REPO_ID, "gpu": "l4", "engine": "sglang",
                         "context": "32768", "batch": "16"},
                "third": {"source": "hub", "model": SINGLE_ID, "gpu": "h100-sxm",
                          "engine": "vllm", "context": "8192", "batch": ""}}
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        p = subprocess.run([node, str(WEB / "drive.mjs"), str(tmp_path / "plan.json")],
                           capture_output=True, text=True, timeout=600, cwd=WEB)
    finally:
        site_server.shutdown()
        hub_server.shutdown()
    assert p.returncode == 0, p.stderr[-3000:]
    (shot.parent / (shot.stem + ".json")).write_text(p.stdout)  # what the page said, for CI
    out = json.loads(p.stdout)
    assert "failure" not in out, out["failure"]
    # A repository without an index answers the page's look for one with 404, which
    # Chromium logs; nothing else may be logged as an error.
    index_404 = f"/{SINGLE_ID}/resolve/main/model.safetensors.index.json)"
    assert not [c for c in out["console"] if not c.endswith(index_404)], out["console"]
    print(f"\npage: Python ready {out['first']['timings']['ready'] / 1000:.1f} s, first answer "
          f"{out['first']['timings']['first_answer'] / 1000:.1f} s after load "
          f"({out['first']['wall_ms'] / 1000:.1f} s wall); second answer "
          f"{out['second']['wall_ms'] / 1000:.1f} s; screenshots {shots[0]}, {shots[1]}")

    # 1: a preset on vLLM from the address
    q1 = out["first"]
    assert q1["state"] == "done", q1
    _same_as_cli(q1["answer"])
    assert q1["answer"]["commands"]["fit"] == ["fit", "--preset", "llama3.1-8b", "--gpu",
                                               "h100-sxm", "--max-model-len", "auto",
                                               "--format", "json"]
    assert q1["headline"] == q1["answer"]["headline"]
    assert q1["launch"] == q1["answer"]["launch"].strip()
    memory = q1["answer"]["fit"]["memory"]
    assert {s["key"]: s["bytes"] for s in q1["segments"]} == {
        k: memory[k] for k in ("weights", "activation_peak", "non_torch", "cuda_graphs",
                               "kv_cache")}
    assert q1["points"] == len(q1["answer"]["plan"]["layouts"])

    # 2: a Hub id on SGLang, typed into the form; headers read, weights not
    q2 = out["second"]
    assert q2["state"] == "done", q2
    _same_as_cli(q2["answer"], hub_env)
    assert q2["answer"]["commands"]["fit"] == ["fit", REPO_ID, "--gpu", "l4", "--engine",
                                               "sglang", "--context-length", "32768",
                                               "--max-running-requests", "16", "--format",
                                               "json"]
    assert hub_handler.sent[0] < 1 << 20, hub_handler.sent[0]
    assert all(k in q2["hash"].lstrip("#").split("&") for k in ("src=hub", "engine=sglang", "ctx=32768",
                                                   "batch=16", "gpu=l4"))

    # 3: the address the second question left gives its answer again
    assert out["shared"]["state"] == "done"
    assert out["shared"]["answer"]["fit"] == q2["answer"]["fit"]
    # 4: a Hub id with model.safetensors alone (no index), typed in again
    q3 = out["third"]
    assert q3["state"] == "done", q3
    _same_as_cli(q3["answer"], hub_env)
    assert q3["answer"]["fit"]["model"] == SINGLE_ID
    assert hub_handler.sent[0] < 1 << 20, hub_handler.sent[0]

    for path in shots:
        assert Path(path).stat().st_size > 10_000


def test_the_page_imports_nothing_heavy(tmp_path):
    """The page's Python is the standard library and kvcalc: an answer imports no numpy,
    torch, pandas, rich or typer (Pyodide's core has none of them)."""
    if not (WEB / "kvcalc_page.py").is_file():
        pytest.skip("web/ is not beside tests/ (a copy of the tests alone)")
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import kvcalc_page as p; "
            "a = json.loads(p.answer({'source': 'preset', 'model': 'llama3.1-8b', "
            "'gpu': 'h100-sxm', 'engine': 'sglang'})); assert 'error' not in a, a; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numpy', 'torch', 'pandas', 'rich', 'typer', 'click', 'huggingface_hub'}))")
    p = subprocess.run([sys.executable, "-c", code, str(WEB)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO),
                            "KVCALC_PAGE_WORK": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
