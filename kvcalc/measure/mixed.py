"""A served scheduler step, measured: `batch` decode tokens at `seq_len` with a chunk of
`prefill_tokens` prompt tokens carried in the same forward pass (`kvcalc measure --step
mixed`), the step kvcalc's served-load model (`kvcalc bench`) times under continuous
batching. Pure integer math here, no torch; the forward itself is
kvcalc.measure.mixed_step.

The chunk is part of one prompt: it starts at position `prefill_start`, so its causal
attention covers those earlier, cached positions too (query i of the chunk sees positions
0 .. prefill_start + i). What it costs, from kvcalc's formulas (reused, not derived again):

- decode part: formulas.decode_step at (seq_len, batch): every matmul for the batch's
  tokens and the lm_head, weights once, the K/V read at seq_len and one token's written,
  activations.
- prefill part: FLOPs from latency.step_figures (the prompt FLOPs of a prompt of
  prefill_start + prefill_tokens tokens less those of one of prefill_start: every matmul
  for each chunk token, no lm_head, and the causal attention of positions prefill_start+1
  .. prefill_start + prefill_tokens); bytes: the chunk's K/V read at its prefix plus
  itself and written for its tokens (formulas.kv_cache), and what its tokens add to the
  step's weight and activation bytes (decode_step at batch + prefill_tokens less at
  batch: their embedding rows and kvcalc's activation bytes per token, which count the
  lm_head's input and output for every token, so an upper bound for a chunk that samples
  none). The weights are read once for the whole step: they are the decode part's.

Predicted time: max(all bytes / the read ceiling, all FLOPs / the matmul ceiling), both
measured on this device in the same run; each part's bytes and FLOPs at those ceilings
show which part dominates.
"""

from __future__ import annotations

from dataclasses import field, replace

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_BATCH, MAX_SEQ_LEN
from kvcalc.errors import KvcalcError, ParameterError, literal

STEP = "mixed"
SEQ_LEN = {"cuda": 1024, "cpu": 256}  # --step model's defaults


@record
class MixedConfig:
    """One mixed step to run: `batch` decode sequences at `seq_len` cached tokens and a
    chunk of `prefill_tokens` prompt tokens starting at position `prefill_start`.

    `spec` is a kvcalc.spec.ModelSpec (dense decoders with full attention only, as
    `--step model` runs them). None for dtype, warmup and iters: the device's defaults."""

    spec: object
    batch: int = 1
    seq_len: int | None = None  # the device's default: 1,024 on a GPU, 256 on a CPU
    prefill_tokens: int = 0
    prefill_start: int = 0
    dtype: str | None = None
    device: str = "auto"
    warmup: int | None = None
    iters: int | None = None
    cuda_graphs: bool = False
    ceilings_cache: object = None  # a path: reuse (or store) the ceilings there
    ceiling_buffer_bytes: int | None = None  # tests only: smaller ceiling buffers
    memory_fraction: float = 0.85

    def __post_init__(self) -> None:
        checks = (("batch", self.batch, 1, MAX_BATCH), ("seq_len", self.seq_len, 1, MAX_SEQ_LEN),
                  ("prefill_tokens", self.prefill_tokens, 0, MAX_SEQ_LEN),
                  ("prefill_start", self.prefill_start, 0, MAX_SEQ_LEN))
        for name, value, low, high in checks:
            if value is None and name == "seq_len":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParameterError("{" + name + "} takes a whole number, got "
                                     + literal(repr(value)), name)
            if value < low:
                raise ParameterError("{" + name + f"}} must be >= {low} (got {value:,})"
                                     + ("; a step needs at least one decode token (a "
                                        "prefill-only step is not measured here)"
                                        if name == "batch" else ""), name)
            if value > high:
                raise ParameterError("{" + name + f"}} {value:,} is absurdly large (limit "
                                     f"{high:,})", name)
        if self.prefill_start and not self.prefill_tokens:
            raise ParameterError("{prefill_start} places a chunk: give {prefill_tokens} too",
                                 "prefill_start", "prefill_tokens")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ParameterError("{device} must be one of auto, cuda, cpu, got "
                                 + literal(repr(self.device)), "device")
        if self.prefill_start + self.prefill_tokens > MAX_SEQ_LEN:
            raise ParameterError("{prefill_start} + {prefill_tokens} is absurdly large "
                                 f"(limit {MAX_SEQ_LEN:,})", "prefill_start", "prefill_tokens")
        for name, value in (("warmup", self.warmup), ("iters", self.iters)):
            if value is not None and (value < (1 if name == "iters" else 0) or value > 100_000):
                raise ParameterError("{" + name + f"}} must be between "
                                     f"{1 if name == 'iters' else 0} and 100,000 (got {value:,})",
                                     name)


