"""Published serving measurements under load (tests/data/served/*.yaml) read into typed rows.

Figures others measured with many requests in flight (vLLM's `vllm bench serve`, SGLang's
`bench_serving`, `trtllm-bench`, AIPerf): time to first token, time per output token,
inter-token latency and throughputs, each with its source, the quoted output line and the
configuration and load it ran (engine, model, GPUs, parallelism, dataset and lengths,
request rate or concurrency). They are the truth a served-load model is checked against,
leave one source out (issue #39). Plain data and checks only: nothing here predicts
anything. The schema is in tests/data/served/README.md.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yamlload

from kvcalc.presets import hardware_names, model_names

TESTS_DIR = Path(__file__).parent
SERVED_DIR = TESTS_DIR / "data" / "served"
# Per-request ShareGPT lengths of served runs, copied from the clients' result files
# (tests/data/served/lengths/README.md); pool/ holds files of runs not in the set.
LENGTHS_DIR = SERVED_DIR / "lengths"

ENGINES = ("vllm", "sglang", "tensorrt-llm")
# The metric names `vllm bench serve --save-result` writes, each with its unit.
METRICS = {
    "mean_ttft_ms": "ms", "median_ttft_ms": "ms", "p99_ttft_ms": "ms",
    "mean_tpot_ms": "ms", "median_tpot_ms": "ms", "p99_tpot_ms": "ms",
    "mean_itl_ms": "ms", "median_itl_ms": "ms", "p99_itl_ms": "ms",
    "request_throughput": "req/s",
    "output_throughput": "tok/s",
    "total_token_throughput": "tok/s",
}
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
CLIENTS = ("vllm bench serve", "vllm benchmark_serving.py", "sglang.bench_serving",
           "trtllm-bench", "aiperf")
DATASETS = ("random", "sharegpt", "synthetic")  # synthetic: the client's fixed-length token ids
WEIGHTS = ("fp16", "bf16", "fp8", "int8", "int4", "awq", "gptq", "mxfp4", "nvfp4")
KV_DTYPES = ("fp16", "bf16", "fp8")
PER = ("gpu",)  # a throughput divided by the GPUs (absent: the whole deployment's)

FILE_KEYS = {"source", "title", "publisher", "accessed", "rows"}
FILE_OPTIONAL = {"engine", "engine_version", "setting", "notes", "defaults", "runs"}
ROW_KEYS = {"id", "run", "quote", "engine", "engine_version", "model", "weights", "gpu", "gpus",
            "tp", "client", "dataset", "input_len", "output_len", "num_prompts", "request_rate",
            "concurrency", "metric", "value"}
ROW_OPTIONAL = {"hf_id", "pp", "dp", "ep", "kv_dtype", "range_ratio", "prefix_caching", "per",
                "server", "completed", "total_input_tokens", "total_output_tokens", "where",
                "note", "excluded", "engine_options"}
# What a run (one result block's configuration) may set; the rows add id, quote, metric, value.
RUN_FIELDS = (ROW_KEYS | ROW_OPTIONAL) - {"id", "run", "quote", "metric", "value"}

_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")
_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# A number as printed: 1,627 (thousands separators) or 64.00 or 7.7
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


class ServedDataError(ValueError):
    """A served-measurement file breaks the schema."""


@dataclass(frozen=True)
class ServedRow:
    """One published metric of one benchmark run, with the run's configuration and load."""

    id: str
    run: str             # the result block (run) the row is one metric of
    source: str          # URL of the page or file read
    title: str
    publisher: str       # who measured and published it (leave-one-source-out groups by this)
    accessed: str        # ISO date the source was read
    file: str            # the YAML file's name
    quote: str           # the output line or table row the value was read from, verbatim
    engine: str          # one of ENGINES
    engine_version: str  # as the source gives it, or "unknown" (the notes say why)
    model: str           # a kvcalc model preset, or the Hugging Face id (then equal to hf_id)
    hf_id: str | None    # the checkpoint served, where the source names it
    weights: str         # checkpoint format: one of WEIGHTS
    kv_dtype: str | None  # the KV cache's dtype where the source sets one
    gpu: str             # a kvcalc hardware preset
    gpus: int            # GPUs serving the model: tp * pp * dp
    tp: int
    pp: int
    dp: int
    ep: int | None       # expert parallelism over that many GPUs, where set
    server: str | None   # the serving command as published
    client: str          # one of CLIENTS
    dataset: str         # one of DATASETS
    input_len: int | None   # requested prompt tokens (null: ShareGPT's own lengths)
    output_len: int | None  # requested output tokens (a maximum unless EOS is ignored)
    range_ratio: float | None  # the client's --random-range-ratio, where it applies
    num_prompts: int | None    # requests sent (null: not stated)
    request_rate: float  # requests/s of the open-loop arrival process; math.inf: all at once
    concurrency: int | None  # the client's cap on requests in flight (closed loop); None: no cap
    prefix_caching: bool | None  # where the source sets it
    completed: int | None        # the block's "Successful requests"
    total_input_tokens: int | None
    total_output_tokens: int | None
    metric: str          # one of METRICS
    value: float         # as published, in `unit`
    unit: str
    per: str | None      # "gpu": divided by the GPUs
    where: str | None    # where in the source the block is
    note: str | None     # an assumption the source leaves open
    excluded: str | None  # why the row is kept out of the scored set (still loaded)
    # the engine's settings the source states outside its command line (a config file
    # such as trtllm-bench's llm_options, or a backend), by kvcalc's parameter names
    engine_options: Any = field(default=None, compare=False)


