"""The sweep as CSV: each chunk's lines built as blocks of bytes, streamed in order.

The lines are those of `report.csv_json.rows_to_csv` for the same rows, byte for
byte: integers exact, floats with twelve significant digits (format(x, ".12g"),
see kvcalc.sweep.csvtext), True/False and names as Python's csv writer puts them.
Memory stays bounded whatever the number of rows: a chunk at a time.
"""

from __future__ import annotations

import csv
import io
from typing import IO, Callable, Sequence

import numpy as np

from kvcalc.report.csv_json import cell
from kvcalc.sweep import csvtext
from kvcalc.sweep.compute import CHUNK_ROWS, Chunk, in_order
from kvcalc.sweep.plan import FLOAT_COLUMNS, SweepPlan


def _csv_text(values: Sequence) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([cell(v) for v in values])
    return buf.getvalue()[:-1]


def csv_header(plan: SweepPlan) -> bytes:
    return (_csv_text(plan.columns) + "\n").encode()


def _runs(col: np.ndarray, field) -> np.ndarray:
    """field(col), formatting each run of equal values once (seq_len repeats per
    batch, and so does everything that depends on seq_len alone)."""
    n = len(col)
    change = np.flatnonzero(col[1:] != col[:-1]) + 1 if n > 1 else np.zeros(0, np.int64)
    if len(change) > n // 4:
        return field(col)
    starts = np.concatenate(([0], change))
    return np.repeat(field(col[starts]), np.diff(np.concatenate((starts, [n]))), axis=0)


def _batch_text(chunk: Chunk) -> np.ndarray:
    """The batch column: its values cycle, so format the SPEC's values once and index."""
    spec = chunk.plan.batch
    n = len(chunk)
    if spec.count >= n:
        return csvtext.int_field(chunk.batch)
    table = csvtext.int_field(spec.at(np.arange(spec.count)))
    return table[(np.arange(chunk.start, chunk.start + n)) % spec.count]


def _words(flags: np.ndarray, yes: bytes, no: bytes) -> np.ndarray:
    return np.where(flags, yes, no).view(np.uint8).reshape(len(flags), -1)


def _int_block(col: np.ndarray, formatted: list) -> np.ndarray:
    """csvtext.int_field(col), reusing the block of an equal column already formatted
    (the cache total, the full-attention total and the per-device share are often the
    same numbers)."""
    for seen, block in formatted:
        if seen.dtype == col.dtype and np.array_equal(seen, col):
            return block
    block = csvtext.int_field(col)
    formatted.append((col, block))
    return block


def chunk_csv(chunk: Chunk) -> np.ndarray:
    """The CSV lines of a chunk (no header) as a uint8 array: each field a block of
    bytes (kvcalc.sweep.csvtext), constant fields and separators literal runs, joined
    row by row."""
    consts = chunk.combo.constants
    blocks: list = []
    literal: list[str] = []
    formatted: list[tuple[np.ndarray, np.ndarray]] = []
    for i, name in enumerate(chunk.plan.columns):
        sep = "," if i else ""
        if name in consts:
            literal.append(sep + _csv_text([consts[name]]))
            continue
        literal.append(sep)
        blocks.append(csvtext.literal_field("".join(literal)))
        literal = []
        if name == "seq_len":
            blocks.append(_runs(chunk.seq_len, csvtext.int_field))
        elif name == "batch":
            blocks.append(_batch_text(chunk))
        elif name == "roofline_bound":
            blocks.append(_words(chunk.values[name], b"memory", b"compute"))
        elif name in ("fits", "floor_fits"):
            blocks.append(_words(chunk.values[name], b"True", b"False"))
        elif name in FLOAT_COLUMNS:
            blocks.append(_runs(chunk.values[name], csvtext.float_field))
        else:
            blocks.append(_int_block(chunk.values[name], formatted))
    literal.append("\n")
    blocks.append(csvtext.literal_field("".join(literal)))
    return csvtext.join_rows(blocks, len(chunk))


def write_csv(plan: SweepPlan, out: IO[bytes], header: bool = True,
              progress: Callable[[Chunk], None] | None = None,
              chunk_rows: int = CHUNK_ROWS, threads: int | None = None) -> int:
    """Stream the sweep as CSV to a binary file object; returns the rows written.

    The pool computes and formats the next chunks while this thread writes (the page
    cache, a pipe), so the writes overlap the arithmetic. `progress` is called after
    each chunk is written, with the chunk, in the calling thread.
    """
    rows = 0
    if header:
        out.write(csv_header(plan))
    for chunk, text in in_order(plan, chunk_csv, chunk_rows, threads):
        out.write(memoryview(text))
        rows += len(chunk)
        if progress is not None:
            progress(chunk)
    return rows
