"""`kvcalc plan`: parse, call kvcalc.plan, render; exit 1 when no layout serves."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.options import (
    DEFAULT_GPU,
    SUFFIXES,
    DataParallelOpt,
    ExpertParallelOpt,
    ForceOpt,
    FormatOpt,
    ModelRequest,
    OutputOpt,
    PromptLenOpt,
    model_options,
    output_format,
    resolve_gpu,
)
from kvcalc.cli import feature_flags as ff
from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @model_options
    def plan(
        request: ModelRequest,
        gpu: Annotated[str, typer.Option(
            "--gpu", help="Hardware preset (or YAML file) of every device.")] = DEFAULT_GPU,
        gpus: Annotated[int, typer.Option(
            "--gpus", help="Devices to lay the model out on: tensor x pipeline parallel x "
            "replicas, at most this many (count).")] = 1,
        max_model_len: Annotated[Optional[str], typer.Option(
            "--max-model-len", show_default=False, metavar="<tokens>|auto",
            help=f"Tokens per request the engine accepts; {SUFFIXES}; auto: the longest "
            "each layout fits (default: --prompt-len + --output-len when both are given, "
            "else the model's context).")] = None,
        concurrency: Annotated[Optional[int], typer.Option(
            "--concurrency", show_default=False, metavar="<requests>",
            help="Requests in flight across all replicas at most (default: as many as the "
            "cache and --max-num-seqs hold).")] = None,
        prompt_len: PromptLenOpt = None,
        output_len: Annotated[Optional[int], typer.Option(
            "--output-len", show_default=False, metavar="<tokens>",
            help="Output tokens per request, suffixes as --prompt-len (default 128; the "
            "prompt fills the rest of --max-model-len unless given).")] = None,
        ttft_ms: Annotated[Optional[float], typer.Option(
            "--ttft-ms", show_default=False,
            help="Keep layouts whose time to first token stays under this (ms).")] = None,
        tpot_ms: Annotated[Optional[float], typer.Option(
            "--tpot-ms", show_default=False,
            help="Keep layouts whose time per output token stays under this (ms).")] = None,
        engine: Annotated[Optional[str], typer.Option(
            "--engine", metavar="NAME[@VERSION]|any", show_default=False,
            help="Whose start-up count, latency terms and launch line: vllm, sglang or "
            "tensorrt-llm (@VERSION: its release), a comma-separated list, or `any` for "
            "all three side by side; `roofline` times vLLM's layouts on the datasheet "
            "roofline (default: vllm).")] = None,
        vllm_version: Annotated[Optional[str], typer.Option(
            "--vllm-version", show_default=False,
            help="The vLLM release whose start-up count to follow, 0.8 or later (default "
            "0.33, or --calibration's).")] = None,
        calibration: Annotated[Optional[Path], typer.Option(
            "--calibration", show_default=False, metavar="<file>",
            help="The terms a start-up log taught (`kvcalc check LOG -o FILE`): its "
            "weights, activation peak, non-torch memory and CUDA graphs for the layouts "
            "of the tp and pp the log ran, kvcalc's models for the others (stderr and "
            "JSON say which); its release and driver-visible memory for all.")] = None,
        speculative_config: ff.SpeculativeConfigOpt = None,
        speculative_algorithm: ff.SpecAlgorithmOpt = None,
        speculative_draft_model_path: ff.SpecDraftPathOpt = None,
        speculative_num_steps: ff.SpecStepsOpt = None,
        speculative_eagle_topk: ff.SpecTopkOpt = None,
        speculative_num_draft_tokens: ff.SpecDraftTokensOpt = None,
        extra_llm_api_options: ff.ExtraLlmApiOptionsOpt = None,
        acceptance_rate: ff.AcceptanceRateOpt = None,
        enable_lora: ff.EnableLoraOpt = False,
        max_loras: ff.MaxLorasOpt = None,
        max_loras_per_batch: ff.MaxLorasPerBatchOpt = None,
        max_lora_rank: ff.MaxLoraRankOpt = None,
        lora_dtype: ff.LoraDtypeOpt = None,
        lora_target_modules: ff.LoraTargetModulesOpt = None,
        limit_mm_per_prompt: ff.LimitMmPerPromptOpt = None,
        mm_encoder_tp_mode: ff.MmEncoderTpModeOpt = None,
        data_parallel_size: DataParallelOpt = None,
        enable_expert_parallel: ExpertParallelOpt = False,
        disaggregated: Annotated[bool, typer.Option(
            "--disaggregated", help="Also plan prefill and decode on separate instances "
            "(xPyD) on the same GPUs: each request's KV moved between them, and whether "
            "it beats the best co-located layout at --ttft-ms and --tpot-ms.")] = False,
        transfer_bandwidth: Annotated[Optional[float], typer.Option(
            "--transfer-bandwidth", show_default=False, metavar="<GB/s>",
            help="With --disaggregated: the KV transfer's bandwidth per GPU, GB/s (1e9 "
            "bytes), one direction, e.g. 50 for 400 Gb/s RDMA between nodes (default: the "
            "GPU preset's interconnect, NVLink within a node).")] = None,
        plot: Annotated[Optional[Path], typer.Option(
            "--plot", show_default=False,
            help="Also draw tokens/s per GPU against tokens/s per user, the front marked "
            "(.png, .svg or .pdf; needs matplotlib: pip install 'kvcalc\\[plot]').")] = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
    ) -> None:
        """The layouts N GPUs allow for a model under vLLM's start-up count, the best by
        output tokens/s per GPU, and its `vllm serve` line.

        Searches tensor x pipeline parallel x replicas, the KV cache dtype (auto, fp8),
        --max-num-batched-tokens, --gpu-memory-utilization and --max-num-seqs; keeps
        the layouts vLLM would start and that meet --ttft-ms and --tpot-ms; prints the
        front of tokens/s per GPU against tokens/s per user, then the command. No layout
        serves: exit 1 and one line on stderr saying why and what came closest. With a
        speculative flag (each engine's own) and --acceptance-rate, every layout is searched
        with speculation on and off; the winner at the targets is printed, its line has the
        flag only when speculation wins, and a table and a note say why.

        Examples: `kvcalc plan --preset llama3.1-8b --gpu h100-sxm --max-model-len 32768`;
        `kvcalc plan --preset llama3.3-70b --gpus 8 --max-model-len 32k --tpot-ms 40`;
        `kvcalc plan Qwen/Qwen3-8B --gpu l4 --max-model-len auto --format json`.
        """
        from kvcalc.plan import NothingFits, plan as run_plan

        fmt = output_format(fmt, output)
        if plot is not None:
            from kvcalc.plot import require_matplotlib

            require_matplotlib(plot)
        hardware = resolve_gpu(gpu)
        if hardware is None:
            raise KvcalcError("plan needs a device: --gpu NAME (see `kvcalc presets`)")
        length = _max_model_len(max_model_len)
        learnt = None
        if calibration is not None:
            from kvcalc.serving.vllm.calibration import read_calibration

            learnt = read_calibration(calibration)
        refs = _engines(engine)
        features = _features(refs, speculative=ff.speculative_given(
                                 speculative_config=speculative_config,
                                 speculative_algorithm=speculative_algorithm,
                                 speculative_draft_model_path=speculative_draft_model_path,
                                 speculative_num_steps=speculative_num_steps,
                                 speculative_eagle_topk=speculative_eagle_topk,
                                 speculative_num_draft_tokens=speculative_num_draft_tokens,
                                 extra_llm_api_options=extra_llm_api_options),
                             lora=ff.lora_given(enable_lora=enable_lora, max_loras=max_loras,
                                                max_loras_per_batch=max_loras_per_batch,
                                                max_lora_rank=max_lora_rank,
                                                lora_dtype=lora_dtype,
                                                lora_target_modules=lora_target_modules),
                             mm={"limit_mm_per_prompt": limit_mm_per_prompt,
                                 "mm_encoder_tp_mode": mm_encoder_tp_mode})
        spec = request.resolve()
        if learnt is not None:
            learnt.check_for(spec, hardware, str(calibration))
        if refs is not None and (data_parallel_size is not None or enable_expert_parallel):
            flag = ("--data-parallel-size" if data_parallel_size is not None
                    else "--enable-expert-parallel")
            raise KvcalcError(f"{flag} is vLLM's flag: plan vLLM's layouts with it (--engine "
                              f"vllm), not --engine {engine}")
        if disaggregated and (refs is not None or features):
            raise KvcalcError("--disaggregated plans vLLM's layouts without speculative, "
                              "LoRA or multimodal flags: drop --engine or those flags")
        if transfer_bandwidth is not None and not (disaggregated and transfer_bandwidth > 0):
            raise KvcalcError("--transfer-bandwidth is a positive GB/s for --disaggregated")
        if refs is not None:
            _compare(refs, spec, hardware, fmt=fmt, output=output, force=force, gpus=gpus,
                     max_model_len=length, concurrency=concurrency, prompt_len=prompt_len,
                     output_len=output_len, ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                     model=_served_name(request), vllm_version=vllm_version, learnt=learnt,
                     features=features, acceptance_rate=acceptance_rate)
            return
        try:
            result = run_plan(
                spec, hardware, gpus=gpus, max_model_len=length, concurrency=concurrency,
                prompt_len=prompt_len, output_len=output_len,
                ttft_s=None if ttft_ms is None else ttft_ms / 1000,
                tpot_s=None if tpot_ms is None else tpot_ms / 1000,
                engine=_vllm_terms(engine, hardware), model=_served_name(request),
                vllm_version=vllm_version, allow_long_max_model_len=_allows_long(),
                calibration=learnt, features=features,
                data_parallel_size=data_parallel_size,
                enable_expert_parallel=enable_expert_parallel, acceptance_rate=acceptance_rate)
        except NothingFits as e:
            sys.stderr.write(f"kvcalc: {' '.join(str(e).split())}\n")
            raise typer.Exit(1)
        if disaggregated:
            from kvcalc.plan.disagg import with_disaggregated

            result = with_disaggregated(
                result, ttft_s=None if ttft_ms is None else ttft_ms / 1000,
                tpot_s=None if tpot_ms is None else tpot_ms / 1000,
                transfer_bandwidth_bytes_per_s=None if transfer_bandwidth is None
                else transfer_bandwidth * 1e9)
        if result.calibration is not None:  # which layouts the measured terms priced
            sys.stderr.write(f"kvcalc: note: --calibration {calibration}: "
                             f"{result.calibration['note']}\n")
        from kvcalc.report.plan import plan_items
        from kvcalc.report.render import deliver

        deliver(fmt.value, plan_items(result), data=result.as_dict(),
                rows=[x.as_dict() for x in result.front], output=output, force=force)
        if plot is not None:
            from kvcalc.plot import plot_plan

            plot_plan(result, plot, force)


def _max_model_len(text: Optional[str]):
    if text is None:
        return None
    if text.strip().lower() == "auto":
        return "auto"
    from kvcalc.ground.dtypes import MAX_SEQ_LEN, check_size
    from kvcalc.ground.units import count

    value = count(text, "--max-model-len")
    check_size("--max-model-len", value, MAX_SEQ_LEN)
    return value


def _vllm_terms(text: str | None, hardware):
    """--engine: vLLM's fitted terms (a version of them, with @VERSION); `roofline`: None
    (the datasheet roofline); not given: estimate's default for the device (vLLM)."""
    from kvcalc.cli.speed import DEFAULT, engine_option, resolve

    engine = resolve(engine_option(text, default=DEFAULT), hardware)
    if engine is None:
        return None
    if engine.name != "vllm":
        raise KvcalcError(f"--engine {text}: plan counts and writes vLLM's start-up; give "
                          "vllm (or vllm@VERSION)")
    return engine


def _served_name(request: ModelRequest) -> Optional[str]:
    """The name `vllm serve` takes for MODEL: a Hub id or a folder as written; None for a
    preset or a config file (the preset's Hub id, kvcalc.model_source.hub_id)."""
    from kvcalc import presets

    text = request.model
    if text is None or presets.find(text, presets.model_names()) is not None:
        return None
    path = Path(text).expanduser()
    if path.is_file():
        return None
    return text


def _allows_long() -> bool:
    from kvcalc.answers.fit import allows_long_max_model_len

    return allows_long_max_model_len()


def _engines(text: str | None):
    """--engine naming an engine other than vLLM, a list or `any`: the engines to plan for
    (kvcalc.serving.EngineRef); None: vLLM's plan alone (its terms or the roofline)."""
    if text is None or text.strip() == "roofline":
        return None
    from kvcalc.cli.speed import memory_engine
    from kvcalc.serving import MEMORY_ENGINES, engine_ref

    names = MEMORY_ENGINES if text.strip().lower() == "any" else [
        t for t in (p.strip() for p in text.split(",")) if t]
    refs = []
    for name in names:
        ref = memory_engine(name)
        if ref is None:
            raise KvcalcError(f"--engine {name}: plan counts {', '.join(MEMORY_ENGINES)}")
        refs.append(ref)
    if len(refs) == 1 and refs[0].name == "vllm":
        return None
    return refs or None


def _compare(refs, spec, hardware, *, fmt, output, force, gpus, max_model_len, concurrency,
             prompt_len, output_len, ttft_ms, tpot_ms, model, vllm_version, learnt,
             features=None, acceptance_rate=None) -> None:
    """Each engine's best layout and launch line; the winner by tokens/s per GPU first."""
    from kvcalc.plan import NothingFits, plan as run_plan
    from kvcalc.plan.engines import engine_plan
    from kvcalc.report.plan import engines_items
    from kvcalc.report.render import deliver

    if max_model_len == "auto":
        raise KvcalcError("--max-model-len auto is vLLM's; with --engine give a length")
    targets = dict(ttft_s=None if ttft_ms is None else ttft_ms / 1000,
                   tpot_s=None if tpot_ms is None else tpot_ms / 1000)
    plans, failures = [], []
    for ref in refs:
        try:
            if ref.name == "vllm":
                if vllm_version is not None and ref.named and vllm_version != ref.release:
                    raise KvcalcError(f"--engine {ref} and --vllm-version {vllm_version} "
                                      f"name two releases: give one")
                plans.append(run_plan(
                    spec, hardware, gpus=gpus, max_model_len=max_model_len,
                    concurrency=concurrency, prompt_len=prompt_len, output_len=output_len,
                    engine=_vllm_terms(None, hardware), model=model,
                    vllm_version=ref.release if ref.named else vllm_version,
                    allow_long_max_model_len=_allows_long(), calibration=learnt, **targets))
            else:
                plans.append(engine_plan(
                    spec, hardware, ref, gpus=gpus, max_model_len=max_model_len,
                    concurrency=concurrency, prompt_len=prompt_len, output_len=output_len,
                    model=model, features=features or None,
                    acceptance_rate=acceptance_rate, **targets))
        except NothingFits as e:
            failures.append(" ".join(str(e).split()))
    for text in failures:
        sys.stderr.write(f"kvcalc: {text}\n")
    if not plans:
        raise typer.Exit(1)
    plans.sort(key=lambda p: -p.best.tokens_per_s_per_gpu)
    deliver(fmt.value, engines_items(plans),
            data={"engines": [p.as_dict() for p in plans], "winner": _name(plans[0])},
            rows=[{"engine": _name(p), **p.best.as_dict(), "command": p.command}
                  for p in plans], output=output, force=force)


def _name(p) -> str:
    """An engine plan's engine; vLLM's Plan names its timing terms instead."""
    return p.engine.name if hasattr(p.engine, "release") else "vllm"


def _features(refs, *, speculative, lora, mm=None) -> dict:
    """The launch features plan counts, by parameter name: vLLM's (EngineSettings' draft
    and LoRA fields) for vLLM's plan; with one --engine sglang or tensorrt-llm, that
    engine's own speculative flags (LoRA is counted for vLLM only). A flag of another
    engine than the one planned is one error naming its own."""
    from kvcalc.cli.engine_flags import flag_of
    from kvcalc.serving.flags import check_owners

    given = {**speculative, **lora, **(mm or {})}  # mm: --limit-mm-per-prompt (vLLM's)
    engine = refs[0].name if refs is not None and len(refs) == 1 else "vllm"
    features = {k: v for k, v in given.items() if v is not None}
    if refs is not None and len(refs) > 1 and features:
        raise KvcalcError("plan counts speculative decoding and LoRA for one engine at a "
                          "time: give one --engine with its own flags")
    check_owners(engine, given, flag_of)
    if engine != "vllm" and any(lora.get(k) is not None for k in lora):
        raise KvcalcError(f"plan counts LoRA for vLLM's layouts only: drop --engine "
                          f"{engine}, or the LoRA flags")
    return features
