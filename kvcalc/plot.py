"""Figures for `kvcalc sweep --plot` and `kvcalc measure --plot` (matplotlib, optional).

matplotlib is the `plot` extra: it is imported inside the functions, never at
import time, and a missing install is a one-line KvcalcError. Figures are built
on matplotlib.figure.Figure (no pyplot, no global state, no GUI backend) and
written atomically with report.files.atomic_write (no overwrite unless force).
Axes carry units; byte ticks are decimal (GB = 10^9) and say so.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from kvcalc.errors import KvcalcError

_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
_SERIES_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


MISSING = "--plot needs matplotlib, the plot extra: pip install 'kvcalc[plot]'"


def check_plot_name(path: str | os.PathLike) -> None:
    """A plot file name kvcalc can draw (.png, .svg, .pdf), or a KvcalcError."""
    if Path(path).suffix.lower() not in _FORMATS:
        raise KvcalcError(f"--plot {path}: use a .png, .svg or .pdf file name")


def has_matplotlib() -> bool:
    """Whether matplotlib can be imported (found without importing it)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def require_matplotlib(path: str | os.PathLike) -> None:
    """Fail before any work if the plot cannot be drawn: a bad suffix or no matplotlib."""
    check_plot_name(path)
    if not has_matplotlib():
        raise KvcalcError(MISSING)


def _figure(**kwargs):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise KvcalcError("plotting needs matplotlib: pip install 'kvcalc[plot]'") from None
    return Figure(**kwargs)


def _save(fig, path: str | os.PathLike, force: bool) -> Path:
    from kvcalc.report.files import atomic_write

    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise KvcalcError(f"cannot tell the image format of {path}: use .png, .svg or .pdf")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight")
    return atomic_write(path, buf.getvalue(), force)


# --------------------------------------------------------------------------------
# Tick labels with units
# --------------------------------------------------------------------------------
def _si(value: float, unit: str, base: float = 1000.0,
        prefixes: tuple[str, ...] = ("", "k", "M", "G", "T", "P", "E")) -> str:
    if value <= 0:
        return f"0 {unit}".strip()
    i = 0
    while i + 1 < len(prefixes) and abs(value) >= base ** (i + 1) * 0.9995:
        i += 1
    return f"{value / base ** i:.3g} {prefixes[i]}{unit}".strip()


def bytes_label(value: float, _pos=None) -> str:
    """1e9 -> '1 GB' (decimal units)."""
    return _si(value, "B", prefixes=("", "k", "M", "G", "T", "P", "E"))


def rate_label(value: float, _pos=None) -> str:
    """3.35e12 -> '3.35 TB/s'."""
    return _si(value, "B/s")


def tokens_label(value: float, _pos=None) -> str:
    """1024 -> '1K', 131072 -> '128K', 1048576 -> '1M' (binary K/M, as context sizes are named)."""
    if value >= 1 << 20:
        return f"{value / (1 << 20):.4g}M"
    if value >= 1 << 10:
        return f"{value / (1 << 10):.4g}K"
    return f"{value:.4g}"


def seconds_label(value: float, _pos=None) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= size * 0.9995:
            return f"{value / size:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def _log_axis(axis, formatter, base: float = 10) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=base, numticks=12))
    axis.set_major_formatter(FuncFormatter(formatter))
    axis.set_minor_formatter(NullFormatter())


# --------------------------------------------------------------------------------
# kvcalc sweep --plot
# --------------------------------------------------------------------------------
_LINE_STYLES = ("-", (0, (1, 1.5)), (0, (5, 1, 1, 1)))
# tab10 without its red, which marks "does not fit".
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
            "#7f7f7f", "#bcbd22", "#000080")