@record
class MixedPrediction:
    """Bytes and FLOPs of one mixed step, split into its decode and prefill parts (each
    breakdown keyed as formulas.decode_step's)."""

    decode_bytes: dict[str, int]
    decode_flops: dict[str, int]
    prefill_bytes: dict[str, int]
    prefill_flops: dict[str, int]

    @property
    def decode_bytes_total(self) -> int:
        return sum(self.decode_bytes.values())

    @property
    def decode_flops_total(self) -> int:
        return sum(self.decode_flops.values())

    @property
    def prefill_bytes_total(self) -> int:
        return sum(self.prefill_bytes.values())

    @property
    def prefill_flops_total(self) -> int:
        return sum(self.prefill_flops.values())

    @property
    def bytes(self) -> int:
        return self.decode_bytes_total + self.prefill_bytes_total

    @property
    def flops(self) -> int:
        return self.decode_flops_total + self.prefill_flops_total

    def times(self, read_bytes_per_s: float, matmul_flops_per_s: float) -> dict:
        """Seconds at the ceilings: each part's memory and compute time, the step's
        max(bytes / read, FLOPs / matmul), what bounds it and which part dominates that."""
        dm = self.decode_bytes_total / read_bytes_per_s
        dc = self.decode_flops_total / matmul_flops_per_s
        pm = self.prefill_bytes_total / read_bytes_per_s
        pc = self.prefill_flops_total / matmul_flops_per_s
        memory, compute = dm + pm, dc + pc
        bound = "memory" if memory >= compute else "compute"
        decode_share, prefill_share = (dm, pm) if bound == "memory" else (dc, pc)
        return {
            "predicted_s": max(memory, compute),
            "predicted_memory_s": memory, "predicted_compute_s": compute,
            "predicted_decode_memory_s": dm, "predicted_decode_compute_s": dc,
            "predicted_prefill_memory_s": pm, "predicted_prefill_compute_s": pc,
            # the decode step alone, and what the chunk adds to the step (the marginal)
            "predicted_decode_s": max(dm, dc),
            "predicted_prefill_added_s": max(memory, compute) - max(dm, dc),
            "bound": bound,
            "dominant": "prefill" if prefill_share > decode_share else "decode",
        }


def mixed_prediction(spec, batch: int, seq_len: int, prefill_tokens: int,
                     prefill_start: int, dtype: str) -> MixedPrediction:
    """The mixed step's bytes and FLOPs from kvcalc's formulas (module docstring), every
    tensor in `dtype` (weights, K/V and activations, as measure runs them)."""
    from kvcalc.formulas.cache import kv_cache
    from kvcalc.formulas.step import decode_step
    from kvcalc.speed.latency import step_figures
    from kvcalc.workload import Workload

    dec = decode_step(spec, seq_len, batch, dtype, dtype, dtype, prefill=False)
    p, s = prefill_tokens, prefill_start
    if p == 0:
        zero = {"weights": 0, "kv_read": 0, "kv_write": 0, "activations": 0}
        return MixedPrediction(dict(dec.bytes_breakdown), dict(dec.flops_breakdown), zero,
                               {"projections_and_mlp": 0, "attention": 0})
    base = Workload(seq_len=1, batch=1, kv_dtype=dtype, weight_dtype=dtype)

    def prompt(n: int) -> tuple[int, int]:
        """(matmul FLOPs, causal attention FLOPs) of one n-token prompt's prefill."""
        f = step_figures(spec, replace(base, seq_len=n, prompt_len=n))
        return f.prefill_flops - f.prefill_attention_flops, f.prefill_attention_flops

    end_mm, end_attn = prompt(s + p)
    if s:
        start_mm, start_attn = prompt(s)
    else:
        # Prompt FLOPs are linear in the tokens but for the attention and one lm_head:
        # the matmuls of p tokens are those of 2p tokens less those of p.
        double_mm, _ = prompt(2 * p)
        start_mm, start_attn = 2 * end_mm - double_mm, 0
    with_chunk = decode_step(spec, seq_len, batch + p, dtype, dtype, dtype, prefill=False)
    cache = kv_cache(spec, s + p, 1, dtype)
    prefill_bytes = {
        "weights": with_chunk.bytes_breakdown["weights"] - dec.bytes_breakdown["weights"],
        "kv_read": cache.bytes,
        "kv_write": cache.bytes_per_token * p,
        "activations": (with_chunk.bytes_breakdown["activations"]
                        - dec.bytes_breakdown["activations"]),
    }
    return MixedPrediction(
        dict(dec.bytes_breakdown), dict(dec.flops_breakdown), prefill_bytes,
        {"projections_and_mlp": end_mm - start_mm, "attention": end_attn - start_attn})


