"""Each engine's own flags, by the names its command line spells them, and the one record
an engine's wing takes built from them and from the workload (model dtype, weights,
KV dtype, tensor parallelism).

`OWNER` says whose flag each is; `ALIKE` pairs the flags that mean the same thing in
two engines, so that a flag given for the wrong engine is refused with the right one's
name (`--gpu-memory-utilization` with SGLang: "give --mem-fraction-static").
"""

from __future__ import annotations

import functools

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.serving.offload import OFFLOAD_FLAGS, OFFLOAD_UNITS
from kvcalc.serving.releases import TITLES

__all__ = ["ALIKE", "ELSEWHERE", "OWNER", "SIDE", "check_owners", "check_types",
           "engine_flags"]

# parameter name -> the engines that take it
OWNER = {
    # vLLM (EngineSettings' names)
    "gpu_memory_utilization": ("vllm",), "max_model_len": ("vllm",), "block_size": ("vllm",),
    "max_num_batched_tokens": ("vllm",), "max_num_seqs": ("vllm",),
    "kv_cache_memory_bytes": ("vllm",), "enforce_eager": ("vllm",),
    "vllm_version": ("vllm",), "calibration": ("vllm",), "dp": ("vllm",),
    "enable_expert_parallel": ("vllm",), "limit_mm_per_prompt": ("vllm",),
    "mm_encoder_tp_mode": ("vllm",),
    # SGLang (ServerArgs' names)
    "mem_fraction_static": ("sglang",), "context_length": ("sglang",),
    "max_running_requests": ("sglang",), "max_total_tokens": ("sglang",),
    "page_size": ("sglang",), "chunked_prefill_size": ("sglang",),
    "cuda_graph_max_bs": ("sglang",), "disable_cuda_graph": ("sglang",),
    "dp_size": ("sglang",), "enable_dp_attention": ("sglang",),
    "mamba_full_memory_ratio": ("sglang",), "max_mamba_cache_size": ("sglang",),
    "swa_full_tokens_ratio": ("sglang",), "disable_hybrid_swa_memory": ("sglang",),
    # TensorRT-LLM (LLM API / trtllm-serve names)
    "free_gpu_memory_fraction": ("tensorrt-llm",), "max_batch_size": ("tensorrt-llm",),
    "max_num_tokens": ("tensorrt-llm",), "max_seq_len": ("tensorrt-llm",),
    "tokens_per_block": ("tensorrt-llm",), "backend": ("tensorrt-llm",),
    "max_tokens_in_paged_kv_cache": ("tensorrt-llm",),
    "enable_chunked_prefill": ("tensorrt-llm",),
    # speculative decoding (kvcalc.serving.speculative), each engine's own spelling
    "speculative_config": ("vllm",),
    "speculative_algorithm": ("sglang",), "speculative_draft_model_path": ("sglang",),
    "speculative_num_steps": ("sglang",), "speculative_eagle_topk": ("sglang",),
    "speculative_num_draft_tokens": ("sglang",),
    "extra_llm_api_options": ("tensorrt-llm",), "cuda_graph_config": ("tensorrt-llm",),
    # LoRA adapters (kvcalc.serving.lora)
    "enable_lora": ("vllm", "sglang"), "max_lora_rank": ("vllm", "sglang"),
    "lora_target_modules": ("vllm", "sglang"), "max_loras": ("vllm",),
    "lora_dtype": ("vllm",), "max_loras_per_batch": ("sglang",),
    "max_attention_window": ("tensorrt-llm",),
    # every engine
    "pp": ("vllm", "sglang", "tensorrt-llm"),
    # prefix caching, each engine's own switch (kvcalc.serving.prefix)
    "enable_prefix_caching": ("vllm",), "disable_radix_cache": ("sglang",),
    "enable_block_reuse": ("tensorrt-llm",),
}
# KV offload to CPU memory (kvcalc.serving.offload): vLLM's GiB over all ranks, SGLang's
# GB per rank, TensorRT-LLM's bytes per rank
OWNER.update({name: (engine,) for name, engine in OFFLOAD_FLAGS.items()})

