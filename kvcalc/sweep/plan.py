"""The sweep's plan: the SPECs checked, and one Combo per (kv_heads, kv_dtype, tp).

Nothing per row is computed here: a plan holds the model, the SPECs and, for each
combination, the model variant and the row columns that do not vary with seq_len or
batch (parameters, weight bytes, the device's memory after the weights). Row order:
kv_heads, then tp, then kv_dtype (each as given in its SPEC), then seq_len, then
batch (fastest).
"""

from __future__ import annotations

from dataclasses import field
from typing import Callable, Sequence

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import (
    MAX_BATCH,
    MAX_SEQ_LEN,
    MAX_TP,
    MAX_WIDTH,
    DType,
    WEIGHT_FORMATS,
    check_size,
    dtype as _dtype,
    weight_dtype as _weight_dtype,
)
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.estimate import check_encoder_len, stored_weights, weights_as
from kvcalc.serving.vllm.settings import EngineSettings, settings_for
from kvcalc.floor import free_for_kv_bytes
from kvcalc.formulas.cache import kv_cache, kv_heads_per_device
from kvcalc.formulas.params import param_counts
from kvcalc.formulas.step import StoredWeights
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.workload import Memory, Workload
from kvcalc.sweep.grammar import Spec, parse_names, parse_spec

ROW_LIMIT = 50_000_000  # rows above which a sweep needs force=True (--force)

# The columns of Estimate.as_row(), in its order (tests/test_sweep.py holds them to it).
BASE_COLUMNS = (
    "model", "attention", "layers", "heads", "kv_heads", "head_dim", "seq_len", "batch",
    "kv_dtype", "weight_dtype", "tp", "kv_bytes_per_token", "kv_cache_bytes",
    "kv_cache_bytes_full", "kv_cache_bytes_per_device", "params_total", "params_attention",
    "weight_bytes", "decode_flops", "decode_bytes", "arithmetic_intensity",
    "attention_arithmetic_intensity",
)

HARDWARE_COLUMNS = ("gpu", "roofline_s", "roofline_bound", "tokens_per_s",
                    "free_for_kv_bytes_per_device", "fits", "floor_fits")
ENGINE_COLUMNS = ("engine", "tpot_s")  # with --engine: its time per output token
FLOAT_COLUMNS = ("arithmetic_intensity", "attention_arithmetic_intensity", "roofline_s",
                 "tokens_per_s", "tpot_s")


@record
class Combo:
    """One (kv_heads, kv_dtype, tp) combination: the model variant and the workload its
    rows share (each row has its own seq_len and batch: the chunk's arrays, which
    compute.row_columns takes)."""

    spec: ModelSpec
    workload: Workload  # seq_len 1, batch 1: placeholders for the rows' own
    constants: dict  # the row's columns that do not depend on seq_len or batch
    hardware: Hardware | None = None
    free_bytes: int | None = None  # device memory after this combination's weights
    stored: StoredWeights | None = None  # quantized weights as stored
    engine: object = None  # kvcalc.engines.Engine, for the tpot_s column
    family: str = ""  # the weights' format family on that engine
    # The verdict's engine settings (max_model_len set per row) and the engine's counts
    # made so far (kvcalc.serving.vllm.verdict.rooms), filled as chunks need them
    serving: EngineSettings | None = None
    counts: dict = field(default_factory=dict)
    # Another engine whose count decides `fits` (kvcalc.serving.EngineRef): SGLang,
    # TensorRT-LLM; None: vLLM's (the settings above)
    memory_engine: object = None

    @property
    def kv_heads(self) -> int:
        a = self.spec.attention_shape
        return a and a.kv_heads


@record
class SweepPlan:
    """What to compute: the model, the SPECs, the fixed settings, and the combinations."""

    spec: ModelSpec
    seq_len: Spec
    batch: Spec
    kv_heads: tuple[int, ...]
    kv_dtypes: tuple[str, ...]
    tps: tuple[int, ...]
    weight_dtype: str  # the dtype's name (bf16 when the weights are as stored)
    hardware: Hardware | None
    scale_bytes: int
    encoder_seq_len: int | None
    memory_fraction: float | str
    reserve_bytes: int
    combos: tuple[Combo, ...]
    skipped: tuple[str, ...] = ()  # combinations estimate() rejects, when skip_invalid
    weight_arg: str | None = None  # --weight-dtype as given (None: as the config stores)
    group_size: int | None = None
    engine: object = None  # kvcalc.engines.Engine or None

    @property
    def columns(self) -> tuple[str, ...]:
        return BASE_COLUMNS + (HARDWARE_COLUMNS if self.hardware is not None else ()) + (
            ENGINE_COLUMNS if self.engine is not None else ())

    @property
    def rows_per_combo(self) -> int:
        return self.seq_len.count * self.batch.count

    @property
    def rows(self) -> int:
        return self.rows_per_combo * len(self.combos)


