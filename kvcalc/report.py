"""Rows to text: units, CSV, JSON, rich tables, and safe report files.

The only module that formats numbers for people. Bytes stay exact ints in CSV and
JSON; tables show the exact count beside decimal (GB = 1e9) and binary
(GiB = 2^30) units, each labelled. rich is imported lazily (tables only).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import tempfile
from dataclasses import field
from pathlib import Path
from typing import IO, Any, Iterable, Mapping

from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.spec import base_name

DECIMAL_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))
BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _scaled(n: int, units: tuple[tuple[str, int], ...], suffix: str = "B") -> str:
    for name, size in units:
        if abs(n) >= size:
            x = n / size
            return f"{x:.3g} {name}" if abs(x) < 1000 else f"{x:,.0f} {name}"
    return f"{n} {suffix}"


def human_bytes(n: int) -> str:
    """'9.66 GB / 9 GiB': decimal and binary, both named."""
    if abs(n) < 1000:
        return f"{n} B"
    return f"{_scaled(n, DECIMAL_UNITS)} / {_scaled(n, BINARY_UNITS)}"


def exact_bytes(n: int) -> str:
    """'9,663,676,416 B (9.66 GB / 9 GiB)'."""
    return f"{n:,} B" if abs(n) < 1000 else f"{n:,} B ({human_bytes(n)})"


def human_count(n: float, unit: str = "") -> str:
    """1.75e11 -> '175 G' (SI prefixes, for parameters and FLOPs)."""
    for name, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.4g} {name}{unit}"
    return f"{n:.4g} {unit}".rstrip()


def human_seconds(s: float) -> str:
    if not math.isfinite(s):
        return str(s)
    for name, size in (("s", 1.0), ("ms", 1e-3), (_MICRO + "s", 1e-6)):
        if abs(s) >= size:
            return f"{s / size:.4g} {name}"
    return f"{s * 1e9:.4g} ns"


def _micro() -> str:
    """'µ', or 'u' where stdout cannot show it (PYTHONIOENCODING=ascii)."""
    try:
        "µ".encode(getattr(sys.stdout, "encoding", None) or "utf-8")
        return "µ"
    except (UnicodeEncodeError, LookupError):
        return "u"


_MICRO = _micro()


def human_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


# --------------------------------------------------------------------------------
# Machine-readable output
# --------------------------------------------------------------------------------
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

    Floats carry twelve significant digits (kvcalc.csvtext), as in `kvcalc sweep`."""
    from kvcalc.csvtext import cell

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
    return json.dumps(obj, indent=2, default=_json_default, allow_nan=False) + "\n"


_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has only fsync


class _WritebackFile(io.FileIO):
    """A file that puts each 32 MB it has written on disk as it goes (fdatasync), then
    lets those pages go (POSIX_FADV_DONTNEED, now that they are clean): a big report's
    final fsync has at most 32 MB left to wait for, and a multi-GB sweep does not fill
    the page cache. On this project's VM, starting writeback alone (fadvise on dirty
    pages) still left 0.3-0.4 s of a 400 MB sweep to the final fsync; syncing as it goes,
    in the sweep's writer thread (report.WriteBehind), overlaps it with the arithmetic."""

    STEP_BYTES = 32 << 20

    def __init__(self, fd: int):
        super().__init__(fd, "wb", closefd=True)
        self._written = self._synced = 0

    def write(self, data) -> int:
        n = super().write(data)
        self._written += n or 0
        if self._written - self._synced >= self.STEP_BYTES:
            _datasync(self.fileno())
            try:
                os.posix_fadvise(self.fileno(), self._synced, self._written - self._synced,
                                 os.POSIX_FADV_DONTNEED)
            except (AttributeError, OSError):  # not Linux, or a file system without it
                pass
            self._synced = self._written
        return n


class WriteBehind:
    """Writes handed to a thread of their own, in order: the producer goes on computing
    while the file system (or a slow pipe) takes the bytes. At most `depth` writes wait
    (the producer blocks beyond that); the buffers handed over must not be changed
    after. An error in the writer is raised in the producer at its next write or at the
    end of the `with` block; the writer drains the rest so the producer never hangs."""

    def __init__(self, out: IO[bytes], depth: int = 8):
        import queue
        import threading

        self.out = out
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="kvcalc-writer", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (data := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.out.write(data)
                except BaseException as e:  # re-raised in the producer
                    self._error = e

    def write(self, data) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(data)

    def __enter__(self) -> "WriteBehind":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._queue.put(None)
        self._thread.join()
        if exc_type is None and self._error is not None:
            raise self._error


class AtomicOutput:
    """A binary file that appears at `path` whole or not at all (streamed reports).

    Data goes to a temporary file in the same folder; on success it is linked into
    place (failing if the name exists: no race between check and write) or, with
    force, renamed over the old file. On an exception the temporary file is removed.
    A symbolic link to a regular file is written through: the file it names is
    replaced and the link stays (see `write_target`).
    """

    def __init__(self, path: str | os.PathLike, force: bool = False):
        self.path = Path(path)
        self.force = force
        check_writable(self.path, force)
        self.target = write_target(self.path)
        folder = self.target.parent if str(self.target.parent) else Path(".")
        try:
            fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.target.name}.",
                                            suffix=".tmp")
        except OSError as e:
            raise KvcalcError(f"cannot write {self.path}: {e.strerror}") from None
        self.file = io.BufferedWriter(_WritebackFile(fd), buffer_size=1 << 20)

    def __enter__(self) -> IO[bytes]:
        return self.file

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if exc_type is None:
                os.chmod(self.tmp, 0o644)
                try:
                    _publish(self.tmp, self.target, self.force, shown=self.path)
                except OSError as e:
                    raise KvcalcError(f"cannot write {self.path}: {e.strerror}") from None
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