def plot_sweep(selection, path: str | os.PathLike, force: bool = False) -> Path:
    """KV cache per device against context (or batch) for each K/V-head count, log-log.

    `selection` is a kvcalc.sweep.plot_selection.PlotSelection filled from the sweep's chunks.
    With hardware, the device's memory left after the weights is a dashed line
    (one per variant when they differ by more than 2%) and the band above it,
    where the cache does not fit, is shaded.
    """
    series = selection.series()
    if not series:
        raise KvcalcError("nothing to plot: the sweep produced no rows for the plot")
    fig = _figure(figsize=(9, 5.6))
    ax = fig.add_subplot()
    heads = sorted({s.kv_heads for s in series}, reverse=True)
    colour = {g: _PALETTE[i % len(_PALETTE)] for i, g in enumerate(heads)}
    fixed_values = sorted({s.fixed for s in series}, reverse=True)
    style = {v: _LINE_STYLES[min(i, len(_LINE_STYLES) - 1)] for i, v in enumerate(fixed_values)}
    other = "batch" if selection.x == "seq_len" else "seq_len"

    mla = selection.plan.spec.mla  # MLA sweeps have one variant: no K/V heads to vary
    ys = []
    for s in series:
        label = _variant_label(s, mla)
        if len(fixed_values) > 1:
            label += f", {other} {s.fixed:,}"
        # Distinct markers too, so variants that coincide (replicated heads under TP) show.
        marker = _SERIES_MARKERS[heads.index(s.kv_heads) % len(_SERIES_MARKERS)]
        ax.plot(s.x, s.y, color=colour[s.kv_heads], linestyle=style[s.fixed], marker=marker,
                markersize=4 if len(s.x) <= 24 else 0, markerfacecolor="none", linewidth=1.8,
                label=label)
        ys.extend([float(s.y.min()), float(s.y.max())])
    # Points that do not fit beside their own variant's weights (the CSV's `floor_fits`).
    labelled = False
    for s in series:
        if s.free_bytes is None:
            continue
        over = s.y > s.free_bytes
        if over.any():
            ax.scatter(s.x[over], s.y[over], marker="x", s=28, color="#d62728", zorder=5,
                       label=None if labelled else "does not fit beside the weights")
            labelled = True

    # Device memory after weights: one line, or one per variant if they differ by > 10%.
    hw = selection.plan.hardware
    frees = {s.kv_heads: s.free_bytes for s in series if s.free_bytes is not None}
    positive = {g: f for g, f in frees.items() if f > 0}
    if hw is not None and positive:
        lo, hi = min(positive.values()), max(positive.values())
        where = f"{hw.name} memory after weights" + (" (per device)" if selection.tp > 1 else "")
        if hi <= lo * 1.10:
            span = bytes_label(lo) if bytes_label(lo) == bytes_label(hi) else \
                f"{bytes_label(lo)} to {bytes_label(hi)}"
            ax.axhline(lo, color="black", linestyle="--", linewidth=1.4, label=f"{where}: {span}")
        else:
            for g, f in sorted(positive.items(), reverse=True):
                kind = next(s.attention for s in series if s.kv_heads == g)
                ax.axhline(f, color=colour[g], linestyle="--", linewidth=1.2,
                           label=f"{where}, {kind}-{g}: {bytes_label(f)}")
        ys.extend([lo, hi])
    elif hw is not None and frees:
        ax.text(0.01, 0.985, f"the weights alone exceed {hw.name} memory at tp {selection.tp}",
                transform=ax.transAxes, ha="left", va="top", fontsize=8, color="#a01010")

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ymin, ymax = min(ys), max(ys)
    ax.set_ylim(ymin / 1.6, ymax * 2.5)
    _log_axis(ax.xaxis, tokens_label if selection.x == "seq_len" else
              (lambda v, _p=None: f"{v:,.0f}"), base=2)
    _log_axis(ax.yaxis, bytes_label)
    if selection.x == "seq_len":
        ax.set_xlabel("context length (tokens, seq_len; K = 1,024)")
    else:
        ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("KV cache per device (bytes; GB = 10^9)")
    ax.set_title(selection.title, fontsize=10.5, loc="left")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.92)
    return _save(fig, path, force)


def _variant_label(s, mla) -> str:
    """'GQA: 8 K/V heads'; for MLA the cached latent, since its `heads` K/V heads
    (what the spec's kv_heads holds) are decompressed per step, never cached."""
    if mla is not None:
        return f"MLA latent (kv_lora_rank {mla.kv_lora_rank} + rope {mla.rope_dim})"
    return f"{s.attention}: {s.kv_heads} K/V head{'s' if s.kv_heads != 1 else ''}"


