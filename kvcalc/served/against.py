"""A real `vllm bench serve` / SGLang `bench_serving` result beside kvcalc's prediction of
the same run (`kvcalc bench --against RESULT.json`).

What is read:

* vLLM: the JSON `vllm bench serve --save-result` (and `benchmarks/benchmark_serving.py
  --save-result` before it) writes: one object with `backend`, `model_id`, `num_prompts`,
  `request_rate` ("inf" or a number), `max_concurrency`, `completed`, `duration`,
  `total_input_tokens`, `total_output_tokens`, the metrics under the names of
  kvcalc.served.METRICS and, unless left out, per-request `input_lens`, `output_lens`,
  `ttfts`, `itls`.
* SGLang: the JSONL `python -m sglang.bench_serving --output-file` appends: one object
  a line, one line per run, with `backend`, `dataset_name`, `request_rate` (a number or
  Infinity), `max_concurrency`, `random_input_len`, `random_output_len`,
  `random_range_ratio`, `completed`, `duration`, the token totals and the metrics, most
  under vLLM's names; its `*_e2e_latency_ms` are vLLM's `*_e2el_ms` and its
  `total_throughput` vLLM's `total_token_throughput` (the same definitions: SGLang's
  client is a port of vLLM's). A metric the file lacks (old bench_serving lines carry
  only medians) is not compared; nothing is derived to fill it.

What the run is compared on (`against`), each a one-line KvcalcError when it differs:

* the model: the file's `model_id` (else `model`, `tokenizer_id` or `server_info`'s
  `model_path`) against the asked model's Hugging Face id (a preset's `source:`), by name
  with an `-Instruct`/`-Chat`/`-it`/`-hf` suffix and a `Meta-` prefix set aside (an
  instruct checkpoint has its base model's shape); a file that names no model is taken
  as the asked model, with a note;
* the lengths: an asked `input_len`/`output_len` against the client's own
  `random_input_len`/`random_output_len` where the file states them (a random-dataset
  run), else against the run's mean (total tokens over completed requests) within 1%;
  not asked, they come from the file. kvcalc simulates one length for every request, so
  it always runs the file's means (what the run sent: a range ratio draws lengths around
  the stated one; SGLang's 0.0 draws them uniformly up to it), and says so;
* the load: an asked concurrency, rate or request count must be the run's (in a JSONL
  of several runs, the runs that match are kept); not asked, they come from the file;
* the GPU count: `tp` where the file records one (`tensor_parallel_size`, `tp_size` or
  `tp`, at the top or in `server_info`); a file that does not (vLLM's never does) leaves
  the asked `tp`, with a note; the GPU itself is never recorded: the asked one stands;
* the engine: the file's `backend` (vllm, sglang, trt) where it names one.
"""

from __future__ import annotations

import math
import os
from dataclasses import field
from pathlib import Path

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal, quoted, value_problem
from kvcalc.served import METRICS

__all__ = ["Comparison", "Against", "MeasuredRun", "against", "read_result"]

MAX_RESULT_BYTES = 64 << 20  # a 5,000-request result with its texts is some 6 MB
LENGTH_TOLERANCE = 0.01  # an asked length within 1% of the run's mean is that run's
# bench_serving's names for vLLM's metrics (sglang/bench_serving.py writes both
# families: these three differ)
_SGLANG_NAMES = {"mean_e2e_latency_ms": "mean_e2el_ms",
                 "median_e2e_latency_ms": "median_e2el_ms",
                 "p99_e2e_latency_ms": "p99_e2el_ms",
                 "total_throughput": "total_token_throughput"}
_SGLANG_KEYS = ("dataset_name", "total_output_tokens_retokenized", "random_range_ratio",
                "mean_e2e_latency_ms", "median_e2e_latency_ms")
# The client's --backend: the engine it talked to, where it names one
_BACKEND_ENGINE = {"vllm": "vllm", "vllm-chat": "vllm", "sglang": "sglang",
                   "sglang-native": "sglang", "sglang-oai": "sglang",
                   "sglang-oai-chat": "sglang", "trt": "tensorrt-llm",
                   "tensorrt-llm": "tensorrt-llm"}
_SUFFIXES = ("-instruct", "-chat", "-it", "-hf", "-base")