_SPECIAL_TREES = ("/dev", "/proc", "/sys")  # device nodes and kernel views, not files


def _in_special_tree(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in _SPECIAL_TREES)


def write_target(path: str | os.PathLike) -> Path:
    """The file a report at `path` replaces: `path` itself, or, for a symbolic link,
    the regular file it resolves to (so the link survives --force).

    A link whose chain goes through /dev, /proc or /sys (/dev/stdout,
    /proc/self/fd/1), that dangles, or that names anything but a regular file is
    refused: renaming over it would replace the link, not write where it points.
    """
    path = Path(path)
    if not path.is_symlink():
        return path
    hop, seen = str(path), set()
    while os.path.islink(hop):  # each link in the chain, as the kernel follows them
        if hop in seen or len(seen) > 40:
            raise KvcalcError(f"cannot write {path}: a loop of symbolic links")
        seen.add(hop)
        hop = os.path.join(os.path.dirname(os.path.abspath(hop)), os.readlink(hop))
        if _in_special_tree(os.path.normpath(hop)):
            raise KvcalcError(f"cannot write {path}: it is a symbolic link into "
                              f"{os.path.normpath(hop)}, not to a regular file "
                              "(use stdout and a pipe)")
    real = Path(os.path.realpath(path))
    if _in_special_tree(str(real)) or not real.is_file():
        what = "a missing file" if not real.exists() else "something other than a regular file"
        raise KvcalcError(f"cannot write {path}: it is a symbolic link to {what} ({real})")
    return real


def check_writable(path: str | os.PathLike, force: bool) -> None:
    """Fail early (before any work) if `path` is a folder, exists without force, or its
    folder is missing or not writable; a symbolic link is judged by what it names."""
    path = Path(path)
    if path.is_dir():
        raise KvcalcError(f"cannot write {path}: it is a folder")
    if path.exists() and not path.is_file():
        # A device or FIFO would be replaced by a regular file on rename: refuse.
        raise KvcalcError(f"cannot write {path}: not a regular file (use stdout and a pipe)")
    target = write_target(path)
    if path.exists() and not force:
        raise KvcalcError(f"{path} exists; pass --force to overwrite it")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise KvcalcError(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise KvcalcError(f"cannot write {path}: folder {folder} is not writable")


def _publish(tmp: str, path: Path, force: bool, shown: Path | None = None) -> None:
    shown = path if shown is None else shown
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise KvcalcError(f"{shown} exists; pass --force to overwrite it") from None
    except OSError:  # file systems without hard links
        if path.exists():
            raise KvcalcError(f"{shown} exists; pass --force to overwrite it") from None
        os.replace(tmp, path)


def atomic_write(path: str | os.PathLike, text: str | bytes, force: bool = False) -> Path:
    """Write a file whole or not at all; never replace an existing file unless `force`."""
    with AtomicOutput(path, force) as f:
        f.write(text.encode() if isinstance(text, str) else text)
    return Path(path)


def emit(text: str, output: str | os.PathLike | None = None, force: bool = False) -> None:
    """Data to stdout, or atomically to a file (then a one-line note on stderr)."""
    if output is None or str(output) == "-":
        import sys

        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        path = atomic_write(output, text, force)
        # markup=False: a file named '[red]x.json' or '[/]x.json' is printed as named.
        error_console().print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)


# --------------------------------------------------------------------------------
# Consoles (rich, imported on first use)
# --------------------------------------------------------------------------------
_consoles: dict[bool, Any] = {}


def console(stderr: bool = False):
    """The rich console for data (stdout) or diagnostics (stderr)."""
    if stderr not in _consoles:
        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                # rich exits 1 here; `kvcalc ... | head` is not a failure, so hand the
                # error to the CLI, which exits 0.
                self.quiet = True
                raise BrokenPipeError

        # Off a terminal (a file, a pipe) nothing wraps lines, so tables get room to be
        # read instead of rich's 80 columns; COLUMNS still wins when set.
        _consoles[stderr] = _Console(stderr=stderr, highlight=False, width=_width(stderr))
    return _consoles[stderr]


