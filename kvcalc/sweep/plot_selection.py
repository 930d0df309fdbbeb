"""What `kvcalc sweep --plot` draws, gathered while the rows stream past.

Only the rows the plot shows are kept (a few thousand points, whatever the size of
the sweep); kvcalc.plot draws them.
"""

from __future__ import annotations

import numpy as np

from kvcalc.ground.record import record
from kvcalc.spec import base_name
from kvcalc.sweep.compute import Chunk
from kvcalc.sweep.plan import Combo, SweepPlan


@record(frozen=False)
class Series:
    """One line of the sweep plot: KV cache per device against x for one variant."""

    kv_heads: int
    attention: str  # MHA / GQA / MQA / MLA
    fixed: int  # the batch (x = seq_len) or the seq_len (x = batch) of this line
    x: np.ndarray
    y: np.ndarray  # kv_cache_bytes_per_device
    free_bytes: int | None  # device memory after this variant's weights, per device


class PlotSelection:
    """Picks the rows `--plot` shows and keeps only those (a few thousand points).

    The first kv_dtype and tp of the sweep; x is seq_len (or batch when a single
    seq_len is swept); one line per K/V-head count, at the largest batch swept
    (against batch: at the first seq_len).
    """

    def __init__(self, plan: SweepPlan):
        self.plan = plan
        first = plan.combos[0]
        self.kv_dtype, self.tp = first.workload.kv_dtype.name, first.workload.tp
        self.x = "seq_len" if plan.seq_len.count > 1 or plan.batch.count == 1 else "batch"
        if self.x == "seq_len":
            self.lines = [plan.batch.max]
        else:
            self.lines = [plan.seq_len.first]
        self._parts: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        self._combos: dict[int, Combo] = {}

    def add(self, chunk: Chunk) -> None:
        c = chunk.combo
        if c.workload.kv_dtype.name != self.kv_dtype or c.workload.tp != self.tp:
            return
        self._combos[c.kv_heads] = c
        y = chunk.values["kv_cache_bytes_per_device"]
        if self.x == "seq_len":
            for b in self.lines:
                mask = chunk.batch == b
                if mask.any():
                    part = (chunk.seq_len[mask], y[mask])
                    self._parts.setdefault((c.kv_heads, b), []).append(part)
        else:
            self._parts.setdefault((c.kv_heads, self.lines[0]), []).append((chunk.batch, y))

    def series(self) -> list[Series]:
        out = []
        for (g, fixed), parts in self._parts.items():
            x = np.concatenate([p[0] for p in parts])
            y = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in parts])
            order = np.argsort(x, kind="stable")
            c = self._combos[g]
            out.append(Series(kv_heads=g, attention=c.constants["attention"], fixed=fixed,
                              x=x[order], y=y[order],
                              free_bytes=c.free_bytes if self.plan.hardware is not None else None))
        return sorted(out, key=lambda s: (-s.kv_heads, s.fixed))

    @property
    def title(self) -> str:
        p = self.plan
        other = "batch" if self.x == "seq_len" else "seq_len"
        fixed = ", ".join(f"{v:,}" for v in self.lines)
        against = "context" if self.x == "seq_len" else "batch"
        parts = [f"{base_name(p.spec.name)}: KV cache per device vs {against}",
                 f"{other} {fixed}, KV {self.kv_dtype}, weights {p.weight_dtype}, tp {self.tp}"]
        if p.hardware is not None:
            parts[-1] += f", {p.hardware.name}"
        return "\n".join(parts)