# --------------------------------------------------------------------------------
# kvcalc measure --plot
# --------------------------------------------------------------------------------
def _kind(kv_heads: Any, heads: Any) -> str:
    try:
        g, h = int(kv_heads), int(heads)
    except (TypeError, ValueError):
        return "?"
    return "MHA" if g == h else "MQA" if g == 1 else "GQA"


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def plot_measure(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike,
                 force: bool = False) -> Path:
    """Two panels from `kvcalc measure` rows.

    Left: measured median time against the predicted (roofline) time, log-log,
    with the y = x line (on it: the prediction is met; above: slower).
    Right: achieved bandwidth against KV-cache size for each variant (impl, K/V
    heads), with the measured bandwidth ceiling as a dashed line.
    Rows need kv_cache_bytes, median_s, predicted_s, achieved_bytes_per_s,
    ceiling_bytes_per_s, impl, kv_heads, heads, device and step; rows missing a
    positive number are left out.
    """
    rows = list(rows)
    variants: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        key = (str(r.get("step", "")), str(r.get("impl", "?")), r.get("kv_heads"), r.get("heads"))
        variants.setdefault(key, []).append(r)
    if not variants:
        raise KvcalcError("nothing to plot: no measured rows")

    # One subfigure per panel, so each legend can sit below its own axes: inside, the
    # left one (upper left) covered the slow points and the right one the large caches.
    # Constrained layout keeps "outside" legends clear of the tick and axis labels.
    fig = _figure(figsize=(13, 6.4), layout="constrained")
    panels = fig.subfigures(1, 2)
    left, right = (panel.add_subplot() for panel in panels)
    palette = _PALETTE
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    times: list[float] = []
    sizes: list[float] = []
    rates: list[float] = []

    steps = {key[0] for key in variants}

    def order(key):
        step, impl, g, h = key
        try:
            return (step, impl, -int(g))
        except (TypeError, ValueError):
            return (step, impl, 0)

    for i, key in enumerate(sorted(variants, key=order)):
        step, impl, g, h = key
        name = f"{step} {impl}" if len(steps) > 1 else impl
        label = f"{name}: {_kind(g, h)} ({g} K/V heads)" if g is not None else name
        colour, marker = palette[i % len(palette)], markers[i % len(markers)]
        pts = [(_number(r.get("predicted_s")), _number(r.get("median_s"))) for r in variants[key]]
        pts = [(p, m) for p, m in pts if p is not None and m is not None]
        if pts:
            left.scatter([p for p, _ in pts], [m for _, m in pts], color=colour, marker=marker,
                         s=22, label=label, alpha=0.85)
            times.extend(v for pt in pts for v in pt)
        bw = [(_number(r.get("kv_cache_bytes")), _number(r.get("achieved_bytes_per_s")))
              for r in variants[key]]
        bw = sorted((x, y) for x, y in bw if x is not None and y is not None)
        if bw:
            right.plot([x for x, _ in bw], [y for _, y in bw], color=colour, marker=marker,
                       markersize=4, linewidth=1.4, label=label)
            sizes.extend(x for x, _ in bw)
            rates.extend(y for _, y in bw)

    if times:
        lo, hi = min(times) / 1.5, max(times) * 1.5
        left.plot([lo, hi], [lo, hi], color="black", linestyle="--", linewidth=1,
                  label="measured = predicted")
        left.set_xlim(lo, hi)
        left.set_ylim(lo, hi)
        left.set_xscale("log")
        left.set_yscale("log")
        _log_axis(left.xaxis, seconds_label)
        _log_axis(left.yaxis, seconds_label)
    left.set_xlabel("predicted time per step (s, roofline lower bound)")
    left.set_ylabel("measured median time per step (s)")
    left.set_title("measured vs predicted (above the line: slower than predicted)", fontsize=10,
                   loc="left")
    left.grid(True, which="major", alpha=0.35)
    panels[0].legend(loc="outside lower center", ncol=2, fontsize=8)

    ceilings = sorted({c for c in (_number(r.get("ceiling_bytes_per_s")) for r in rows) if c})
    for j, c in enumerate(ceilings):
        right.axhline(c, color="black", linestyle="--", linewidth=1.2,
                      label=(f"measured ceiling {rate_label(c)}"
                             if j == 0 or len(ceilings) < 4 else None))
        rates.append(c)
    if sizes:
        right.set_xscale("log")
        _log_axis(right.xaxis, bytes_label)
    from matplotlib.ticker import FuncFormatter

    right.yaxis.set_major_formatter(FuncFormatter(rate_label))
    if rates:
        right.set_ylim(0, max(rates) * 1.12)
    right.set_xlabel("KV cache read per step (bytes; GB = 10^9)")
    right.set_ylabel("achieved bandwidth (bytes/s; TB/s = 10^12)")
    right.set_title("achieved bandwidth vs cache size", fontsize=10, loc="left")
    right.grid(True, which="major", alpha=0.35)
    panels[1].legend(loc="outside lower center", ncol=2, fontsize=8)

    devices = sorted({str(r["device"]) for r in rows if r.get("device")})
    steps = sorted({str(r["step"]) for r in rows if r.get("step")})
    title = "kvcalc measure"
    if steps:
        title += ": " + ", ".join(steps)
    if devices:
        title += " on " + ", ".join(devices)
    fig.suptitle(title, fontsize=11.5, x=0.01, ha="left")
    return _save(fig, path, force)


# --------------------------------------------------------------------------------
# kvcalc plan --plot
# --------------------------------------------------------------------------------
def plot_plan(p, path: str | os.PathLike, force: bool = False) -> Path:
    """Output tokens/s per GPU against tokens/s per user for every layout a plan kept
    (grey), its front (the line) and the best layout (the star), log-log."""
    fig = _figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.add_subplot()
    if p.cloud:
        ax.scatter([u for u, _ in p.cloud], [g for _, g in p.cloud], s=8, color="#bbbbbb",
                   label=f"{p.kept:,} layouts that start and meet the targets")
    ax.plot([x.tokens_per_s_per_user for x in p.front],
            [x.tokens_per_s_per_gpu for x in p.front], color=_PALETTE[0], marker="o",
            markersize=4, linewidth=1.4, label="front")
    b = p.best
    ax.scatter([b.tokens_per_s_per_user], [b.tokens_per_s_per_gpu], marker="*", s=160,
               color=_PALETTE[1], zorder=3,
               label=f"best: tp {b.tp} x pp {b.pp} x {b.replicas}, {b.max_num_seqs} seqs")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("output tokens/s per user (1 / time per output token)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{p.model} on up to {p.gpus} x {p.gpu}, requests of {p.prompt_len:,} + "
                 f"{p.output_len:,} tokens")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    return _save(fig, path, force)