def _width(stderr: bool) -> int | None:
    """COLUMNS when it is a sensible number (0 or junk is ignored, below 40 raised to 40);
    else the terminal's width, or 160 columns off a terminal (a file or a pipe), where
    nothing wraps lines."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and 0 < int(cols) < 100_000:
        return max(40, int(cols))
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream is not None and stream.isatty()
    except (ValueError, OSError):
        tty = False
    return None if tty or stderr else 160


def error_console():
    return console(stderr=True)


def _plain(text: str) -> str:
    """`text` escaped for rich markup: a model named '[red]x' or a source path with
    '[/]' in it prints as written, inside tables that use markup of their own."""
    from rich.markup import escape

    return escape(text)


def table(title: str, columns: list[str], rows: list[list[str]], caption: str | None = None):
    """A rich Table; numbers right-aligned."""
    from rich.table import Table

    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right", overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


# --------------------------------------------------------------------------------
# Tables for the analytical commands: plain data (Tab), drawn by rich or as markdown
# --------------------------------------------------------------------------------
@record(frozen=False)
class Tab:
    """A table as plain text cells (no markup), for rich, markdown or a text file."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str | None = None
    bold: set[int] = field(default_factory=set)  # row indexes shown in bold
    header: bool = True
    # Too wide for the terminal: True shows each row as a table of its own (column names
    # beside the values: a sweep's rows); False each value column beside the labels.
    records: bool = False


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3g}x" if b else "-"


def count_words(n: int) -> str:
    """8030261248 -> '8.03B' (parameters, as model cards write them)."""
    for name, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{name}"
    return str(n)


def tokens_left(est) -> int | None:
    """Tokens the batch's cache can still grow by on the device (all sequences growing
    alike), None when every layer slides (the cache stops growing) or without a device."""
    f = est.fit
    if f is None or f.max_seq_len_unbounded or not f.fits:
        return None
    return est.batch * max(0, f.max_seq_len - est.seq_len)


def _on_device(est) -> str:
    return f"{est.tp} x {est.hardware.name}" if est.tp > 1 else est.hardware.name


def _not_fit_words(est) -> str:
    m = est.min_tp_that_fits
    return ("does not fit at any tp" if m is None else f"does not fit (smallest tp that fits: {m})")


def headline(est) -> str:
    """The answer in one sentence: model, context x batch, KV cache, parameters, decode
    time and tokens/s on the device, whether it fits and the cache room left."""
    s, c, p = est.spec, est.cache, est.params
    seqs = "sequence" if est.batch == 1 else "sequences"
    cache = f"KV cache {human_bytes(c.bytes)} ({c.bytes_per_token:,} B/token)"
    if s.attention_free:  # Mamba: no K/V at all
        cache = f"state {human_bytes(c.bytes)} (constant per sequence; no attention, no KV cache)"
    if est.tp > 1:
        cache += f", {human_bytes(c.bytes_per_device)} per device"
    params = f"{count_words(p.total)} parameters"
    if p.active != p.total:
        params += f" ({count_words(p.active)} active)"
    text = f"{s.name}, {est.seq_len:,} tokens x {est.batch} {seqs}: {cache}; {params}"
    if est.roofline is None:
        return text + "."
    r = est.roofline
    speed = (f"{human_seconds(r.time_s)}/token, {r.tokens_per_s:,.{0 if r.tokens_per_s >= 100 else 1}f} "
             f"tokens/s ({r.bound}-bound)")
    if est.fit.fits:
        left = tokens_left(est)
        room = (f"room for {left:,} more tokens of cache" if left is not None
                else "the state does not grow with the context" if s.attention_free
                else "the cache stops growing (every layer slides)")
        return f"{text}; on {_on_device(est)} {speed}; fits, {room}."
    return (f"{text}; on {_on_device(est)} it {_not_fit_words(est)}; "
            f"if it fit: {speed}.")