@record
class MeasuredRun:
    """One benchmark run as its result file records it (the metrics under vLLM's names)."""

    source: str  # the file
    line: int | None  # its line in a JSONL file; None for a JSON object
    client: str  # "vllm bench serve" or "bench_serving"
    backend: str | None
    model_id: str | None
    dataset: str | None
    num_prompts: int
    completed: int
    duration_s: float
    request_rate: float  # math.inf: all at once
    max_concurrency: int | None
    total_input_tokens: int
    total_output_tokens: int
    input_len: int | None  # the client's --random-input-len, where the file states it
    output_len: int | None
    range_ratio: float | None
    input_range: tuple[int, int] | None  # shortest and longest prompt, from input_lens
    output_range: tuple[int, int] | None
    tp: int | None  # GPU count where the file records it
    metrics: dict = field(default_factory=dict)
    # each completed request's (prompt, output) tokens, where the file lists them
    lengths: tuple = ()

    @property
    def mean_input_len(self) -> float:
        return self.total_input_tokens / self.completed

    @property
    def mean_output_len(self) -> float:
        return self.total_output_tokens / self.completed

    @property
    def label(self) -> str:
        where = f"line {self.line}" if self.line is not None else Path(self.source).name
        load = (f"concurrency {self.max_concurrency:,}" if self.max_concurrency is not None
                else "all at once" if math.isinf(self.request_rate)
                else f"{self.request_rate:g} req/s")
        return (f"{where}: {self.num_prompts:,} requests, {load}, "
                f"{self.mean_input_len:,.1f} + {self.mean_output_len:,.1f} tokens on average"
                + (f" ({self.dataset})" if self.dataset else ""))

    def as_dict(self) -> dict:
        return {"source": self.source, "line": self.line, "client": self.client,
                "backend": self.backend, "model_id": self.model_id, "dataset": self.dataset,
                "num_prompts": self.num_prompts, "completed": self.completed,
                "duration": self.duration_s,
                "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
                "max_concurrency": self.max_concurrency,
                "total_input_tokens": self.total_input_tokens,
                "total_output_tokens": self.total_output_tokens,
                "random_input_len": self.input_len, "random_output_len": self.output_len,
                "random_range_ratio": self.range_ratio, "tp": self.tp,
                **self.metrics}


@record
class Comparison:
    """One measured run and kvcalc's prediction of it (None where kvcalc refuses the run:
    `refusal` says why)."""

    run: MeasuredRun
    predicted: object  # kvcalc.served.BenchResult, or None
    refusal: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def measured(self) -> dict:
        return {m: self.run.metrics[m] for m in METRICS if m in self.run.metrics}

    @property
    def kvcalc(self) -> dict:
        if self.predicted is None:
            return {}
        return {m: self.predicted.metrics[m] for m in METRICS}

    @property
    def ratio(self) -> dict:
        """kvcalc / measured, per metric both sides have (a measured 0 has none)."""
        got = self.kvcalc
        return {m: got[m] / v for m, v in self.measured.items() if m in got and v}

    def as_dict(self) -> dict:
        p = self.predicted
        load = p.load if p is not None else None
        return {"source": self.run.source, "line": self.run.line,
                "client": self.run.client, "model_id": self.run.model_id,
                "num_prompts": self.run.num_prompts,
                "request_rate": ("inf" if math.isinf(self.run.request_rate)
                                 else self.run.request_rate),
                "max_concurrency": self.run.max_concurrency,
                "input_len": load.input_len if load else round(self.run.mean_input_len),
                "output_len": load.output_len if load else round(self.run.mean_output_len),
                "tp": p.tp if p is not None else self.run.tp,
                "measured": self.measured, "kvcalc": self.kvcalc, "ratio": self.ratio,
                "refusal": self.refusal, "notes": list(self.notes)}


@record
class Against:
    """Every kept run of a result file beside kvcalc's prediction."""

    source: str
    model: str
    gpu: str
    engine: object  # kvcalc.serving.EngineRef
    runs: tuple[Comparison, ...]
    skipped: int = 0  # runs of the file another load or length than asked

    def as_dict(self) -> dict:
        return {"against": self.source, "model": self.model, "gpu": self.gpu,
                "engine": self.engine.name, "engine_release": self.engine.release,
                "skipped_runs": self.skipped, "runs": [c.as_dict() for c in self.runs]}

    def rows(self) -> list[dict]:
        """CSV rows: per run, one row each of measured, kvcalc and ratio, the metrics in
        columns under vllm bench serve's names."""
        out = []
        for i, c in enumerate(self.runs, 1):
            d = c.as_dict()
            ident = {"run": i, "line": c.run.line, "request_rate": d["request_rate"],
                     "max_concurrency": d["max_concurrency"], "num_prompts": d["num_prompts"],
                     "input_len": d["input_len"], "output_len": d["output_len"],
                     "tp": d["tp"]}
            for side in ("measured", "kvcalc", "ratio"):
                values = d[side]
                out.append({**ident, "side": side, **{m: values.get(m) for m in METRICS}})
        return out