def _combo(spec: ModelSpec, workload: Workload, *, memory: Memory | None,
           engine=None, memory_engine=None) -> Combo:
    w = workload
    kv_heads_per_device(spec, w.tp)  # raises on a bad tp
    stored = stored_weights(spec, w.quantization, w.tp)
    params = param_counts(spec)
    cache = kv_cache(spec, 1, 1, w.kv_dtype, w.tp, w.kv_scale_bytes, w.encoder_seq_len)
    constants = {
        "model": spec.name, "attention": spec.attention_kind, "layers": spec.layers,
        **_heads(spec),
        "kv_dtype": w.kv_dtype.name, "weight_dtype": w.weight_label, "tp": w.tp,
        "kv_bytes_per_token": cache.bytes_per_token,
        "params_total": params.total, "params_attention": params.attention,
        "weight_bytes": stored.total if stored else w.weight_dtype.nbytes(params.total),
    }
    free = serving = None
    if memory is not None:
        serving = settings_for(w)
        if memory_engine is not None and memory_engine.name == "vllm":
            from kvcalc.serving.vllm import release_settings

            serving = serving.replace(**release_settings(memory_engine.release))
        free = free_for_kv_bytes(spec, w, memory=memory, stored=stored)
        constants["gpu"] = memory.hardware.name
        constants["free_for_kv_bytes_per_device"] = free
    family = ""
    if engine is not None:
        from kvcalc.engines import check_runs, weight_family

        family = weight_family(w.weight_dtype.name, w.quantization)
        check_runs(engine, family)
        constants["engine"] = engine.name
    return Combo(spec=spec, workload=w, constants=constants,
                 hardware=memory.hardware if memory is not None else None,
                 free_bytes=free, stored=stored, engine=engine, family=family,
                 serving=serving, memory_engine=memory_engine)


def _as_tuple(value, name: str, upper: int) -> tuple[int, ...]:
    spec = parse_spec(value, name)
    if spec.count > 4096:
        raise KvcalcError(f"{name} {spec.text!r} has {spec.count:,} values; at most 4,096 allowed")
    check_size(name.lstrip("-").replace("-", "_"), spec.max, upper)
    return tuple(spec.values())


def _heads(spec: ModelSpec) -> dict:
    """The heads columns: the attention most layers have (empty without attention)."""
    a = spec.attention_shape
    return {"heads": a and a.heads, "kv_heads": a and a.kv_heads, "head_dim": a and a.head_dim}


def variant(spec: ModelSpec, kv_heads: int) -> ModelSpec:
    """The model with `kv_heads` K/V heads, as `--kv-heads` makes it (unchanged if equal)."""
    a = spec.attention_shape
    return spec if a is None or kv_heads == a.kv_heads else spec.with_kv_heads(kv_heads)