def summary_table(est) -> Tab:
    """The compact table under the headline: one row per figure a person asks for."""
    s, d, p = est.spec, est.decode, est.params
    rows: list[list[str]] = []
    rows += _cache_rows(est)
    rows.append(["parameters", f"{p.total:,} ({count_words(p.total)})"])
    if p.active != p.total:
        rows.append(["active per token (MoE)", f"{p.active:,} ({count_words(p.active)})"])
    rows.append([f"weights ({weights_label(est)})", exact_bytes(est.weight_bytes)])
    rows.append(["decode step: bytes", exact_bytes(d.bytes)])
    rows.append(["decode step: FLOPs", f"{d.flops:,} ({human_count(d.flops, 'FLOP')})"])
    rows.append(["FLOPs per byte", f"{d.arithmetic_intensity:.3g}"
                 + (f" (ridge {est.roofline.ridge_flops_per_byte:.0f})" if est.roofline else "")])
    if est.roofline is not None:
        r, f = est.roofline, est.fit
        caveat = "" if f.fits else " if it fit"
        rows.append([f"time per token{caveat}", f"{human_seconds(r.time_s)} ({r.bound}-bound)"])
        rows.append([f"tokens/s{caveat}", f"{r.tokens_per_s:,.1f}"])
        if est.latency is not None:
            lat = est.latency
            rows.append([f"first token, {lat.prompt_len:,}-token prompt{caveat}",
                         f"{human_seconds(lat.ttft_s)} ({lat.prefill_bound}-bound)"])
            rows.append([f"per output token{caveat}",
                         f"{human_seconds(lat.tpot_s)} ({lat.tokens_per_s:,.0f} tokens/s)"])
        rows.append(["free for KV per device", exact_bytes(f.free_for_kv_bytes)
                     if f.free_for_kv_bytes >= 0 else
                     f"none: weights exceed memory by {human_bytes(-f.free_for_kv_bytes)}"])
        rows.append([f"max batch at {est.seq_len:,} tokens", f"{f.max_batch:,}"])
        rows.append([f"max context at batch {est.batch}", max_context_words(est)])
        fits = "yes" if f.fits else f"no; {_not_fit_words(est)[len('does not fit '):].strip('()')}"
        rows.append([f"fits on {_on_device(est)}", fits])
    title = (f"{s.name} ({s.mixing}, {s.layers} layers), KV {est.kv_dtype.name}"
             + (f", tp {est.tp}" if est.tp > 1 else ""))
    caption = "`--detail` for every breakdown, `--format json` for all of it"
    if est.latency is not None:
        caption = (f"time per token: datasheet roofline; first/per output token at "
                   f"{est.latency.mfu:.0%} MFU and {est.latency.bandwidth_efficiency:.0%} of "
                   f"bandwidth (--mfu, --bandwidth-efficiency). " + caption)
    return Tab(title, ["", ""], rows, header=False, caption=caption)


def _cache_rows(est) -> list[list[str]]:
    """KV-cache rows of the compact table (one place to add per-kind rows)."""
    c = est.cache
    rows = [["KV cache per token", exact_bytes(c.bytes_per_token)],
            [f"KV cache, {est.seq_len:,} x {est.batch}", exact_bytes(c.bytes)]]
    if len(c.bytes_by_kind) > 1 or c.state_bytes_per_sequence:
        for label, nbytes in c.bytes_by_kind.items():  # e.g. "  52 x sliding 1,024"
            rows.append([f"  {c.layers_by_kind[label]} x {label}", exact_bytes(nbytes)])
    if c.bytes_full != c.bytes:
        rows.append(["  without windows", exact_bytes(c.bytes_full)])
    if c.state_bytes_per_sequence:
        rows.append(["  constant state per sequence", exact_bytes(c.state_bytes_per_sequence)])
    if est.tp > 1:
        rows.append(["  per device", exact_bytes(c.bytes_per_device)])
    return rows


def max_context_words(est) -> str:
    """The longest context at the batch: a number, or why memory does not bound it."""
    f, s = est.fit, est.spec
    if not f.max_seq_len_unbounded:
        return f"{f.max_seq_len:,}"
    if s.max_context:
        return f"{f.max_seq_len:,} (model limit; cache stops growing)"
    if s.attention_free:
        return "unbounded (a constant state, no attention)"
    return "unbounded (the cache stops growing)"


def weights_label(est) -> str:
    return est.stored.label.split(" (")[0].split(",")[0] if est.stored else est.weight_dtype.name