def load(folder: Path = SERVED_DIR) -> list[ServedRow]:
    """Every row of every YAML file in `folder`, validated."""
    documents = {}
    for path in sorted(folder.glob("*.yaml")):
        with path.open(encoding="utf-8") as f:
            documents[path.name] = yamlload.safe_load(f)
    return validate(documents)


def validate(documents: Mapping[str, Any]) -> list[ServedRow]:
    """The rows of `documents` (file name -> parsed YAML), or ServedDataError naming the file,
    the row and what is wrong: a missing or unknown field, an unknown metric, engine, client,
    dataset or weight format, a gpu or model kvcalc does not know, a value that is not a
    positive number or not a number in its quote, parallelism that does not multiply to the
    GPUs, a run with two figures of one metric, a duplicate id."""
    models, gpus = set(model_names()), set(hardware_names())
    rows: list[ServedRow] = []
    seen: dict[str, str] = {}
    run_metrics: set[tuple[str, str]] = set()
    for name, doc in documents.items():
        for row in _rows(doc, name):
            _check_row(row, models, gpus)
            if row.id in seen:
                raise ServedDataError(f"{name}: duplicate id {row.id!r} (also in {seen[row.id]})")
            seen[row.id] = name
            if (row.run, row.metric) in run_metrics:
                raise ServedDataError(f"{name}: run {row.run!r} has two {row.metric} rows")
            run_metrics.add((row.run, row.metric))
            rows.append(row)
    return rows


def numbers_in(quote: str) -> list[float]:
    """The numbers printed in `quote`, thousands separators removed."""
    return [float(n.replace(",", "")) for n in _NUMBER.findall(quote)]


def runs(rows: list[ServedRow]) -> dict[str, list[ServedRow]]:
    """The rows grouped by run (one benchmark result block each), in file order."""
    out: dict[str, list[ServedRow]] = {}
    for row in rows:
        out.setdefault(row.run, []).append(row)
    return out


@functools.lru_cache(maxsize=4)  # read once: the fit asks for a run's lengths at every grid point
def lengths_files(folder: Path = LENGTHS_DIR) -> dict[str, dict]:
    """Each per-request lengths file of `folder` (file name -> parsed JSON), pool/ included."""
    return {str(path.relative_to(folder)): json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(folder.rglob("*.json"))}


def lengths(run_id: str, folder: Path = LENGTHS_DIR) -> tuple[tuple[int, int], ...] | None:
    """The (prompt, output) tokens of each request of run `run_id`, in the client's order, as
    its result file lists them (input_lens, output_lens); None where no file has the run.
    A request the file marks failed (a non-empty entry of its "errors" list, as later vLLM
    clients write) is dropped; without such a list every request is kept: vLLM 0.5's client
    writes 0 for a failed request and for a completed one that streamed no text alike, and
    the stored files' completed counts and input totals show none failed (README.md)."""
    for doc in lengths_files(folder).values():
        if doc.get("run") != run_id:
            continue
        errors = doc.get("errors") or [""] * len(doc["input_lens"])
        return tuple((i, o) for i, o, e in zip(doc["input_lens"], doc["output_lens"], errors,
                                               strict=True) if not e)
    return None


def lengths_pool(folder: Path = LENGTHS_DIR) -> dict[str, tuple[tuple[int, int], ...]]:
    """The (prompt, output) tokens of each request of the pool's runs (lengths/pool/: runs of
    the same sources outside the served set, kept for the spread of ShareGPT lengths), by
    file name; every request kept (no pool file marks one failed)."""
    return {name: tuple(zip(doc["input_lens"], doc["output_lens"], strict=True))
            for name, doc in lengths_files(folder).items() if name.startswith("pool/")}


