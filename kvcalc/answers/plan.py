"""`kvcalc plan` as a library function: `kvcalc.plan(model=..., gpu=..., gpus=...)` returns
a PlanAnswer whose `as_dict()` is `kvcalc plan --format json`, exactly
(tests/test_answers_plan_bench.py holds them equal on the golden cases).

vLLM's layouts of up to `gpus` devices are searched under its start-up count and the
latency targets (kvcalc.plan), the best by output tokens/s per GPU with its `vllm serve`
line; engine "sglang", "tensorrt-llm", a comma-separated list or "any" plans each of those
engines under its own count (kvcalc.plan.engines), the winner first. No layout serves:
kvcalc.plan.NothingFits (NoEngineServes when several engines were asked, one reason each).
"""

from __future__ import annotations

from kvcalc.answers.given import device, model_spec, owned, sized, unexpected
from kvcalc.errors import ParameterError, literal
from kvcalc.ground.record import record
from kvcalc.plan import NothingFits, Plan
from kvcalc.plan.engines import EnginePlan

# Another engine's speculative flags and SGLang's LoRA slots, by name (plan's
# **engine_flags): kvcalc.serving.flags says whose each is.
ENGINE_FLAGS = ("speculative_algorithm", "speculative_draft_model_path",
                "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "extra_llm_api_options", "max_loras_per_batch")
_LORA = ("enable_lora", "max_loras", "max_loras_per_batch", "max_lora_rank", "lora_dtype",
         "lora_target_modules")
# The launch features in the order they are checked (the first wrong one is said)
_FEATURES = ("speculative_config", *ENGINE_FLAGS[:-1], *_LORA, "limit_mm_per_prompt",
             "mm_encoder_tp_mode")


class NoEngineServes(NothingFits):
    """No engine asked for serves a layout: each one's reason (`refusals`), a line each."""

    def __init__(self, refusals: tuple[str, ...]):
        self.refusals = tuple(refusals)
        super().__init__("; ".join(self.refusals))


@record
class PlanAnswer:
    """What `kvcalc plan` answers: `as_dict()` is its JSON, `rows()` its CSV. vLLM's plan
    (`plan`, kvcalc.plan.Plan), or with several engines (or one other than vLLM) each
    engine's best (`engines`, the winner by tokens/s per GPU first) and why the others
    serve nothing (`refusals`)."""

    plan: Plan | None  # vLLM's search: its front, best layout and launch line
    engines: tuple[EnginePlan | Plan, ...] = ()  # each engine's (Plan for vLLM's), best first
    refusals: tuple[str, ...] = ()  # an engine that serves no layout: why, one line each

    def as_dict(self) -> dict:
        if self.plan is not None:
            return self.plan.as_dict()
        return {"engines": [p.as_dict() for p in self.engines],
                "winner": engine_name(self.engines[0])}

    def rows(self) -> list[dict]:
        """One row a front layout (vLLM's plan), or a row an engine's best layout."""
        if self.plan is not None:
            return [x.as_dict() for x in self.plan.front]
        return [{"engine": engine_name(p), **p.best.as_dict(), "command": p.command}
                for p in self.engines]


def engine_name(p) -> str:
    """An engine plan's engine; vLLM's Plan names its timing terms instead."""
    return p.engine.name if hasattr(p.engine, "release") else "vllm"


def plan(*, model, gpu="h100-sxm", gpus: int = 1, max_model_len: int | str | None = None,
         concurrency: int | None = None, prompt_len: int | None = None,
         output_len: int | None = None, ttft_ms: float | None = None,
         tpot_ms: float | None = None, engine: str | None = None,
         vllm_version: str | None = None, calibration=None,
         speculative_config: str | None = None, acceptance_rate: float | None = None,
         enable_lora: bool = False, max_loras: int | None = None,
         max_lora_rank: int | None = None, lora_dtype: str | None = None,
         lora_target_modules: str | None = None, limit_mm_per_prompt: str | None = None,
         mm_encoder_tp_mode: str | None = None, data_parallel_size: int | None = None,
         enable_expert_parallel: bool = False, disaggregated: bool = False,
         transfer_bandwidth_gb_per_s: float | None = None,
         launch_model: str | None = None, **engine_flags) -> PlanAnswer:
    """The layouts up to `gpus` devices allow, the best by output tokens/s per GPU, and
    its launch line.

    `model`: a ModelSpec or MODEL (a preset, Hub id, folder or config file); `gpu`: a
    Hardware, a hardware preset or a hardware YAML file, every device alike; `gpus`: the
    devices (tensor x pipeline parallel x replicas), at most. Lengths in tokens
    (`max_model_len`: a number or "auto", the longest each layout fits; `prompt_len`,
    `output_len`), `concurrency` in requests across all replicas, latency targets in
    milliseconds (`ttft_ms`, `tpot_ms`), `acceptance_rate` a share in [0, 1].
    `engine`: vllm (default), sglang or tensorrt-llm (@release), a list ("vllm,sglang")
    or "any", each under its own count; "roofline": vLLM's on the datasheet roofline.
    `vllm_version`: whose count (default 0.33, or the calibration's). `calibration`: a
    file `kvcalc check LOG -o FILE` wrote, measured terms for its tp and pp. vLLM's
    speculative, LoRA and multimodal parameters by their vLLM names; another engine's by
    its own (`engine_flags`: speculative_algorithm, extra_llm_api_options, ...).
    `disaggregated`: also prefill and decode on separate instances (xPyD), the KV moved
    at `transfer_bandwidth_gb_per_s` per GPU in GB/s (1e9 bytes a second; default the
    device's interconnect). `launch_model`: the name the launch line gives the model
    (default: MODEL as given for a Hub id or folder, else the preset's Hub id).
    """
    unexpected("plan", engine_flags, ENGINE_FLAGS)
    hardware, length = device(gpu, "plan"), _length(max_model_len)
    learnt = _calibration(calibration)
    refs = _engines(engine)
    features = _features(refs, {
        "speculative_config": speculative_config, **engine_flags,
        "enable_lora": enable_lora or None, "max_loras": max_loras,
        "max_lora_rank": max_lora_rank, "lora_dtype": lora_dtype,
        "lora_target_modules": lora_target_modules, "limit_mm_per_prompt": limit_mm_per_prompt,
        "mm_encoder_tp_mode": mm_encoder_tp_mode})
    launch_model = launch_model or (launch_name(model) if isinstance(model, str) else None)
    spec = model_spec(model)
    if learnt is not None:
        learnt.check_for(spec, hardware, str(calibration))
    _check(refs, features, data_parallel_size, enable_expert_parallel, disaggregated,
           transfer_bandwidth_gb_per_s, engine)
    common = dict(gpus=gpus, max_model_len=length, concurrency=concurrency,
                  prompt_len=prompt_len, output_len=output_len, model=launch_model,
                  **_targets(ttft_ms, tpot_ms))
    if refs is not None:
        return _compare(refs, spec, hardware, common, vllm_version=vllm_version,
                        learnt=learnt, features=features, acceptance_rate=acceptance_rate)
    return PlanAnswer(plan=_vllm(
        spec, hardware, common, engine=engine, vllm_version=vllm_version, learnt=learnt,
        features=features, data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel, acceptance_rate=acceptance_rate,
        disaggregated=disaggregated, transfer_bandwidth_gb_per_s=transfer_bandwidth_gb_per_s))


def _calibration(path):
    """The calibration file's terms (kvcalc.serving.vllm.calibration), or None."""
    if path is None:
        return None
    from kvcalc.serving.vllm.calibration import read_calibration

    return read_calibration(path)


def _targets(ttft_ms, tpot_ms) -> dict:
    """The latency targets in seconds, as kvcalc.plan takes them (positive, or None)."""
    for name, value in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if value is not None and not value > 0:
            raise ParameterError("{" + name + "} must be a positive number of milliseconds",
                                 name)
    return {"ttft_s": None if ttft_ms is None else ttft_ms / 1000,
            "tpot_s": None if tpot_ms is None else tpot_ms / 1000}


def _length(value):
    """max_model_len: None, "auto" (any case), or a positive number of tokens."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        raise ParameterError("{max_model_len} is a number of tokens or 'auto', got "
                             + literal(repr(value)), "max_model_len")
    from kvcalc.ground.dtypes import MAX_SEQ_LEN

    sized("max_model_len", value, MAX_SEQ_LEN)
    return value


def _check(refs, features, dp, expert_parallel, disaggregated, bandwidth, engine) -> None:
    """vLLM's layout parameters and the disaggregated plan are vLLM's alone."""
    if dp is not None:
        sized("data_parallel_size", dp, 4096)
    if refs is not None and (dp is not None or expert_parallel):
        name = "data_parallel_size" if dp is not None else "enable_expert_parallel"
        raise ParameterError("{" + name + "} is vLLM's flag: plan vLLM's layouts with it "
                             "({engine} vllm), not {engine} " + literal(engine), name, "engine")
    if disaggregated and (refs is not None or features):
        raise ParameterError("{disaggregated} plans vLLM's layouts without speculative, LoRA "
                             "or multimodal flags: drop {engine} or those flags",
                             "disaggregated", "engine")
    if bandwidth is not None and not (disaggregated and bandwidth > 0):
        raise ParameterError("{transfer_bandwidth_gb_per_s} is a positive GB/s for "
                             "{disaggregated}", "transfer_bandwidth_gb_per_s", "disaggregated")


def launch_name(text: str) -> str | None:
    """The name a launch line takes for MODEL: a Hub id or a folder as written; None for
    a preset or a config file (the preset's Hub id, kvcalc.model_source.hub_id)."""
    from pathlib import Path

    from kvcalc import presets

    if presets.find(text, presets.model_names()) is not None:
        return None
    return None if Path(text).expanduser().is_file() else text


def _engines(text: str | None):
    """engine naming an engine other than vLLM, a list or `any`: the engines to plan for
    (kvcalc.serving.EngineRef); None: vLLM's plan alone (its terms or the roofline)."""
    if text is None or text.strip() == "roofline":
        return None
    from kvcalc.answers.speed import memory_engine
    from kvcalc.serving import MEMORY_ENGINES

    names = MEMORY_ENGINES if text.strip().lower() == "any" else [
        t for t in (p.strip() for p in text.split(",")) if t]
    refs = []
    for name in names:
        ref = memory_engine(name)
        if ref is None:
            raise ParameterError("{engine} " + literal(name) + ": plan counts "
                                 + ", ".join(MEMORY_ENGINES), "engine")
        refs.append(ref)
    if len(refs) == 1 and refs[0].name == "vllm":
        return None
    return refs or None


def _features(refs, given: dict) -> dict:
    """The launch features plan counts, by parameter name: vLLM's (EngineSettings' draft,
    LoRA and multimodal fields) for vLLM's plan; with one other engine, its own
    speculative flags (LoRA is counted for vLLM only). A flag of another engine than the
    one planned is one error naming its own."""
    engine = refs[0].name if refs is not None and len(refs) == 1 else "vllm"
    given = {k: given.get(k) for k in _FEATURES}
    features = {k: v for k, v in given.items() if v is not None}
    if refs is not None and len(refs) > 1 and features:
        raise ParameterError("plan counts speculative decoding and LoRA for one engine at a "
                             "time: give one {engine} with its own flags", "engine")
    owned(engine, given)
    if engine != "vllm" and any(given.get(k) is not None for k in _LORA):
        raise ParameterError("plan counts LoRA for vLLM's layouts only: drop {engine} "
                             + literal(engine) + ", or the LoRA flags", "engine")
    return features


def _vllm_terms(text: str | None, hardware):
    """engine: vLLM's fitted terms (a version of them, with @VERSION); `roofline`: None
    (the datasheet roofline); not given: the device's default (vLLM's)."""
    from kvcalc.answers.speed import DEFAULT, engine_option, resolve

    engine = resolve(engine_option(text, default=DEFAULT), hardware)
    if engine is not None and engine.name != "vllm":
        raise ParameterError("{engine} " + literal(text) + ": plan counts and writes vLLM's "
                             "start-up; give vllm (or vllm@VERSION)", "engine")
    return engine


def _vllm(spec, hardware, common: dict, *, engine, vllm_version, learnt, features,
          data_parallel_size, enable_expert_parallel, acceptance_rate, disaggregated,
          transfer_bandwidth_gb_per_s):
    """vLLM's plan (kvcalc.plan.plan), with the disaggregated one beside it if asked."""
    from kvcalc.answers.fit import allows_long_max_model_len
    from kvcalc.plan import plan as run_plan

    result = run_plan(spec, hardware, **common, engine=_vllm_terms(engine, hardware),
                      vllm_version=vllm_version,
                      allow_long_max_model_len=allows_long_max_model_len(),
                      calibration=learnt, features=features,
                      data_parallel_size=data_parallel_size,
                      enable_expert_parallel=enable_expert_parallel,
                      acceptance_rate=acceptance_rate)
    if not disaggregated:
        return result
    from kvcalc.plan.disagg import with_disaggregated

    return with_disaggregated(
        result, ttft_s=common["ttft_s"], tpot_s=common["tpot_s"],
        transfer_bandwidth_bytes_per_s=None if transfer_bandwidth_gb_per_s is None
        else transfer_bandwidth_gb_per_s * 1e9)


def _compare(refs, spec, hardware, common: dict, *, vllm_version, learnt, features,
             acceptance_rate) -> PlanAnswer:
    """Each engine's best layout and launch line; the winner by tokens/s per GPU first."""
    from kvcalc.answers.fit import allows_long_max_model_len
    from kvcalc.plan import plan as run_plan
    from kvcalc.plan.engines import engine_plan

    if common["max_model_len"] == "auto":
        raise ParameterError("{max_model_len} auto is vLLM's; with {engine} give a length",
                             "max_model_len", "engine")
    plans, failures = [], []
    for ref in refs:
        try:
            if ref.name != "vllm":
                plans.append(engine_plan(spec, hardware, ref, **common,
                                         features=features or None,
                                         acceptance_rate=acceptance_rate))
                continue
            if vllm_version is not None and ref.named and vllm_version != ref.release:
                raise ParameterError("{engine} " + literal(ref) + " and {vllm_version} "
                                     + literal(vllm_version) + " name two releases: give one",
                                     "engine", "vllm_version")
            plans.append(run_plan(
                spec, hardware, **common, engine=_vllm_terms(None, hardware),
                vllm_version=ref.release if ref.named else vllm_version,
                allow_long_max_model_len=allows_long_max_model_len(), calibration=learnt))
        except NothingFits as e:
            failures.append(" ".join(str(e).split()))
    if not plans:
        raise NoEngineServes(tuple(failures))
    plans.sort(key=lambda p: -p.best.tokens_per_s_per_gpu)
    return PlanAnswer(plan=None, engines=tuple(plans), refusals=tuple(failures))
