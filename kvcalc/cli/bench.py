"""`kvcalc bench`: a `vllm bench serve` run predicted (kvcalc.served): parse, call, render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli import engine_flags as ef
from kvcalc.cli import feature_flags as ff
from kvcalc.cli.options import (DEFAULT_GPU, ForceOpt, FormatOpt, GpuOpt, KvDtypeOpt,
                                ModelRequest, OutputOpt, WeightDtypeOpt, model_options,
                                output_format, resolve_gpu)
from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @model_options
    def bench(
        request: ModelRequest,
        engine: Annotated[Optional[str], typer.Option(
            "--engine", show_default=False, metavar="NAME[@VERSION]",
            help="The serving engine: vllm, sglang or tensorrt-llm (its start-up count "
            "sizes the pool and the running limit; its fitted terms time the steps; "
            "default: vllm).")] = None,
        gpu: GpuOpt = DEFAULT_GPU,
        tp: Annotated[Optional[int], typer.Option(
            "--tp", show_default=False,
            help="Tensor-parallel devices (count; default: 1, or with --against the "
            "file's own where it records one).")] = None,
        input_len: Annotated[Optional[int], typer.Option(
            "--input-len", "--random-input-len", show_default=False,
            help="Prompt tokens per request (default: 1,024; with --against, checked "
            "against the file's, else taken from it).")] = None,
        output_len: Annotated[Optional[int], typer.Option(
            "--output-len", "--random-output-len", show_default=False,
            help="Output tokens per request (default: 128; with --against, checked "
            "against the file's, else taken from it).")] = None,
        num_prompts: Annotated[Optional[int], typer.Option(
            "--num-prompts", show_default=False,
            help="Requests the client sends (default: 1,000, or 10 x the concurrency, as "
            "sized runs do).")] = None,
        concurrency: Annotated[Optional[str], typer.Option(
            "--concurrency", "--max-concurrency", show_default=False, metavar="C[,C...]",
            help="Closed loop: at most this many requests in flight (a list: one run "
            "each).")] = None,
        request_rate: Annotated[Optional[str], typer.Option(
            "--request-rate", show_default=False, metavar="R[,R...]|inf",
            help="Open loop: Poisson arrivals at R requests/s (inf: all at once; the "
            "default without --concurrency).")] = None,
        prefix_hit: Annotated[float, typer.Option(
            "--prefix-hit", help="Share of each prompt already in the prefix cache, "
            "in [0, 1); with an engine's prefix-caching or offload flag, cut to its "
            "blocks (or 0 with caching off).")] = 0.0,
        host_hit: Annotated[float, typer.Option(
            "--host-hit", help="Share of each prompt held in the engine's host KV tier "
            "beyond --prefix-hit (evicted from the GPU pool), fetched over the GPU's host "
            "link instead of computed; needs the tier's flag (default 0).")] = 0.0,
        max_model_len: Annotated[Optional[int], typer.Option(
            "--max-model-len", show_default=False,
            help="The engine's longest request (default: the model's context).")] = None,
        gpu_memory_utilization: ef.GpuMemoryUtilizationOpt = None,
        max_num_seqs: ef.MaxNumSeqsOpt = None,
        max_num_batched_tokens: ef.MaxNumBatchedTokensOpt = None,
        mem_fraction_static: ef.MemFractionStaticOpt = None,
        max_running_requests: ef.MaxRunningRequestsOpt = None,
        chunked_prefill_size: ef.ChunkedPrefillOpt = None,
        free_gpu_memory_fraction: ef.FreeFractionOpt = None,
        max_batch_size: ef.MaxBatchSizeOpt = None,
        max_num_tokens: ef.MaxNumTokensOpt = None,
        enable_chunked_prefill: ef.EnableChunkedPrefillOpt = False,
        enforce_eager: ef.EnforceEagerOpt = False,
        cuda_graph_max_bs: ef.CudaGraphMaxBsOpt = None,
        disable_cuda_graph: ef.DisableCudaGraphOpt = False,
        kv_offloading_size: ef.KvOffloadingSizeOpt = None,
        kv_offloading_backend: ef.KvOffloadingBackendOpt = None,
        enable_prefix_caching: ef.PrefixCachingOpt = None,
        enable_hierarchical_cache: ef.HicacheOpt = False,
        hicache_ratio: ef.HicacheRatioOpt = None,
        hicache_size: ef.HicacheSizeOpt = None,
        hicache_write_policy: ef.HicacheWritePolicyOpt = None,
        disable_radix_cache: ef.DisableRadixCacheOpt = False,
        host_cache_size: ef.HostCacheSizeOpt = None,
        enable_block_reuse: ef.BlockReuseOpt = None,
        speculative_config: ff.SpeculativeConfigOpt = None,
        speculative_algorithm: ff.SpecAlgorithmOpt = None,
        speculative_draft_model_path: ff.SpecDraftPathOpt = None,
        speculative_num_steps: ff.SpecStepsOpt = None,
        speculative_eagle_topk: ff.SpecTopkOpt = None,
        speculative_num_draft_tokens: ff.SpecDraftTokensOpt = None,
        extra_llm_api_options: ff.ExtraLlmApiOptionsOpt = None,
        acceptance_rate: ff.AcceptanceRateOpt = None,
        kv_dtype: KvDtypeOpt = "bf16",
        weight_dtype: WeightDtypeOpt = None,
        range_ratio: Annotated[float, typer.Option(
            "--random-range-ratio", help="Each request's lengths drawn as vllm bench serve's "
            "random dataset draws them: uniform between len x (1 - R) and len x (1 + R) "
            "(0: every request the same).")] = 0.0,
        dataset: Annotated[str, typer.Option(
            "--dataset-name", "--dataset", help="random (the lengths given, spread by "
            "--random-range-ratio) or sharegpt (lengths spread as ShareGPT's are, at the "
            "given lengths as means: exponential, kept as vllm bench serve keeps ShareGPT "
            "requests; a model of the spread, not the dataset).")] = "random",
        past_saturation: Annotated[bool, typer.Option(
            "--past-saturation", help="Run a --request-rate over what the engine sustains "
            "anyway: the finite run's times, its queue growing throughout (else refused "
            "with where it saturates).")] = False,
        seed: Annotated[int, typer.Option("--seed", help="Poisson arrivals' and lengths' "
                                          "seed.")] = 0,
        against: Annotated[Optional[Path], typer.Option(
            "--against", show_default=False, metavar="RESULT.json",
            help="A real `vllm bench serve --save-result` JSON or SGLang `bench_serving "
            "--output-file` JSONL: each run in it beside kvcalc's prediction of the same "
            "load (its lengths, rate or concurrency and request count; the flags given "
            "must match the file's), metric by metric with the ratio kvcalc / "
            "measured.")] = None,
        images_per_request: Annotated[int, typer.Option(
            "--images-per-request", "--random-mm-base-items-per-request",
            help="Images each request carries (vllm bench serve's random-mm dataset): their "
            "tokens join the prompt (KV and prefill), the vision encoder runs in the step "
            "of the first prompt chunk (kvcalc.served.images; default 0).")] = 0,
        image_size: Annotated[Optional[str], typer.Option(
            "--image-size", show_default=False, metavar="WxH",
            help="Each image's width x height in pixels (needed where the tokens depend on "
            "it: Qwen-VL, Mistral 3).")] = None,
        limit_mm_per_prompt: ff.LimitMmPerPromptOpt = None,
        fmt: FormatOpt = None,
        output: OutputOpt = None,
        force: ForceOpt = False,
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
        from kvcalc.report.render import Tab, deliver
        from kvcalc.cli.speed import memory_engine
        from kvcalc.served import Load, bench as run, random_lengths, sharegpt_lengths

        fmt = output_format(fmt, output)
        hardware = resolve_gpu(gpu)
        if hardware is None:
            raise KvcalcError("bench needs a device: --gpu NAME (see `kvcalc presets`)")
        ref = memory_engine(engine or "vllm")
        if ref is None:
            raise KvcalcError(f"--engine {engine}: bench serves with vllm, sglang or "
                              "tensorrt-llm")
        if concurrency is not None and request_rate is not None:
            raise KvcalcError("--concurrency (closed loop) and --request-rate (open loop) "
                              "are two kinds of run: give one")
        spec = request.resolve()
        if against is not None and (acceptance_rate is not None or any(v is not None for v in (
                speculative_config, speculative_algorithm, extra_llm_api_options))):
            raise KvcalcError("--against predicts the file's runs as measured; bench a "
                              "speculative run without --against")
        if against is not None:
            _against(against, spec, hardware, engine=ref if engine else None, tp=tp,
                     input_len=input_len, output_len=output_len, concurrency=concurrency,
                     request_rate=request_rate, num_prompts=num_prompts,
                     prefix_hit=prefix_hit, seed=seed, kv_dtype=kv_dtype,
                     weight_dtype=weight_dtype, max_model_len=max_model_len, fmt=fmt,
                     output=output, force=force)
            return
        side = {k: v for k, v in ef.side_flags(
            kv_offloading_size=kv_offloading_size, kv_offloading_backend=kv_offloading_backend,
            enable_prefix_caching=enable_prefix_caching,
            enable_hierarchical_cache=enable_hierarchical_cache, hicache_ratio=hicache_ratio,
            hicache_size=hicache_size, hicache_write_policy=hicache_write_policy,
            disable_radix_cache=disable_radix_cache, host_cache_size=host_cache_size,
            enable_block_reuse=enable_block_reuse).items() if v is not None}
        # the engine's own scheduler and memory flags: its pool, running limit and step
        # budget as its count gives them (kvcalc.serving.flags says whose each is)
        own = {k: v for k, v in {
            "gpu_memory_utilization": gpu_memory_utilization, "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "mem_fraction_static": mem_fraction_static,
            "max_running_requests": max_running_requests,
            "chunked_prefill_size": chunked_prefill_size,
            "free_gpu_memory_fraction": free_gpu_memory_fraction,
            "max_batch_size": max_batch_size, "max_num_tokens": max_num_tokens,
            "enable_chunked_prefill": enable_chunked_prefill or None,
            "enforce_eager": enforce_eager or None, "cuda_graph_max_bs": cuda_graph_max_bs,
            "disable_cuda_graph": disable_cuda_graph or None,
            "limit_mm_per_prompt": limit_mm_per_prompt,
            **ff.speculative_given(
                speculative_config=speculative_config,
                speculative_algorithm=speculative_algorithm,
                speculative_draft_model_path=speculative_draft_model_path,
                speculative_num_steps=speculative_num_steps,
                speculative_eagle_topk=speculative_eagle_topk,
                speculative_num_draft_tokens=speculative_num_draft_tokens,
                extra_llm_api_options=extra_llm_api_options)}.items()
            if v is not None}
        from kvcalc.serving.flags import check_owners

        check_owners(ref.name, {**own, **side}, ef.flag_of)
        side = {**own, **side}
        tp = tp or 1
        input_len = input_len or 1024
        output_len = output_len or 128
        image_tokens, encode_flops = _images(spec, images_per_request, image_size)
        loads = []
        if concurrency is not None:
            for c in _values(concurrency, "--concurrency", int):
                loads.append(dict(concurrency=c, num_prompts=num_prompts or 10 * c))
        else:
            for r in _values(request_rate or "inf", "--request-rate", float):
                loads.append(dict(request_rate=r, num_prompts=num_prompts or 1000))
        if dataset not in ("random", "sharegpt"):
            raise KvcalcError(f"--dataset-name must be random or sharegpt, got {dataset!r}")
        if dataset == "sharegpt" and range_ratio:
            raise KvcalcError("--random-range-ratio spreads the random dataset's lengths; "
                              "ShareGPT's spread is its own")
        from kvcalc.served.speculative import gain, without_speculation

        results, gains = [], []
        for kw in loads:
            lengths = (random_lengths(input_len, output_len, kw["num_prompts"], range_ratio,
                                      "vllm", seed) if range_ratio else ())
            if dataset == "sharegpt":
                lengths = sharegpt_lengths(input_len, output_len, kw["num_prompts"], seed)
            hits = dict(host_hit=host_hit, prefix_block=1) if host_hit else {}
            lengths = tuple((p + image_tokens, o) for p, o in lengths)  # images in each prompt
            load = Load(input_len=input_len + image_tokens, output_len=output_len,
                        prefix_hit=prefix_hit, seed=seed, lengths=lengths,
                        encode_flops=encode_flops, **hits, **kw)
            common = dict(engine=ref, tp=tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
                          max_model_len=max_model_len, past_saturation=past_saturation)
            results.append(run(spec, hardware, load, engine_flags=side or None,
                               acceptance_rate=acceptance_rate, **common))
            if "speculative" in results[-1].extra:  # its baseline: speculation off
                gains.append(gain(results[-1], run(
                    spec, hardware, load, engine_flags=without_speculation(side) or None,
                    **common)))
        gpus = tp

        def row(r, i) -> dict:
            d = {**r.as_dict(), **(gains[i] if gains else {})}
            d["output_throughput_per_gpu"] = d["output_throughput"] / gpus
            d["total_token_throughput_per_gpu"] = d["total_token_throughput"] / gpus
            return d

        rows = [row(r, i) for i, r in enumerate(results)]
        r0 = results[0]
        head = (f"predicted for {ref.title} serving {spec.name} on {gpus} x {hardware.name}: "
                + (f"{input_len:,} prompt + {output_len:,} output tokens a request"
                   if dataset == "random" else
                   f"ShareGPT's spread of lengths, {input_len:,} prompt + {output_len:,} "
                   "output tokens a request on average")
                + (f", {images_per_request} image(s) of {image_tokens // images_per_request:,} "
                   f"tokens in the prompt" if images_per_request else ""))
        shown = ("request_throughput", "output_throughput", "output_throughput_per_gpu",
                 "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                 "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms")
        label = "max concurrency" if concurrency is not None else "request rate (req/s)"
        cols = [label, *(str(d["max_concurrency"] if concurrency is not None
                             else d["request_rate"]) for d in rows)]
        table = [[k, *(f"{d[k]:,.2f}" for d in rows)] for k in shown]
        if gains:  # where speculation stops paying: the same load without it
            table += [["mean_tpot_ms without speculation",
                       *(f"{d['without_speculation']['mean_tpot_ms']:,.2f}" for d in rows)],
                      ["output_throughput with / without speculation",
                       *(f"{d['speculation_gain']:,.2f}" for d in rows)]]
        notes = sorted({n for r in results for n in r.notes})
        caption = "\n".join([f"KV pool {r0.kv_cache_tokens:,} tokens; step budget "
                             f"{r0.step_budget:,} tokens; times on {ref.name}'s fitted terms "
                             "(presets/engines)", *(f"note: {n}" for n in notes)])
        deliver(fmt.value, [head, Tab("", cols, table, caption=caption)],
                data=rows[0] if len(rows) == 1 else {"runs": rows}, rows=rows,
                output=output, force=force)


def _images(spec, images: int, size: str | None) -> tuple[int, int]:
    """(tokens, vision FLOPs) --images-per-request images of --image-size add to a request."""
    if not images:
        if size is not None:
            raise KvcalcError("--image-size sizes the images of --images-per-request: give both")
        return 0, 0
    from kvcalc.formulas.images import parse_image_size
    from kvcalc.served.images import image_load

    if size is None and "fixed" not in (spec.extra.get("image") or {"fixed": 0}):
        raise KvcalcError(f"--images-per-request: {spec.name}'s image tokens depend on the "
                          f"image's size; give --image-size WxH")
    width, height = parse_image_size(size) if size is not None else (1, 1)
    return image_load(spec, images, width, height)


def _against(path, spec, hardware, *, engine, tp, input_len, output_len, concurrency,
             request_rate, num_prompts, fmt, output, force, **kw) -> None:
    """`bench --against`: the file's runs beside kvcalc's, rendered."""
    from kvcalc.report.render import Tab, deliver
    from kvcalc.served import METRICS
    from kvcalc.served.against import against as compare

    if concurrency is not None and request_rate is not None:
        raise KvcalcError("--concurrency (closed loop) and --request-rate (open loop) "
                          "are two kinds of run: give one")
    for flag, v in (("--tp", tp), ("--input-len", input_len), ("--output-len", output_len),
                    ("--num-prompts", num_prompts)):
        if v is not None and v < 1:
            raise KvcalcError(f"{flag} must be a positive whole number, got {v}")
    got = compare(path, spec, hardware, engine=engine, tp=tp, input_len=input_len,
                  output_len=output_len,
                  concurrency=_values(concurrency, "--concurrency", int) if concurrency else None,
                  request_rate=(_values(request_rate, "--request-rate", float)
                                if request_rate else None),
                  num_prompts=num_prompts, **kw)
    first = got.runs[0]
    items = [f"{first.run.client} result {path} beside kvcalc ({got.engine.title} serving "
             f"{got.model} on {first.predicted.tp if first.predicted else (tp or first.run.tp or 1)}"
             f" x {got.gpu}): ratio = kvcalc / measured"]
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
    deliver(fmt.value, items, data=got.as_dict(), rows=got.rows(), output=output, force=force)


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
