"""What the commands share below their parsing: one result written in the chosen format."""

from __future__ import annotations

from kvcalc.cli.options import OutputFormat


def write(fmt: OutputFormat, output, force: bool, obj, rows, items) -> None:
    """One result in the chosen format, to stdout or atomically to `output`.

    Each a function, of which only the chosen format's is called: `obj` gives the JSON,
    `rows` the CSV rows, `items` the paragraphs and tables (Tab) that table and md draw."""
    from kvcalc.report.render import deliver

    kind = fmt.value
    deliver(kind, items() if kind in ("table", "md") else [],
            data=obj() if kind == "json" else None, rows=rows() if kind == "csv" else None,
            output=output, force=force)