def estimate_tables(est) -> list:
    """Every breakdown for one `Estimate` (kvcalc.estimate): the `--detail` view."""
    s, c, d, p = est.spec, est.cache, est.decode, est.params
    src = f"source: {s.source}" if s.source else ""
    shape = (f"{s.mixing}: " if s.attention_free else
             f"{s.attention_kind}: {s.heads} query heads, "
             f"{s.kv_heads if s.mla is None else '-'} K/V heads, head_dim {s.head_dim}, ")
    head = (f"{s.name}  {shape}{s.layers} layers, d_model {s.d_model}\n"
            f"seq_len {est.seq_len:,}, batch {est.batch}, KV {est.kv_dtype.name}, "
            f"weights {est.weight_dtype.name}, tp {est.tp}"
            + (f", {est.hardware.name}" if est.hardware else "") + (f"\n{src}" if src else ""))
    out: list = [head]

    rows = [["per token per layer", exact_bytes(c.bytes_per_token_per_layer)],
            ["per token (all layers)", exact_bytes(c.bytes_per_token)],
            ["per sequence", exact_bytes(c.bytes_per_sequence)],
            [f"batch of {est.batch} (kv_cache_bytes)", exact_bytes(c.bytes)]]
    if c.bytes_full != c.bytes:
        rows.append(["without sliding window", exact_bytes(c.bytes_full)])
    if c.cross_attention_bytes_per_sequence:
        rows.append(["cross-attention, per sequence", exact_bytes(c.cross_attention_bytes_per_sequence)])
    if est.tp > 1:
        share = ("the whole latent, replicated" if s.mla is not None
                 else f"{c.kv_heads_per_device} K/V head{'s' if c.kv_heads_per_device > 1 else ''} each")
        rows.append([f"per device ({share})", exact_bytes(c.bytes_per_device)])
        rows.append([f"all {est.tp} devices", exact_bytes(c.bytes_all_devices)])
    out.append(Tab("KV cache", ["", "bytes"], rows))

    prow = [[name, f"{n:,}", f"{n / p.total:.1%}"] for name, n in p.breakdown.items()]
    bold = {len(prow)}
    prow.append([f"total ({human_count(p.total)})", f"{p.total:,}", "100%"])
    prow.append(["attention (all projections)", f"{p.attention:,}", f"{p.attention / p.total:.1%}"])
    if p.active != p.total:
        prow.append([f"active per token, MoE ({human_count(p.active)})", f"{p.active:,}",
                     f"{p.active / p.total:.1%}"])
    prow.append([f"weights in {est.weight_dtype.name}", exact_bytes(est.weight_bytes), ""])
    out.append(Tab("Parameters", ["", "count", "share"], prow, bold=bold))

    drow = [["FLOPs", f"{d.flops:,}", human_count(d.flops, "FLOP")]]
    for name, n in d.bytes_breakdown.items():
        drow.append([f"bytes: {name}", f"{n:,}", human_bytes(n)])
    bold = {len(drow)}
    drow.append(["bytes moved", f"{d.bytes:,}", human_bytes(d.bytes)])
    drow.append(["arithmetic intensity (step)", f"{d.arithmetic_intensity:.4g}", "FLOP/byte"])
    drow.append(["arithmetic intensity (attention)", f"{d.attention_intensity:.4g}", "FLOP/byte"])
    drow.append([f"prefill FLOPs ({est.seq_len:,} tokens)", f"{d.prefill_flops:,}",
                 human_count(d.prefill_flops, "FLOP")])
    out.append(Tab("One decode step (one token per sequence)", ["", "exact", ""], drow,
                   caption="; ".join(d.notes) or None, bold=bold))

    if est.shazeer is not None:
        sz = est.shazeer
        srow = [[name, f"{v:.4g}", "<- dominates" if name == sz.dominant_term else ""]
                for name, v in sz.terms.items()]
        srow.append(["exact ratio (memory / arithmetic)", f"{sz.ratio:.4g}", ""])
        bz = est.shazeer_batched
        srow.append(["batched (whole prompt at once):", "", ""])
        srow += [[f"  {name}", f"{v:.4g}", "<- dominates" if name == bz.dominant_term else ""]
                 for name, v in bz.terms.items()]
        srow.append(["  exact ratio (memory / arithmetic)", f"{bz.ratio:.4g}", ""])
        out.append(Tab("Shazeer (2019) memory-to-arithmetic ratio, incremental decoding (and batched)",
                       ["term", "value", ""], srow,
                       caption=f"b={est.batch}, n={sz.n}, d={s.d_model}, h={s.heads}, "
                               f"g={s.kv_heads}, k={s.head_dim}; n*g/(d*h) is the K/V reload term"
                               + ("; n is the tokens a layer attends over on average "
                                  "(sliding windows), not seq_len" if sz.n != est.seq_len else "")))
    if est.roofline is not None:
        r, f = est.roofline, est.fit
        hw = est.hardware
        per_dev = f"one of {est.tp} devices' " if est.tp > 1 else ""
        caveat = "" if f.fits else f" -- {_not_fit_words(est)}, so only if it fit"
        rrow = []
        if est.tp > 1:
            rrow += [["bytes per device", f"{d.per_device_bytes:,} ({human_bytes(d.per_device_bytes)})"],
                     ["FLOPs per device", human_count(d.per_device_flops, "FLOP")]]
        rrow += [[f"memory time ({per_dev}bytes / bandwidth)", human_seconds(r.memory_s)],
                 [f"compute time ({per_dev}FLOPs / dense peak)", human_seconds(r.compute_s)],
                 ["bound", f"{r.bound} (ridge {r.ridge_flops_per_byte:.0f} FLOP/byte)"],
                 ["time per token (per step)", human_seconds(r.time_s)],
                 ["tokens/s (whole batch)", f"{r.tokens_per_s:,.1f}"]]
        out.append(Tab(f"Roofline on {_on_device(est)} ({human_rate(hw.memory_bandwidth_bytes_per_s)}, "
                       f"{human_count(r.peak_flops_per_s, 'FLOP/s')} dense){caveat}",
                       ["", "lower bound"], rrow, caption=f"datasheet figures: {hw.source}",
                       bold={len(rrow) - 3}))
        frow = [["device memory usable", exact_bytes(f.usable_bytes)],
                ["weights per device", exact_bytes(f.weight_bytes)],
                ["free for KV cache per device", exact_bytes(f.free_for_kv_bytes)],
                [f"max batch at {est.seq_len:,} tokens", f"{f.max_batch:,}"],
                [f"max context at batch {est.batch}",
                 max_context_words(est)],
                ["fits as asked", "yes" if f.fits else "NO"]]
        if est.min_tp_that_fits != est.tp:
            frow.append(["smallest tp that fits",
                         "none" if est.min_tp_that_fits is None else str(est.min_tp_that_fits)])
        out.append(Tab(f"Fit on {est.tp} x {hw.name}", ["", ""], frow))
    return out


