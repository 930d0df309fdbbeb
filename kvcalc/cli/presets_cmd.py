"""`kvcalc presets`: list the model and hardware presets, or show one with its source."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc import presets, report
from kvcalc.cli.options import FormatOpt, OutputFormat
from kvcalc.errors import KvcalcError


def _model_row(name: str) -> dict:
    s = presets.load_model(name)
    return {"name": name, "attention": s.attention_kind, "layers": s.layers, "d_model": s.d_model,
            "heads": s.heads, "kv_heads": s.kv_heads, "head_dim": s.head_dim,
            "max_context": s.max_context, "source": s.source}


def _hardware_row(name: str) -> dict:
    h = presets.load_hardware(name)
    return {"name": name, "memory_bytes": h.memory_bytes,
            "memory_bandwidth_bytes_per_s": h.memory_bandwidth_bytes_per_s,
            "bf16_flops_per_s": h.flops_per_s.get("bf16", 0), "l2_bytes": h.l2_bytes,
            "source": h.source}


def _raw_yaml(name: str) -> tuple[str, str]:
    """(kind, text) of a preset file, found case-insensitively."""
    key = name.lower()
    for kind, names in (("models", presets.model_names()), ("hardware", presets.hardware_names())):
        if key in names:
            return kind, (presets.presets_dir() / kind / f"{key}.yaml").read_text()
    every = presets.model_names() + presets.hardware_names()
    raise KvcalcError(f"unknown preset {name!r}; {presets.suggest(key, every)}")


def register(app: typer.Typer) -> None:
    @app.command(name="presets")
    def presets_command(
        action: Annotated[Optional[str], typer.Argument(help="`show` to print one preset.")] = None,
        name: Annotated[Optional[str], typer.Argument(help="The preset to show.")] = None,
        fmt: FormatOpt = OutputFormat.table,
    ) -> None:
        """List model and hardware presets; `kvcalc presets show NAME` prints one with its source."""
        if action is not None:
            name = name.strip() if name is not None else None  # as --preset ' gpt3' does
            if action != "show" or not name:
                raise KvcalcError("usage: kvcalc presets [show NAME]")
            kind, text = _raw_yaml(name)
            if fmt is OutputFormat.table:
                report.emit(text)
                return
            row = _model_row(name.lower()) if kind == "models" else _hardware_row(name.lower())
            report.emit(report.to_json(row) if fmt is OutputFormat.json else report.rows_to_csv([row]))
            return
        models = [_model_row(n) for n in presets.model_names()]
        hardware = [_hardware_row(n) for n in presets.hardware_names()]
        if fmt is OutputFormat.json:
            report.emit(report.to_json({"models": models, "hardware": hardware}))
            return
        if fmt is OutputFormat.csv:
            report.emit(report.rows_to_csv([{"kind": "model", **m} for m in models]
                                           + [{"kind": "hardware", **h} for h in hardware]))
            return
        con = report.console()
        con.print(report.table(
            "Model presets", ["name", "attention", "layers", "d_model", "heads", "kv_heads",
                              "head_dim", "max ctx", "source"],
            [[m["name"], m["attention"], str(m["layers"]), str(m["d_model"]), str(m["heads"]),
              str(m["kv_heads"]), str(m["head_dim"]), f"{m['max_context']:,}", m["source"]]
             for m in models]))
        con.print(report.table(
            "Hardware presets", ["name", "memory", "bandwidth", "bf16 dense", "L2", "source"],
            [[h["name"], report.human_bytes(h["memory_bytes"]),
              report.human_rate(h["memory_bandwidth_bytes_per_s"]),
              report.human_count(h["bf16_flops_per_s"], "FLOP/s"), report.human_bytes(h["l2_bytes"]),
              h["source"]] for h in hardware]))