# The same knob in each engine: (vLLM, SGLang, TensorRT-LLM).
ALIKE = (
    ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction"),
    ("max_model_len", "context_length", "max_seq_len"),
    ("max_num_seqs", "max_running_requests", "max_batch_size"),
    ("max_num_batched_tokens", "chunked_prefill_size", "max_num_tokens"),
    ("block_size", "page_size", "tokens_per_block"),
    ("enforce_eager", "disable_cuda_graph", None),
    ("speculative_config", "speculative_algorithm", "extra_llm_api_options"),
    ("max_loras", "max_loras_per_batch", None),
    ("dp", "dp_size", None),
    ("kv_offloading_size", "hicache_size", "host_cache_size"),
    ("kv_offloading_backend", "enable_hierarchical_cache", "host_cache_size"),
    ("enable_prefix_caching", "disable_radix_cache", "enable_block_reuse"),
)
# What another engine calls a knob kvcalc takes for one engine only, where kvcalc does not
# take that engine's own spelling: (parameter, engine) -> how that engine spells it, read
# in its released source.
ELSEWHERE = {
    # SGLang server_args.py (0.4.6.post5-0.5.8; 0.5.23 arg_groups/fields/parallel.py
    # ep_size): "--expert-parallel-size" / "--ep-size", an expert-parallel size, not a
    # switch (0.4.6-0.5.1 also "--enable-ep-moe"); absent in 0.4.0
    ("enable_expert_parallel", "sglang"): "--ep-size (an expert-parallel size)",
    # TensorRT-LLM commands/serve.py::serve (1.3.0rc3 l. 499-500): "--moe_expert_parallel_size"
    # / "--ep_size" (absent at main@0.17dev, whose serve takes --tp_size and --pp_size);
    # no data-parallel replicas in any: attention data parallelism is enable_attention_dp
    # in --extra_llm_api_options
    ("enable_expert_parallel", "tensorrt-llm"): "--ep_size (an expert-parallel size)",
    # SGLang 0.5.8 server_args.py l. 4708 "--limit-mm-data-per-request": a check on each
    # request (`managers/tokenizer_manager.py` l. 833-836), which sizes no memory
    ("limit_mm_per_prompt", "sglang"): "--limit-mm-data-per-request (0.5.8+: a check on "
                                       "each request, which sizes no memory)",
    # SGLang 0.5.8 server_args.py l. 4702 "--mm-enable-dp-encoder", a switch
    ("mm_encoder_tp_mode", "sglang"): "--mm-enable-dp-encoder (a switch)",
    ("dp", "tensorrt-llm"): "no data-parallel replicas (attention data parallelism is "
                            "enable_attention_dp in --extra_llm_api_options)",
}
_COLUMN = {"vllm": 0, "sglang": 1, "tensorrt-llm": 2}
# On/off switches whose off (False) is given as much as their on
TRISTATE = {"enable_prefix_caching", "enable_block_reuse"}
# What the engine's count takes no part in: the host tier and prefix caching
# (kvcalc.serving.offload, kvcalc.serving.prefix), dropped before a wing's flags
SIDE = set(OFFLOAD_FLAGS) | {"enable_prefix_caching", "disable_radix_cache",
                             "enable_block_reuse"}


def check_owners(engine: str, given: dict, spell=lambda name: name) -> None:
    """Refuse a flag given for another engine than `engine`, naming this engine's own
    (`spell` turns a parameter name into the way the caller spells it, e.g. a flag)."""
    for name, value in given.items():
        if value is None or (value is False and name not in TRISTATE):
            continue
        owners = OWNER.get(name)
        if owners is None or engine in owners:
            continue
        theirs = " and ".join(TITLES[o] for o in owners)
        mine = next((row[_COLUMN[engine]] for row in ALIKE if name in row), None)
        other = ELSEWHERE.get((name, engine))
        if mine:
            unit = f" ({OFFLOAD_UNITS[mine]})" if mine in OFFLOAD_UNITS else ""
            instead = f"; {TITLES[engine]}'s is {spell(mine)}{unit}"
        elif other and other.startswith("--"):
            instead = (f"; {TITLES[engine]} spells it {other}, which kvcalc does not take "
                       f"for it")
        elif other:
            instead = f"; {TITLES[engine]} has {other}"
        else:
            instead = f"; {TITLES[engine]} has no such flag"
        raise KvcalcError(f"{spell(name)} is {theirs}'s flag (count with {spell('engine')} "
                          f"{owners[0]}), and the engine counted is {TITLES[engine]}{instead}")


# what a flag's field takes, in words, by the Python type of its record's annotation
_TAKES = {int: "a whole number", bool: "true or false", float: "a number", str: "text"}