def estimate_notes(est) -> list[str]:
    return [n for n in est.notes() if n not in est.decode.notes]


def compare_table(estimates: list) -> Tab:
    """MHA / GQA / MQA side by side with reduction factors against the first (MHA)."""
    base = estimates[0]
    cols = [""] + [f"{e.spec.attention_kind} ({e.spec.kv_heads} KV)" for e in estimates]
    cols += [f"{e.spec.attention_kind} vs MHA" for e in estimates[1:]]

    def line(label, get, fmt, reduce=True, gain=False):
        vals = [get(e) for e in estimates]
        cells = [fmt(v) for v in vals]
        if reduce:  # "4x less" for costs, "1.13x more" for intensity and throughput
            cells += [f"{_ratio(v, vals[0])} more" if gain else f"{_ratio(vals[0], v)} less"
                      for v in vals[1:]]
        else:
            cells += ["" for _ in vals[1:]]
        return [label] + cells

    rows = [
        line("KV bytes per token", lambda e: e.cache.bytes_per_token, lambda v: f"{v:,}"),
        line("kv_cache_bytes", lambda e: e.cache.bytes, human_bytes),
        *([line(f"KV cache per device (tp {base.tp})", lambda e: e.cache.bytes_per_device,
                human_bytes)] if base.tp > 1 else []),
        line("params total", lambda e: e.params.total, lambda v: f"{v:,}"),
        line("params attention", lambda e: e.params.attention, lambda v: f"{v:,}"),
        line("decode bytes", lambda e: e.decode.bytes, human_bytes),
        line("decode FLOPs", lambda e: e.decode.flops, lambda v: human_count(v, "FLOP")),
        line("arithmetic intensity", lambda e: e.decode.arithmetic_intensity, lambda v: f"{v:.4g}",
             gain=True),
        line("attention intensity", lambda e: e.decode.attention_intensity, lambda v: f"{v:.4g}",
             gain=True),
    ]
    caption = "X vs MHA: how many times less (costs) or more (intensity, tokens/s) X gives"
    if base.roofline is not None:
        rows.append(line("roofline time per step", lambda e: e.roofline.time_s, human_seconds))
        rows.append(line("tokens/s", lambda e: e.roofline.tokens_per_s, lambda v: f"{v:,.0f}",
                         gain=True))
        rows.append(line("bound", lambda e: e.roofline.bound, str, reduce=False))
        rows.append(line("max batch (fit)", lambda e: e.fit.max_batch, lambda v: f"{v:,}", reduce=False))
        rows.append(line(f"fits on {_on_device(base)}", lambda e: e, lambda e: "yes" if e.fit.fits else (
            "no" if e.min_tp_that_fits is None else f"no (tp {e.min_tp_that_fits})"), reduce=False))
        if not all(e.fit.fits for e in estimates):
            caption += "; a variant that does not fit shows the time it would take if it did"
    where = (f", tp {base.tp}" if base.tp > 1 else "") + (
        f", on {base.hardware.name}" if base.hardware else "")
    if base.tp > 1 and any(e.cache.bytes_all_devices > e.cache.bytes for e in estimates):
        caption += "; with tp > kv_heads, K/V heads are replicated, so per-device savings shrink"
    return Tab(f"{base_name(base.spec.name)}: MHA vs GQA vs MQA at seq_len "
               f"{base.seq_len:,}, batch {base.batch}{where}", cols, rows, caption=caption)


