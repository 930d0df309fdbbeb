"""`kvcalc estimate` and `kvcalc fit`: parse, call kvcalc.answers.estimate or kvcalc.fit,
render."""

from __future__ import annotations  # the commands not run never evaluate their options

import typer

from kvcalc.cli import speed
from kvcalc.cli.counting import write
from kvcalc.cli.options import ModelRequest, model_options, output_format, parse_size
from kvcalc.cli.parsing import command, with_options


def _estimate_items(est, detail: bool) -> list:
    """estimate's table: the one-line answer, the compact table (or every breakdown)."""
    from kvcalc.report.tables import estimate_tables, headline, summary_table

    body = estimate_tables(est) if detail else [summary_table(est)]
    return [headline(est), *body, *_notes(est)]


def _compare_items(ests) -> list:
    from kvcalc.report.tables import compare_table

    return [compare_table(ests)]


def _notes(est) -> list[str]:
    from kvcalc.report.tables import estimate_notes

    notes = estimate_notes(est)
    return ["\n".join(f"note: {n}" for n in notes)] if notes else []


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only)
    @model_options
    @with_options("kvcalc.cli.fit_options:ESTIMATE")
    def estimate(request: ModelRequest, options: dict) -> None:
        """KV cache, parameters, decode time and what fits, for one model: one line, then a
        compact table (--detail for every breakdown).

        Examples: `kvcalc estimate Qwen/Qwen3-8B` (a Hub id; or the model's folder);
        `kvcalc estimate --preset gpt3`; `kvcalc estimate --preset llama3-70b
        --seq-len 8192 --batch 16 --tp 4 --format json`; `kvcalc estimate --preset
        llama2-7b --compare`; `-o r.md` writes markdown.
        """
        _estimate_command(request, **options)

    @command(app, only)
    @model_options
    @with_options("kvcalc.cli.fit_options:FIT")
    def fit(request: ModelRequest, options: dict) -> None:
        """Does it fit? vLLM's own start-up count decides, the floor (weights + KV) beside it.

        vLLM's arithmetic (V1 engine): driver-visible memory x --gpu-memory-utilization,
        less weights, the profiling pass's activation peak, non-torch memory and CUDA
        graphs; then KV blocks per layer group, "KV cache tokens" and the maximum
        concurrency at max_model_len (--max-model-len, else --seq-len, with --batch
        requests at once). It fits when the engine starts and holds them all. Where it
        does not: the memory table anyway, the bytes the KV cache lacks, and each single
        change that makes it start (--tp, the length, --gpu-memory-utilization, --kv-dtype
        fp8, --weight-dtype fp8 or int4), each counted again; the exit status is then 1
        (the input was valid; the answer is no), bad input 2. --ttft-ms and --tpot-ms give
        the largest batch meeting both.

        Examples: `kvcalc fit Qwen/Qwen3-8B --gpu l4`; `kvcalc fit --preset llama3.1-8b
        --gpu rtx3090 --max-model-len 20000`;
        `kvcalc fit --config config.json --gpu h100-sxm --tp 4 --max-model-len 32768
        --gpu-memory-utilization 0.95 --format json`.
        """
        _fit_command({**options, "request": request})  # every option, by its parameter name


def _estimate_command(request: ModelRequest, *, compare: bool, detail: bool, fmt, output,
                      force: bool, reserve, **parameters) -> None:
    """estimate: parse, call kvcalc.answers.estimate (the model, or with --compare its MHA,
    GQA and MQA variants), write."""
    from kvcalc.answers.estimate import estimate

    fmt = output_format(fmt, output)
    answer = estimate(model=request.resolve, kv_heads=request.kv_heads, compare=compare,
                      reserve_bytes=None if reserve is None else parse_size(reserve),
                      **parameters)
    if compare:
        write(fmt, output, force, answer.as_dict, answer.as_rows,
              lambda: _compare_items(list(answer.estimates)))
        return
    write(fmt, output, force, answer.as_dict, lambda: [answer.as_row()],
          lambda: _estimate_items(answer, detail))


def _fit_command(p: dict) -> None:
    """fit: parse, call kvcalc.fit (vLLM's count, or --engine sglang|tensorrt-llm's),
    write; exit 1 when it does not fit."""
    from kvcalc.answers.fit import fit
    from kvcalc.report.csv_json import flatten

    fmt = output_format(p["fmt"], p["output"])
    ref = speed.memory_engine(p["speed_engine"])  # whose memory count (None: vLLM's)
    others, side, dp, expert_parallel = _engine_flags_given(p, ref)
    parameters = _fit_parameters(p, dp, expert_parallel)
    if ref is not None and ref.name != "vllm":  # that engine's own flags, by name
        from kvcalc.ground import units

        for name in ("context_length", "max_seq_len"):
            if others.get(name) is not None:
                others[name] = units.count(others[name], "--" + name.replace("_", "-"))
        parameters.update({k: v for k, v in {**others, **side}.items()
                           if v is not None and k not in parameters})
    answer = fit(**parameters)
    write(fmt, p["output"], p["force"], answer.as_dict, lambda: [flatten(answer.as_dict())],
          lambda: _fit_tables(answer))
    if not answer.fits:
        raise typer.Exit(1)  # a valid question answered no (bad input exits 2)


