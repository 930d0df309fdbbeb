"""Time to first token (prefill) and time per output token (decode) on a device.

Both are roofline bounds with stated efficiencies: the larger of the compute time
(FLOPs over the dense peak x `mfu`) and the memory time (bytes over the datasheet
bandwidth x `bandwidth_efficiency`), on one of `tp` devices running in parallel.

Prefill of a batch of prompts of `prompt_len` tokens: every matmul for every prompt
token, causal attention with its quadratic term (windows and chunks applied per
layer), the lm_head for the last position (formulas.prefill_flops); it reads the
weights once, writes each prompt's cache and moves each matmul's activations.
Decode: formulas.decode_step at the context `seq_len`: weights, the cache at that
length, one new token's K/V, activations. Prefill is usually compute-bound and decode
memory-bound, which is why one efficiency of each kind is all the model needs.

Defaults: MFU 0.5 (large prefills reach 40-60% of the dense peak on H100-class parts
in vLLM and SGLang benchmarks) and bandwidth efficiency 0.8 (decode kernels reach
80-90% of HBM bandwidth: ../reference/measurement.md, FlashInfer/FlashMLA figures).
Both are settable and printed with every result. Communication between TP devices and
scheduling overheads are not included.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.speed.roofline import compute_dtype_for, exchanged_dtype_for
from kvcalc.ground.dtypes import MAX_BATCH, check_size, dtype as _dtype
from kvcalc.formulas.cache import KVCache, kv_cache
from kvcalc.formulas.params import ParamCounts, param_counts, weight_params_per_device
from kvcalc.formulas.step import DecodeCost, StoredWeights, decode_step, token_matmuls
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.workload import Workload

DEFAULT_MFU = "0.5"
DEFAULT_BANDWIDTH_EFFICIENCY = "0.8"


def _fraction(value, name: str) -> tuple[int, int]:
    """A share of the peak, exactly as written: (numerator, denominator). Below a
    thousandth is no estimate, and much smaller ones (1e-320) overflow the times."""
    try:
        num, den = _num.exact_ratio(value)
    except (ValueError, ZeroDivisionError):
        raise KvcalcError(f"{name} must be a number in [0.001, 1], got {value!r}") from None
    if not den <= 1000 * num <= 1000 * den:
        raise KvcalcError(f"{name} must be in [0.001, 1], got {value}")
    return num, den


@record
class Latency:
    """Prefill and decode time bounds for one batch on one of `tp` devices (seconds)."""

    prompt_len: int
    seq_len: int
    batch: int
    tp: int
    mfu: float
    bandwidth_efficiency: float
    prefill_flops: int  # one device's share
    prefill_bytes: int
    prefill_compute_s: float
    prefill_memory_s: float
    decode_flops: int
    decode_bytes: int
    decode_compute_s: float
    decode_memory_s: float
    # Calibrated hardware only (0 / "" otherwise): the engine's fixed costs per step and
    # whether they overlap the data movement (a GPU) or add to it (a CPU).
    decode_overhead_s: float = 0.0
    prefill_overhead_s: float = 0.0
    overhead_overlaps: bool = True
    calibration: str = ""  # what the terms were measured on, e.g. "torch-eager on NVIDIA H200"
    # --engine: a prompt's weight read and its math add (True), where the roofline takes
    # the larger of the two.
    prefill_additive: bool = False
    engine: str = ""  # --engine: whose fitted terms, e.g. "llama.cpp: int4 weights at 71% ..."
    engine_name: str = ""  # that engine's name alone

    def _with_overhead(self, data_s: float, overhead_s: float) -> float:
        return max(data_s, overhead_s) if self.overhead_overlaps else data_s + overhead_s

    @property
    def ttft_s(self) -> float:
        """Time to first token: the batch's prompts prefilled together."""
        data_s = (self.prefill_compute_s + self.prefill_memory_s if self.prefill_additive
                  else max(self.prefill_compute_s, self.prefill_memory_s))
        return self._with_overhead(data_s, self.prefill_overhead_s)

    @property
    def tpot_s(self) -> float:
        """Time per output token: one decode step at seq_len."""
        return self._with_overhead(max(self.decode_compute_s, self.decode_memory_s),
                                   self.decode_overhead_s)

    @property
    def prefill_bound(self) -> str:
        return "compute" if self.prefill_compute_s >= self.prefill_memory_s else "memory"

    @property
    def decode_bound(self) -> str:
        return "memory" if self.decode_memory_s >= self.decode_compute_s else "compute"

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput across the batch."""
        return self.batch / self.tpot_s

    def as_dict(self) -> dict:
        return {
            "prompt_len": self.prompt_len, "seq_len": self.seq_len, "batch": self.batch,
            "mfu": self.mfu, "bandwidth_efficiency": self.bandwidth_efficiency,
            "ttft_s": self.ttft_s, "prefill_bound": self.prefill_bound,
            "prefill_flops_per_device": self.prefill_flops,
            "prefill_bytes_per_device": self.prefill_bytes,
            "tpot_s": self.tpot_s, "decode_bound": self.decode_bound,
            "tokens_per_s": self.tokens_per_s,
            **({"engine": self.engine} if self.engine else {}),
            **({"calibration": self.calibration or None,
                "decode_overhead_s": self.decode_overhead_s,
                "prefill_overhead_s": self.prefill_overhead_s,
                "overhead_overlaps": self.overhead_overlaps,
                "decode_memory_s": self.decode_memory_s,
                "decode_compute_s": self.decode_compute_s}
               if self.calibration or self.engine else {}),
        }


@record
class StepFigures:
    """What a workload's prefill and decode move and compute on one device, before any
    device or engine turns them into time (latency_from_figures): the same for every
    engine, so a caller timing one workload on many engines computes them once."""

    prefill_flops: int  # one device's share
    prefill_bytes: int
    step: DecodeCost  # one decode step at seq_len
    compute_dtype: str  # the dtype the matmuls run in
    prefill_attention_flops: int = 0  # the prompts' causal attention, of prefill_flops


def step_figures(spec: ModelSpec, workload: Workload, *, stored: StoredWeights | None = None,
                 step: DecodeCost | None = None, cache: KVCache | None = None,
                 params: ParamCounts | None = None) -> StepFigures:
    """Prefill: FLOPs of the prompts; bytes: weights once, the cache written, activations.
    Decode: one step at seq_len (its per-device figures leave the prefill's out). A
    prompt as long as the context has the figures of the step at seq_len; `step`, `cache`
    and `params` are read when the caller has them."""
    w = workload
    seq_len, prompt_len, batch, tp = w.seq_len, w.prompt_tokens, w.batch, w.tp
    check_size("batch", batch, MAX_BATCH)
    wdt, kdt = w.weight_dtype, w.kv_dtype
    adt = _dtype(compute_dtype_for(wdt))
    same = prompt_len == seq_len
    prompt = step if same and step is not None else decode_step(
        spec, prompt_len, batch, wdt, kdt, adt, tp, w.kv_scale_bytes, w.encoder_seq_len,
        stored=stored)
    prompt_cache = cache if same and cache is not None else kv_cache(
        spec, prompt_len, batch, kdt, tp, w.kv_scale_bytes, w.encoder_seq_len)
    act_per_token = prompt.bytes_breakdown["activations"] // batch
    weights_dev = weight_params_per_device(spec, (params or param_counts(spec)).total, tp)
    weight_bytes = stored.per_device if stored is not None else wdt.nbytes(weights_dev)
    prefill_bytes = (weight_bytes + prompt_cache.bytes_per_device
                     + -(-act_per_token * prompt_len * batch // tp))
    if step is None:
        step = prompt if same else decode_step(
            spec, seq_len, batch, wdt, kdt, adt, tp, w.kv_scale_bytes, w.encoder_seq_len,
            prefill=False, stored=stored)
    attention = batch * sum(n * mx.prefill_flops(prompt_len)
                            for layer, n in spec.groups() for mx in layer.mixers)
    return StepFigures(prefill_flops=-(-prompt.prefill_flops // tp),
                       prefill_bytes=prefill_bytes, step=step, compute_dtype=adt.name,
                       prefill_attention_flops=-(-attention // tp))


def latency(spec: ModelSpec, workload: Workload, *, hardware: Hardware, mfu=DEFAULT_MFU,
            bandwidth_efficiency=DEFAULT_BANDWIDTH_EFFICIENCY,
            stored: StoredWeights | None = None, step: DecodeCost | None = None,
            cache: KVCache | None = None, params: ParamCounts | None = None,
            engine=None, weight_format: str | None = None) -> Latency:
    """TTFT for the workload's batch of prompts (prompt_len tokens, default seq_len) and
    TPOT at its seq_len.

    `step` (decode_step with its prefill FLOPs), `cache` and `params`: the figures at the
    workload's seq_len when the caller has them (estimate does); they are read, not
    computed again. `engine` (kvcalc.engines.Engine): that engine's fitted terms in place
    of the efficiencies; `weight_format` names the weights' format family when the
    workload cannot (a GGUF or EXL2 checkpoint given as stored bytes).
    """
    check_size("batch", workload.batch, MAX_BATCH)  # bad input first, in this order
    _fraction(mfu, "MFU")
    _fraction(bandwidth_efficiency, "bandwidth efficiency")
    figures = step_figures(spec, workload, stored=stored, step=step, cache=cache,
                           params=params)
    return latency_from_figures(spec, workload, figures, hardware=hardware, mfu=mfu,
                                bandwidth_efficiency=bandwidth_efficiency, engine=engine,
                                weight_format=weight_format)


def latency_from_figures(spec: ModelSpec, workload: Workload, figures: StepFigures, *,
                         hardware: Hardware, mfu=DEFAULT_MFU,
                         bandwidth_efficiency=DEFAULT_BANDWIDTH_EFFICIENCY, engine=None,
                         weight_format: str | None = None) -> Latency:
    """latency() from the workload's step_figures: the device's datasheet roofline at the
    efficiencies, its calibration, or `engine`'s fitted terms."""
    w = workload
    seq_len, prompt_len, batch, tp = w.seq_len, w.prompt_tokens, w.batch, w.tp
    prefill_flops, prefill_bytes, step = figures.prefill_flops, figures.prefill_bytes, figures.step
    if hardware.calibration is not None and engine is not None:
        raise ParameterError(literal(f"{hardware.name} is a calibration of "
                                     f"{hardware.calibration.engine} on one device; ")
                             + "{engine} " + literal(engine.name)
                             + " times another engine: give one", "engine")
    if hardware.calibration is not None:
        return _calibrated(hardware, spec, w, prefill_flops, prefill_bytes, step)
    if engine is not None:
        from kvcalc.engines import check_runs, weight_family

        family = weight_format or weight_family(w.weight_dtype.name, w.quantization)
        check_runs(engine, family)
        return _engine_latency(engine, family, hardware, spec, w, figures)
    mfu_n, mfu_d = _fraction(mfu, "MFU")
    bw_n, bw_d = _fraction(bandwidth_efficiency, "bandwidth efficiency")
    peak = hardware.peak_flops(figures.compute_dtype)
    bandwidth = hardware.memory_bandwidth_bytes_per_s

    # Exact ints divided once: Python rounds an int / int quotient correctly.
    def compute_s(flops: int) -> float:
        return flops * mfu_d / (peak * mfu_n)

    def memory_s(nbytes: int) -> float:
        return nbytes * bw_d / (bandwidth * bw_n)

    return Latency(
        prompt_len=prompt_len, seq_len=seq_len, batch=batch, tp=tp,
        mfu=mfu_n / mfu_d, bandwidth_efficiency=bw_n / bw_d,
        prefill_flops=prefill_flops, prefill_bytes=prefill_bytes,
        prefill_compute_s=compute_s(prefill_flops), prefill_memory_s=memory_s(prefill_bytes),
        decode_flops=step.per_device_flops, decode_bytes=step.per_device_bytes,
        decode_compute_s=compute_s(step.per_device_flops),
        decode_memory_s=memory_s(step.per_device_bytes),
    )


def _calibrated(hardware: Hardware, spec: ModelSpec, w: Workload, prefill_flops: int,
                prefill_bytes: int, step: DecodeCost) -> Latency:
    """Latency from a device's own measured terms (Hardware.calibration), no efficiencies:

        decode  = weights / F.linear's streaming rate at `batch` rows and each
                  matmul's input width
                  + K/V / SDPA's K/V streaming rate + activations / the read rate,
                  floored by FLOPs / the prompt-sized matmul rate;
        prefill = FLOPs / the prompt-sized matmul rate, floored by bytes / read rate;
        each with the engine's fixed cost (step + layers x per-layer), which overlaps
        the data movement on a GPU and adds to it on a CPU; under tp, the decode adds
        the step's all-reduces at the file's measured latency and bus bandwidth.
    Under TP each part is one device's own (DecodeCost.per_device_breakdown)."""
    cal = hardware.calibration
    dev = step.per_device_breakdown
    weights_dev, kv_dev, acts_dev = dev["weights"], dev["kv"], dev["activations"]
    # Each matmul's weights at the rate of its own width, weighted by its elements.
    mm = [*token_matmuls(spec), (spec.d_model, spec.vocab, 1)]  # the lm_head too
    elements = sum(i * o * c for i, o, c in mm)
    weight_s_per_byte = sum(i * o * c / cal.linear_rate(w.batch, i) for i, o, c in mm) / elements
    memory_s = (weights_dev * weight_s_per_byte
                + kv_dev / cal.attention_kv_bytes_per_s + acts_dev / cal.read_bytes_per_s)
    overhead_s = cal.step_overhead_s + spec.layers * cal.layer_overhead_s
    if w.tp > 1 and hardware.allreduce_latency_s:  # the calibration's own all-reduce
        from kvcalc.speed.comm import decode_allreduce

        memory_s += decode_allreduce(spec, w.batch, w.tp, cal.dtype,
                                     hardware.interconnect_bandwidth_bytes_per_s,
                                     latency_s=hardware.allreduce_latency_s).time_s
    return Latency(
        prompt_len=w.prompt_tokens, seq_len=w.seq_len, batch=w.batch, tp=w.tp,
        mfu=1.0, bandwidth_efficiency=1.0,
        prefill_flops=prefill_flops, prefill_bytes=prefill_bytes,
        prefill_compute_s=prefill_flops / cal.prefill_flops_per_s,
        prefill_memory_s=prefill_bytes / cal.read_bytes_per_s,
        decode_flops=step.per_device_flops, decode_bytes=step.per_device_bytes,
        decode_compute_s=step.per_device_flops / cal.prefill_flops_per_s,
        decode_memory_s=memory_s,
        decode_overhead_s=overhead_s, prefill_overhead_s=overhead_s,
        overhead_overlaps=cal.overlapped,
        calibration=f"{cal.engine} on {hardware.name} ({cal.dtype}, {cal.measured_at})",
    )


def engine_decode_terms(engine, family: str, hardware: Hardware, step: DecodeCost,
                        layers: int, tp: int, compute_dtype: str) -> tuple:
    """(memory_s, compute_s, serial_s, host_s) of one decode step on one device of tp, on
    `engine` (kvcalc.engines): weights at its bandwidth share for the format family, the
    K/V its attention kernel reads and writes at that kernel's share, activations at its
    16-bit share (else the weights'), FLOPs at its prefill share of the peak; GPU time
    per layer and two all-reduces per layer under tp; host time, which overlaps the
    GPU's. `step`'s figures may be arrays (the sweep's rows)."""
    e_w = engine.efficiency(family)[0]
    e_float = float(engine.bandwidth_efficiency.get("float", e_w))
    bw = hardware.memory_bandwidth_bytes_per_s
    # One device's own bytes: a K/V cache every rank keeps whole is read whole on each
    dev = step.per_device_breakdown
    weights_dev, kv_dev, rest_dev = dev["weights"], dev["kv"], dev["activations"]
    memory_s = (weights_dev / (bw * e_w) + kv_dev / (bw * engine.kv_share(e_float))
                + rest_dev / (bw * e_float))
    compute_s = step.per_device_flops / (engine.peak_flops(hardware, compute_dtype)
                                         * engine.mfu(family)[0])
    serial_s = (layers * engine.layer_s(hardware, family)
                + (2 * layers * engine.allreduce_s if tp > 1 else 0.0))
    host_s = engine.host_step_s + layers * engine.host_layer_s + (tp - 1) * engine.host_rank_s
    return memory_s, compute_s, serial_s, host_s


def engine_tpot_s(terms: tuple):
    """Time per output token from engine_decode_terms: the GPU's larger phase plus its
    serial costs, or the host's time when that is longer (arrays work)."""
    memory_s, compute_s, serial_s, host_s = terms
    gpu_s = _num.where(memory_s >= compute_s, memory_s, compute_s) + serial_s
    return _num.where(gpu_s >= host_s, gpu_s, host_s)


def _engine_latency(engine, family: str, hardware: Hardware, spec: ModelSpec, w: Workload,
                    figures: StepFigures) -> Latency:
    """Latency on `engine`: decode from engine_decode_terms. Prefill: the matmuls' FLOPs
    / (peak x prefill share) and the attention's at the attention kernel's share, plus
    bytes / (bandwidth x weights' share), plus the same serial costs, the request's own
    host time and, under tp, the all-reduces of the prompt's activations at the
    interconnect's bandwidth; at least the host's time per step. The read and the math add: a short prompt's GEMMs wait on the
    weights, a long one's on the math, and the engines' published prompts of 128 to
    8192 tokens sit between (tests/data/published)."""
    step, compute_dtype = figures.step, figures.compute_dtype
    e_w, fitted_w = engine.efficiency(family)
    mfu, fitted_mfu = engine.mfu(family)
    layers = spec.layers
    memory_s, compute_s, serial_s, host_s = engine_decode_terms(
        engine, family, hardware, step, layers, w.tp, compute_dtype)
    prefill_comm_s = 0.0
    if w.tp > 1 and hardware.interconnect_bandwidth_bytes_per_s:
        from kvcalc.speed.comm import decode_allreduce

        prefill_comm_s = decode_allreduce(spec, w.prompt_tokens * w.batch, w.tp,
                                          exchanged_dtype_for(w.weight_dtype),
                                          hardware.interconnect_bandwidth_bytes_per_s).bandwidth_s
    peak = engine.peak_flops(hardware, compute_dtype)
    attention = figures.prefill_attention_flops
    prefill_compute_s = ((figures.prefill_flops - attention) / (peak * mfu)
                         + attention / (peak * (engine.attention_mfu or mfu)))
    extrapolated = [] if fitted_w else [f"{family} bandwidth"]
    extrapolated += [] if fitted_mfu else [f"{family} prefill"]
    label = (f"{engine.name}: {family} weights at {e_w:.0%} of bandwidth, "
             f"{engine.layer_s(hardware, family) * 1e6:.3g} us per layer on the GPU"
             + (f", all-reduce {engine.allreduce_s * 1e6:.3g} us x {2 * layers}"
                if w.tp > 1 else ""))
    if extrapolated:
        label += f" (extrapolated: no published {', '.join(extrapolated)} rows)"
    return Latency(
        prompt_len=w.prompt_tokens, seq_len=w.seq_len, batch=w.batch, tp=w.tp,
        mfu=mfu, bandwidth_efficiency=e_w,
        prefill_flops=figures.prefill_flops, prefill_bytes=figures.prefill_bytes,
        prefill_compute_s=prefill_compute_s,
        prefill_memory_s=figures.prefill_bytes / (hardware.memory_bandwidth_bytes_per_s * e_w)
        + serial_s + prefill_comm_s + engine.request_s,
        decode_flops=step.per_device_flops, decode_bytes=step.per_device_bytes,
        decode_compute_s=compute_s + serial_s, decode_memory_s=memory_s + serial_s,
        decode_overhead_s=host_s, prefill_overhead_s=host_s, overhead_overlaps=True,
        prefill_additive=True, engine=label, engine_name=engine.name,
    )


def max_batch_for_slo(spec: ModelSpec, workload: Workload, *, hardware: Hardware,
                      ttft_s: float | None, tpot_s: float | None, limit: int,
                      mfu=DEFAULT_MFU, bandwidth_efficiency=DEFAULT_BANDWIDTH_EFFICIENCY,
                      stored: StoredWeights | None = None, engine=None) -> int:
    """The largest batch (at most `limit`, e.g. what memory allows) of the workload's
    requests whose TTFT and TPOT both meet their targets; 0 if not even one sequence
    does. Both times grow with the batch, so a binary search over integers is exact."""
    if ttft_s is None and tpot_s is None:
        return limit

    def meets(b: int) -> bool:
        lat = latency(spec, replace(workload, batch=b), hardware=hardware, mfu=mfu,
                      bandwidth_efficiency=bandwidth_efficiency, stored=stored, engine=engine)
        return ((ttft_s is None or lat.ttft_s <= ttft_s)
                and (tpot_s is None or lat.tpot_s <= tpot_s))

    if limit < 1 or not meets(1):
        return 0
    if meets(limit):
        return limit
    return _num.largest(meets, 1, limit)
