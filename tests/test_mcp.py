"""`kvcalc mcp` (issue #42 point 2), end to end with the MCP SDK's own client: the server
runs as `python -m kvcalc mcp` in a subprocess; its tools list with schemas made from the
functions' signatures, a call answers what the command's `--format json` prints, and a
bad argument is a tool error in kvcalc's words. The schemas and calls themselves
(kvcalc/cli/tools.py) are checked without the SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.cli.tools import tools
from kvcalc.errors import KvcalcError

ROOT = Path(__file__).resolve().parent.parent

ESTIMATE = {"model": "llama3-8b", "seq_len": 8192, "batch": 4}
ESTIMATE_ARGV = ["estimate", "--preset", "llama3-8b", "--seq-len", "8192", "--batch", "4"]
FIT = {"model": "llama3.1-8b", "gpu": "rtx3090", "max_model_len": 20000}
FIT_ARGV = ["fit", "--preset", "llama3.1-8b", "--gpu", "rtx3090", "--max-model-len", "20000"]
# SGLang's count, its own flags by name (the tool's schema leaves room for them)
SGLANG = {"model": "llama3.1-8b", "gpu": "h100-sxm", "engine": "sglang",
          "mem_fraction_static": "0.8", "context_length": 32768}
SGLANG_ARGV = ["fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang",
               "--mem-fraction-static", "0.8", "--context-length", "32768"]
# kvcalc check (the log as its text) and kvcalc sweep (its rows under "rows")
README_LOG = ROOT / "tests" / "data" / "vllm" / "logs" / "qwen2-7b-a100-0.25-dl.log"
CHECK = {"log": README_LOG.read_text(), "model": "qwen2-7b", "gpu": "a100-80gb"}
CHECK_ARGV = ["check", str(README_LOG), "qwen2-7b", "--gpu", "a100-80gb"]
SWEEP = {"model": "llama3-8b", "seq_len": "1024:8192:*2", "batch": "1,8", "kv_dtype": "bf16,fp8"}
SWEEP_ARGV = ["sweep", "--preset", "llama3-8b", "--seq-len", "1024:8192:*2", "--batch", "1,8",
              "--kv-dtype", "bf16,fp8"]
# kvcalc.plan and kvcalc.bench (bench's runs a list, as the command's 1,8)
PLAN = {"model": "qwen3-0.6b", "gpu": "l4", "max_model_len": 4096, "prompt_len": 1000,
        "output_len": 200}
PLAN_ARGV = ["plan", "--preset", "qwen3-0.6b", "--gpu", "l4", "--max-model-len", "4096",
             "--prompt-len", "1000", "--output-len", "200"]
BENCH = {"model": "llama3.1-8b", "gpu": "h100-sxm", "concurrency": [1, 8], "input_len": 1024,
         "output_len": 128}
BENCH_ARGV = ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--concurrency", "1,8",
              "--input-len", "1024", "--output-len", "128"]


def _cli_json(argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "kvcalc", *argv, "--format", "json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode in (0, 1), r.stderr  # fit: 1 is a valid question answered no
    return json.loads(r.stdout)


def test_the_schemas_come_from_the_signatures():
    fit = tools()["fit"].input_schema()
    assert fit["required"] == ["model"]
    props = fit["properties"]
    assert props["max_model_len"]["type"] == ["integer", "string", "null"]
    assert props["max_model_len"]["description"].startswith("In tokens")
    assert props["ttft_ms"]["type"] == ["number", "null"]
    assert "milliseconds" in props["ttft_ms"]["description"]
    assert "bytes" in props["kv_cache_memory_bytes"]["description"].lower()
    assert props["gpu"]["default"] == "h100-sxm"
    assert props["enforce_eager"] == {"type": "boolean", "default": False,
                                      "description": "Default: false."}
    assert fit["additionalProperties"] is True  # another engine's own flags, by name
    assert "sglang: mem_fraction_static, context_length," in tools()["fit"].description()
    est = tools()["estimate"].input_schema()
    assert est["additionalProperties"] is False
    # the command's defaults: an H100 SXM, timed as vLLM runs it
    assert est["properties"]["gpu"]["default"] == "h100-sxm"
    assert est["properties"]["engine"]["default"] is None
    assert "(default: vLLM on a GPU)" in est["properties"]["engine"]["description"]
    assert est["properties"]["tp"]["description"].startswith("`tp` and `data_parallel_size` "
                                                           "in devices")


def test_the_estimate_tool_is_kvcalc_estimate():
    """The tool is the command's library function itself: its schema from its signature,
    its description ending in its docstring."""
    import inspect

    import kvcalc

    est = tools()["estimate"]
    assert est.function is kvcalc.estimate
    assert est.input_schema()["required"] == ["model"]
    assert list(est.input_schema()["properties"]) == list(
        inspect.signature(kvcalc.estimate).parameters)
    assert est.description().endswith(inspect.cleandoc(kvcalc.estimate.__doc__))


def test_the_check_and_sweep_tools_are_the_library_functions():
    import inspect

    import kvcalc
    from kvcalc.cli import tools as module

    check = tools()["check"]
    assert check.function is kvcalc.check and check.input_schema()["required"] == ["log"]
    sweep = tools()["sweep"].input_schema()
    assert sweep["required"] == ["model"]
    assert sweep["properties"]["seq_len"]["type"] == ["integer", "string", "null"]
    # kvcalc.sweep's parameters, less force (the tool answers 10,000 rows at most) and
    # variant (a Python function)
    mine = inspect.signature(module._sweep).parameters
    lib = inspect.signature(kvcalc.sweep).parameters
    assert list(mine) == [n for n in lib if n not in ("force", "variant")]
    assert all(mine[n].default == lib[n].default for n in mine)


def test_a_bad_argument_is_said_in_kvcalcs_words():
    est = tools()["estimate"]
    with pytest.raises(KvcalcError, match=r"^seq_len must be a whole number or null, got 'x'$"):
        est.call({"model": "llama3-8b", "seq_len": "x"})
    with pytest.raises(KvcalcError, match=r"^estimate takes no argument 'seqlen' \(did you mean "
                                          r"seq_len\?\); it takes model, seq_len, "):
        est.call({"model": "llama3-8b", "seqlen": 8192})
    with pytest.raises(KvcalcError, match=r"^estimate needs model$"):
        est.call({})
    fit = tools()["fit"]
    with pytest.raises(KvcalcError, match=r"^fit takes no argument 'max_model_length' \(did "
                                          r"you mean max_model_len\?\); it takes model, gpu, "):
        fit.call({"model": "llama3-8b", "max_model_length": 8192})
    with pytest.raises(KvcalcError, match=r"^fit takes no argument 'dp'; "):  # data_parallel_size
        fit.call({"model": "llama3-8b", "dp": 2})


def test_plan_and_bench_take_their_own_arguments():
    """kvcalc.plan and kvcalc.bench as tools: bench's runs a list, its max_model_len
    tokens only (plan's may be "auto"), each engine's own flags by name."""
    with pytest.raises(KvcalcError, match=r"^plan takes no argument 'max_model_length' \(did "
                                          r"you mean max_model_len\?\); it takes model, gpu, "):
        tools()["plan"].call({"model": "llama3-8b", "max_model_length": 8192})
    with pytest.raises(KvcalcError, match=r"^concurrency must be a whole number or a list or "
                                          r"null, got '1,8'$"):
        tools()["bench"].call({"model": "llama3-8b", "concurrency": "1,8"})
    bench = tools()["bench"].input_schema()["properties"]
    assert bench["concurrency"]["type"] == ["integer", "array", "null"]
    assert bench["max_model_len"]["description"].startswith("In tokens. ")
    assert tools()["plan"].input_schema()["properties"]["max_model_len"]["type"] == [
        "integer", "string", "null"]
    assert "sglang: mem_fraction_static, max_running_requests," in tools()["bench"].description()


def test_the_server_end_to_end_with_the_sdks_client():
    pytest.importorskip("mcp", reason="the MCP SDK is the `mcp` extra: pip install 'kvcalc[mcp]'")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(command=sys.executable, args=["-m", "kvcalc", "mcp"],
                                   env=env, cwd=str(ROOT))
    results = {}

    async def session():
        with anyio.fail_after(240):
            await _session()

    async def _session():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                results["list"] = await client.list_tools()
                results["estimate"] = await client.call_tool("estimate", ESTIMATE)
                results["fit"] = await client.call_tool("fit", FIT)
                results["sglang"] = await client.call_tool("fit", SGLANG)
                results["unknown"] = await client.call_tool("estimate", {"model": "nosuch-7b"})
                results["negative"] = await client.call_tool("fit", {**FIT, "max_model_len": -5})
                results["typed"] = await client.call_tool("fit", {**FIT, "tp": "two"})
                results["check"] = await client.call_tool("check", CHECK)
                results["sweep"] = await client.call_tool("sweep", SWEEP)
                results["not_a_log"] = await client.call_tool("check", {"log": "hello"})
                results["bad_spec"] = await client.call_tool("sweep", {**SWEEP, "seq_len": "0"})
                results["too_many"] = await client.call_tool("sweep", {**SWEEP, "batch": "1:9999:+1"})
                results["plan"] = await client.call_tool("plan", PLAN)
                results["bench"] = await client.call_tool("bench", BENCH)
                results["bad_plan"] = await client.call_tool("plan", {**PLAN, "ttft_ms": -1})
                results["bad_bench"] = await client.call_tool("bench", {**BENCH,
                                                                        "dataset_name": "x"})

    anyio.run(session)

    listed = {t.name: t for t in results["list"].tools}
    assert sorted(listed) == sorted(tools())
    for name, tool in listed.items():
        assert tool.input_schema == tools()[name].input_schema()
        assert ("log" if name == "check" else "model") in tool.input_schema["required"]
        if name in ("estimate", "fit"):
            assert {"seq_len", "kv_dtype", "tp"} <= set(tool.input_schema["properties"])
        assert f"kvcalc {name} --format json" in tool.description

    for name, argv in (("estimate", ESTIMATE_ARGV), ("fit", FIT_ARGV), ("sglang", SGLANG_ARGV),
                       ("plan", PLAN_ARGV), ("bench", BENCH_ARGV)):
        result = results[name]
        assert not result.is_error, result.content
        want = _cli_json(argv)
        assert json.loads(result.content[0].text) == want
        assert result.structured_content == want
    assert results["fit"].structured_content["fits"] is True

    assert json.loads(results["check"].content[0].text) == _cli_json(CHECK_ARGV)
    assert results["sweep"].structured_content == {"rows": _cli_json(SWEEP_ARGV), "skipped": []}

    # Each tool declares its command's JSON Schema as outputSchema (kvcalc.schema), and
    # its structured result validates against the schema it declared.
    from jsonschema import Draft202012Validator

    for name, tool in listed.items():
        assert tool.output_schema == tools()[name].output_schema()
    for key, name in (("estimate", "estimate"), ("fit", "fit"), ("sglang", "fit"),
                      ("check", "check"), ("sweep", "sweep"), ("plan", "plan"), ("bench", "bench")):
        Draft202012Validator(listed[name].output_schema).validate(results[key].structured_content)

    for name, line in (("unknown", "unknown model 'nosuch-7b': not a preset"),
                       ("negative", "max_model_len must be positive, got -5"),
                       ("typed", "tp must be a whole number, got 'two'"),
                       ("not_a_log", "this does not look like a vLLM, SGLang or TensorRT-LLM"),
                       ("bad_spec", "seq_len '0': the value must be positive, got 0"),
                       ("too_many", "the sweep has 79,992 rows; the tool answers at most 10,000"),
                       ("bad_plan", "ttft_ms must be a positive number of milliseconds"),
                       ("bad_bench", "dataset_name must be random or sharegpt, got 'x'")):
        result = results[name]
        assert result.is_error, name
        text = result.content[0].text
        assert text.startswith(line), text
        assert "Traceback" not in text and "\n" not in text


def test_without_the_sdk_the_command_says_how_to_install_it(tmp_path):
    """A `mcp` that cannot be imported (a module named so that raises ImportError, first
    on the path) is one line and exit code 2."""
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ImportError('no', name='mcp')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = subprocess.run([sys.executable, "-m", "kvcalc", "mcp"], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "kvcalc: error: kvcalc mcp needs the MCP SDK, which is not installed: "
        "pip install 'kvcalc[mcp]'"]
