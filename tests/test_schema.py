"""The JSON Schemas of the commands' `--format json` (issue #42 point 1; kvcalc/schemas/):
each is a valid draft 2020-12 schema whose every property says what it is and in which
unit; every golden answer, an invocation of each engine and feature
(tests/schema_cases.py), every public start-up log `kvcalc check` reads, and random valid
estimate and fit calls validate against their command's schema, whose closed objects
refuse a key they do not declare; `kvcalc schema COMMAND` prints kvcalc.schema(COMMAND)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

import golden
import kvcalc
import schema_cases
from kvcalc.cli import app
from kvcalc.errors import KvcalcError, ParameterError
from kvcalc.schemas import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
_VALIDATORS: dict[str, Draft202012Validator] = {}


def _validate(command: str, data) -> None:
    """`data` against `command`'s schema, its first error said with its path."""
    v = _VALIDATORS.get(command)
    if v is None:
        v = _VALIDATORS[command] = Draft202012Validator(kvcalc.schema(command))
    errors = sorted(v.iter_errors(data), key=lambda e: list(e.absolute_path))
    while len(errors) == 1 and errors[0].context:  # a oneOf: the variant nearest to it
        by_variant: dict = {}
        for e in errors[0].context:
            by_variant.setdefault(e.relative_schema_path[0], []).append(e)
        errors = min(by_variant.values(), key=len)
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: "
                                 f"{e.message[:300]}" for e in errors[:5])


