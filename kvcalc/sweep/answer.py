"""`kvcalc sweep` as a library function: `kvcalc.sweep(model=..., seq_len="1k:128k:*2",
batch="1,8,32", ...)` returns a SweepAnswer whose `as_dict()` is `kvcalc sweep --format
json` (its rows), exactly, and whose `write_csv` writes `--format csv`
(tests/test_answers_check_sweep.py holds them equal on the golden cases).

It lives beside the sweep's plan rather than in kvcalc/answers/: the sweep's layer sits
above the answers' (tests/test_architecture.py). Nothing per row is computed until the
rows are asked for; they come a chunk at a time (kvcalc.sweep.compute).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.ground.record import record


@record
class SweepAnswer:
    """What `kvcalc sweep` answers: one row per (kv_heads, kv_dtype, tp, seq_len, batch),
    with exactly the columns of `kvcalc estimate --format csv`, computed when asked for."""

    plan: object  # kvcalc.sweep.plan.SweepPlan: the SPECs checked, one Combo per combination

    @property
    def rows(self) -> int:
        return self.plan.rows

    @property
    def columns(self) -> tuple[str, ...]:
        return self.plan.columns

    @property
    def skipped(self) -> tuple[str, ...]:
        """The (kv_heads, tp) combinations left out (skip_invalid), each with why."""
        return self.plan.skipped

    def chunks(self):
        """The rows, a chunk at a time (kvcalc.sweep.compute.Chunk: numpy columns)."""
        from kvcalc.sweep.compute import chunks

        return chunks(self.plan)

    def row_dicts(self, progress: Callable | None = None) -> list[dict]:
        """Every row as a dict of Python values (floats in full), `progress(chunk)` called
        after each chunk."""
        out: list[dict] = []
        for chunk in self.chunks():
            out.extend(chunk.rows())
            if progress is not None:
                progress(chunk)
        return out

    def as_dict(self) -> list[dict]:
        """`kvcalc sweep --format json`: the rows (a list, one dict per row)."""
        return self.row_dicts()

    def write_csv(self, out, progress: Callable | None = None) -> int:
        """`--format csv` to the binary stream `out`, streamed; the number of rows."""
        from kvcalc.sweep.csv import write_csv

        return write_csv(self.plan, out, progress=progress)

    def write_parquet(self, out, progress: Callable | None = None) -> int:
        """The rows as a Parquet file (needs pyarrow), streamed; the number of rows."""
        from kvcalc.sweep.parquet import write_parquet

        return write_parquet(self.plan, out, progress=progress)

    def frame(self):
        """The rows as one pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.concat([c.to_frame() for c in self.chunks()], ignore_index=True)