@functools.lru_cache(maxsize=None)  # the records' annotations never change in a run
def _field_types(engine: str) -> dict:
    """{flag: the types in _TAKES its field in `engine`'s flags record takes}; {} for an
    engine whose settings the library reads itself (vLLM's). Resolving the annotations
    takes about a millisecond, and plan and sweep build a record a layout or a row."""
    import types
    import typing

    if engine == "sglang":
        from kvcalc.serving.sglang import SglangFlags as flags_class
    elif engine == "tensorrt-llm":
        from kvcalc.serving.trtllm import TrtllmFlags as flags_class
    else:
        return {}
    out = {}
    for name, hint in typing.get_type_hints(flags_class).items():
        allowed = tuple(t for t in (typing.get_args(hint) if isinstance(hint, types.UnionType)
                                    else (hint,)) if t in _TAKES)
        if allowed:
            out[name] = allowed
    return out


def check_types(engine: str, given: dict) -> None:
    """Each flag in `given` of a type its field in `engine`'s flags record (SglangFlags,
    TrtllmFlags) takes: a whole number where the engine's parser wants an int (not
    "auto", not 0.5, not True), a switch a bool; ParameterError naming the flag's
    parameter otherwise (the library's callers give these by name, past the CLI's
    parsers)."""
    types_of = _field_types(engine)
    for name, value in given.items():
        allowed = types_of.get(name)
        if allowed is None or value is None:
            continue
        if isinstance(value, bool) and bool not in allowed:
            ok = False
        elif float in allowed:
            ok = isinstance(value, (*allowed, int))
        else:
            ok = isinstance(value, allowed)
        if not ok:
            what = " or ".join(_TAKES[t] for t in allowed)
            raise ParameterError(f"{{{name}}} takes {what}, got {literal(repr(value))}", name)


def engine_flags(ref, settings, *, kv_scale_bytes: int = 0, **given):
    """The record `ref`'s wing takes: `settings` (kvcalc.serving.vllm.settings.EngineSettings,
    what the workload says: dtypes, weights, tp, pp) and `given` (the engine's own
    flags by their parameter names; None: the engine's default)."""
    from kvcalc.serving.layout import Layout

    given = {k: v for k, v in given.items() if v is not None}
    check_owners(ref.name, given)
    prefix = given.get("enable_prefix_caching")  # vLLM's count sizes a hybrid's state by it
    given = {k: v for k, v in given.items() if k not in SIDE}
    if prefix is not None:
        given["prefix_caching"] = bool(prefix)
    if ref.name == "vllm":
        from kvcalc.serving.vllm import VllmFlags

        return VllmFlags(engine=ref, settings=settings.replace(**given),
                         kv_scale_bytes=kv_scale_bytes)
    weights = settings.weights
    pp = given.pop("pp", settings.pp)
    if ref.name == "sglang":
        from kvcalc.serving.sglang import SglangFlags, allow_long_context_from_env

        check_types(ref.name, given)
        layout = Layout(tp=settings.tp, pp=pp, dp=given.pop("dp_size", 1),
                        dp_attention=bool(given.pop("enable_dp_attention", False)))
        given.setdefault("context_length", settings.max_model_len)
        return SglangFlags(engine=ref, weights=weights, layout=layout,
                           kv_cache_dtype=settings.kv_dtype, kv_scale_bytes=kv_scale_bytes,
                           allow_long_context=allow_long_context_from_env(), **given)
    from kvcalc.serving.trtllm import TrtllmFlags

    check_types(ref.name, given)
    path = given.pop("extra_llm_api_options", None)
    if path is not None:
        from kvcalc.serving.speculative import llm_api_speculative_config
        from kvcalc.serving.trtllm.options import cuda_graph_flags, read_llm_api_options

        options = read_llm_api_options(path)
        spec_config = llm_api_speculative_config(options, str(path))
        if spec_config is not None:
            given["speculative_config"] = spec_config
        given.update(cuda_graph_flags(options, str(path)))
    if "max_tokens_in_paged_kv_cache" in given:
        given["max_tokens"] = given.pop("max_tokens_in_paged_kv_cache")
    given.setdefault("max_seq_len", settings.max_model_len)
    return TrtllmFlags(engine=ref, weights=weights, layout=Layout(tp=settings.tp, pp=pp),
                       kv_cache_dtype=settings.kv_dtype, kv_scale_bytes=kv_scale_bytes, **given)