def read_result(path: str | os.PathLike) -> list[MeasuredRun]:
    """The runs a result file records: one for vLLM's JSON, one per line for SGLang's
    JSONL. A KvcalcError in one line for anything else."""
    import json

    from kvcalc.ground.inputfile import read_text

    name = str(path)
    try:
        text = read_text(Path(path), name, MAX_RESULT_BYTES)
    except FileNotFoundError:
        raise ParameterError("{against} " + literal(name) + ": no such file", "against") from None
    except IsADirectoryError:
        raise ParameterError("{against} " + literal(name) + ": it is a folder, not a result file",
                             "against") from None
    bad = f"{name} is not a vllm bench serve or bench_serving result"
    if not text.strip():
        raise KvcalcError(f"{bad}: it is empty")
    try:
        objects = [(None, json.loads(text))]
    except ValueError as whole:
        if "Extra data" not in str(whole):
            raise KvcalcError(f"{bad}: not JSON ({value_problem(whole)})") from None
        objects = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objects.append((n, json.loads(line)))
            except ValueError as e:
                raise KvcalcError(f"{bad}: line {n} is not JSON ({value_problem(e)})") from None
    return [_run(obj, name, n, bad) for n, obj in objects]


def _run(d, name: str, line: int | None, bad: str) -> MeasuredRun:
    at = f" (line {line})" if line is not None else ""
    if not isinstance(d, dict):
        raise KvcalcError(f"{bad}: it holds a JSON {type(d).__name__}{at}, not an object")
    if "reason" in d and "completed" not in d:
        raise KvcalcError(f"{bad}: it records a failed run{at} (reason: "
                          f"{quoted(str(d['reason']))})")
    missing = [k for k in ("completed", "duration") if k not in d]
    renamed = {_SGLANG_NAMES.get(k, k): v for k, v in d.items()}
    if missing or not any(m in renamed for m in METRICS):
        keys = ", ".join(list(d)[:8]) + (", ..." if len(d) > 8 else "")
        lacks = (" and ".join(repr(k) for k in missing) if missing
                 else "any metric under vllm bench serve's names")
        raise KvcalcError(f"{bad}: it lacks {lacks}{at} (its keys: {keys or 'none'})")

    def number(key, *, whole=False, positive=False, allow_inf=False):
        v = d.get(key)
        if v is None:
            return None
        if isinstance(v, str) and allow_inf and v.strip().lower() == "inf":
            return math.inf
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
        ok = ok and (allow_inf or not math.isinf(v)) and (not whole or float(v).is_integer())
        ok = ok and (v > 0 if positive else v >= 0)
        if not ok:
            kind = "a positive" if positive else "a non-negative"
            raise KvcalcError(f"{bad}: {key}{at} is {quoted(str(v))}, not {kind} "
                              f"{'whole number' if whole else 'number'}")
        return int(v) if whole and not math.isinf(v) else v

    completed = number("completed", whole=True)
    if not completed:
        raise KvcalcError(f"{name}: the run{at} completed no requests: nothing to compare")
    duration = number("duration", positive=True)
    totals = {}
    for key, lens in (("total_input_tokens", "input_lens"), ("total_output_tokens", "output_lens")):
        total = number(key, whole=True)
        if total is None:
            values = d.get(lens)
            if isinstance(values, list) and values and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in values):
                total = sum(values) * completed // len(values)  # the mean, over completed
            else:
                raise KvcalcError(f"{bad}: it records no {key} nor {lens}{at}")
        totals[key] = total
    if not totals["total_input_tokens"] or not totals["total_output_tokens"]:
        raise KvcalcError(f"{name}: the run{at} records no prompt or output tokens")

    def span(key):
        v = d.get(key)
        if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                             for x in v):
            return (min(v), max(v))
        return None

    metrics = {}
    for key, v in d.items():
        m = _SGLANG_NAMES.get(key, key)
        if m in METRICS and v is not None:
            metrics[m] = float(number(key))
    sglang = any(k in d for k in _SGLANG_KEYS)
    dataset = d.get("dataset_name") if isinstance(d.get("dataset_name"), str) else None
    random_lens = dataset in (None, "random")
    rate = number("request_rate", positive=True, allow_inf=True)
    concurrency = number("max_concurrency", whole=True, positive=True)
    num_prompts = number("num_prompts", whole=True, positive=True) or completed
    server = d.get("server_info") if isinstance(d.get("server_info"), dict) else {}
    tp = None
    for where in (d, server):
        for key in ("tensor_parallel_size", "tp_size", "tp"):
            v = where.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                tp = tp or v
    model = next((v for v in (d.get("model_id"), d.get("model"), server.get("model_path"),
                              d.get("tokenizer_id")) if isinstance(v, str) and v.strip()), None)
    backend = d.get("backend") if isinstance(d.get("backend"), str) else None
    return MeasuredRun(
        source=name, line=line, client="bench_serving" if sglang else "vllm bench serve",
        backend=backend, model_id=model, dataset=dataset, num_prompts=num_prompts,
        completed=completed, duration_s=float(duration),
        request_rate=math.inf if rate is None else float(rate), max_concurrency=concurrency,
        total_input_tokens=totals["total_input_tokens"],
        total_output_tokens=totals["total_output_tokens"],
        input_len=number("random_input_len", whole=True, positive=True) if random_lens else None,
        output_len=number("random_output_len", whole=True, positive=True) if random_lens else None,
        range_ratio=number("random_range_ratio") if random_lens else None,
        input_range=span("input_lens"), output_range=span("output_lens"), tp=tp,
        metrics=metrics, lengths=_pairs(d))


