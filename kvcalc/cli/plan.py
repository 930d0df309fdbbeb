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
)
from kvcalc.cli import feature_flags as ff
from kvcalc.cli.parsing import command

PlanGpuOpt = Annotated[str, typer.Option(
    "--gpu", help="Hardware preset (or YAML file) of every device.")]
GpusOpt = Annotated[int, typer.Option(
    "--gpus", help="Devices to lay the model out on: tensor x pipeline parallel x "
    "replicas, at most this many (count).")]
PlanMaxModelLenOpt = Annotated[Optional[str], typer.Option(
    "--max-model-len", show_default=False, metavar="<tokens>|auto",
    help=f"Tokens per request the engine accepts; {SUFFIXES}; auto: the longest "
    "each layout fits (default: --prompt-len + --output-len when both are given, "
    "else the model's context).")]
ConcurrencyOpt = Annotated[Optional[int], typer.Option(
    "--concurrency", show_default=False, metavar="<requests>",
    help="Requests in flight across all replicas at most (default: as many as the "
    "cache and --max-num-seqs hold).")]
OutputLenOpt = Annotated[Optional[int], typer.Option(
    "--output-len", show_default=False, metavar="<tokens>",
    help="Output tokens per request, suffixes as --prompt-len (default 128; the "
    "prompt fills the rest of --max-model-len unless given).")]
TtftOpt = Annotated[Optional[float], typer.Option(
    "--ttft-ms", show_default=False,
    help="Keep layouts whose time to first token stays under this (ms).")]
TpotOpt = Annotated[Optional[float], typer.Option(
    "--tpot-ms", show_default=False,
    help="Keep layouts whose time per output token stays under this (ms).")]
PlanEngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", metavar="NAME[@VERSION]|any", show_default=False,
    help="Whose start-up count, latency terms and launch line: vllm, sglang or "
    "tensorrt-llm (@VERSION: its release), a comma-separated list, or `any` for "
    "all three side by side; `roofline` times vLLM's layouts on the datasheet "
    "roofline (default: vllm).")]
PlanVllmVersionOpt = Annotated[Optional[str], typer.Option(
    "--vllm-version", show_default=False,
    help="The vLLM release whose start-up count to follow, 0.8 or later (default "
    "0.33, or --calibration's).")]
PlanCalibrationOpt = Annotated[Optional[Path], typer.Option(
    "--calibration", show_default=False, metavar="<file>",
    help="The terms a start-up log taught (`kvcalc check LOG -o FILE`): its "
    "weights, activation peak, non-torch memory and CUDA graphs for the layouts "
    "of the tp and pp the log ran, kvcalc's models for the others (stderr and "
    "JSON say which); its release and driver-visible memory for all.")]
DisaggregatedOpt = Annotated[bool, typer.Option(
    "--disaggregated", help="Also plan prefill and decode on separate instances "
    "(xPyD) on the same GPUs: each request's KV moved between them, and whether "
    "it beats the best co-located layout at --ttft-ms and --tpot-ms.")]