def plan_sweep(
    spec: ModelSpec,
    seq_len: str | int | Sequence[int] | Spec,
    batch: str | int | Sequence[int] | Spec = 1,
    *,
    kv_heads: str | int | Sequence[int] | Spec | None = None,
    kv_dtype: str | Sequence[str] = "bf16",
    tp: str | int | Sequence[int] | Spec = 1,
    weight_dtype: DType | str | None = None,
    hardware: Hardware | None = None,
    scale_bytes: int = 0,
    encoder_seq_len: int | None = None,
    memory_fraction: float | str = 1,
    reserve_bytes: int = 0,
    force: bool = False,
    group_size: int | None = None,
    skip_invalid: bool = False,
    make_variant: Callable[[int], ModelSpec] | None = None,
    engine=None,
    memory_engine=None,
) -> SweepPlan:
    """Validate a sweep and work out its combinations; nothing per row is computed yet.

    Arguments are those of `estimate()`, where seq_len, batch, kv_heads, kv_dtype
    and tp may be SPECs (strings), ints or lists. kv_heads=None keeps the model's;
    MLA models have no K/V heads to sweep. A (kv_heads, tp) pair estimate() would
    reject raises, or with skip_invalid is left out and named in `plan.skipped`.
    More than ROW_LIMIT rows needs force=True. `engine` (kvcalc.engines.Engine, with
    hardware) adds each row's time per output token on it; `memory_engine`
    (kvcalc.serving.EngineRef, SGLang or TensorRT-LLM) decides `fits` by that engine's
    count instead of vLLM's.
    `make_variant(kv_heads)` builds each K/V-head variant (default `variant`; the
    CLI passes its own, so that rows match `kvcalc estimate --kv-heads` exactly).
    """
    seq = parse_spec(seq_len, "--seq-len")
    bat = parse_spec(batch, "--batch")
    check_size("seq_len", seq.max, MAX_SEQ_LEN)
    check_size("batch", bat.max, MAX_BATCH)
    if kv_heads is None:
        heads = (spec.attention_shape and spec.attention_shape.kv_heads,)
    else:
        if spec.attention_free:
            raise ParameterError(literal(f"{spec.name} has no attention ({spec.state_mixers} "
                                         "layers only)") + ": there are no K/V heads to sweep; "
                                 "drop {kv_heads}", "kv_heads")
        if spec.mla is not None:
            raise ParameterError(literal(spec.name) + " uses MLA: its cache is one shared "
                                 "latent, so there are no K/V heads to sweep; drop {kv_heads}",
                                 "kv_heads")
        heads = _as_tuple(kv_heads, "--kv-heads", MAX_WIDTH)
    kdts = parse_names(kv_dtype, "--kv-dtype")
    tps = _as_tuple(tp, "--tp", MAX_TP)
    # None: weights as the config stores them (quantization_config, else bf16).
    wdt = _dtype("bf16") if weight_dtype is None else (
        weight_dtype if isinstance(weight_dtype, DType) else _weight_dtype(weight_dtype))
    weight_arg = None if weight_dtype is None else wdt.name
    if isinstance(weight_dtype, str) and weight_dtype.strip().lower() in WEIGHT_FORMATS:
        weight_arg = weight_dtype.strip().lower()  # awq, gptq: their layout, int4 values
    quantization = weights_as(spec, weight_arg, group_size)
    if encoder_seq_len is not None:
        check_size("encoder_seq_len", encoder_seq_len, MAX_SEQ_LEN)

    total = seq.count * bat.count * len(heads) * len(kdts) * len(tps)
    if total > ROW_LIMIT and not force:
        raise ParameterError(f"the sweep has {total:,} rows, over the {ROW_LIMIT:,}-row limit; "
                             "narrow a SPEC or pass {force}", "force")

    if engine is not None and hardware is None:
        raise ParameterError("{engine} times the rows on a device: give {gpu} NAME", "engine",
                             "gpu")
    memory = None if hardware is None else Memory(hardware=hardware, fraction=memory_fraction,
                                                  reserve_bytes=reserve_bytes)
    combos: list[Combo] = []
    skipped: list[str] = []
    for g in heads:
        try:
            if kv_heads is None:  # the model as it is (a Mamba model has no K/V heads to set)
                spec_g = spec
            else:
                spec_g = make_variant(g) if make_variant is not None else variant(spec, g)
        except KvcalcError as e:
            if not skip_invalid:
                raise ParameterError("{kv_heads} " + literal(f"{g}: {e}"), "kv_heads") from None
            skipped.append(f"kv_heads={g}: {e}")
            continue
        for t in tps:
            try:
                kv_heads_per_device(spec_g, t)
            except KvcalcError as e:
                if not skip_invalid:
                    raise ParameterError(literal(f"kv_heads={g}, tp={t}: {e}") + " ({skip_invalid} "
                                         "leaves such combinations out)", "skip_invalid") from None
                skipped.append(f"kv_heads={g}, tp={t}: {e}")
                continue
            for kname in kdts:
                w = Workload(seq_len=1, batch=1, kv_dtype=_dtype(kname), weight_dtype=wdt, tp=t,
                             kv_scale_bytes=scale_bytes, encoder_seq_len=encoder_seq_len,
                             quantization=quantization)
                combos.append(_combo(spec_g, w, memory=memory, engine=engine,
                                     memory_engine=memory_engine))
    if not combos:
        raise KvcalcError("no valid combination left to sweep: " + "; ".join(skipped))
    # The settings estimate() refuses that building the combinations does not check
    # (the rows never go through estimate() itself).
    check_encoder_len(combos[0].spec, encoder_seq_len)
    if scale_bytes:
        check_size("kv_scale_bytes", scale_bytes, 64)
    return SweepPlan(spec=spec, seq_len=seq, batch=bat, kv_heads=heads, kv_dtypes=kdts,
                     tps=tps, weight_dtype=wdt.name, weight_arg=weight_arg,
                     group_size=group_size, hardware=hardware, scale_bytes=scale_bytes,
                     encoder_seq_len=encoder_seq_len, memory_fraction=memory_fraction,
                     reserve_bytes=reserve_bytes, combos=tuple(combos), skipped=tuple(skipped),
                     engine=engine)
