"""What every layout of one `kvcalc plan` shares, and how a layout is timed (kvcalc.plan's
module docstring): vLLM's start-up count of a setting, and the times of a batch on it,
kvcalc bench's served run (kvcalc.served.bench) for one pipeline stage on vLLM's own
fitted terms, else the single-step model (kvcalc.speed.latency); and the walk over a setting's
batches.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import field

from kvcalc.errors import ParameterError, literal
from kvcalc.ground.record import record
from kvcalc.serving.room import largest_batch
from kvcalc.serving.vllm.calibration import Calibration
from kvcalc.serving.vllm.capacity import Capacity, serving_capacity
from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.vllm.verdict import room_of
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["MISSES", "REFUSED", "SERVED", "SERVED_PROMPTS", "SINGLE_STEP", "TIMING", "Search",
           "batches", "served_ref", "timing_notes", "walk"]

SERVED_PROMPTS = 3  # a layout's closed loop sends this many requests per slot: steady state
SERVED = "served"  # Layout.timing: kvcalc bench's closed loop (kvcalc.served)
SINGLE_STEP = "single-step"  # Layout.timing: one decode step at the batch (kvcalc.speed.latency)
TIMING = {SERVED: "mean TTFT and mean TPOT of kvcalc bench's closed loop of max_num_seqs "
                  "requests per replica (num_prompts 3 x max_num_seqs, no warm-up), the "
                  "layout's own engine flags, vLLM's fitted and served terms",
          SINGLE_STEP: "kvcalc.speed.latency's single step: TPOT the decode step at the full "
                       "length (pp micro-batches), TTFT the prompts of one scheduler step"}


@record(frozen=False)
class Search:
    """What every layout of one plan shares; the counts, single steps and served runs it
    caches."""

    spec: ModelSpec
    hw: Hardware
    prompt_len: int | None  # None: each layout's max_model_len less the output
    output_len: int
    ttft_s: float | None
    tpot_s: float | None
    engine: object
    base: EngineSettings
    calibration: Calibration | None = None
    ref: object = None  # kvcalc.serving.EngineRef whose served run times pp = 1 layouts
    terms: object = None  # its kvcalc.served.ServedTerms, read once
    replicas: int | None = None  # --data-parallel-size: every layout's (None: as many as fit)
    acceptance_rate: float | None = None  # speculative decoding's, per drafted token
    latencies: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)  # served_times' cache

    def calibrated(self, tp: int, pp: int) -> bool:
        """Whether the layout is the calibration's own (its measured terms apply)."""
        return self.calibration is not None and self.calibration.matches(tp, pp)

    def count(self, tp: int, pp: int, kv: str, util: str, tokens: int | None,
              length: int, seqs: int | None = None) -> Capacity:
        s = self.base.replace(
            tp=tp, pp=pp, kv_dtype=kv, gpu_memory_utilization=util,
            max_num_batched_tokens=tokens, max_num_seqs=seqs, max_model_len=length)
        if self.calibrated(tp, pp):
            s = self.calibration.apply(s)
        return serving_capacity(self.spec, self.hw, s)

    def held(self, cap: Capacity) -> int:
        """Requests of max_model_len the setting holds at once, --max-num-seqs lowered to
        them (the line plan prints): verdict's rule."""
        return largest_batch(room_of(self.spec, cap), lower_max_num_seqs=True)

    def prompt(self, length: int) -> int:
        return self.prompt_len if self.prompt_len is not None else length - self.output_len

    def latency(self, tp: int, kv: str, batch: int, prompt: int):
        """kvcalc.speed.latency of `batch` requests of `prompt` + output tokens on tp devices
        (a pipeline's stages run one after another: the time of all its layers)."""
        key = (tp, kv, batch, prompt)
        if key not in self.latencies:
            from kvcalc.estimate import stored_weights, workload_for
            from kvcalc.speed.latency import latency

            w = workload_for(self.spec, seq_len=prompt + self.output_len, batch=batch,
                             kv_dtype=self.base.model_dtype if kv == "auto" else kv, tp=tp,
                             prompt_len=prompt)
            self.latencies[key] = latency(self.spec, w, hardware=self.hw,
                                          stored=stored_weights(self.spec, w.quantization, tp),
                                          engine=self.engine)
        return self.latencies[key]

    def served(self, pp: int) -> bool:
        """Whether layouts of `pp` stages are timed by bench's served run (module
        docstring): one stage, on vLLM's own fitted terms."""
        return self.ref is not None and pp == 1

    def times(self, s: EngineSettings, batch: int, tokens: int) -> tuple:
        """(ttft_s, tpot_s, output tokens/s of one replica, timing) of `batch` requests
        per replica under settings `s` (its tp, pp, KV dtype, utilization, length; its
        max_num_batched_tokens when given) whose step is `tokens` tokens."""
        if self.served(s.pp):
            return self.served_times(s, batch)
        prompt = self.prompt(s.max_model_len)
        micro = -(-batch // s.pp)  # pp micro-batches in flight
        prompts = max(1, min(batch, tokens // prompt))
        tpot = self.latency(s.tp, s.kv_dtype, micro, prompt).tpot_s
        return (self.latency(s.tp, s.kv_dtype, prompts, prompt).ttft_s, tpot, batch / tpot,
                SINGLE_STEP)

    def bench_flags(self, s: EngineSettings, batch: int) -> dict:
        """The engine flags of the layout's `vllm serve` line at `batch`, by
        kvcalc.serving.flags' names (with a calibration's measured terms where they
        apply): what kvcalc.served.bench counts the engine with."""
        flags = {"gpu_memory_utilization": str(s.gpu_memory_utilization),
                 "max_num_seqs": batch, "max_num_batched_tokens": s.max_num_batched_tokens,
                 "vllm_version": self.base.vllm_version,
                 "allow_long_max_model_len": self.base.allow_long_max_model_len}
        if self.base.speculative_config is not None:  # the draft's pool, its rounds' times
            flags["speculative_config"] = self.base.speculative_config
        if self.base.enable_lora:  # the slots in the pool's count, the kernels in the steps
            flags.update({k: getattr(self.base, k) for k in (
                "enable_lora", "max_loras", "max_lora_rank", "lora_target_modules")})
            flags["lora_dtype"] = None if self.base.lora_dtype == "auto" else self.base.lora_dtype
        if self.calibrated(s.tp, s.pp):
            learnt = self.calibration.apply(self.base)
            flags.update({k: getattr(learnt, k) for k in (
                "weights_bytes", "activation_peak_bytes", "non_torch_bytes",
                "cuda_graph_bytes", "sampler")})
        return flags

    def served_times(self, s: EngineSettings, batch: int) -> tuple:
        """bench's closed loop of `batch` requests on one replica of settings `s`:
        (mean TTFT s, mean TPOT s, output tokens/s, SERVED); cached by layout and batch.
        One output token: its TPOT is the request's whole latency."""
        key = (s.tp, s.pp, s.kv_dtype, str(s.gpu_memory_utilization),
               s.max_num_batched_tokens, s.max_model_len, batch)
        if key not in self.runs:
            from kvcalc.served import Load, bench, served_terms
            from kvcalc.serving import schedule_for

            if self.terms is None:  # bench's own default, read once for every run
                self.terms = served_terms(self.ref.name, schedule_for(self.ref).host_path)
            load = Load(input_len=self.prompt(s.max_model_len), output_len=self.output_len,
                        num_prompts=SERVED_PROMPTS * batch, concurrency=batch, warmup=False)
            r = bench(self.spec, self.hw, load, engine=self.ref, tp=s.tp,
                      kv_dtype=self.base.model_dtype if s.kv_dtype == "auto" else s.kv_dtype,
                      max_model_len=s.max_model_len, engine_flags=self.bench_flags(s, batch),
                      terms=self.terms, acceptance_rate=self.acceptance_rate)
            m = r.metrics
            tpot_ms = m["mean_tpot_ms"] if self.output_len > 1 else m["mean_e2el_ms"]
            self.runs[key] = (m["mean_ttft_ms"] / 1000, tpot_ms / 1000,
                              m["output_throughput"], SERVED)
        return self.runs[key]

    def meets(self, ttft: float, tpot: float) -> bool:
        return ((self.ttft_s is None or ttft <= self.ttft_s)
                and (self.tpot_s is None or tpot <= self.tpot_s))


def served_ref(engine, vllm_version: str):
    """The engine kvcalc.served.bench times pp = 1 layouts with: vLLM at the counted
    release, when `engine` is vLLM's own fitted terms (bench's); None otherwise (the
    roofline, or other terms: the single-step model times every layout)."""
    from kvcalc.engines import load_engine
    from kvcalc.serving import EngineRef

    if engine is None or engine != load_engine("vllm")[0]:
        return None
    return EngineRef("vllm", vllm_version)


def timing_notes(search: Search, best, untimed: int) -> list[str]:
    """Which model timed the ranked layouts, and what it left out."""
    if best.timing == SERVED:
        out = [f"times: mean TTFT and mean TPOT of a closed loop of --max-num-seqs requests "
               f"per replica ({SERVED_PROMPTS} x that many sent), as `kvcalc bench "
               f"--concurrency` predicts it"]
        if untimed:
            out.append(f"{untimed:,} pipeline-parallel (pp > 1) layouts also start but are "
                       f"not timed or ranked: kvcalc bench has no pipeline model")
        return out
    if search.ref is None:
        return [f"times: {TIMING[SINGLE_STEP]} (kvcalc bench times vLLM's own terms only)"]
    return [f"times: no pp = 1 layout starts and meets the targets; the pp > 1 ones are "
            f"timed on {TIMING[SINGLE_STEP]} (kvcalc bench has no pipeline model)"]


MISSES, REFUSED = "misses", "refused"  # a batch over the targets; one bench's count refuses


def walk(rows: dict, at) -> None:
    """Time the batches of each shape (`rows`: shape -> its batches, smallest first;
    `at(shape, i)`: the i-th timed, a layout or MISSES or REFUSED, cached by the caller),
    each shape's up to the first that misses the targets: times grow with the batch.
    Every other batch is timed: the served model's throughput need not grow with the
    batch (a closed loop's waves), so no batch is left out on a bound."""
    for shape, batches in rows.items():
        for i in range(len(batches)):
            if at(shape, i) is MISSES:
                break


def batches(top: int) -> list[int]:
    """Powers of two below `top`, then `top`: the front from one user to the most."""
    out = [1 << i for i in range(max(top, 1).bit_length()) if (1 << i) < top]
    return out + [top] if top >= 1 else []


def start_length(spec, max_model_len, prompt_len, output_len, allow_long) -> int:
    """The max_model_len plan's search starts from (kvcalc.plan.plan)."""
    context = spec.max_context or 0
    if max_model_len == "auto":
        if not context:
            raise ParameterError("{max_model_len} auto needs the model's context, and "
                                 + literal(spec.name) + " states none: give a number",
                                 "max_model_len")
        return context
    if max_model_len is not None:
        return max_model_len
    if prompt_len is not None and output_len is not None:
        return prompt_len + output_len
    if not context:
        raise ParameterError(literal(spec.name) + " states no context length: give "
                             "{max_model_len}", "max_model_len")
    return context