def sweep(*, model, seq_len: int | str | Sequence[int] | None = None,
          batch: int | str | Sequence[int] = 1, kv_heads: int | str | Sequence[int] | None = None,
          kv_dtype: str | Sequence[str] = "bf16", tp: int | str | Sequence[int] = 1,
          weight_dtype: str | None = None, group_size: int | None = None,
          gpu="h100-sxm", engine: str | None = None, kv_scale_bytes: int = 0,
          encoder_seq_len: int | None = None, memory_fraction: float | None = None,
          reserve_bytes: int | None = None, skip_invalid: bool = False, force: bool = False,
          variant: Callable[[int], object] | None = None) -> SweepAnswer:
    """estimate() over a grid of configurations: one row per (kv_heads, kv_dtype, tp,
    seq_len, batch).

    `model`: a ModelSpec or MODEL (a preset, Hub id, folder or config file). `seq_len`
    (tokens), `batch` (sequences), `kv_heads` and `tp` (devices) are SPECs: a value (8),
    a list ([1, 8, 32] or "1,8,32"), a linear range "start:stop:+step" or a geometric one
    "start:stop:*factor" (stop included when reached; token counts take suffixes, 1k =
    1,000, 1K = 1,024); `seq_len` defaults to the model's max context (or 4096), `kv_heads`
    to the model's own (each K/V-head count replaces it, its MHA/GQA/MQA variant).
    `kv_dtype`: KV cache dtypes, a comma list ("bf16,fp8"). `weight_dtype`: as estimate
    takes it (default: as the config stores the weights), with scales per `group_size`.
    `gpu`: a Hardware, a hardware preset or a hardware YAML file; "none" leaves the
    device columns out. `engine`: whose time per output token each row adds (vllm,
    sglang, llama.cpp, ...; "roofline": the roofline columns only; default: vLLM on a
    GPU), and whose count decides `fits` (vllm, sglang, tensorrt-llm). Memory in bytes
    (`kv_scale_bytes` per token per K/V head, `reserve_bytes` per device);
    `memory_fraction`: the floor's share of device memory, in (0, 1]. `skip_invalid`:
    leave out (kv_heads, tp) pairs estimate would reject (named in `skipped`) instead of
    failing. `force`: allow more than 50,000,000 rows. `variant(kv_heads)` builds each
    K/V-head variant (default: ModelSpec.with_kv_heads).
    """
    from kvcalc.answers import speed
    from kvcalc.answers.estimate import device_memory
    from kvcalc.answers.fit import DEFAULT_SEQ_LEN
    from kvcalc.sweep.plan import plan_sweep

    hardware = _hardware(gpu)
    fraction, reserve = device_memory(hardware, memory_fraction, reserve_bytes)
    spec = _model(model)
    engine_timed = speed.resolve(speed.engine_option(engine, default=speed.DEFAULT), hardware)
    memory_engine = speed.memory_engine(engine)
    try:
        plan = plan_sweep(
            spec, seq_len if seq_len is not None else str(spec.max_context or DEFAULT_SEQ_LEN),
            batch, kv_heads=kv_heads, kv_dtype=kv_dtype, tp=tp, weight_dtype=weight_dtype,
            group_size=group_size, hardware=hardware, scale_bytes=kv_scale_bytes,
            encoder_seq_len=encoder_seq_len, memory_fraction=fraction, reserve_bytes=reserve,
            force=force, skip_invalid=skip_invalid, engine=engine_timed,
            memory_engine=memory_engine, make_variant=variant)
    except ParameterError:
        raise
    except KvcalcError as e:
        raise _by_parameter(e) from None
    return SweepAnswer(plan=plan)


# The sweep's plan and SPEC grammar word their errors with the command line's flags (the
# grammar reads suffixes by flag); the library says each as its parameter.
_PARAMETERS = {"--seq-len": "seq_len", "--batch": "batch", "--kv-heads": "kv_heads",
               "--kv-dtype": "kv_dtype", "--tp": "tp", "--weight-dtype": "weight_dtype",
               "--group-size": "group_size", "--gpu": "gpu", "--engine": "engine",
               "--kv-scale-bytes": "kv_scale_bytes", "--encoder-seq-len": "encoder_seq_len",
               "--memory-fraction": "memory_fraction", "--reserve": "reserve_bytes",
               "--skip-invalid": "skip_invalid", "--force": "force"}
_FLAG = re.compile(r"--[a-z][a-z-]*[a-z]")


def _by_parameter(e: KvcalcError) -> KvcalcError:
    named: list[str] = []

    def parameter(m: re.Match) -> str:
        name = _PARAMETERS.get(m.group(0))
        if name is None:
            return m.group(0)
        named.append(name)
        return "{" + name + "}"

    template = _FLAG.sub(parameter, literal(e))
    return ParameterError(template, *dict.fromkeys(named)) if named else e


def _hardware(gpu):
    """A Hardware: itself, a hardware preset's name or a hardware YAML file; None for
    None or "none" (no device columns)."""
    if gpu is None or not isinstance(gpu, str):
        return gpu
    if gpu.lower() == "none":
        return None
    from kvcalc.presets import hardware_named

    return hardware_named(gpu)


def _model(model):
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        from kvcalc.model_source import resolve_model

        return resolve_model(model)
    return model