TransferBandwidthOpt = Annotated[Optional[float], typer.Option(
    "--transfer-bandwidth", show_default=False, metavar="<GB/s>",
    help="With --disaggregated: the KV transfer's bandwidth per GPU, GB/s (1e9 "
    "bytes), one direction, e.g. 50 for 400 Gb/s RDMA between nodes (default: the "
    "GPU preset's interconnect, NVLink within a node).")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", show_default=False,
    help="Also draw tokens/s per GPU against tokens/s per user, the front marked "
    "(.png, .svg or .pdf; needs matplotlib: pip install 'kvcalc\\[plot]').")]


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @model_options
    def plan(
        request: ModelRequest, gpu: PlanGpuOpt = DEFAULT_GPU, gpus: GpusOpt = 1,
        max_model_len: PlanMaxModelLenOpt = None, concurrency: ConcurrencyOpt = None,
        prompt_len: PromptLenOpt = None, output_len: OutputLenOpt = None,
        ttft_ms: TtftOpt = None, tpot_ms: TpotOpt = None, engine: PlanEngineOpt = None,
        vllm_version: PlanVllmVersionOpt = None, calibration: PlanCalibrationOpt = None,
        speculative_config: ff.SpeculativeConfigOpt = None,
        speculative_algorithm: ff.SpecAlgorithmOpt = None,
        speculative_draft_model_path: ff.SpecDraftPathOpt = None,
        speculative_num_steps: ff.SpecStepsOpt = None,
        speculative_eagle_topk: ff.SpecTopkOpt = None,
        speculative_num_draft_tokens: ff.SpecDraftTokensOpt = None,
        extra_llm_api_options: ff.ExtraLlmApiOptionsOpt = None,
        acceptance_rate: ff.AcceptanceRateOpt = None, enable_lora: ff.EnableLoraOpt = False,
        max_loras: ff.MaxLorasOpt = None, max_loras_per_batch: ff.MaxLorasPerBatchOpt = None,
        max_lora_rank: ff.MaxLoraRankOpt = None, lora_dtype: ff.LoraDtypeOpt = None,
        lora_target_modules: ff.LoraTargetModulesOpt = None,
        limit_mm_per_prompt: ff.LimitMmPerPromptOpt = None,
        mm_encoder_tp_mode: ff.MmEncoderTpModeOpt = None,
        data_parallel_size: DataParallelOpt = None,
        enable_expert_parallel: ExpertParallelOpt = False,
        disaggregated: DisaggregatedOpt = False,
        transfer_bandwidth: TransferBandwidthOpt = None, plot: PlotOpt = None,
        fmt: FormatOpt = None, output: OutputOpt = None, force: ForceOpt = False,
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
        _plan_command(dict(locals()))  # every option, by its parameter name


def _plan_command(p: dict) -> None:
    """plan: parse, call kvcalc.plan, write (and draw); exit 1 when no layout serves."""
    from kvcalc.answers.plan import plan
    from kvcalc.plan import NothingFits

    fmt = output_format(p["fmt"], p["output"])
    if p["plot"] is not None:
        from kvcalc.plot import require_matplotlib

        require_matplotlib(p["plot"])
    request, length = p.pop("request"), p.pop("max_model_len")
    if length is not None:
        from kvcalc.ground.units import count

        length = "auto" if length.strip().lower() == "auto" else count(length, "--max-model-len")
    shown = {k: p.pop(k) for k in ("output", "force", "plot")}
    del p["fmt"]
    p["transfer_bandwidth_gb_per_s"] = p.pop("transfer_bandwidth")
    try:
        answer = plan(model=request.resolve(), max_model_len=length,
                      launch_model=_served_name(request), **p)
    except NothingFits as e:  # a valid question answered no (bad input exits 2)
        for line in getattr(e, "refusals", None) or [" ".join(str(e).split())]:
            sys.stderr.write(f"kvcalc: {line}\n")
        raise typer.Exit(1)
    _write(answer, fmt, calibration=p["calibration"], **shown)


def _write(answer, fmt, *, calibration, output, force, plot) -> None:
    """plan's answer in its format: the front and the line, or each engine's best."""
    from kvcalc.report.plan import engines_items, plan_items
    from kvcalc.report.render import deliver

    for line in answer.refusals:  # the engines that serve nothing, beside the others
        sys.stderr.write(f"kvcalc: {line}\n")
    result = answer.plan
    if result is not None and result.calibration is not None:  # which layouts it priced
        sys.stderr.write(f"kvcalc: note: --calibration {calibration}: "
                         f"{result.calibration['note']}\n")
    items = plan_items(result) if result is not None else engines_items(list(answer.engines))
    deliver(fmt.value, items, data=answer.as_dict(), rows=answer.rows(), output=output,
            force=force)
    if plot is not None and result is not None:
        from kvcalc.plot import plot_plan

        plot_plan(result, plot, force)


def _served_name(request: ModelRequest) -> Optional[str]:
    """The name `vllm serve` takes for MODEL: a Hub id or a folder as written; None for a
    preset or a config file (the preset's Hub id, kvcalc.model_source.hub_id)."""
    from kvcalc.answers.plan import launch_name

    return None if request.model is None else launch_name(request.model)
