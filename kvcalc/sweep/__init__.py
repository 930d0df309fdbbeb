"""Sweeps: `estimate()` over a grid of configurations, computed column-wise with numpy.

A sweep is the product of SPECs: seq_len x batch x kv_heads x kv_dtype x tp. Its rows
are exactly `estimate(...).as_row()` for each configuration (same columns, same order,
same values), computed on whole arrays a chunk at a time:

    grammar.py         the SPEC grammar (no numpy: `kvcalc measure` reads SPECs too)
    plan.py            the plan: SPECs checked, one Combo per (kv_heads, kv_dtype, tp)
    compute.py         the rows, chunk by chunk (row_columns: the formulas on arrays), in threads
    csvtext.py         numpy columns to CSV text (exact ints, floats as ".12g")
    csv.py             the CSV stream;  parquet.py: the Parquet file (pyarrow)
    plot_selection.py  the rows `--plot` draws, kept while the rest streams past
    answer.py          `kvcalc sweep` as a library function (SweepAnswer)

The package is also that function: `kvcalc.sweep(model=..., seq_len=...)` calls
kvcalc.sweep.answer.sweep, while `kvcalc.sweep.sweep_frame` and the rest stay here.

The Python API below is loaded on first use (PEP 562), so that importing the
package, or its grammar alone, imports no numpy.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# name -> submodule it comes from, imported when first asked for
_API = {
    "parse_spec": "kvcalc.sweep.grammar",
    "plan_sweep": "kvcalc.sweep.plan",
    "chunks": "kvcalc.sweep.compute",
    "iter_rows": "kvcalc.sweep.compute",
    "sweep_frame": "kvcalc.sweep.compute",
    "write_csv": "kvcalc.sweep.csv",
    "write_parquet": "kvcalc.sweep.parquet",
    "SweepAnswer": "kvcalc.sweep.answer",
}

__all__ = sorted(_API)


class _Sweep(types.ModuleType):
    """kvcalc.sweep: this package, and called, the function kvcalc.sweep.answer.sweep.
    Importing a submodule binds the package on kvcalc as `sweep`, so the function cannot
    take that name there; the package answers calls for it instead."""

    def __call__(self, *args, **parameters):
        from kvcalc.sweep.answer import sweep

        return sweep(*args, **parameters)

    @property
    def __signature__(self):  # the function's, for help() and inspect
        import inspect

        from kvcalc.sweep.answer import sweep

        return inspect.signature(sweep)


sys.modules[__name__].__class__ = _Sweep


def __getattr__(name: str) -> Any:
    if name == "sweep":  # kvcalc's lazy table names kvcalc.sweep by its `sweep`: itself
        return sys.modules[__name__]
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcalc.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
