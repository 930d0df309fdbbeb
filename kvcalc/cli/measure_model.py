"""`kvcalc measure --calibrate` and `kvcalc measure --step model`: the loop from
measurement to prediction.

--calibrate measures this device's decode terms and writes them as a hardware file;
--step model times whole decode steps of a preset and sets each beside what
`kvcalc estimate --gpu FILE` predicts from such a file (or from terms calibrated in
the same run when no --gpu is given).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from kvcalc.errors import KvcalcError


def _device(name: str):
    """The torch device `--device` names, as the other measure runs resolve it."""
    from kvcalc.measure import require_torch
    from kvcalc.measure.ceilings import resolve_device
    from kvcalc.measure.config import DEVICES

    require_torch()
    if name not in DEVICES:
        raise KvcalcError(f"--device must be one of {', '.join(DEVICES)}, got {name!r}")
    return resolve_device(name)


def _dtype(name: Optional[str], device) -> str:
    """--dtype, canonical; the device's default (measure's DEFAULTS) when not given."""
    from kvcalc.ground.dtypes import dtype
    from kvcalc.measure.config import DEFAULTS, MEASURE_DTYPES

    if name is None:
        return DEFAULTS[device.type].dtype
    canonical = dtype(name).name
    if canonical not in MEASURE_DTYPES:
        raise KvcalcError(f"--dtype {name}: measure runs {', '.join(MEASURE_DTYPES)}")
    return canonical


def _say(text: str) -> None:
    from kvcalc.report.consoles import error_console

    error_console().print(text, highlight=False, markup=False)


def _dtype_notice(device, dtype: str) -> None:
    """One `kvcalc: note:` line on stderr, before anything slow, when the device emulates
    `dtype` (kvcalc.measure.ceilings.dtype_check), naming the dtype that times well."""
    if dtype == "fp32":
        return
    from kvcalc.measure.ceilings import dtype_check
    from kvcalc.report.consoles import error_console

    text = dtype_check(device, dtype)["notice"]
    if text:
        error_console().print(f"kvcalc: note: {text}", highlight=False, markup=False,
                              soft_wrap=True)


def calibrate_command(device: str, dtype: Optional[str], output: Optional[Path],
                      force: bool, tp: int = 1) -> None:
    """Measure and write (or print) the hardware file."""
    from kvcalc.report.files import check_writable, emit

    if output is not None:
        check_writable(output, force)  # before minutes of measuring
    dev = _device(device)
    dt = _dtype(dtype, dev)
    _dtype_notice(dev, dt)
    from kvcalc.measure.calibrate import calibrate, to_yaml

    name = Path(output).stem if output is not None else f"calibrated-{dev.type}"
    command = "kvcalc " + " ".join(sys.argv[1:])
    hw = calibrate(dev, dt, name, command, progress=lambda label: _say(f"measuring {label}"),
                   tp=tp)
    emit(to_yaml(hw), output, force)
    if output is not None:
        _say(f"use it with: kvcalc estimate --gpu {output} ...")


def model_rows(spec, device, dtype: str, seq_len: int, batch: int, hardware, warmup: int,
               iters: int, cuda_graphs: bool) -> list[dict]:
    """One row: the measured decode step of `spec` and estimate's prediction on `hardware`."""
    import torch

    from kvcalc.ground.dtypes import dtype as _dt
    from kvcalc.speed.latency import latency
    from kvcalc.measure import ceilings as ceil_mod
    from kvcalc.measure.model_step import check_dense, decode_call, step_bytes
    from kvcalc.measure.timing import time_calls
    from kvcalc.workload import Workload

    check_dense(spec)
    tdtype = ceil_mod.torch_dtype(dtype)
    need = step_bytes(spec, batch, seq_len, torch.empty((), dtype=tdtype).element_size())
    free = ceil_mod.free_bytes(device)
    if need > 0.85 * free:
        from kvcalc.ground.units import human_count

        raise KvcalcError(f"--step model: {spec.name} at batch {batch} x {seq_len:,} tokens needs "
                          f"{human_count(need, 'B')} of weights and cache; "
                          f"{human_count(free, 'B')} is free on {device.type}")
    from kvcalc.measure import terms as terms_mod

    _say(f"timing {spec.name} decode steps")
    call = decode_call(spec, batch, seq_len, device, tdtype)
    before = terms_mod.host_sample()
    t = time_calls([call], device=device, warmup=warmup, iters=iters, cuda_graphs=cuda_graphs)
    others, steal = terms_mod.other_cores(before, terms_mod.host_sample())
    loaded = None if others is None else (others > terms_mod.LOADED_CORES
                                          or (steal or 0) > terms_mod.LOADED_CORES)
    lat = latency(spec, Workload(seq_len=seq_len, batch=batch, kv_dtype=_dt(dtype),
                                 weight_dtype=_dt(dtype)), hardware=hardware)
    info = ceil_mod.device_info(device)
    cal = hardware.calibration
    return [{
        "device": info["name"], "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if device.type == "cuda" else None,
        "model": spec.name, "layers": spec.layers, "dtype": dtype, "seq_len": seq_len,
        "batch": batch, "step": "model", "engine": "torch-eager",
        "cuda_graphs": cuda_graphs, "timer": t.timer, "iters": t.samples,
        "median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "min_s": t.min_s,
        "predicted_s": lat.tpot_s, "measured_over_predicted": t.median_s / lat.tpot_s,
        "predicted_memory_s": lat.decode_memory_s, "predicted_compute_s": lat.decode_compute_s,
        "predicted_overhead_s": lat.decode_overhead_s,
        "overhead_overlaps": lat.overhead_overlaps, "decode_bytes": lat.decode_bytes,
        "decode_flops": lat.decode_flops, "hardware": hardware.name,
        "calibration": lat.calibration or None,
        "calibrated_at": cal.measured_at if cal is not None else None,
        "load_avg_1m": terms_mod.load_average(), "other_cpu_cores": others,
        "steal_cpu_cores": steal, "loaded": loaded,
    }]