def capacity_table(est, cap, slo: int | None = None) -> Tab:
    """`kvcalc fit` with engine flags: vLLM's start-up arithmetic, per device."""
    s, m = cap.settings, cap.memory
    rows = [["driver-visible memory x utilization", exact_bytes(m["budget"])],
            ["  weights", exact_bytes(m["weights"])],
            ["  activation peak (profiling pass)", exact_bytes(m["activation_peak"])],
            ["  non-torch (CUDA context, NCCL)", exact_bytes(m["non_torch"])],
            ["  CUDA graphs", exact_bytes(m["cuda_graphs"])],
            ["KV cache memory", exact_bytes(m["kv_cache"])],
            [f"KV blocks of {cap.block_size} tokens", f"{cap.num_gpu_blocks:,}"],
            ["KV cache tokens", f"{cap.kv_cache_tokens:,}"],
            [f"max concurrency at {s.max_model_len:,} tokens", f"{cap.max_concurrency:.2f}x"]]
    if slo is not None:
        rows.append(["largest batch meeting the latency targets", f"{slo:,}"])
    where = f"{s.tp} x {cap.hardware}" + (f", pp {s.pp}" if s.pp > 1 else "")
    return Tab(f"{est.spec.name} on {where}, as vLLM {s.vllm_version} counts it "
               f"(utilization {s.gpu_memory_utilization})", ["", ""], rows,
               caption="\n".join(f"note: {n}" for n in cap.notes) or None)


def fit_table(est, slo: int | None = None) -> Tab:
    f, hw = est.fit, est.hardware
    rows = [["usable per device (x fraction, - reserve)", exact_bytes(f.usable_bytes)],
            ["weights per device", exact_bytes(f.weight_bytes)],
            ["free for KV cache per device", exact_bytes(f.free_for_kv_bytes)],
            [f"KV per sequence per device at {est.seq_len:,}", exact_bytes(f.kv_bytes_per_sequence)],
            [f"max batch at {est.seq_len:,} tokens", f"{f.max_batch:,}"],
            [f"max context at batch {est.batch}",
             max_context_words(est)],
            ["fits as asked", "yes" if f.fits else "no"],
            ["smallest tp that fits",
             "none" if est.min_tp_that_fits is None else str(est.min_tp_that_fits)]]
    if slo is not None:
        rows.append(["largest batch meeting the latency targets", f"{slo:,}"])
    notes = [n for n in est.notes() if "max context" in n or "replicated" in n]
    notes.append("leaves out the serving engine's activation peak, non-torch memory, CUDA "
                 "graphs and block rounding: --max-model-len counts as vLLM does")
    return Tab(f"{est.spec.name} on {est.tp} x {hw.name} ({human_bytes(hw.memory_bytes)} each), "
               f"weights {est.weight_dtype.name}, KV {est.kv_dtype.name}", ["", ""], rows,
               caption="\n".join(f"note: {n}" for n in notes) or None)


# --------------------------------------------------------------------------------
# Drawing: rich on a terminal, markdown for issues and docs, plain text in a file
# --------------------------------------------------------------------------------
def to_rich(tab: Tab):
    """A rich Table; cells are Text, so '[red]' in a model name prints as written."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(tab.title) if tab.title else None, show_header=tab.header,
              caption=Text(tab.caption) if tab.caption else None, title_justify="left",
              caption_justify="left", box=box.SIMPLE_HEAD if tab.header else None,
              padding=(0, 1) if tab.header else (0, 2, 0, 0), title_style="bold")
    for i, col in enumerate(tab.columns):
        t.add_column(col, justify="left" if i == 0 else "right",
                     overflow="fold", no_wrap=i > 0 and not tab.header)
    for n, r in enumerate(tab.rows):
        t.add_row(*[Text(cell) for cell in r], style="bold" if n in tab.bold else None)
    return t


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")


def to_markdown(items: list) -> str:
    """Paragraphs (str) and tables (Tab) as GitHub-flavoured markdown."""
    parts = []
    for item in items:
        if isinstance(item, str):
            parts.append(item.replace("\n", "  \n"))
            continue
        lines = [f"**{_md_cell(item.title)}**", ""] if item.title else []
        cols = item.columns if item.header else [c or " " for c in item.columns]
        lines.append("| " + " | ".join(_md_cell(c) for c in cols) + " |")
        lines.append("|" + "|".join(":--" if i == 0 else "--:" for i in range(len(cols))) + "|")
        for n, r in enumerate(item.rows):
            cells = [_md_cell(c) for c in r]
            if n in item.bold:
                cells = [f"**{c}**" if c else c for c in cells]
            lines.append("| " + " | ".join(cells) + " |")
        if item.caption:
            lines += ["", f"*{_md_cell(item.caption)}*"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _plain_text(items: list, width: int) -> str | None:
    """Paragraphs and header-less two-column tables as plain text, or None when a table
    has a header or does not fit `width` (rich draws those). Plain text needs no rich
    import: `kvcalc estimate`'s default view starts faster. Words are never split."""
    import re
    import textwrap

    def fill(text: str, indent: str = "") -> str:
        # A number keeps its unit on its line: "1.07 GB", "4.8 ms", "8,192 tokens".
        glued = re.sub(r"(?<=\d) (?=[A-Za-zµ%(])", "\0", text)
        return textwrap.fill(glued, width, break_long_words=False, break_on_hyphens=False,
                             subsequent_indent=indent).replace("\0", " ")

    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            for para in item.split("\n"):
                out.append(fill(para, "  " if para.startswith("note:") else ""))
            continue
        if item.header:
            grid = _plain_grid(item, width)
            if grid is None:
                return None
            out += ([""] if out else []) + grid
            if item.caption:
                out.append(fill(item.caption))
            continue
        if len(item.columns) != 2:
            return None
        # Values right-aligned at one column; a row too long for it puts its value on a
        # line of its own, so the view never needs rich to wrap inside a cell.
        longest = max(len(r[0]) + 2 + len(r[1]) for r in item.rows)
        edge = min(width, longest)
        if max(max(len(r[0]), len(r[1])) for r in item.rows) > edge:
            return None
        out.append(item.title)
        for label, value in item.rows:
            if len(label) + 2 + len(value) <= edge:
                out.append(f"{label}{' ' * (edge - len(label) - len(value))}{value}")
            else:
                out += [label, f"{value:>{edge}}"]
        if item.caption:
            out.append(fill(item.caption))
    return "\n".join(out) + "\n"


