"""Published GPU speed measurements (tests/data/published/*.yaml) read into typed rows.

Figures others measured and published (tokens/s, ms per token, time to first token,
achieved GB/s), each with its source, the quoted table row and the configuration it
ran, for checking kvcalc's latency model (issues #23 and #26). Plain data and checks
only: nothing here predicts anything. The schema is in tests/data/published/README.md.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yamlload

from kvcalc.presets import hardware_names, model_names

TESTS_DIR = Path(__file__).parent
PUBLISHED_DIR = TESTS_DIR / "data" / "published"

ENGINES = ("vllm", "sglang", "tensorrt-llm", "llama.cpp", "transformers", "exllamav2",
           "mlc-llm", "gpt-fast", "autoawq")
# Each metric with the unit its value is published in (values are kept as published).
METRICS = {
    "decode_tokens_per_s": "tokens/s",
    "prefill_tokens_per_s": "tokens/s",
    "ms_per_token": "ms",
    "ttft_ms": "ms",
    "request_latency_ms": "ms",  # a whole batch: prefill and every decode step
    "request_latency_s": "s",  # the same, published in seconds
    "ttft_s": "s",  # time to first token, published in seconds
    "s_per_token": "s",  # time per output token, published in seconds
    # one request's output tokens over its whole time, prefill included (trtllm-bench)
    "output_tokens_per_s": "tokens/s",
    "achieved_bytes_per_s": "GB/s",  # 1e9 bytes per second
}
PER = ("sequence", "batch")  # tokens/s of one sequence, or summed over the batch
WEIGHTS = ("fp16", "bf16", "fp8", "int8", "int4", "q4_0", "q4_k_m", "q8_0", "awq", "gptq",
           "bnb-int8", "bnb-4bit", "mxfp4")
_EXL2 = re.compile(r"exl2-(\d+(?:\.\d+)?)$")  # ExLlamaV2's average bits per weight

FILE_KEYS = {"source", "title", "accessed", "engine", "rows"}
FILE_OPTIONAL = {"engine_version", "setting", "notes", "defaults"}
ROW_KEYS = {"id", "quote", "engine", "engine_version", "model", "weights", "gpu", "gpus",
            "batch", "prompt_len", "gen_len", "metric", "value"}
ROW_OPTIONAL = {"per", "unit", "bits_per_weight", "group_size", "kernel", "kv_dtype", "note",
                "excluded"}
KV_DTYPES = ("fp16", "bf16", "fp8", "int8")


class PublishedDataError(ValueError):
    """A published-measurement file breaks the schema."""


@dataclass(frozen=True)
class PublishedRow:
    """One measured figure and the configuration it was measured on."""

    id: str
    source: str          # URL of the page or file the figure was read in
    title: str
    accessed: str        # ISO date the source was read
    quote: str           # the table row or sentence, verbatim
    engine: str          # one of ENGINES
    engine_version: str | None
    model: str           # a kvcalc model preset, or a config path under tests/
    weights: str         # checkpoint format: one of WEIGHTS or exl2-<bpw>
    bits_per_weight: float | None  # where the format defines it
    group_size: int | None         # weights per scale, for grouped int formats
    kernel: str | None             # the engine's kernel choice, where the source names it
    gpu: str             # a kvcalc hardware preset
    gpus: int            # GPUs the model is split over (tensor parallel)
    batch: int           # sequences decoded together
    prompt_len: int | None  # tokens, as the source states
    gen_len: int | None     # tokens generated, as the source states
    metric: str          # one of METRICS
    value: float         # as published, in `unit`
    unit: str
    per: str | None      # "sequence" or "batch" (required for tokens/s metrics)
    note: str | None     # an assumption the source does not settle
    file: str            # the YAML file's name
    kv_dtype: str | None = None   # the KV cache's dtype where the source sets one (else 16-bit)
    # Why the row is kept out of the scored set (a configuration the source leaves open,
    # or a figure that cannot be the configuration's): it is still loaded and reported.
    excluded: str | None = None


def load(folder: Path = PUBLISHED_DIR) -> list[PublishedRow]:
    """Every row of every YAML file in `folder`, validated."""
    documents = {}
    for path in sorted(folder.glob("*.yaml")):
        with path.open(encoding="utf-8") as f:
            documents[path.name] = yamlload.safe_load(f)
    return validate(documents)


def validate(documents: Mapping[str, Any]) -> list[PublishedRow]:
    """The rows of `documents` (file name -> parsed YAML), or PublishedDataError naming
    the file, the row and what is wrong: a missing or unknown field, an unknown metric,
    engine or weight format, a gpu or model kvcalc does not know, a duplicate id, a
    value that is not a positive number, an empty quote, a source that is not a URL."""
    models, gpus = set(model_names()), set(hardware_names())
    rows: list[PublishedRow] = []
    seen: dict[str, str] = {}
    for name, doc in documents.items():
        for row in _rows(doc, name):
            _check_row(row, models, gpus)
            if row.id in seen:
                raise PublishedDataError(
                    f"{name}: duplicate id {row.id!r} (also in {seen[row.id]})")
            seen[row.id] = name
            rows.append(row)
    return rows


def decode_ms_per_token(row: PublishedRow) -> float:
    """Milliseconds per decode step: what kvcalc's time per output token predicts.

    tokens/s of one sequence is one token per step, 1000/value; tokens/s summed over
    a batch of b is b tokens per step, 1000*b/value; seconds per token, 1000*value."""
    if row.metric == "ms_per_token":
        return row.value
    if row.metric == "s_per_token":
        return 1000 * row.value
    if row.metric != "decode_tokens_per_s":
        raise ValueError(f"{row.id} is a {row.metric} figure, not a decode speed")
    tokens_per_step = row.batch if row.per == "batch" else 1
    return 1000 * tokens_per_step / row.value


def _rows(doc: Any, name: str) -> list[PublishedRow]:
    if not isinstance(doc, dict):
        raise PublishedDataError(f"{name}: the top level must be a mapping")
    _keys(doc, FILE_KEYS, FILE_OPTIONAL, name)
    source, rows = doc["source"], doc["rows"]
    if not isinstance(source, str) or not source.startswith("https://"):
        raise PublishedDataError(f"{name}: source must be an https:// URL, got {source!r}")
    if not isinstance(rows, list) or not rows:
        raise PublishedDataError(f"{name}: rows must be a non-empty list")
    accessed = doc["accessed"]
    if isinstance(accessed, datetime.date):  # YAML reads 2026-11-26 as a date
        accessed = accessed.isoformat()
    defaults = dict(doc.get("defaults") or {})
    inherited = {"engine": doc["engine"], "engine_version": doc.get("engine_version")}
    out = []
    for i, raw in enumerate(rows):
        if not isinstance(raw, dict):
            raise PublishedDataError(f"{name}: row {i} must be a mapping")
        fields = {**inherited, **defaults, **raw}
        where = f"{name}: row {fields.get('id', i)!r}"
        _keys(fields, ROW_KEYS, ROW_OPTIONAL, where)
        out.append(PublishedRow(
            source=source, title=doc["title"], accessed=str(accessed), file=name,
            unit=fields.get("unit") or METRICS.get(fields["metric"], ""),
            per=fields.get("per"), bits_per_weight=fields.get("bits_per_weight"),
            group_size=fields.get("group_size"), kernel=fields.get("kernel"),
            note=fields.get("note"), kv_dtype=fields.get("kv_dtype"),
            excluded=fields.get("excluded"),
            **{k: fields[k] for k in ROW_KEYS}))
    return out


def _keys(d: Mapping, required: set, optional: set, where: str) -> None:
    missing = sorted(required - d.keys())
    if missing:
        raise PublishedDataError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(d.keys() - required - optional)
    if unknown:
        raise PublishedDataError(f"{where}: unknown field(s) {', '.join(unknown)}")


def _check_row(row: PublishedRow, models: set, gpus: set) -> None:
    where = f"{row.file}: row {row.id!r}"
    if not isinstance(row.id, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", row.id):
        raise PublishedDataError(f"{where}: id must be a lower-case slug")
    if not isinstance(row.quote, str) or not row.quote.strip():
        raise PublishedDataError(f"{where}: missing quote")
    if row.engine not in ENGINES:
        raise PublishedDataError(f"{where}: unknown engine {row.engine!r}; known: {', '.join(ENGINES)}")
    if row.metric not in METRICS:
        raise PublishedDataError(f"{where}: unknown metric {row.metric!r}; known: {', '.join(METRICS)}")
    if row.unit != METRICS[row.metric]:
        raise PublishedDataError(f"{where}: {row.metric} is published in {METRICS[row.metric]}, got {row.unit!r}")
    if row.metric.endswith("tokens_per_s") and row.per is None:
        raise PublishedDataError(f"{where}: a tokens/s figure needs per: sequence or batch")
    if row.per is not None and row.per not in PER:
        raise PublishedDataError(f"{where}: per must be one of {PER}, got {row.per!r}")
    if row.gpu not in gpus:
        raise PublishedDataError(f"{where}: gpu {row.gpu!r} is not a kvcalc hardware preset")
    if row.model not in models and not _is_test_config(row.model):
        raise PublishedDataError(f"{where}: model {row.model!r} is not a kvcalc preset or a config under tests/")
    _check_weights(row, where)
    if row.kv_dtype is not None and row.kv_dtype not in KV_DTYPES:
        raise PublishedDataError(f"{where}: kv_dtype must be one of {KV_DTYPES}, got {row.kv_dtype!r}")
    if row.excluded is not None and (not isinstance(row.excluded, str) or not row.excluded.strip()):
        raise PublishedDataError(f"{where}: excluded must say why")
    if isinstance(row.value, bool) or not isinstance(row.value, (int, float)) or not row.value > 0:
        raise PublishedDataError(f"{where}: value must be a positive number, got {row.value!r}")
    for key in ("gpus", "batch"):
        if not _count(getattr(row, key), minimum=1):
            raise PublishedDataError(f"{where}: {key} must be a whole number >= 1")
    for key in ("prompt_len", "gen_len"):
        length = getattr(row, key)
        if length is not None and not _count(length, minimum=0):
            raise PublishedDataError(f"{where}: {key} must be a whole number >= 0 or null")


def _check_weights(row: PublishedRow, where: str) -> None:
    exl2 = _EXL2.match(row.weights) if isinstance(row.weights, str) else None
    if row.weights not in WEIGHTS and not exl2:
        raise PublishedDataError(f"{where}: unknown weights {row.weights!r}; known: {', '.join(WEIGHTS)}, exl2-<bpw>")
    if exl2 and row.bits_per_weight != float(exl2.group(1)):
        raise PublishedDataError(f"{where}: {row.weights} is {exl2.group(1)} bits per weight")
    bpw = row.bits_per_weight
    if bpw is not None and (isinstance(bpw, bool) or not isinstance(bpw, (int, float)) or bpw <= 0):
        raise PublishedDataError(f"{where}: bits_per_weight must be a positive number or absent")
    if row.group_size is not None and not _count(row.group_size, minimum=1):
        raise PublishedDataError(f"{where}: group_size must be a whole number >= 1")


def _count(x: Any, minimum: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= minimum


def _is_test_config(model: str) -> bool:
    # a path such as tests/data/golden/config-X.json, found beside this module
    if not isinstance(model, str) or not model.startswith("tests/"):
        return False
    return (TESTS_DIR / model.removeprefix("tests/")).is_file()


def check_feature_rows(rows: Mapping[str, Mapping]) -> None:
    """A launch feature's published rows (tests/data/lora, tests/data/prefix): at least one
    scored, each cited (a URL and the quoted figures), each unscored one saying why, each
    scored one on a model and GPU kvcalc has presets for."""
    from kvcalc.presets import load_hardware, load_model

    assert any(r["scored"] for r in rows.values())
    for name, row in rows.items():
        assert row["source"].startswith("https://") and row["quoted"].strip(), name
        assert row["scored"] or row["why"], name
        if row["scored"]:
            load_model(row["model"]), load_hardware(row["gpu"])
