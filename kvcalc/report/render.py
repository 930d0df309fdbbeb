"""Tables drawn: `Tab` (plain text cells) as rich on a terminal, markdown for issues
and docs, plain text where it fits.

The three share the one table model. Plain text needs no rich import, so the default
view of `kvcalc estimate` starts faster; rich draws what plain text cannot (tables
wider than the terminal, bold rows on a terminal), and `to_text` for files.
"""

from __future__ import annotations

import io
import sys
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.report.consoles import console, terminal_width


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


class Verbatim(str):
    """A line shown as written, never wrapped (a command to copy); markdown fences it."""


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
        if isinstance(item, Verbatim):
            parts.append(f"```\n{item}\n```")
            continue
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


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """`text` as plain text draws it in `width` columns: each line its own paragraph,
    words never split, a number kept with its unit ("1.07 GB", "4.8 ms", "8,192 tokens"),
    a "note: ..." line's continuation indented."""
    import re
    import textwrap

    out: list[str] = []
    for line in text.split("\n"):
        out += [w.replace("\0", " ") for w in textwrap.wrap(
            re.sub(r"(?<=\d) (?=[A-Za-zµ%(])", "\0", line), width, break_long_words=False,
            break_on_hyphens=False,
            subsequent_indent="  " if line.startswith("note:") else indent)] or [""]
    return out


def _plain_text(items: list, width: int) -> str | None:
    """Paragraphs and header-less two-column tables as plain text, or None when a table
    has a header or does not fit `width` (rich draws those). Plain text needs no rich
    import: `kvcalc estimate`'s default view starts faster. Words are never split."""
    def fill(text: str, indent: str = "") -> str:
        return "\n".join(wrap(text, width, indent))

    out: list[str] = []
    for item in items:
        if isinstance(item, Verbatim):
            out.append(str(item))
            continue
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
        # line of its own, and a value longer than the width (words: where the weights
        # came from) is wrapped under its label, so the view never needs rich.
        longest = max(len(r[0]) + 2 + len(r[1]) for r in item.rows)
        edge = min(width, longest)
        if max(len(r[0]) for r in item.rows) > edge:
            return None
        out.append(item.title)
        for label, value in item.rows:
            if len(label) + 2 + len(value) <= edge:
                out.append(f"{label}{' ' * (edge - len(label) - len(value))}{value}")
            elif len(value) <= edge:
                out += [label, f"{value:>{edge}}"]
            else:
                out += [label, fill("    " + value.lstrip(), "    ")]
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
            con.print(item, markup=False, highlight=False,
                      soft_wrap=isinstance(item, Verbatim))
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


def deliver(fmt: str, items: list, *, data=None, rows: list | None = None, output=None,
            force: bool = False, width: int = 100) -> None:
    """One result in the format `fmt` names (table, md, json, csv), to stdout or, written
    atomically, to `output`: `items` (paragraphs and Tabs) for table and md, `data` for
    json, `rows` (dicts) for csv. A table file is plain text `width` columns wide."""
    if fmt == "table" and (output is None or str(output) == "-"):
        show(items)  # the common case: no file machinery imported
        return
    from kvcalc.report.csv_json import rows_to_csv, to_json
    from kvcalc.report.files import emit

    if fmt == "table":
        emit(to_text(items, width=width), output, force)
    elif fmt == "md":
        emit(to_markdown(items), output, force)
    elif fmt == "json":
        emit(to_json(data), output, force)
    elif fmt == "csv":
        emit(rows_to_csv(rows), output, force)
    else:
        raise ValueError(f"no renderer for {fmt!r}")
