"""`kvcalc plan` and `kvcalc bench` as library functions (kvcalc.answers, issue #42): each
golden case's `--format json` is kvcalc.plan(...) / kvcalc.bench(...)'s `as_dict()`,
exactly, the command's flags given as the functions' keyword parameters; a value a
function cannot take raises ParameterError naming the parameter, which the command line
says as its flag. (That plan's front is bench's closed loop of each layout's own launch
line, number for number: tests/test_plan_served.py.)"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import golden
import kvcalc
from kvcalc.cli import app
from kvcalc.errors import ParameterError

# Flags whose library parameter is named otherwise, switches, and bench's run lists
NAMES = {"--preset": "model", "--transfer-bandwidth": "transfer_bandwidth_gb_per_s"}
SWITCHES = {"--disaggregated"}
LISTS = {"--concurrency": int, "--request-rate": float}  # bench's: one run each
TEXT = {"--kv-offloading-size", "--speculative-config"}  # taken as written (GiB, JSON)


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _parameters(command: str, argv: list[str]) -> dict:
    """The command's flags as its function's keyword parameters."""
    out, it = {}, iter(argv)
    for flag in it:
        name = NAMES.get(flag) or flag[2:].replace("-", "_")
        if flag in SWITCHES:
            out[name] = True
            continue
        text = next(it)
        if command == "bench" and flag in LISTS:
            out[name] = [LISTS[flag](t) for t in text.split(",")]
        else:
            out[name] = text if flag in TEXT else _number(text)
    return out


CASES = {name: (table, argv) for table, cases in (("plan", golden.PLANS),
                                                   ("bench", golden.BENCHES))
         for name, argv in cases.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_json_is_the_functions_as_dict_on_the_golden_cases(name, monkeypatch):
    """The golden file is `kvcalc plan|bench ... --format json`; the function gives it."""
    monkeypatch.chdir(golden.ROOT)  # the files the cases name are relative to it
    command, argv = CASES[name]
    want = json.loads((golden.GOLDEN / f"{name}.json").read_text())
    answer = getattr(kvcalc, command)(**_parameters(command, argv))
    assert answer.as_dict() == want
    assert json.loads(json.dumps(answer.as_dict())) == want  # as JSON carries it (MCP)


def test_the_records_say_what_the_tables_draw():
    """plan's record is vLLM's Plan, or each engine's best with the winner first; bench's
    holds each run's result and its JSON row."""
    p = kvcalc.plan(**_parameters("plan", golden.PLANS["plan-qwen3-0.6b-l4-2gpus-tpot"]))
    assert p.plan is not None and p.engines == () and p.plan.best in p.plan.front
    assert p.rows() == p.as_dict()["layouts"]
    e = kvcalc.plan(**_parameters("plan", golden.PLANS["plan-llama3.1-8b-h100-engines"]))
    assert e.plan is None and len(e.engines) == 3 and e.refusals == ()
    per_gpu = [x.best.tokens_per_s_per_gpu for x in e.engines]
    assert per_gpu == sorted(per_gpu, reverse=True)
    b = kvcalc.bench(**_parameters("bench", golden.BENCHES["bench-llama3.1-8b-h100-concurrency"]))
    assert b.closed_loop and [r.load.concurrency for r in b.results] == [1, 8]
    assert b.rows() == b.as_dict()["runs"] and b.against is None


