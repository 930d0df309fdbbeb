"""The sweep as Parquet: one row group per chunk, zstd, ints as int64 (needs pyarrow).

pyarrow is imported only when a Parquet file is written.
"""

from __future__ import annotations

from typing import IO, Callable

from kvcalc.errors import KvcalcError
from kvcalc.sweep.compute import CHUNK_ROWS, Chunk, in_order
from kvcalc.sweep.grammar import INT64_MAX
from kvcalc.sweep.plan import SweepPlan

PARQUET_MISSING = "Parquet output needs pyarrow: pip install 'kvcalc[parquet]'"


def has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def _arrow_table(chunk: Chunk):
    import pyarrow as pa

    columns = {}
    for name in chunk.plan.columns:
        if name in chunk.combo.constants:
            value = chunk.combo.constants[name]
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
                raise KvcalcError(f"{name} = {value:,} does not fit Parquet's 64-bit integers; "
                                  "write CSV (-o FILE.csv), which holds any integer")
            columns[name] = pa.repeat(value, len(chunk))
            continue
        col = chunk.column(name)
        if col.dtype == object:
            raise KvcalcError(f"{name} exceeds 64-bit integers in this sweep, which Parquet "
                              "cannot hold; write CSV (-o FILE.csv), which holds any integer")
        columns[name] = pa.array(col)
    return pa.table(columns)


def write_parquet(plan: SweepPlan, out: IO[bytes],
                  progress: Callable[[Chunk], None] | None = None,
                  chunk_rows: int = CHUNK_ROWS, threads: int | None = None) -> int:
    """Stream the sweep as Parquet (one row group per chunk, zstd) to a binary file
    object; returns the rows written. Needs pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise KvcalcError(PARQUET_MISSING) from None
    rows = 0
    writer = None
    try:
        for chunk, table in in_order(plan, _arrow_table, chunk_rows, threads):
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema, compression="zstd")
            elif table.schema != writer.schema:
                table = table.cast(writer.schema)
            writer.write_table(table)
            rows += len(chunk)
            if progress is not None:
                progress(chunk)
    finally:
        if writer is not None:
            writer.close()
    return rows