def _plain_grid(tab: Tab, width: int) -> list[str] | None:
    """A table with a header as aligned columns (the first left, the rest right) under a
    rule, or None when it is wider than `width` or has bold rows bound for a terminal
    (rich draws those)."""
    if tab.bold and sys.stdout.isatty():
        return None
    cells = [tab.columns, *tab.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(tab.columns))]
    total = sum(widths) + 2 * (len(widths) - 1)
    if total > width or any("\n" in c for row in cells for c in row):
        return None

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    try:
        rule = "─" * total
        rule.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        rule = "-" * total
    return ([tab.title] if tab.title else []) + [line(tab.columns), rule] + [line(r) for r in tab.rows]


def terminal_width() -> int:
    """The width to draw for: COLUMNS when sensible, the terminal's, or 160 off one."""
    width = _width(stderr=False)
    if width is None:
        import shutil

        width = shutil.get_terminal_size((80, 24)).columns
    return max(40, width)


def show(items: list, con=None) -> None:
    """Print paragraphs and tables on the data console (stdout)."""
    if con is None:
        text = _plain_text(items, terminal_width())
        if text is not None:
            sys.stdout.write(text)
            return
    plain = con is None
    con = con or console()
    for item in items:
        if isinstance(item, str) and plain:  # wrapped as _plain_text does: units kept on
            con.file.write(_plain_text([item], terminal_width()))
        elif isinstance(item, str):
            con.print(item, markup=False, highlight=False)
        else:
            for tab in _fitted(item, con):
                con.print(to_rich(tab))


def _fitted(tab: Tab, con) -> list[Tab]:
    """`tab`, or, where its columns cannot all be as wide as their longest word (a number
    would be split mid-digit), one narrow table per value column: the labels beside that
    column's values, under its header."""
    if len(tab.columns) <= 2:
        return [tab]
    # Labels may wrap between words; a value stays on one line (rich would rather fold
    # "6,738,415,616" than shrink a column of short words).
    label = max((len(w) for cell in [tab.columns[0], *(r[0] for r in tab.rows)]
                 for w in cell.split()), default=0)
    values = [max((len(cell) for cell in [col.split()[-1] if col else "",
                                          *(r[i] for r in tab.rows)]), default=0)
              for i, col in enumerate(tab.columns) if i]
    # to_rich's padding: one space each side of every cell, and the edge
    if label + sum(values) + 2 * len(tab.columns) + 2 <= con.width:
        return [tab]
    out = []
    if tab.records:
        for n, r in enumerate(tab.rows):
            out.append(Tab(tab.title if n == 0 else "", ["", f"row {n + 1:,}"],
                           [[c, v] for c, v in zip(tab.columns, r)],
                           caption=tab.caption if n == len(tab.rows) - 1 else None))
        return out
    for j in range(1, len(tab.columns)):
        rows = [[r[0], r[j]] for r in tab.rows if r[j]]
        out.append(Tab(tab.title if j == 1 else "", ["", tab.columns[j]], rows,
                       caption=tab.caption if j == len(tab.columns) - 1 else None,
                       bold={n for n in tab.bold if n < len(rows)}, header=tab.header))
    return out


def to_text(items: list, width: int = 100) -> str:
    """The tables as plain text (no colour), for `--format table -o FILE.txt`."""
    from rich.console import Console

    buf = io.StringIO()
    show(items, Console(file=buf, width=width, color_system=None, highlight=False,
                        legacy_windows=False, force_terminal=False))
    return buf.getvalue()
