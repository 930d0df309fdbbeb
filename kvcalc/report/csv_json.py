"""Rows as machine-readable text: CSV and JSON.

Bytes stay exact ints. Floats in CSV carry twelve significant digits
(format(x, ".12g")), the text `kvcalc sweep` writes too (kvcalc.sweep.csvtext is its
vectorised form); JSON carries every float in full.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

# Twelve significant digits, not the shortest round-trip repr: the repr of a double
# costs ~20 times more to produce, and the float columns (seconds, tokens/s, FLOP/byte
# ratios) derive from integers that the same row carries exactly.
FLOAT_DIGITS = 12


def format_float(x: float) -> str:
    """The text a float column carries (scalar; csvtext.float_field is the array form)."""
    return format(x, f".{FLOAT_DIGITS}g")


def cell(value):
    """A value as the CSV writer should see it: floats as their text, the rest as is."""
    return format_float(value) if isinstance(value, float) else value


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'params': {'total': 1}} -> {'params_total': 1}, for CSV columns."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}_"))
        elif isinstance(value, (list, tuple)):
            out[name] = "; ".join(map(str, value))
        else:
            out[name] = value
    return out


def rows_to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """CSV with a header from the union of the rows' keys, in first-seen order.

    Floats carry twelve significant digits (`cell`), as in `kvcalc sweep`."""
    import csv  # each format imports only its own writer: start-up time
    import io

    rows = [{k: cell(v) for k, v in flatten(r).items()} for r in rows]
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2, default=_json_default, allow_nan=False) + "\n"
