"""`kvcalc presets`: list the model and hardware presets, or show one with its source."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.parsing import command

from kvcalc.cli.options import OutputFormat, PrintFormatOpt
from kvcalc.errors import KvcalcError, quoted


def _model_row(name: str) -> dict:
    from kvcalc import presets

    s = presets.load_model(name)
    # The attention most layers have; a model without attention (Mamba) has no heads.
    a = s.attention_shape
    heads = (None, None, None) if a is None else (a.heads, a.kv_heads, a.head_dim)
    return {"name": name, "attention": s.attention_kind, "mixing": s.mixing, "layers": s.layers,
            "d_model": s.d_model, "heads": heads[0], "kv_heads": heads[1], "head_dim": heads[2],
            "max_context": s.max_context, "source": s.source}


def _hardware_row(name: str) -> dict:
    from kvcalc import presets

    h = presets.load_hardware(name)
    return {"name": name, "memory_bytes": h.memory_bytes,
            "memory_bandwidth_bytes_per_s": h.memory_bandwidth_bytes_per_s,
            "bf16_flops_per_s": h.flops_per_s.get("bf16", 0), "l2_bytes": h.l2_bytes,
            "source": h.source}


def _engine_row(name: str) -> dict:
    from kvcalc.engines import load_engine

    e = load_engine(name)[0]
    return {"name": e.name, "bandwidth_efficiency": dict(e.bandwidth_efficiency),
            "prefill_mfu": dict(e.prefill_mfu), "host_layer_s": e.host_layer_s,
            "host_step_s": e.host_step_s, "layer_cycles": e.layer_cycles,
            "allreduce_s": e.allreduce_s,
            "rows_fitted": sum(e.rows.values()),
            "rows_held_out": len([i for i in e.held_out.split(",") if i.strip()]),
            "versions": e.versions, "source": e.source}


def _engine_tab(rows: list[dict]):
    from kvcalc.report.render import Tab

    def shares(d: dict) -> str:
        return ", ".join(f"{k} {v:.0%}" for k, v in d.items()) or "-"

    return Tab(f"{len(rows)} engines (--engine NAME)",
               ["name", "bandwidth share", "prefill share", "kcycles/layer", "rows"],
               [[r["name"], shares(r["bandwidth_efficiency"]), shares(r["prefill_mfu"]),
                 f"{r['layer_cycles'] / 1e3:.3g}", f"{r['rows_fitted']}+{r['rows_held_out']}"]
                for r in rows],
               caption="fitted by benchmarks/fit_engines.py on tests/data/published (rows: "
                       "fitted + held out); kcycles/layer: GPU cycles per layer beyond its bytes "
                       "(time: over the GPU's boost clock). "
                       "`kvcalc presets show NAME` for an engine's whole file.")


def _raw_yaml(name: str) -> tuple[str, str, str]:
    """(kind, file stem, text) of a preset file, found as --preset and --gpu find it."""
    from kvcalc import presets
    from kvcalc.engines import engine_names
    from kvcalc.ground.inputfile import read_text

    for kind, names in (("models", presets.model_names()), ("hardware", presets.hardware_names()),
                        ("engines", engine_names())):
        stem = presets.find(name, names)  # case, spaces, '-' and '_' aside, as --gpu
        if stem is not None:
            path = presets.presets_dir() / kind / f"{stem}.yaml"
            return kind, stem, read_text(path, f"presets/{kind}/{stem}.yaml")
    every = presets.model_names() + presets.hardware_names() + engine_names()
    raise KvcalcError(f"unknown preset {quoted(name)}; {presets.suggest(name.lower(), every)}")


def _listing(models: list[dict], hardware: list[dict]) -> list:
    """The two tables `kvcalc presets` draws: short columns that fit 80 columns (each
    preset's source is in `kvcalc presets show NAME` and in --format json/csv)."""
    from kvcalc.report.render import Tab
    from kvcalc.ground.units import human_bytes

    def cell(value) -> str:
        return "-" if value is None else str(value)

    free: dict[str, list[str]] = {}  # models without attention, by what mixes their tokens
    for m in models:
        if m["attention"] == "none":
            free.setdefault(m["mixing"], []).append(m["name"])
    notes = [f"attn none = {mixing} ({', '.join(names)})" for mixing, names in free.items()]
    if any(not m["max_context"] for m in models):
        notes.append("max ctx -: the config states none")
    return [
        Tab("Model presets", ["name", "attn", "layers", "d_model", "heads", "kv", "head_dim",
                              "max ctx"],
            [[m["name"], m["attention"], str(m["layers"]), str(m["d_model"]), cell(m["heads"]),
              cell(m["kv_heads"]), cell(m["head_dim"]),
              f"{m['max_context']:,}" if m["max_context"] else "-"]
             for m in models],
            caption="; ".join(notes) or None),
        Tab("Hardware presets", ["name", "memory", "GB/s", "bf16 TFLOP/s", "L2 (MB)"],
            [[h["name"], human_bytes(h["memory_bytes"]),
              f"{h['memory_bandwidth_bytes_per_s'] / 1e9:,.0f}",
              f"{h['bf16_flops_per_s'] / 1e12:,.0f}", f"{h['l2_bytes'] / 1e6:,.0f}"]
             for h in hardware],
            caption="GB/MB = 10^9/10^6 bytes, GiB = 2^30; datasheet figures, dense. "
                    "`kvcalc presets show NAME` for one preset and its source."),
    ]


def _family_rows() -> list[dict]:
    """Each model_type --config reads, with the first line of its adapter's description."""
    from kvcalc.hfconfig import SUPPORTED_MODEL_TYPES, readers
    from kvcalc.hfconfig.multimodal import WRAPPERS

    read_by = readers()

    rows = []
    for model_type in sorted(SUPPORTED_MODEL_TYPES):
        if model_type in WRAPPERS:
            what = f"multimodal: text_config as {WRAPPERS[model_type]}, vision tower apart"
        else:
            doc = (read_by[model_type].__doc__ or "").strip()
            what = doc.split(": ")[0].split(". ")[0]
            what = " ".join(what.split())
        rows.append({"model_type": model_type, "read_as": what})
    return rows


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only, name="presets")
    def presets_command(
        action: Annotated[Optional[str], typer.Argument(help="`show` to print one preset.")] = None,
        name: Annotated[Optional[str], typer.Argument(help="The preset to show.")] = None,
        families: Annotated[bool, typer.Option(
            "--families", help="The config.json model_types `--config` reads.")] = False,
        engines: Annotated[bool, typer.Option(
            "--engines", help="The serving engines `--engine` knows, with their fitted "
            "terms.")] = False,
        fmt: PrintFormatOpt = None,
    ) -> None:
        """List model and hardware presets; `kvcalc presets show NAME` prints one with its source."""
        from kvcalc import presets
        from kvcalc.report.files import emit
        from kvcalc.report.render import Tab, deliver

        fmt = OutputFormat(fmt.value) if fmt else OutputFormat.table
        if families:
            if action is not None:
                raise KvcalcError("--families lists model_types; it takes no preset name")
            rows = _family_rows()
            tab = Tab(f"{len(rows)} config.json model_types kvcalc reads",
                      ["model_type", "read as"], [[r["model_type"], r["read_as"]] for r in rows],
                      caption="`kvcalc estimate --config path/to/config.json`")
            deliver(fmt.value, [tab], data=rows, rows=rows)
            return
        if engines:
            if action is not None or families:
                raise KvcalcError("--engines lists the engines; it takes no preset name")
            from kvcalc.engines import engine_names

            rows = [_engine_row(n) for n in engine_names()]
            deliver(fmt.value, [_engine_tab(rows)], data=rows, rows=rows)
            return
        if action is not None:
            name = name.strip() if name is not None else None  # as --preset ' gpt3' does
            if action != "show" or not name:
                raise KvcalcError("usage: kvcalc presets [show NAME]")
            kind, stem, text = _raw_yaml(name)
            if fmt in (OutputFormat.table, OutputFormat.md):
                emit(text if fmt is OutputFormat.table else f"```yaml\n{text}```\n")
                return
            row = {"models": _model_row, "hardware": _hardware_row,
                   "engines": _engine_row}[kind](stem)
            deliver(fmt.value, [], data=row, rows=[row])
            return
        models = [_model_row(n) for n in presets.model_names()]
        hardware = [_hardware_row(n) for n in presets.hardware_names()]
        deliver(fmt.value, _listing(models, hardware), data={"models": models, "hardware": hardware},
                rows=[{"kind": "model", **m} for m in models]
                + [{"kind": "hardware", **h} for h in hardware])
