"""`kvcalc bench`: a `vllm bench serve` run predicted (kvcalc.served): parse, call, render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli import engine_flags as ef
from kvcalc.cli import feature_flags as ff
from kvcalc.cli.options import (DEFAULT_GPU, ForceOpt, FormatOpt, GpuOpt, KvDtypeOpt,
                                ModelRequest, OutputOpt, WeightDtypeOpt, model_options,
                                output_format)
from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError

BenchEngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", show_default=False, metavar="NAME[@VERSION]",
    help="The serving engine: vllm, sglang or tensorrt-llm (its start-up count "
    "sizes the pool and the running limit; its fitted terms time the steps; "
    "default: vllm).")]
BenchTpOpt = Annotated[Optional[int], typer.Option(
    "--tp", show_default=False,
    help="Tensor-parallel devices (count; default: 1, or with --against the "
    "file's own where it records one).")]
InputLenOpt = Annotated[Optional[int], typer.Option(
    "--input-len", "--random-input-len", show_default=False,
    help="Prompt tokens per request (default: 1,024; with --against, checked "
    "against the file's, else taken from it).")]
BenchOutputLenOpt = Annotated[Optional[int], typer.Option(
    "--output-len", "--random-output-len", show_default=False,
    help="Output tokens per request (default: 128; with --against, checked "
    "against the file's, else taken from it).")]
NumPromptsOpt = Annotated[Optional[int], typer.Option(
    "--num-prompts", show_default=False,
    help="Requests the client sends (default: 1,000, or 10 x the concurrency, as "
    "sized runs do).")]
BenchConcurrencyOpt = Annotated[Optional[str], typer.Option(
    "--concurrency", "--max-concurrency", show_default=False, metavar="C[,C...]",
    help="Closed loop: at most this many requests in flight (a list: one run "
    "each).")]
RequestRateOpt = Annotated[Optional[str], typer.Option(
    "--request-rate", show_default=False, metavar="R[,R...]|inf",
    help="Open loop: Poisson arrivals at R requests/s (inf: all at once; the "
    "default without --concurrency).")]
PrefixHitOpt = Annotated[float, typer.Option(
    "--prefix-hit", help="Share of each prompt already in the prefix cache, "
    "in [0, 1); with an engine's prefix-caching or offload flag, cut to its "
    "blocks (or 0 with caching off).")]
HostHitOpt = Annotated[float, typer.Option(
    "--host-hit", help="Share of each prompt held in the engine's host KV tier "
    "beyond --prefix-hit (evicted from the GPU pool), fetched over the GPU's host "
    "link instead of computed; needs the tier's flag (default 0).")]
SharedPrefixOpt = Annotated[bool, typer.Option(
    "--shared-prefix", help="The --prefix-hit part is one prefix every request shares "
    "(a system prompt; vllm bench serve's --random-prefix-len), held once in the KV "
    "pool; default: each request's own, held by it.")]
BenchMaxModelLenOpt = Annotated[Optional[int], typer.Option(
    "--max-model-len", show_default=False,
    help="The engine's longest request (default: the model's context).")]
RangeRatioOpt = Annotated[float, typer.Option(
    "--random-range-ratio", help="Each request's lengths drawn as vllm bench serve's "
    "random dataset draws them: uniform between len x (1 - R) and len x (1 + R) "
    "(0: every request the same).")]
DatasetOpt = Annotated[str, typer.Option(
    "--dataset-name", "--dataset", help="random (the lengths given, spread by "
    "--random-range-ratio) or sharegpt (lengths spread as ShareGPT's are when vllm "
    "bench serve draws them: a published draw of 320 requests, presets/served/"
    "sharegpt.yaml, scaled to the given lengths as means).")]
PastSaturationOpt = Annotated[bool, typer.Option(
    "--past-saturation", help="Run a --request-rate over what the engine sustains "
    "anyway: the finite run's times, its queue growing throughout (else refused "
    "with where it saturates).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Poisson arrivals' and lengths' "
                                      "seed.")]
AgainstOpt = Annotated[Optional[Path], typer.Option(
    "--against", show_default=False, metavar="RESULT.json",
    help="A real `vllm bench serve --save-result` JSON or SGLang `bench_serving "
    "--output-file` JSONL: each run in it beside kvcalc's prediction of the same "
    "load (its lengths, rate or concurrency and request count; the flags given "
    "must match the file's), metric by metric with the ratio kvcalc / "
    "measured.")]
ImagesOpt = Annotated[int, typer.Option(
    "--images-per-request", "--random-mm-base-items-per-request",
    help="Images each request carries (vllm bench serve's random-mm dataset): their "
    "tokens join the prompt (KV and prefill), the vision encoder runs in the step "
    "of the first prompt chunk (kvcalc.served.images; default 0).")]
ImageSizeOpt = Annotated[Optional[str], typer.Option(
    "--image-size", show_default=False, metavar="WxH",
    help="Each image's width x height in pixels (needed where the tokens depend on "
    "it: Qwen-VL, Mistral 3).")]


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @model_options
    def bench(
        request: ModelRequest, engine: BenchEngineOpt = None, gpu: GpuOpt = DEFAULT_GPU,
        tp: BenchTpOpt = None, input_len: InputLenOpt = None,
        output_len: BenchOutputLenOpt = None, num_prompts: NumPromptsOpt = None,
        concurrency: BenchConcurrencyOpt = None, request_rate: RequestRateOpt = None,
        prefix_hit: PrefixHitOpt = 0.0, host_hit: HostHitOpt = 0.0,
        prefix_shared: SharedPrefixOpt = False, max_model_len: BenchMaxModelLenOpt = None,
        gpu_memory_utilization: ef.GpuMemoryUtilizationOpt = None,
        max_num_batched_tokens: ef.MaxNumBatchedTokensOpt = None,
        mem_fraction_static: ef.MemFractionStaticOpt = None, max_num_seqs: ef.MaxNumSeqsOpt = None,
        max_running_requests: ef.MaxRunningRequestsOpt = None,
        chunked_prefill_size: ef.ChunkedPrefillOpt = None,
        free_gpu_memory_fraction: ef.FreeFractionOpt = None,
        max_batch_size: ef.MaxBatchSizeOpt = None, max_num_tokens: ef.MaxNumTokensOpt = None,
        enable_chunked_prefill: ef.EnableChunkedPrefillOpt = False,
        enforce_eager: ef.EnforceEagerOpt = False, cuda_graph_max_bs: ef.CudaGraphMaxBsOpt = None,
        disable_cuda_graph: ef.DisableCudaGraphOpt = False,
        kv_offloading_size: ef.KvOffloadingSizeOpt = None, hicache_size: ef.HicacheSizeOpt = None,
        kv_offloading_backend: ef.KvOffloadingBackendOpt = None,
        enable_prefix_caching: ef.PrefixCachingOpt = None,
        enable_hierarchical_cache: ef.HicacheOpt = False, hicache_ratio: ef.HicacheRatioOpt = None,
        hicache_write_policy: ef.HicacheWritePolicyOpt = None,
        disable_radix_cache: ef.DisableRadixCacheOpt = False,
        host_cache_size: ef.HostCacheSizeOpt = None, enable_block_reuse: ef.BlockReuseOpt = None,
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
        lora_target_modules: ff.LoraTargetModulesOpt = None, kv_dtype: KvDtypeOpt = "bf16",
        weight_dtype: WeightDtypeOpt = None, range_ratio: RangeRatioOpt = 0.0,
        dataset: DatasetOpt = "random", past_saturation: PastSaturationOpt = False,
        seed: SeedOpt = 0, against: AgainstOpt = None, images_per_request: ImagesOpt = 0,
        image_size: ImageSizeOpt = None, limit_mm_per_prompt: ff.LimitMmPerPromptOpt = None,
        fmt: FormatOpt = None, output: OutputOpt = None, force: ForceOpt = False,
    ) -> None:
        """What `vllm bench serve` (or SGLang's bench_serving) would print for a model on
        these GPUs: mean, median and P99 TTFT, TPOT, ITL and end-to-end latency, request,
        output and total token throughput, per GPU as well: predicted, under the same
        names.

        The engine's scheduler is simulated over the client's requests (kvcalc.served):
        continuous batching up to its running-request limit and KV pool (its own start-up
        count), chunked prefill sharing each step's token budget, each step timed on the
        engine's fitted terms. A rate the engine cannot sustain is refused with where it
        saturates. Example: `kvcalc bench --preset llama3.1-8b --gpu h100-sxm
        --concurrency 1,8,64 --input-len 1024 --output-len 128`.

        With --against RESULT.json, a real run's file instead: every metric it measured
        beside kvcalc's prediction of that run (kvcalc.served.against).
        """
        _bench_command(dict(locals()))  # every option, by its parameter name


def _bench_command(p: dict) -> None:
    """bench: parse, call kvcalc.bench, write."""
    from kvcalc.answers.bench import bench
    from kvcalc.report.render import deliver

    fmt = output_format(p.pop("fmt"), p["output"])
    request, output, force = p.pop("request"), p.pop("output"), p.pop("force")
    for name, kind in (("concurrency", int), ("request_rate", float)):
        if p[name] is not None:
            p[name] = _values(p[name], "--" + name.replace("_", "-"), kind)
    p["random_range_ratio"], p["dataset_name"] = p.pop("range_ratio"), p.pop("dataset")
    answer = bench(model=request.resolve(), **p)
    items = _items(answer) if answer.against is None else _against_items(answer, p["against"])
    deliver(fmt.value, items, data=answer.as_dict(), rows=answer.rows(), output=output,
            force=force)


def _items(answer) -> list:
    """The runs as bench's table: one line, then a column a run, a row a metric."""
    from kvcalc.report.render import Tab

    rows, ref = answer.runs, answer.engine
    head = (f"predicted for {ref.title} serving {answer.model} on {answer.gpus} x "
            f"{answer.gpu}: "
            + (f"{answer.input_len:,} prompt + {answer.output_len:,} output tokens a request"
               if answer.dataset_name == "random" else
               f"ShareGPT's spread of lengths, {answer.input_len:,} prompt + "
               f"{answer.output_len:,} output tokens a request on average")
            + (f", {answer.images_per_request} image(s) of "
               f"{answer.image_tokens // answer.images_per_request:,} tokens in the prompt"
               if answer.images_per_request else ""))
    shown = ("request_throughput", "output_throughput", "output_throughput_per_gpu",
             "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
             "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms")
    closed = answer.closed_loop
    cols = ["max concurrency" if closed else "request rate (req/s)",
            *(str(d["max_concurrency"] if closed else d["request_rate"]) for d in rows)]
    table = [[k, *(f"{d[k]:,.2f}" for d in rows)] for k in shown]
    if "speculation_gain" in rows[0]:  # where speculation stops paying: the load without it
        table += [["mean_tpot_ms without speculation",
                   *(f"{d['without_speculation']['mean_tpot_ms']:,.2f}" for d in rows)],
                  ["output_throughput with / without speculation",
                   *(f"{d['speculation_gain']:,.2f}" for d in rows)]]
    r0 = answer.results[0]
    caption = "\n".join([f"KV pool {r0.kv_cache_tokens:,} tokens; step budget "
                         f"{r0.step_budget:,} tokens; times on {ref.name}'s fitted terms "
                         "(presets/engines)", *(f"note: {n}" for n in answer.notes)])
    return [head, Tab("", cols, table, caption=caption)]


def _against_items(answer, path) -> list:
    """`bench --against`: the file's runs beside kvcalc's, a table a run."""
    from kvcalc.report.render import Tab
    from kvcalc.served import METRICS

    got = answer.against
    first = got.runs[0]
    items = [f"{first.run.client} result {path} beside kvcalc ({got.engine.title} serving "
             f"{got.model} on {answer.gpus} x {got.gpu}): ratio = kvcalc / measured"]
    if got.skipped:
        items.append(f"{len(got.runs)} of {len(got.runs) + got.skipped} runs in the file "
                     "match what was asked; the others ran other loads or lengths")
    for c in got.runs:
        measured, predicted, ratio = c.measured, c.kvcalc, c.ratio
        table = [[m, f"{measured[m]:,.2f}",
                  f"{predicted[m]:,.2f}" if m in predicted else "-",
                  f"{ratio[m]:.2f}" if m in ratio else "-"]
                 for m in METRICS if m in measured]
        notes = ([f"kvcalc refuses this run: {c.refusal}"] if c.refusal else []) + [
            f"note: {n}" for n in c.notes]
        items.append(Tab(c.run.label, ["metric", "measured", "kvcalc", "ratio"], table))
        if notes:  # lines of their own (a table caption is filled as one paragraph)
            items.append("\n".join(notes))
    return items


def _values(text: str, flag: str, kind):
    out = []
    for part in (p.strip() for p in text.split(",")):
        try:
            v = kind(part)
        except ValueError:
            raise KvcalcError(f"{flag} takes numbers separated by commas, got {part!r}") from None
        if not v > 0:
            raise KvcalcError(f"{flag} values must be positive, got {part}")
        out.append(v)
    return out
