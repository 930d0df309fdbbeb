"""`kvcalc plan --engine sglang|tensorrt-llm|any`: each engine's best layout under its own
count, and launch lines each engine's parser takes.

SGLang's lines are parsed by SGLang's own argument parser where it imports (opt-in tier,
marker `sglang`); TensorRT-LLM's flags are held to the options trtllm-serve's source
declares for the release (tests/data/trtllm/serve-options.yaml: its parser needs a GPU
build of tensorrt_llm to import)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yamlload
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.plan.engines import engine_plan
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving import engine_ref

DATA = Path(__file__).parent / "data" / "trtllm"
PLANS = [("llama3.1-8b", "h100-sxm", 2, 8192), ("qwen3-32b", "h100-sxm", 4, 32768),
         ("gpt-oss-120b", "h100-sxm", 2, 32768), ("deepseek-r1", "h200", 8, 16384),
         ("llama3.3-70b", "a100-80gb", 8, 16384)]


def _run(*args):
    return CliRunner().invoke(app, list(args))


def test_any_sets_the_three_engines_side_by_side_winner_first():
    r = _run("plan", "--preset", "llama3.1-8b", "--gpus", "2", "--max-model-len", "8192",
             "--engine", "any", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert sorted(e["engine"] for e in d["engines"]) == ["sglang", "tensorrt-llm", "vllm"]
    assert d["winner"] == d["engines"][0]["engine"]
    rates = [e["best"]["tokens_per_s_per_gpu"] for e in d["engines"]]
    assert rates == sorted(rates, reverse=True)
    commands = {e["best"]["command"].split()[0] for e in d["engines"]}
    assert commands == {"python", "vllm", "trtllm-serve"}


def _trtllm_options(release: str) -> set[str]:
    doc = yamlload.safe_load((DATA / "serve-options.yaml").read_text())
    have: set[str] = set()
    for since, names in doc["options"].items():
        if tuple(int(p) for p in since.split(".")) <= tuple(int(p) for p in
                                                             release.split(".")[:2]):
            have |= set(names)
    return have


@pytest.mark.parametrize("model, gpu, gpus, length", PLANS)
def test_trtllm_lines_use_only_options_trtllm_serve_declares(model, gpu, gpus, length):
    p = engine_plan(load_model(model), load_hardware(gpu), engine_ref("tensorrt-llm@1.0"),
                    gpus=gpus, max_model_len=length)
    words = shlex.split(p.command)
    assert words[0] == "trtllm-serve" and not words[1].startswith("--")
    flags = [w for w in words[2:] if w.startswith("--")]
    assert set(flags) <= _trtllm_options("1.0"), set(flags) - _trtllm_options("1.0")
    values = dict(zip(words[2::2], words[3::2]))
    assert values["--backend"] == "pytorch" and int(values["--tp_size"]) == p.best.tp
    assert int(values["--max_batch_size"]) == p.best.batch
    assert int(values["--max_seq_len"]) == length


@pytest.mark.sglang
@pytest.mark.parametrize("model, gpu, gpus, length", PLANS)
def test_sglang_lines_parse_with_sglangs_own_parser(model, gpu, gpus, length):
    server_args = pytest.importorskip("sglang.srt.server_args")
    import argparse

    p = engine_plan(load_model(model), load_hardware(gpu), engine_ref("sglang"), gpus=gpus,
                    max_model_len=length)
    words = shlex.split(p.command)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    ns = vars(parser.parse_args(words[3:]))
    # argparse's names: --tp-size and --dp-size land in tensor_parallel_size and
    # data_parallel_size (0.5.x; ServerArgs.from_cli_args maps them back)
    assert ns.get("tensor_parallel_size", ns.get("tp_size")) == p.best.tp
    assert ns.get("data_parallel_size", ns.get("dp_size")) == p.best.replicas
    assert ns["context_length"] == length and ns["max_running_requests"] == p.best.batch
    assert ns["kv_cache_dtype"] == (p.best.kv_dtype if p.best.kv_dtype != "auto" else "auto")


def test_a_flag_for_another_engine_is_refused_in_plan():
    r = _run("plan", "--preset", "llama3.1-8b", "--engine", "llama.cpp")
    assert r.exit_code == 2 and "plan counts vllm, sglang, tensorrt-llm" in r.stderr