def _pairs(d: dict) -> tuple:
    """(prompt, output) of each request the file lists, failed ones (0 output tokens,
    vllm bench serve's mark) left out; () unless both lists are whole and equally long."""
    ins, outs = d.get("input_lens"), d.get("output_lens")
    if not (isinstance(ins, list) and isinstance(outs, list) and ins and len(ins) == len(outs)):
        return ()
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ins + outs):
        return ()
    return tuple((i, o) for i, o in zip(ins, outs) if i > 0 and o > 0)


def _model_key(model_id: str) -> str:
    """'meta-llama/Meta-Llama-3-8B-Instruct' -> 'llama-3-8b': the name (a Hub id's or a
    folder's last part) without its chat-tuning suffix or Meta's prefix."""
    name = model_id.strip().rstrip("/").replace("\\", "/").rsplit("/", 1)[-1].lower()
    changed = True
    while changed:
        changed = False
        for s in _SUFFIXES:
            if name.endswith(s) and len(name) > len(s):
                name, changed = name[: -len(s)], True
    return name.removeprefix("meta-")


def _asked_names(spec) -> list[str]:
    from kvcalc.model_source import hub_id

    return [n for n in (hub_id(spec), spec.name) if n]


def _preset_for(model_id: str) -> str | None:
    """The preset whose Hugging Face id is `model_id`'s, by _model_key (the error path)."""
    from kvcalc import presets
    from kvcalc.model_source import hub_id

    key = _model_key(model_id)
    for name in presets.model_names():
        try:
            hub = hub_id(presets.load_model(name))
        except KvcalcError:
            continue
        if hub and _model_key(hub) == key:
            return name
    return None


def _check_model(run: MeasuredRun, spec) -> str | None:
    """None or a note when the file's model is the asked one; a KvcalcError otherwise."""
    asked = _asked_names(spec)
    shown = spec.name + (f" ({asked[0]})" if asked and asked[0] != spec.name else "")
    if run.model_id is None:
        return (f"{Path(run.source).name} names no model: taken as the asked {shown}")
    if any(_model_key(run.model_id) == _model_key(a) for a in asked):
        if any(run.model_id.strip().lower() == a.lower() for a in asked):
            return None
        return (f"the run's {run.model_id} is taken as {shown}: a chat or instruct "
                "checkpoint has its base model's shape")
    preset = _preset_for(run.model_id)
    hint = (f"; kvcalc's preset for it: {preset}" if preset
            else "; no preset is that model: give its Hub id or config as MODEL")
    raise KvcalcError(f"{run.source} ran {run.model_id}, not {shown}{hint}")