def _subschemas(node, path="$"):
    """(path, schema, whether it is a named property) of everything under `node`: its
    properties, the values of its maps, its items and its variants."""
    if not isinstance(node, dict):
        return
    for name, prop in (node.get("properties") or {}).items():
        yield f"{path}.{name}", prop, True
        yield from _subschemas(prop, f"{path}.{name}")
    for key in ("additionalProperties", "items"):
        if isinstance(node.get(key), dict):
            yield f"{path}.{key}", node[key], False
            yield from _subschemas(node[key], f"{path}.{key}")
    for key in ("anyOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or ()):
            yield f"{path}.{key}[{i}]", sub, False
            yield from _subschemas(sub, f"{path}.{key}[{i}]")
    for name, sub in (node.get("$defs") or {}).items():
        yield from _subschemas(sub, f"$defs.{name}")


# --- the schemas themselves -------------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_each_schema_is_a_valid_draft_2020_12_schema_shipped_in_the_package(command):
    import kvcalc.schemas

    path = Path(kvcalc.schemas.__file__).parent / f"{command}.json"  # the wheel carries it
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert schema == kvcalc.schema(command)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_property_says_what_it_is(command):
    """A description on each property (its unit among the words), every object closed or
    its values typed, and every leaf typed."""
    undescribed, open_, untyped = [], [], []
    for path, prop, named in _subschemas(kvcalc.schema(command)):
        if named and not prop.get("description"):
            undescribed.append(path)
        if prop.get("type") == "object" and "properties" in prop and (
                "additionalProperties" not in prop):
            open_.append(path)
        if not ({"type", "enum", "const", "anyOf", "oneOf", "$ref"} & set(prop)):
            untyped.append(path)
    assert not undescribed, f"properties without a description: {undescribed}"
    assert not open_, f"objects that neither close nor type their keys: {open_}"
    assert not untyped, f"untyped: {untyped}"


def test_kvcalc_schema_is_lazy_and_says_the_commands():
    code = ("import sys, kvcalc; kvcalc.schema('fit'); "
            "print(sorted(m for m in sys.modules if m in ('numpy', 'kvcalc.estimate', "
            "'jsonschema', 'kvcalc.cli')))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    with pytest.raises(ParameterError, match=r"^command 'plan9': kvcalc's schemas are for "
                                             r"estimate, fit, check, sweep, plan, bench$"):
        kvcalc.schema("plan9")
    assert kvcalc.schema("fit") is not kvcalc.schema("fit")  # a fresh dict each time


@pytest.mark.parametrize("command", COMMANDS)
def test_the_schema_command_prints_kvcalc_schema(command):
    r = CliRunner().invoke(app, ["schema", command])
    assert r.exit_code == 0, r.output
    assert r.stdout == json.dumps(kvcalc.schema(command), indent=2) + "\n"
    assert json.loads(r.stdout) == kvcalc.schema(command)


def test_the_schema_command_refuses_an_unknown_command_in_one_line():
    r = CliRunner().invoke(app, ["schema", "plan9"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["kvcalc: error: COMMAND 'plan9': kvcalc's schemas are for "
                                     "estimate, fit, check, sweep, plan, bench"]


# --- the answers against them ------------------------------------------------------------------
GOLDEN_JSON = sorted(p.stem for p in golden.GOLDEN.glob("*.json"))


@pytest.mark.parametrize("name", GOLDEN_JSON)
def test_every_golden_answer_validates(name):
    command = name.split("-")[0] if name.split("-")[0] in ("fit", "plan", "bench") else "estimate"
    _validate(command, json.loads((golden.GOLDEN / f"{name}.json").read_text()))


@pytest.mark.parametrize("name", sorted(golden.SWEEPS))
def test_the_golden_sweeps_validate(name):
    argv = golden.SWEEPS[name]
    params = {"model" if flag == "--preset" else flag[2:].replace("-", "_"): value
              for flag, value in zip(argv[1::2], argv[2::2])}
    _validate("sweep", json.loads(json.dumps(kvcalc.sweep(**params).as_dict())))


@pytest.mark.parametrize("name", sorted(schema_cases.argvs()))
def test_each_engine_and_feature_validates(name):
    argv = schema_cases.argvs()[name]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code in (0, 1), r.output  # fit: 1 is a question answered no
    _validate(argv[0], json.loads(r.stdout))


def test_check_answers_validate(tmp_path):
    """Every public log kind `kvcalc check` reads: one that started with each engine, each
    failed one (tests/test_answers_check_sweep.py's cases)."""
    from test_answers_check_sweep import CHECKS, _check_parameters, _log

    for name, (path, args) in sorted(CHECKS.items()):
        log = _log(path, tmp_path)
        answer = kvcalc.check(log=log.read_text(), **_check_parameters(args))
        _validate("check", json.loads(json.dumps(answer.as_dict())))


def test_a_key_the_schema_does_not_declare_fails():
    """Closed objects refuse a new field: one added to the JSON must be declared."""
    fit = json.loads((golden.GOLDEN / "fit-llama3.1-8b-rtx3090-20000.json").read_text())
    est = json.loads((golden.GOLDEN / "estimate-llama3-8b.json").read_text())
    for command, data, where in (("fit", fit, fit), ("fit", fit, fit["memory"]),
                                 ("estimate", est, est["latency"]),
                                 ("estimate", est, est["fit"]["engine"])):
        where["undeclared"] = 1
        with pytest.raises(AssertionError):
            _validate(command, data)
        del where["undeclared"]
        _validate(command, data)
    for bad in ("1 GiB", -1, 1.5):  # a byte count is a whole number, never negative
        est["kv_cache_bytes"] = bad
        with pytest.raises(AssertionError, match="kv_cache_bytes"):
            _validate("estimate", est)
    fit["memory"]["kv_cache"] = -1  # what the KV cache lacks is kv_cache_shortfall_bytes
    with pytest.raises(AssertionError, match="memory/kv_cache"):
        _validate("fit", fit)


# --- random valid invocations -------------------------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings, strategies as st  # noqa: E402

MODELS = ["llama3-8b", "llama3.1-8b", "mistral-7b", "gemma3-27b", "deepseek-v3", "qwen3-30b-a3b",
          "qwen3-next-80b-a3b", "mamba-2.8b", "jamba-1.5-mini", "gpt-oss-20b", "gemma2-9b"]
GPUS = ["h100-sxm", "a100-80gb", "l4", "rtx4090", "h200"]
DTYPES = ["bf16", "fp8", "int8", "int4"]
LENGTHS = [1, 512, 4096, 32768, 131072]
EXAMPLES = int(os.environ.get("KVCALC_SCHEMA_EXAMPLES", "30"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from([*GPUS, "none"]),
       seq_len=st.sampled_from(LENGTHS), batch=st.sampled_from([1, 4, 64]),
       kv_dtype=st.sampled_from(DTYPES), weight_dtype=st.sampled_from([None, *DTYPES]),
       tp=st.sampled_from([1, 2, 8]),
       engine=st.sampled_from([None, "vllm", "sglang", "llama.cpp", "roofline"]))
def test_random_estimates_validate(model, gpu, seq_len, batch, kv_dtype, weight_dtype, tp, engine):
    try:
        est = kvcalc.estimate(model=model, seq_len=seq_len, batch=batch, kv_dtype=kv_dtype,
                              weight_dtype=weight_dtype, tp=tp, gpu=gpu,
                              engine=None if gpu == "none" else engine)
    except KvcalcError:
        assume(False)
    _validate("estimate", json.loads(json.dumps(est.as_dict())))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS),
       length=st.sampled_from([None, *LENGTHS, "auto"]), kv_dtype=st.sampled_from(DTYPES),
       tp=st.sampled_from([1, 2, 8]), engine=st.sampled_from([None, "sglang", "tensorrt-llm"]),
       batch=st.sampled_from([None, 8]), tpot_ms=st.sampled_from([None, 30]))
def test_random_fits_validate(model, gpu, length, kv_dtype, tp, engine, batch, tpot_ms):
    params = {"model": model, "gpu": gpu, "kv_dtype": kv_dtype, "tp": tp, "tpot_ms": tpot_ms}
    if engine is None and batch is not None:
        params["batch"] = batch  # the plain fit
    elif length is not None:
        params[{None: "max_model_len", "sglang": "context_length",
                "tensorrt-llm": "max_seq_len"}[engine]] = length
    if engine is not None:
        params["engine"] = engine
    try:
        answer = kvcalc.fit(**params)
    except KvcalcError:
        assume(False)
    _validate("fit", json.loads(json.dumps(answer.as_dict())))


def test_the_page_publishes_the_wheels_schemas(tmp_path):
    """web/build.py lays each schema the wheel carries out as schemas/COMMAND.json."""
    import importlib.util
    import zipfile

    if not (ROOT / "web" / "build.py").is_file():
        pytest.skip("web/ is not beside tests/ (a copy of the tests alone)")
    spec = importlib.util.spec_from_file_location("web_build", ROOT / "web" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    wheel = tmp_path / "kvcalc-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("kvcalc/__init__.py", "")
        for command in COMMANDS:
            z.writestr(f"kvcalc/schemas/{command}.json", json.dumps(kvcalc.schema(command)))
    out = tmp_path / "site"
    out.mkdir()
    assert build.publish_schemas(wheel, out) == sorted(f"{c}.json" for c in COMMANDS)
    for command in COMMANDS:
        assert json.loads((out / "schemas" / f"{command}.json").read_text()) == kvcalc.schema(
            command)