def model_spec(preset: Optional[str], config: Optional[Path], step: str):
    """The ModelSpec of --preset NAME or --config FILE (a preset-format YAML or a Hugging
    Face config.json), exactly one of them."""
    if preset is not None and config is not None:
        raise KvcalcError("give --preset or --config, not both")
    if preset is None and config is None:
        raise KvcalcError(f"{step} needs --preset NAME or --config FILE (a dense decoder)")
    if preset is not None:
        from kvcalc.presets import load_model

        return load_model(preset)
    if config.suffix.lower() == ".json":
        from kvcalc import hfconfig

        return hfconfig.spec_from_hf_config_file(config)
    from kvcalc.presets import model_from_yaml_file

    return model_from_yaml_file(config, require_source=False)


def model_command(preset: Optional[str], device: str, dtype: Optional[str],
                  seq_len: Optional[int], batch: Optional[int], gpu: Optional[str],
                  warmup: Optional[int], iters: Optional[int], cuda_graphs: bool, fmt,
                  output: Optional[Path], force: bool, config: Optional[Path] = None) -> None:
    from kvcalc.report.files import check_writable
    from kvcalc.report.render import deliver

    if output is not None:
        check_writable(output, force)
    spec = model_spec(preset, config, "--step model")
    dev = _device(device)
    if cuda_graphs and dev.type != "cuda":
        raise KvcalcError("--cuda-graphs needs --device cuda")
    dt = _dtype(dtype, dev)
    if gpu is not None:
        from kvcalc.cli.options import resolve_gpu

        hardware = resolve_gpu(gpu)
        if hardware is None:
            raise KvcalcError("--step model predicts on a device: give --gpu NAME or FILE, "
                              "or leave it out to calibrate this one")
    _dtype_notice(dev, dt)
    if gpu is None:
        from kvcalc.measure.calibrate import calibrate

        _say("no --gpu FILE: calibrating this device first (kvcalc measure --calibrate)")
        hardware = calibrate(dev, dt, f"this {dev.type}", "kvcalc measure --step model",
                             progress=lambda label: _say(f"measuring {label}"))
    gpu_default = dev.type == "cuda"
    rows = model_rows(spec, dev, dt, seq_len or (1024 if gpu_default else 256), batch or 1,
                      hardware, warmup if warmup is not None else (10 if gpu_default else 2),
                      iters if iters is not None else (50 if gpu_default else 9), cuda_graphs)
    tab = _model_tab(rows) if fmt.value in ("table", "md") else None
    deliver(fmt.value, [tab], data={"rows": rows}, rows=rows, output=output, force=force,
            width=160)