def _rate_text(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def _select(runs: list[MeasuredRun], name: str, *, input_len, output_len, concurrency,
            request_rate, num_prompts) -> list[MeasuredRun]:
    """The runs that match every asked value; a KvcalcError naming the first asked value
    no run has."""

    def length_ok(stated, mean, asked):
        if stated is not None:
            return stated == asked
        return abs(asked - mean) <= max(1.0, LENGTH_TOLERANCE * mean)

    def length_text(stated, mean, which):
        if stated is not None:
            return f"{stated:,}-token {which}s (random_{which}_len)"
        return f"{which}s of {mean:,.1f} tokens on average"

    checks = []  # (the asked value, a ParameterError's template, and its parameter; ...)
    if input_len is not None:
        checks.append((f"{{input_len}} {input_len:,}",
                       lambda r: length_ok(r.input_len, r.mean_input_len, input_len),
                       lambda r: length_text(r.input_len, r.mean_input_len, "input")))
    if output_len is not None:
        checks.append((f"{{output_len}} {output_len:,}",
                       lambda r: length_ok(r.output_len, r.mean_output_len, output_len),
                       lambda r: length_text(r.output_len, r.mean_output_len, "output")))
    if concurrency is not None:
        checks.append((f"{{concurrency}} {','.join(map(str, concurrency))}",
                       lambda r: r.max_concurrency in concurrency,
                       lambda r: ("no concurrency cap" if r.max_concurrency is None
                                  else f"concurrency {r.max_concurrency:,}")))
    if request_rate is not None:
        checks.append((f"{{request_rate}} {','.join(map(_rate_text, request_rate))}",
                       lambda r: r.max_concurrency is None and any(
                           math.isclose(r.request_rate, x) or r.request_rate == x
                           for x in request_rate),
                       lambda r: (f"concurrency {r.max_concurrency:,}"
                                  if r.max_concurrency is not None
                                  else f"request rate {_rate_text(r.request_rate)}")))
    if num_prompts is not None:
        checks.append((f"{{num_prompts}} {num_prompts:,}", lambda r: r.num_prompts == num_prompts,
                       lambda r: f"{r.num_prompts:,} requests"))
    kept = runs
    for asked, ok, describe in checks:
        left = [r for r in kept if ok(r)]
        if not left:
            seen = list(dict.fromkeys(describe(r) for r in kept))
            parameter = asked[1:asked.index("}")]
            if len(runs) == 1:
                raise ParameterError(literal(name) + " ran " + literal(seen[0]) + ", not "
                                     + asked, parameter)
            raise ParameterError("no run in " + literal(name) + " has " + asked + ": its runs "
                                 "have " + literal("; ".join(seen)), parameter)
        kept = left
    return kept


def _engine_for(run: MeasuredRun, asked):
    """The engine the run's client talked to (an EngineRef), the asked one checked
    against it; a note when the file does not say."""
    from kvcalc.serving import engine_ref

    named = _BACKEND_ENGINE.get((run.backend or "").strip().lower())
    if asked is not None and named is not None and asked.name != named:
        raise ParameterError(literal(run.source) + " ran against " + literal(run.backend)
                             + " (its backend), not {engine} " + asked.name, "engine")
    if asked is not None:
        return asked, None
    if named is None:
        ref = engine_ref(None)
        return ref, (f"the run's backend {run.backend or '(none)'} names no engine: "
                     f"{ref.title} assumed (--engine says otherwise)")
    return engine_ref(named), None


def against(path: str | os.PathLike, spec, hw, *, engine=None, tp: int | None = None,
            input_len: int | None = None, output_len: int | None = None,
            concurrency: list[int] | None = None, request_rate: list[float] | None = None,
            num_prompts: int | None = None, prefix_hit: float = 0.0, seed: int = 0,
            kv_dtype: str = "bf16", weight_dtype=None,
            max_model_len: int | None = None) -> Against:
    """The runs of the result file at `path` that match what is asked, each beside
    kvcalc.served.bench's prediction of the same load (module docstring: what must match
    and what is taken from the file). `engine`: a kvcalc.serving.EngineRef, or None for
    the file's backend; `tp` None: the file's GPU count, else 1."""
    from kvcalc.served import Load, bench, random_lengths

    name = str(path)
    runs = read_result(path)
    kept = _select(runs, name, input_len=input_len, output_len=output_len,
                   concurrency=concurrency, request_rate=request_rate,
                   num_prompts=num_prompts)
    out, ref = [], engine
    for run in kept:
        notes = []
        model_note = _check_model(run, spec)
        if model_note:
            notes.append(model_note)
        ref, engine_note = _engine_for(run, engine)
        if engine_note:
            notes.append(engine_note)
        if not ref.named:
            notes.append(f"the file records no engine release: {ref.title}'s terms "
                         f"(--engine {ref.name}@VERSION says otherwise)")
        if tp is not None and run.tp is not None and run.tp != tp:
            raise ParameterError(literal(name) + f" ran on {run.tp} GPUs (its tensor-parallel "
                                 f"size), not {{tp}} {tp}", "tp")
        gpus = tp or run.tp or 1
        if run.tp is None:
            notes.append(f"the file records no GPU count: {gpus} x {hw.name} as asked "
                         f"({'--tp' if tp else 'the default; --tp says otherwise'}; the GPU "
                         "is never recorded)")
        inp = max(1, round(run.mean_input_len))
        outp = max(1, round(run.mean_output_len))
        lengths = run.lengths
        if lengths:
            notes.append(f"lengths: the {len(lengths):,} completed requests' own prompt and "
                         "output tokens, as the file lists them")
        elif (run.input_len and run.output_len and run.range_ratio is not None
              and (run.range_ratio < 1 if run.client == "bench_serving" else run.range_ratio > 0)):
            lengths = random_lengths(run.input_len, run.output_len, run.num_prompts,
                                     run.range_ratio, "sglang" if run.client == "bench_serving"
                                     else "vllm", seed)
            notes.append(f"lengths: drawn as the client draws them at random_range_ratio "
                         f"{run.range_ratio:g} around {run.input_len:,} + {run.output_len:,} "
                         f"(seed {seed}; the file's own draw is not listed)")
        else:
            notes.append(_lengths_note(run, inp, outp))
        if run.completed < run.num_prompts:
            notes.append(f"{run.num_prompts - run.completed:,} of {run.num_prompts:,} "
                         "requests failed in the run; kvcalc sends them all")
        if run.max_concurrency is not None and not math.isinf(run.request_rate):
            notes.append(f"the run paced {run.request_rate:g} req/s under its concurrency "
                         "cap: kvcalc simulates the cap alone (a closed loop)")
        load = Load(input_len=inp, output_len=outp,
                    num_prompts=len(lengths) if lengths else run.num_prompts, lengths=lengths,
                    concurrency=run.max_concurrency,
                    request_rate=math.inf if run.max_concurrency else run.request_rate,
                    prefix_hit=prefix_hit, seed=seed)
        try:
            predicted, refusal = bench(spec, hw, load, engine=ref, tp=gpus, kv_dtype=kv_dtype,
                                       weight_dtype=weight_dtype,
                                       max_model_len=max_model_len), None
        except KvcalcError as e:
            predicted, refusal = None, str(e)
        out.append(Comparison(run=run, predicted=predicted, refusal=refusal,
                              notes=tuple(notes)))
    return Against(source=name, model=spec.name, gpu=hw.name, engine=ref, runs=tuple(out),
                   skipped=len(runs) - len(kept))


def _lengths_note(run: MeasuredRun, inp: int, outp: int) -> str:
    why = [f"its token totals over {run.completed:,} completed requests"]
    if run.input_range and run.input_range[0] != run.input_range[1]:
        why.append(f"prompts {run.input_range[0]:,}-{run.input_range[1]:,} tokens")
    if run.output_range and run.output_range[0] != run.output_range[1]:
        why.append(f"outputs {run.output_range[0]:,}-{run.output_range[1]:,}")
    if run.input_len is not None and run.range_ratio is not None and (
            inp != run.input_len or outp != (run.output_len or outp)):
        why.append(f"random_range_ratio {run.range_ratio:g} around {run.input_len:,} + "
                   f"{run.output_len or 0:,}")
    return (f"lengths: the run's means, {inp:,} prompt + {outp:,} output tokens "
            f"({'; '.join(why)}); kvcalc gives every request that one length")