def test_the_functions_are_keyword_only_and_name_their_parameters():
    with pytest.raises(TypeError):
        kvcalc.plan("llama3.1-8b")
    with pytest.raises(TypeError):
        kvcalc.bench("llama3.1-8b")
    for function in (kvcalc.plan, kvcalc.bench):
        with pytest.raises(TypeError, match="unexpected keyword argument 'max_model_length'"):
            function(model="llama3.1-8b", max_model_length=8192)
    model = "llama3.1-8b"
    for call, message in (
            (lambda: kvcalc.plan(model=model, max_model_len=0),
             "max_model_len must be positive, got 0"),
            (lambda: kvcalc.plan(model=model, ttft_ms=-1),
             "ttft_ms must be a positive number of milliseconds"),
            (lambda: kvcalc.plan(model=model, gpu="none"),
             "plan needs a device: gpu NAME (see `kvcalc presets`)"),
            (lambda: kvcalc.plan(model=model, transfer_bandwidth_gb_per_s=50),
             "transfer_bandwidth_gb_per_s is a positive GB/s for disaggregated"),
            (lambda: kvcalc.plan(model=model, engine="sglang", max_model_len="auto"),
             "max_model_len auto is vLLM's; with engine give a length"),
            (lambda: kvcalc.plan(model=model, speculative_algorithm="EAGLE"),
             "speculative_algorithm is SGLang's flag (count with engine sglang), and the "
             "engine counted is vLLM; vLLM's is speculative_config"),
            (lambda: kvcalc.bench(model=model, concurrency=1, request_rate=2.0),
             "concurrency (closed loop) and request_rate (open loop) are two kinds of run: "
             "give one"),
            (lambda: kvcalc.bench(model=model, concurrency=[1, 0]),
             "concurrency values must be positive, got 0"),
            (lambda: kvcalc.bench(model=model, dataset_name="sharegpt", random_range_ratio=0.5),
             "random_range_ratio spreads the random dataset's lengths; ShareGPT's spread is "
             "its own"),
            (lambda: kvcalc.bench(model=model, mem_fraction_static="0.8"),
             "mem_fraction_static is SGLang's flag (count with engine sglang), and the engine "
             "counted is vLLM; vLLM's is gpu_memory_utilization"),
            (lambda: kvcalc.bench(model=model, image_size="10x10"),
             "image_size sizes the images of images_per_request: give both"),
            # the models beneath (kvcalc.plan, kvcalc.served) name the parameters too
            (lambda: kvcalc.plan(model=model, max_model_len=1000, output_len=2000),
             "output_len 2,000 leaves no prompt in max_model_len 1,000"),
            (lambda: kvcalc.plan(model=model, data_parallel_size=4),
             "data_parallel_size 4 replicas need at least as many GPUs; gpus is 1"),
            (lambda: kvcalc.plan(model=model, disaggregated=True),
             "disaggregated needs a prefill and a decode instance: gpus 2 at least"),
            (lambda: kvcalc.plan(model=model, calibration="tests/data/nosuch.yaml"),
             "calibration tests/data/nosuch.yaml: no such file"),
            (lambda: kvcalc.bench(model=model, against="tests/data/nosuch.json"),
             "against tests/data/nosuch.json: no such file"),
            (lambda: kvcalc.bench(model=model, concurrency=1, num_prompts=1,
                                  acceptance_rate=0.5),
             "acceptance_rate times speculative decoding: give the engine's speculative flag "
             "(speculative_config, speculative_algorithm, extra_llm_api_options)")):
        with pytest.raises(ParameterError) as e:
            call()
        assert str(e.value) == message
        assert "--" not in str(e.value)


@pytest.mark.parametrize("argv, line", [
    (["plan", "--transfer-bandwidth", "50"],
     "--transfer-bandwidth is a positive GB/s for --disaggregated"),
    (["plan", "--speculative-algorithm", "EAGLE"],
     "--speculative-algorithm is SGLang's flag (count with --engine sglang), and the engine "
     "counted is vLLM; vLLM's is --speculative-config"),
    (["bench", "--dataset-name", "sharegpt", "--random-range-ratio", "0.5"],
     "--random-range-ratio spreads the random dataset's lengths; ShareGPT's spread is its own"),
    (["bench", "--concurrency", "1", "--request-rate", "2"],
     "--concurrency (closed loop) and --request-rate (open loop) are two kinds of run: "
     "give one"),
])
def test_the_command_line_says_the_parameter_as_its_flag(argv, line):
    r = CliRunner().invoke(app, [*argv, "--preset", "llama3.1-8b"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"kvcalc: error: {line}"]


def test_no_engine_serves_is_an_answer_not_an_error():
    """Every engine asked refuses: NothingFits, a reason an engine (the command: a line
    each on stderr, exit 1)."""
    from kvcalc.answers.plan import NoEngineServes
    from kvcalc.plan import NothingFits

    with pytest.raises(NoEngineServes) as e:
        kvcalc.plan(model="llama3.3-70b", max_model_len=8192, engine="vllm,sglang")
    assert isinstance(e.value, NothingFits) and len(e.value.refusals) == 2
    r = CliRunner().invoke(app, ["plan", "--preset", "llama3.3-70b", "--max-model-len", "8192",
                                 "--engine", "vllm,sglang"])
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"kvcalc: {x}" for x in e.value.refusals]