def _rows(doc: Any, name: str) -> list[ServedRow]:
    if not isinstance(doc, dict):
        raise ServedDataError(f"{name}: the top level must be a mapping")
    _keys(doc, FILE_KEYS, FILE_OPTIONAL, name)
    source, rows = doc["source"], doc["rows"]
    if not isinstance(source, str) or not source.startswith("https://"):
        raise ServedDataError(f"{name}: source must be an https:// URL, got {source!r}")
    for key in ("title", "publisher"):
        if not isinstance(doc[key], str) or not doc[key].strip():
            raise ServedDataError(f"{name}: {key} must be a non-empty string")
    if not isinstance(rows, list) or not rows:
        raise ServedDataError(f"{name}: rows must be a non-empty list")
    accessed = doc["accessed"]
    if isinstance(accessed, datetime.date):  # YAML reads 2026-11-29 as a date
        accessed = accessed.isoformat()
    if not isinstance(accessed, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", accessed):
        raise ServedDataError(f"{name}: accessed must be an ISO date, got {accessed!r}")
    defaults = dict(doc.get("defaults") or {})
    _keys(defaults, set(), RUN_FIELDS, f"{name}: defaults")
    file_runs = doc.get("runs") or {}
    if not isinstance(file_runs, dict):
        raise ServedDataError(f"{name}: runs must be a mapping of run id to its configuration")
    for run_id, cfg in file_runs.items():
        if not isinstance(cfg, dict):
            raise ServedDataError(f"{name}: run {run_id!r} must be a mapping")
        _keys(cfg, set(), RUN_FIELDS, f"{name}: run {run_id!r}")
    inherited = {k: doc[k] for k in ("engine", "engine_version") if k in doc}
    file_notes = doc.get("notes")
    out = []
    for i, raw in enumerate(rows):
        if not isinstance(raw, dict):
            raise ServedDataError(f"{name}: row {i} must be a mapping")
        run_id = raw.get("run")
        if file_runs and run_id not in file_runs:
            raise ServedDataError(f"{name}: row {raw.get('id', i)!r} names run {run_id!r}, "
                                  "which the file's runs do not define")
        fields_ = {**inherited, **defaults, **(file_runs.get(run_id) or {}), **raw}
        where = f"{name}: row {fields_.get('id', i)!r}"
        _keys(fields_, ROW_KEYS, ROW_OPTIONAL, where)
        if fields_["engine_version"] == "unknown" and not (fields_.get("note") or file_notes):
            raise ServedDataError(f"{where}: engine_version 'unknown' needs a note saying why")
        rate = fields_["request_rate"]
        if rate == "inf":
            rate = math.inf
        out.append(ServedRow(
            source=source, title=doc["title"], publisher=doc["publisher"],
            accessed=accessed, file=name,
            unit=METRICS.get(fields_["metric"], ""),
            request_rate=rate,
            pp=fields_.get("pp", 1), dp=fields_.get("dp", 1),
            **{k: fields_.get(k) for k in ROW_OPTIONAL - {"pp", "dp"}},
            **{k: fields_[k] for k in ROW_KEYS - {"request_rate"}}))
    return out


def _keys(d: Mapping, required: set, optional: set, where: str) -> None:
    if not isinstance(d, Mapping):
        raise ServedDataError(f"{where}: must be a mapping")
    missing = sorted(required - d.keys())
    if missing:
        raise ServedDataError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(d.keys() - required - optional)
    if unknown:
        raise ServedDataError(f"{where}: unknown field(s) {', '.join(unknown)}")


def _check_row(row: ServedRow, models: set, gpus: set) -> None:
    where = f"{row.file}: row {row.id!r}"
    for key in ("id", "run"):
        if not isinstance(getattr(row, key), str) or not _SLUG.fullmatch(getattr(row, key)):
            raise ServedDataError(f"{where}: {key} must be a lower-case slug")
    if not isinstance(row.quote, str) or not row.quote.strip():
        raise ServedDataError(f"{where}: missing quote")
    if row.metric not in METRICS:
        raise ServedDataError(f"{where}: unknown metric {row.metric!r}; known: {', '.join(METRICS)}")
    if isinstance(row.value, bool) or not isinstance(row.value, (int, float)) or not row.value > 0:
        raise ServedDataError(f"{where}: value must be a positive number, got {row.value!r}")
    if not any(n == row.value for n in numbers_in(row.quote)):
        raise ServedDataError(f"{where}: value {row.value} is not a number in its quote {row.quote!r}")
    if row.per is not None and (row.per not in PER or row.metric not in THROUGHPUTS):
        raise ServedDataError(f"{where}: per must be 'gpu' on a throughput, got {row.per!r}")
    _check_config(row, where, models, gpus)


def _check_config(row: ServedRow, where: str, models: set, gpus: set) -> None:
    if row.engine not in ENGINES:
        raise ServedDataError(f"{where}: unknown engine {row.engine!r}; known: {', '.join(ENGINES)}")
    if not isinstance(row.engine_version, str) or not row.engine_version.strip():
        raise ServedDataError(f"{where}: engine_version must be a string (or 'unknown')")
    if row.hf_id is not None and (not isinstance(row.hf_id, str) or not _HF_ID.fullmatch(row.hf_id)):
        raise ServedDataError(f"{where}: hf_id must be a Hugging Face id (org/name), got {row.hf_id!r}")
    if row.model not in models and not (row.hf_id is not None and row.model == row.hf_id):
        raise ServedDataError(f"{where}: model {row.model!r} is not a kvcalc preset (or, for a model "
                              "without one, its hf_id)")
    if row.weights not in WEIGHTS:
        raise ServedDataError(f"{where}: unknown weights {row.weights!r}; known: {', '.join(WEIGHTS)}")
    if row.kv_dtype is not None and row.kv_dtype not in KV_DTYPES:
        raise ServedDataError(f"{where}: kv_dtype must be one of {KV_DTYPES}, got {row.kv_dtype!r}")
    if row.gpu not in gpus:
        raise ServedDataError(f"{where}: gpu {row.gpu!r} is not a kvcalc hardware preset")
    for key in ("gpus", "tp", "pp", "dp"):
        if not _count(getattr(row, key), 1):
            raise ServedDataError(f"{where}: {key} must be a whole number >= 1")
    if row.gpus != row.tp * row.pp * row.dp:
        raise ServedDataError(f"{where}: gpus {row.gpus} is not tp x pp x dp "
                              f"({row.tp} x {row.pp} x {row.dp})")
    if row.ep is not None and not (_count(row.ep, 1) and row.ep <= row.gpus):
        raise ServedDataError(f"{where}: ep must be a whole number from 1 to gpus")
    if row.client not in CLIENTS:
        raise ServedDataError(f"{where}: unknown client {row.client!r}; known: {', '.join(CLIENTS)}")
    if row.dataset not in DATASETS:
        raise ServedDataError(f"{where}: unknown dataset {row.dataset!r}; known: {', '.join(DATASETS)}")
    lengths = (row.input_len, row.output_len)
    if row.dataset == "sharegpt" and lengths != (None, None):
        raise ServedDataError(f"{where}: ShareGPT requests keep their own lengths: input_len and "
                              "output_len must be null")
    if row.dataset != "sharegpt" and not all(_count(n, 1) for n in lengths):
        raise ServedDataError(f"{where}: a {row.dataset} dataset needs input_len and output_len >= 1")
    if row.range_ratio is not None and (isinstance(row.range_ratio, bool)
                                        or not isinstance(row.range_ratio, (int, float))
                                        or not 0 <= row.range_ratio <= 1):
        raise ServedDataError(f"{where}: range_ratio must be a number from 0 to 1")
    for key in ("num_prompts", "concurrency", "completed"):
        if getattr(row, key) is not None and not _count(getattr(row, key), 1):
            raise ServedDataError(f"{where}: {key} must be a whole number >= 1 or null")
    for key in ("total_input_tokens", "total_output_tokens"):
        if getattr(row, key) is not None and not _count(getattr(row, key), 0):
            raise ServedDataError(f"{where}: {key} must be a whole number or null")
    if row.completed is not None and row.num_prompts is not None and row.completed > row.num_prompts:
        raise ServedDataError(f"{where}: completed {row.completed} exceeds num_prompts {row.num_prompts}")
    rate = row.request_rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ServedDataError(f"{where}: request_rate must be a positive number or 'inf', got {rate!r}")
    if row.prefix_caching is not None and not isinstance(row.prefix_caching, bool):
        raise ServedDataError(f"{where}: prefix_caching must be true, false or absent")
    for key in ("server", "where", "note", "excluded"):
        value = getattr(row, key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ServedDataError(f"{where}: {key} must be a non-empty string or absent")
    if row.engine_options is not None:
        from kvcalc.serving.flags import OWNER

        if not isinstance(row.engine_options, dict):
            raise ServedDataError(f"{where}: engine_options must be a mapping")
        for key in row.engine_options:
            if row.engine not in OWNER.get(key, ()):
                raise ServedDataError(f"{where}: engine_options: {key!r} is not a "
                                      f"{row.engine} setting kvcalc takes")


def _count(x: Any, minimum: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= minimum


# The dataclass and the schema's field lists must agree (a field added to one and not the
# other would be silently dropped or fail at construction).
assert {f.name for f in fields(ServedRow)} == (
    ROW_KEYS | ROW_OPTIONAL | {"source", "title", "publisher", "accessed", "file", "unit"})