def _model_tab(rows: list[dict]):
    from kvcalc.report.render import Tab
    from kvcalc.ground.units import human_count, human_seconds

    body = []
    for r in rows:
        body.append([r["model"], f"{r['seq_len']:,}", f"{r['batch']:,}",
                     f"{human_seconds(r['median_s'])} ±"
                     f"{50 * (r['p90_s'] - r['p10_s']) / r['median_s']:.0f}%",
                     f"{human_seconds(r['predicted_s'])} ({r['measured_over_predicted']:.2f})",
                     human_seconds(r["predicted_memory_s"]), human_seconds(r["predicted_compute_s"]),
                     human_seconds(r["predicted_overhead_s"]),
                     human_count(r["decode_bytes"], "B"), "LOADED" if r["loaded"] else "no"])
    r = rows[0]
    how = "max(data, fixed costs)" if r["overhead_overlaps"] else "data + fixed costs"
    caption = (f"{r['device']}, torch {r['torch_version']}, {r['dtype']}, engine {r['engine']}"
               f"{', CUDA graphs' if r['cuda_graphs'] else ''}; timer {r['timer']}, median of "
               f"{r['iters']}\npredicted = kvcalc estimate's time per output token on "
               f"{r['hardware']} ({r['calibration'] or 'datasheet peaks x efficiencies'}): "
               f"{how}, data = weights / F.linear streaming + K/V / SDPA streaming + "
               "activations / read, compute = FLOPs / prompt-sized matmul; host busy: other "
               "processes kept > 0.25 cores busy while it was timed")
    return Tab("kvcalc measure --step model: whole decode steps, measured vs estimate",
               ["model", "seq_len", "batch", "median", "predicted (meas/pred)", "memory",
                "compute", "fixed", "bytes", "host busy"], body, caption=caption)



def mixed_command(preset: Optional[str], config: Optional[Path], device: str,
                  dtype: Optional[str], seq_len: Optional[int], batch: Optional[int],
                  prefill_tokens: int, prefill_start: int, warmup: Optional[int],
                  iters: Optional[int], cuda_graphs: bool, ceilings_cache, fmt,
                  output: Optional[Path], force: bool, with_progress) -> None:
    """`kvcalc measure --step mixed`: a decode step with a chunk of a prompt in the same
    forward pass, measured beside the roofline of its bytes and FLOPs at this device's
    ceilings (kvcalc.measure.run_mixed). `with_progress(run, config)` runs it under the
    progress bar (kvcalc.cli.measure._run_with_progress)."""
    from kvcalc.measure.dense import check_dense
    from kvcalc.measure.mixed import MixedConfig
    from kvcalc.report.files import check_writable
    from kvcalc.report.render import deliver

    if output is not None:
        check_writable(output, force)  # before the run, not after it
    spec = model_spec(preset, config, "--step mixed")
    check_dense(spec, "--step mixed")
    if dtype is not None:
        from kvcalc.ground.dtypes import dtype as _dt
        from kvcalc.measure.config import MEASURE_DTYPES

        canonical = _dt(dtype).name
        if canonical not in MEASURE_DTYPES:
            raise KvcalcError(f"--dtype {dtype}: measure runs {', '.join(MEASURE_DTYPES)}")
        dtype = canonical
    mixed = MixedConfig(spec=spec, batch=1 if batch is None else batch, seq_len=seq_len,
                        prefill_tokens=prefill_tokens, prefill_start=prefill_start, dtype=dtype,
                        device=device, warmup=warmup, iters=iters, cuda_graphs=cuda_graphs,
                        ceilings_cache=ceilings_cache)

    def run(cfg, progress, notice):
        from kvcalc.measure import run_mixed

        return run_mixed(cfg, progress, notice)

    result = with_progress(run, mixed)
    tab = _mixed_tab(result) if fmt.value in ("table", "md") else None
    deliver(fmt.value, [tab], data=result.as_dict(), rows=result.row_dicts(), output=output,
            force=force, width=160)