@record
class MixedRow:
    """One timed step: the mixed step, or the same step without its chunk (`step`
    "decode"), measured beside its prediction at the ceilings."""

    step: str  # "mixed" or "decode"
    model: str
    layers: int
    dtype: str
    batch: int
    seq_len: int
    prefill_tokens: int
    prefill_start: int
    prediction: MixedPrediction
    predicted: dict  # MixedPrediction.times at the run's ceilings
    median_s: float
    p10_s: float
    p90_s: float
    min_s: float
    iters: int
    timer: str
    cuda_graphs: bool
    host: dict = field(default_factory=dict)  # load, other processes' and steal cores
    note: str = ""

    def as_dict(self) -> dict:
        p, t = self.prediction, self.predicted
        return {
            "step": self.step, "model": self.model, "layers": self.layers, "dtype": self.dtype,
            "batch": self.batch, "seq_len": self.seq_len, "prefill_tokens": self.prefill_tokens,
            "prefill_start": self.prefill_start, "engine": "torch-eager",
            "median_s": self.median_s, "p10_s": self.p10_s, "p90_s": self.p90_s,
            "min_s": self.min_s, "iters": self.iters, "timer": self.timer,
            "cuda_graphs": self.cuda_graphs,
            **t, "measured_over_predicted": self.median_s / t["predicted_s"],
            "bytes": p.bytes, "flops": p.flops,
            "decode_bytes": p.decode_bytes_total, "decode_flops": p.decode_flops_total,
            "prefill_bytes": p.prefill_bytes_total, "prefill_flops": p.prefill_flops_total,
            "decode_bytes_breakdown": dict(p.decode_bytes),
            "decode_flops_breakdown": dict(p.decode_flops),
            "prefill_bytes_breakdown": dict(p.prefill_bytes),
            "prefill_flops_breakdown": dict(p.prefill_flops),
            **self.host, "note": self.note,
        }


@record
class MixedResult:
    """A `--step mixed` run: the device, the ceilings the predictions divide by, what
    ran, and its rows (the decode step alone first, then the mixed step)."""

    device: dict
    ceilings: dict
    config: dict
    rows: tuple[MixedRow, ...]

    def row_dicts(self) -> list[dict]:
        """Every row flat, with the device's name, torch and CUDA versions (CSV's form)."""
        d = self.device
        stamp = {"device": d["name"], "torch_version": d["torch_version"],
                 "cuda_version": d.get("cuda_version"), "measured_at": self.config["measured_at"]}
        return [{**stamp, **r.as_dict()} for r in self.rows]

    def measured_prefill_added_s(self) -> float | None:
        """The mixed step's median less the decode step's: what the chunk cost."""
        by = {r.step: r for r in self.rows}
        if "mixed" not in by or "decode" not in by:
            return None
        return by["mixed"].median_s - by["decode"].median_s

    def as_dict(self) -> dict:
        return {"device": dict(self.device), "ceilings": dict(self.ceilings),
                "config": dict(self.config), "rows": self.row_dicts(),
                "measured_prefill_added_s": self.measured_prefill_added_s()}