def _engine_flags_given(p: dict, ref) -> tuple:
    """The engine flags given, by parameter name, each checked against the engine it
    belongs to (kvcalc.serving.flags): (the memory engine's own, the offload and prefix
    flags, vLLM's dp, its expert parallelism)."""
    from kvcalc.cli import engine_flags as ef
    from kvcalc.cli import feature_flags as ff
    from kvcalc.serving.flags import check_owners

    names = ("mem_fraction_static", "context_length", "max_running_requests",
             "max_total_tokens", "page_size", "chunked_prefill_size", "cuda_graph_max_bs",
             "disable_cuda_graph", "dp_size", "enable_dp_attention", "mamba_full_memory_ratio",
             "max_mamba_cache_size", "swa_full_tokens_ratio", "disable_hybrid_swa_memory",
             "free_gpu_memory_fraction", "max_batch_size", "max_num_tokens", "max_seq_len",
             "tokens_per_block", "backend", "max_tokens_in_paged_kv_cache")
    others = {k: p[k] or None if isinstance(p[k], bool) else p[k] for k in names}
    window = p["max_attention_window"]
    others["max_attention_window"] = None if window is None else ef.windows(window)
    others.update(ff.speculative_given(**{k: p[k] for k in (
        "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens", "extra_llm_api_options")}))
    others.pop("speculative_config")
    lora = ff.lora_given(**{k: p[k] for k in ("enable_lora", "max_loras", "max_loras_per_batch",
                                             "max_lora_rank", "lora_dtype",
                                             "lora_target_modules")})
    others["max_loras_per_batch"] = lora["max_loras_per_batch"]
    shared_lora = {k: lora[k] for k in ("enable_lora", "max_lora_rank", "lora_target_modules")}
    vllm_given = {k: p[k] for k in ("gpu_memory_utilization", "max_model_len", "block_size",
                                    "max_num_batched_tokens", "max_num_seqs", "vllm_version",
                                    "calibration", "speculative_config", "max_loras",
                                    "lora_dtype", "limit_mm_per_prompt", "mm_encoder_tp_mode")}
    vllm_given.update(kv_cache_memory_bytes=p["kv_cache_memory"],
                      enforce_eager=p["enforce_eager"] or None)
    side = ef.side_flags(**{k: p[k] for k in (
        "kv_offloading_size", "kv_offloading_backend", "enable_prefix_caching",
        "enable_hierarchical_cache", "hicache_ratio", "hicache_size", "hicache_write_policy",
        "disable_radix_cache", "host_cache_size", "enable_block_reuse")})
    others = ef.layout_flags(ref, others, p["data_parallel_size"], p["enable_expert_parallel"])
    check_owners(ref.name if ref else "vllm", {**vllm_given, **others, **shared_lora, **side},
                 ef.flag_of)
    return others, side, others.pop("dp"), others.pop("enable_expert_parallel")


def _fit_parameters(p: dict, dp, expert_parallel) -> dict:
    """kvcalc.fit's parameters from fit's options: sizes and lengths read from their
    text, the model resolved from MODEL, --preset or --config and the architecture flags."""
    from kvcalc.cli.options import parse_size
    from kvcalc.ground import units

    length = p["max_model_len"]
    if length is not None:
        t = length.strip()
        length = "auto" if t.lower() == "auto" else units.count(t, "--max-model-len")
    same = ("seq_len", "batch", "kv_dtype", "weight_dtype", "group_size", "tp", "pp", "gpu",
            "gpu_memory_utilization", "block_size", "max_num_batched_tokens", "max_num_seqs",
            "enforce_eager", "vllm_version", "calibration", "ttft_ms", "tpot_ms", "prompt_len",
            "mfu", "bandwidth_efficiency", "kv_scale_bytes", "encoder_seq_len",
            "memory_fraction", "speculative_config", "acceptance_rate", "enable_lora",
            "max_loras", "max_lora_rank", "lora_dtype", "lora_target_modules",
            "enable_prefix_caching", "kv_offloading_size", "kv_offloading_backend",
            "limit_mm_per_prompt", "mm_encoder_tp_mode")
    memory, reserve = p["kv_cache_memory"], p["reserve"]
    return {**{k: p[k] for k in same}, "model": p["request"].resolve(),
            "max_model_len": length, "engine": p["speed_engine"],
            "kv_cache_memory_bytes": None if memory is None else
            parse_size(memory, "--kv-cache-memory"),
            "reserve_bytes": None if reserve is None else parse_size(reserve),
            "data_parallel_size": dp, "enable_expert_parallel": bool(expert_parallel)}


def _fit_tables(answer) -> list:
    """fit's tables: vLLM's count beside the floor, the speculative time, the host tier."""
    from kvcalc.report.offload import host_tier_tables
    from kvcalc.report.speculative import speculative_table
    from kvcalc.report.tables import capacity_table

    est = answer.estimate
    if answer.count is not None:  # another engine's count
        from kvcalc.report.serving import serving_table

        out = [serving_table(est, answer.count, answer.max_batch_for_slo)]
    else:
        out = [capacity_table(est, answer.max_batch_for_slo,
                              "--max-model-len" if answer.engine_parameters else "--seq-len")]
    if answer.speculative is not None:
        out.append(speculative_table(answer.speculative, answer.speculative_timed_on))
    return [*out, *host_tier_tables(answer.host_tier)]