def _mixed_tab(result):
    from kvcalc.report.render import Tab
    from kvcalc.ground.units import human_count, human_rate, human_seconds

    def pair(decode, prefill, fmt=human_seconds):
        return f"{fmt(decode)} + {fmt(prefill)}"

    body, sizes = [], []
    for r in result.rows:
        d = r.as_dict()
        spread = 50 * (d["p90_s"] - d["p10_s"]) / d["median_s"] if d["median_s"] else 0
        chunk = (f" + {d['prefill_tokens']:,} @ {d['prefill_start']:,}"
                 if d["prefill_tokens"] else "")
        body.append([
            d["step"], f"{d['batch']:,} x {d['seq_len']:,}{chunk}",
            f"{human_seconds(d['median_s'])} ±{spread:.0f}%",
            f"{human_seconds(d['predicted_s'])} ({d['measured_over_predicted']:.2f})",
            pair(d["predicted_decode_memory_s"], d["predicted_prefill_memory_s"]),
            pair(d["predicted_decode_compute_s"], d["predicted_prefill_compute_s"]),
            f"{d['bound']} ({d['dominant']})", "LOADED" if d["loaded"] else "no"])
        sizes.append(f"{d['step']}: "
                     f"{pair(d['decode_bytes'], d['prefill_bytes'], lambda v: human_count(v, 'B'))}"
                     f", {pair(d['decode_flops'], d['prefill_flops'], lambda v: human_count(v, 'FLOP'))}")
    dev, c, cfg = result.device, result.ceilings, result.config
    caption = [
        f"{dev['name']} ({dev['type']}"
        + (f", {dev['threads']} thread{'s' if dev['threads'] != 1 else ''}" if dev.get("threads")
           else "")
        + f"), torch {dev['torch_version']}, {cfg['dtype']}, "
        f"{cfg['model']} ({cfg['layers']} layers, every one run), engine torch-eager; timer "
        f"{result.rows[0].timer}, median of {cfg['iters']} after {cfg['warmup']} warm-up",
        f"ceilings ({c['source']}): read {human_rate(c['read_bytes_per_s'])}, matmul "
        f"{human_count(c['matmul_flops_per_s'], 'FLOP/s')} ({c['dtype']})",
        "shape: decode batch x context [+ chunk tokens @ its first position]; predicted = "
        "max(bytes / read ceiling, FLOPs / matmul ceiling) over the whole step, each term "
        "split decode + prefill; bound (the part that dominates it)",
        "bytes and FLOPs (decode + prefill): " + "; ".join(sizes),
    ]
    added = result.measured_prefill_added_s()
    mixed = [r for r in result.rows if r.step == "mixed"]
    if added is not None and mixed:
        caption.append(f"the chunk added {human_seconds(added)} measured (mixed less decode "
                       f"median), {human_seconds(mixed[0].predicted['predicted_prefill_added_s'])} "
                       "predicted")
        if mixed[0].host.get("rel_error") is not None:
            caption.append(f"the chunk's causal attention against float64: relative error "
                           f"{mixed[0].host['rel_error']:.1e}")
    notes = list(cfg.get("notes") or [])
    for r in result.rows:
        notes += [part for part in r.note.split("; ") if part]
    caption += [f"note: {text}" for text in dict.fromkeys(notes)]
    return Tab("kvcalc measure --step mixed: a decode step with a prefill chunk, measured vs "
               "predicted",
               ["step", "shape", "median", "predicted (meas/pred)", "memory (dec + pre)",
                "compute (dec + pre)", "bound (dominant)", "host busy"], body,
               caption="\n".join(caption))
