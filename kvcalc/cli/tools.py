"""The library functions as tools for an agent (`kvcalc mcp`, kvcalc/cli/mcp.py): each
tool's JSON schema is made from its function's signature (types from the annotations,
defaults from the defaults, units from the parameter's name and the docstring), and a
call returns the function's `as_dict()`, which is the command's `--format json`.

No MCP here: this is plain Python, so the schemas and the calls can be tested without
the SDK, and the server only carries them.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable

from kvcalc.errors import KvcalcError, quoted

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean",
               type(None): "null"}

# The library's convention (kvcalc/answers/__init__.py): units are named in the parameter.
_TOKENS = {"seq_len", "max_model_len", "prompt_len", "encoder_seq_len", "context_length",
           "max_seq_len", "max_num_batched_tokens"}
_SHARES = {"gpu_memory_utilization", "memory_fraction", "mfu", "bandwidth_efficiency",
           "acceptance_rate"}
_UNITS = {"kv_offloading_size": "GiB over all ranks, as vLLM takes it"}
# plan's and bench's
_TOKENS |= {"input_len", "output_len"}
_UNITS.update(concurrency="requests in flight", request_rate="requests a second",
              transfer_bandwidth_gb_per_s="GB/s per GPU (1e9 bytes a second), one direction")


@dataclass(frozen=True)
class Tool:
    name: str
    function: Callable[..., Any]
    summary: str  # what the tool answers, first in its description
    # More keyword arguments it takes than it names (fit's **engine_flags): name -> the
    # engines whose flag it is (kvcalc.serving.flags.OWNER)
    extra: dict | None = None
    doc: str | None = None  # the docstring that describes it, where not the function's own

    @property
    def docstring(self) -> str:
        return self.doc or self.function.__doc__ or ""

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.function)

    def parameters(self) -> dict[str, inspect.Parameter]:
        return {n: p for n, p in self.signature.parameters.items()
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}

    def description(self) -> str:
        doc = inspect.cleandoc(self.docstring)
        text = f"{self.summary}\n\n{doc}".strip()
        named = self.parameters()
        by_engine: dict[str, list[str]] = {}
        for name, engines in (self.extra or {}).items():
            if name not in named:
                for engine in engines:
                    by_engine.setdefault(engine, []).append(name)
        if by_engine:
            text += "\n\nThe engines' own flags, by name, beside those in the schema: " + "; ".join(
                f"{engine}: {', '.join(names)}" for engine, names in by_engine.items()) + "."
        return text

    def input_schema(self) -> dict:
        hints = typing.get_type_hints(self.function)
        properties, required = {}, []
        for name, p in self.parameters().items():
            default = p.default
            prop = _json_type(hints.get(name), default)
            prop["description"] = _describe(name, self.docstring, default)
            if default is p.empty:
                required.append(name)
            elif _plain(default):
                prop["default"] = default
            properties[name] = prop
        schema = {"type": "object", "properties": properties, "required": required,
                  "additionalProperties": self.extra is not None}
        return schema

    def output_schema(self) -> dict:
        """The JSON Schema of what call() returns (MCP's outputSchema): the command's."""
        return output_schema(self.name)

    def call(self, arguments: dict | None) -> dict:
        """The function's as_dict() for these arguments, as JSON would carry it; a bad
        argument raises KvcalcError naming it."""
        arguments = dict(arguments or {})
        schema = self.input_schema()
        known = schema["properties"]
        unknown = sorted(set(arguments) - set(known) - set(self.extra or ()))
        if unknown:
            import difflib

            names = [*known, *(n for n in self.extra or () if n not in known)]
            near = difflib.get_close_matches(unknown[0], names, n=1)
            raise KvcalcError(f"{self.name} takes no argument {quoted(unknown[0])}"
                              + (f" (did you mean {near[0]}?)" if near else "")
                              + "; it takes " + ", ".join(names))
        missing = [n for n in schema["required"] if arguments.get(n) is None]
        if missing:
            raise KvcalcError(f"{self.name} needs {missing[0]}")
        for name, value in arguments.items():
            if name in known:
                _check_type(name, value, known[name])
        result = self.function(**arguments)
        # Tuples become lists and keys strings, as `--format json` writes them.
        return json.loads(json.dumps(result.as_dict()))


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _json_type(hint: Any, default: Any) -> dict:
    """The JSON type of an annotation; an unannotated parameter is named by a string (a
    model, a device, a dtype, a file: as the command line takes it) or by its default's
    type."""
    if hint is None:
        kinds = ["string"] if default is inspect.Parameter.empty or not _plain(default) else (
            ["string", "null"] if default is None else [_JSON_TYPES[type(default)]])
        return {"type": kinds[0] if len(kinds) == 1 else kinds}
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(
        hint) is typing.Union else (hint,)
    kinds = []
    for m in members:
        kind = "array" if typing.get_origin(m) is list else _JSON_TYPES.get(m, "string")
        if kind not in kinds:
            kinds.append(kind)
    if "integer" in kinds and "number" in kinds:  # JSON's number holds the integers
        kinds.remove("integer")
    return {"type": kinds[0] if len(kinds) == 1 else kinds}


def _describe(name: str, doc: str, default: Any) -> str:
    """The parameter in words: its unit, what the docstring says where it names it, and
    its default."""
    parts = []
    if name.endswith("_bytes"):
        parts.append("In bytes.")
    elif name.endswith("_ms"):
        parts.append("In milliseconds.")
    elif name == "max_model_len" and '"auto"' in doc:
        parts.append('In tokens, or "auto": the longest that fits, as vLLM\'s auto-fit finds it.')
    elif name in _TOKENS:
        parts.append("In tokens.")
    elif name in _SHARES:
        parts.append("A share in (0, 1].")
    elif name in _UNITS:
        parts.append(f"In {_UNITS[name]}.")
    said = _sentence(name, doc)
    if said:
        parts.append(said)
    if default is not inspect.Parameter.empty:
        parts.append("Default: none (not given)." if default is None else
                     f"Default: {json.dumps(default) if _plain(default) else default}.")
    else:
        parts.append("Required.")
    return " ".join(parts)


def _sentence(name: str, doc: str) -> str | None:
    """The docstring's first sentence (or clause, up to ';') that names `name` in
    backquotes; a stop inside parentheses does not end it. None where there is none."""
    text = " ".join(doc.split())
    clauses, current = [], ""
    for piece in re.split(r"(?<=[.;])\s+", text):
        current = f"{current} {piece}".strip()
        bare = current.replace("(0, 1]", "")  # an interval, not an open parenthesis
        if bare.count("(") <= bare.count(")"):
            clauses.append(current)
            current = ""
    for clause in [*clauses, current]:
        # A clause naming many parameters lists units: the name already gave the unit.
        if f"`{name}`" in clause and clause.count("`") <= 8:
            return clause.rstrip(";") + ("" if clause.endswith(".") else ".")
    return None


def _check_type(name: str, value: Any, prop: dict) -> None:
    kinds = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    ok = {"null": value is None, "boolean": isinstance(value, bool),
          "string": isinstance(value, str), "array": isinstance(value, list),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, (int, float)) and not isinstance(value, bool)
          and (not isinstance(value, float) or math.isfinite(value))}
    if not any(ok[k] for k in kinds):
        raise KvcalcError(f"{name} must be {' or '.join(_WORDS[k] for k in kinds)}, got "
                          + (quoted(value) if isinstance(value, str) else json.dumps(value)))


_WORDS = {"null": "null", "boolean": "true or false", "string": "a string",
          "integer": "a whole number", "number": "a number", "array": "a list"}


def tools() -> dict[str, Tool]:
    """The tools, by name."""
    import kvcalc
    from kvcalc.answers.fit import fit
    from kvcalc.serving.flags import OWNER

    return {
        "estimate": Tool("estimate", kvcalc.estimate, (
            "`kvcalc estimate --format json`: a model's KV cache, parameters, weights, "
            "decode roofline and vLLM's memory verdict on a device (bytes as exact "
            "integers). `gpu` \"none\" leaves the device out.")),
        "fit": Tool("fit", fit, (
            "`kvcalc fit --format json`: does the model fit on the GPU at this length, "
            "as the serving engine counts its start-up (vLLM by default, or engine "
            "\"sglang\" / \"tensorrt-llm\" with their own flags by name), the floor "
            "(weights + KV) beside it, and the fixes when it does not."), extra={
                # vLLM's own are fit's named parameters (dp is data_parallel_size there)
                name: engines for name, engines in OWNER.items() if engines != ("vllm",)}),
        **_check_and_sweep(),
        **_plan_and_bench(OWNER),
    }


def _plan_and_bench(owner: dict) -> dict[str, Tool]:
    """kvcalc.plan and kvcalc.bench as tools; each engine's own flags by name."""
    from kvcalc.answers import bench, plan

    return {
        "plan": Tool("plan", plan.plan, (
            "`kvcalc plan --format json`: the serving layouts (tensor x pipeline parallel "
            "x replicas, KV dtype, batch limits) up to `gpus` GPUs allow under the "
            "engine's start-up count and the latency targets, the best by output tokens/s "
            "per GPU, and its launch line (`vllm serve ...`)."),
            extra={n: owner[n] for n in plan.ENGINE_FLAGS}),
        "bench": Tool("bench", bench.bench, (
            "`kvcalc bench --format json`: what `vllm bench serve` would print for the "
            "model on these GPUs (TTFT, TPOT, ITL, latency in ms; throughput), predicted "
            "by simulating the engine's scheduler; or, with `against`, a real run's "
            "result file beside kvcalc's prediction."),
            extra={n: owner[n] for n in bench.ENGINE_FLAGS}),
    }


# kvcalc check and kvcalc sweep. An MCP answer is an object, so the sweep tool's rows (the
# command's JSON, a list) come under "rows"; at most as many as `sweep --format json`
# holds in memory.
SWEEP_TOOL_ROWS = 10_000


def _sweep(model, seq_len: int | str | None = None, batch: int | str = 1,
           kv_heads: int | str | None = None, kv_dtype: str = "bf16", tp: int | str = 1,
           weight_dtype: str | None = None, group_size: int | None = None,
           gpu: str = "h100-sxm", engine: str | None = None, kv_scale_bytes: int = 0,
           encoder_seq_len: int | None = None, memory_fraction: float | None = None,
           reserve_bytes: int | None = None, skip_invalid: bool = False):
    """estimate() over a grid: one row per (kv_heads, kv_dtype, tp, seq_len, batch), at
    most 10,000 rows. `model`: a preset, Hub id, model folder or config file. `seq_len`
    (tokens), `batch` (sequences), `kv_heads` and `tp` (devices) are SPECs: a value (8), a
    comma list ("1,8,32"), a linear range "start:stop:+step" or a geometric one
    "start:stop:*factor" (token counts take suffixes: 1k = 1,000, 1K = 1,024); `seq_len`
    defaults to the model's max context, `kv_heads` to the model's own. `kv_dtype`: KV
    cache dtypes, a comma list ("bf16,fp8"). `gpu`: a hardware preset ("none": no device
    columns). `engine`: whose time per output token each row adds and whose count decides
    `fits` (vllm, sglang, tensorrt-llm, llama.cpp, ...; "roofline": the roofline alone).
    `memory_fraction`: the floor's share of device memory. `skip_invalid`: leave out
    (kv_heads, tp) pairs estimate would reject (listed under "skipped")."""
    from kvcalc.sweep.answer import sweep

    answer = sweep(model=model, seq_len=seq_len, batch=batch, kv_heads=kv_heads,
                   kv_dtype=kv_dtype, tp=tp, weight_dtype=weight_dtype, group_size=group_size,
                   gpu=gpu, engine=engine, kv_scale_bytes=kv_scale_bytes,
                   encoder_seq_len=encoder_seq_len, memory_fraction=memory_fraction,
                   reserve_bytes=reserve_bytes, skip_invalid=skip_invalid)
    if answer.rows > SWEEP_TOOL_ROWS:
        raise KvcalcError(f"the sweep has {answer.rows:,} rows; the tool answers at most "
                          f"{SWEEP_TOOL_ROWS:,}: narrow seq_len, batch, kv_heads, kv_dtype or "
                          "tp (`kvcalc sweep` streams any number as CSV)")
    return _SweepRows(answer)


@dataclass(frozen=True)
class _SweepRows:
    answer: Any  # kvcalc.sweep.answer.SweepAnswer

    def as_dict(self) -> dict:
        return {"rows": self.answer.as_dict(), "skipped": list(self.answer.skipped)}


def _check_and_sweep() -> dict[str, Tool]:
    from kvcalc.answers.check import check

    return {
        "check": Tool("check", check, (
            "`kvcalc check --format json`, the log given as its text: kvcalc's count "
            "beside every figure a vLLM, SGLang or TensorRT-LLM start-up log printed, and "
            "for a start-up that failed, the cause the log gives and the fix.")),
        "sweep": Tool("sweep", _sweep, (
            "`kvcalc sweep --format json`, its rows under \"rows\": a model's KV cache, "
            "weights, decode roofline and fit on a device over a grid of lengths, batches, "
            "K/V heads, KV dtypes and tensor-parallel degrees.")),
    }


# Each tool's outputSchema is its command's (kvcalc.schema, kvcalc/schemas/); the sweep
# tool's answer is an object, its rows (the command's list) under "rows".
def output_schema(name: str) -> dict:
    import kvcalc

    if name != "sweep":
        return kvcalc.schema(name)
    rows = kvcalc.schema("sweep")
    return {"$schema": rows.pop("$schema"), "title": "kvcalc's sweep tool", "type": "object",
            "properties": {"rows": rows, "skipped": {
                "description": "The (kv_heads, tp) pairs left out by skip_invalid, in words.",
                "type": "array", "items": {"type": "string"}}},
            "required": ["rows", "skipped"], "additionalProperties": False}
