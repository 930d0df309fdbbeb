"""`--engine NAME[@VERSION]` decides memory on estimate, fit and sweep (kvcalc.serving):
each command answers with that engine's own count, one formula for all of them, and an
engine's flag given for another engine is one clear error.

The engines' figures themselves are checked against their public start-up logs in
tests/test_serving_sglang.py and tests/test_serving_trtllm.py; here, that every command
gives the same answer for the same layout, and the command line's contract."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app


def _run(*args):
    return CliRunner().invoke(app, list(args))


def _json(*args):
    r = _run(*args, "--format", "json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("engine", ["sglang@0.5.4", "tensorrt-llm"])
def test_fit_prints_the_engines_tokens_limit_and_terms(engine):
    d = _json("fit", "--preset", "llama3.1-8b", "--engine", engine, "--gpu", "h100-sxm")
    name = engine.partition("@")[0]
    assert d["engine"] == name and d["fits"] is True and d["kv_cache_tokens"] > 0
    assert d["max_running_requests"] > 0 and d["context_len"] == 131072
    terms = d["memory"]
    if name == "sglang":
        assert d["engine_release"] == "0.5.4"
        assert set(terms) >= {"avail_mem_at_start", "weights", "avail_mem_after_weights",
                              "kv_cache"}
        # the pool is what the fraction leaves of the free memory after the weights
        assert terms["kv_cache"] == d["kv_cache_tokens"] * d["bytes_per_token"]
    else:
        assert d["page_size"] == 32 and d["kv_cache_tokens"] % 32 == 0


def test_the_done_when_commands_and_the_one_error():
    r = _run("fit", "--preset", "llama3.1-8b", "--engine", "sglang@0.5.4", "--gpu", "h100-sxm")
    assert r.exit_code == 0 and "as SGLang 0.5.4 counts it" in " ".join(r.stdout.split())
    r = _run("fit", "--preset", "llama3.1-8b", "--engine", "sglang", "--mem-fraction-static",
             "0.8", "--gpu-memory-utilization", "0.9")
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith("kvcalc: error: --gpu-memory-utilization is vLLM's flag")
    assert "SGLang's is --mem-fraction-static" in r.stderr
    r = _run("fit", "--preset", "llama3.1-8b", "--free-gpu-memory-fraction", "0.8")
    assert r.exit_code == 2 and "(count with --engine tensorrt-llm)" in r.stderr


def test_a_lower_fraction_gives_fewer_tokens_by_sglangs_rule():
    """rest = post - pre x (1 - mfs): lowering mfs by 0.1 takes 0.1 x pre from the pool."""
    hi = _json("fit", "--preset", "llama3.1-8b", "--engine", "sglang", "--mem-fraction-static",
               "0.85")
    lo = _json("fit", "--preset", "llama3.1-8b", "--engine", "sglang", "--mem-fraction-static",
               "0.75")
    pre = hi["memory"]["avail_mem_at_start"]
    drop = (hi["kv_cache_tokens"] - lo["kv_cache_tokens"]) * hi["bytes_per_token"]
    assert abs(drop - pre // 10) <= 2 * hi["bytes_per_token"]


@pytest.mark.parametrize("engine", ["sglang", "tensorrt-llm", "vllm@0.20"])
def test_sweep_estimate_and_fit_agree_on_fits(engine):
    rows = _json("sweep", "--preset", "llama3.1-8b", "--seq-len", "8192,131072", "--batch",
                 "1,16,64", "--engine", engine)
    for row in rows:
        est = _json("estimate", "--preset", "llama3.1-8b", "--seq-len", str(row["seq_len"]),
                    "--batch", str(row["batch"]), "--engine", engine)
        assert est["fit"]["fits"] == row["fits"], row


def test_estimate_names_the_engine_it_counted_for():
    d = _json("estimate", "--preset", "llama3.1-8b", "--seq-len", "8192", "--engine",
              "tensorrt-llm@1.0")
    assert d["fit"]["engine"]["engine"] == "tensorrt-llm"
    assert d["fit"]["engine"]["engine_release"] == "1.0"
    r = _run("estimate", "--preset", "llama3.1-8b", "--seq-len", "8192", "--engine", "sglang")
    # The headline counts it; the table names it (issue #42: the headline is two lines).
    assert "SGLang 0.5.4 at 8,192 tokens starts:" in " ".join(r.stdout.split())
