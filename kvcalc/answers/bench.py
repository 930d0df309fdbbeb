"""`kvcalc bench` as a library function: `kvcalc.bench(model=..., gpu=..., concurrency=...)`
returns a BenchAnswer whose `as_dict()` is `kvcalc bench --format json`, exactly
(tests/test_answers_plan_bench.py holds them equal on the golden cases).

What `vllm bench serve` (or SGLang's bench_serving) would print for the model on these
GPUs, predicted by simulating the engine's scheduler over the client's requests
(kvcalc.served): one run per concurrency (closed loop) or request rate (open loop). With
`against` (a real run's result file) each run in it beside kvcalc's prediction of that
run instead (kvcalc.served.against).
"""

from __future__ import annotations

import copy
import math
from dataclasses import field

from kvcalc.answers.given import device, model_spec, owned, unexpected
from kvcalc.errors import ParameterError, literal
from kvcalc.ground.record import record
from kvcalc.served import BenchResult
from kvcalc.served.against import Against
from kvcalc.serving import EngineRef

DEFAULT_INPUT_LEN = 1024  # tokens, vllm bench serve's random dataset's
DEFAULT_OUTPUT_LEN = 128
# The engine's own flags in the order they are checked (the first wrong one is said):
# its scheduler and memory, speculation, then the host tier and prefix caching. vLLM's
# are bench's named parameters; another engine's come by name (**engine_flags).
ENGINE_FLAGS = (
    "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "mem_fraction_static",
    "max_running_requests", "chunked_prefill_size", "free_gpu_memory_fraction",
    "max_batch_size", "max_num_tokens", "enable_chunked_prefill", "enforce_eager",
    "cuda_graph_max_bs", "disable_cuda_graph", "limit_mm_per_prompt", "speculative_config",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "extra_llm_api_options",
    "enable_lora", "max_loras", "max_loras_per_batch", "max_lora_rank", "lora_dtype",
    "lora_target_modules", "kv_offloading_size", "kv_offloading_backend", "enable_prefix_caching",
    "enable_hierarchical_cache", "hicache_ratio", "hicache_size", "hicache_write_policy",
    "disable_radix_cache", "host_cache_size", "enable_block_reuse")
# Switches whose False is the engine's default (not given)
_SWITCHES = ("enable_chunked_prefill", "enforce_eager", "disable_cuda_graph",
             "enable_hierarchical_cache", "disable_radix_cache", "enable_lora")


@record
class BenchAnswer:
    """What `kvcalc bench` answers: `as_dict()` is its JSON, `rows()` its CSV; the rest
    is what its table says. One predicted run per load (`results`, its JSON row in
    `runs`), or with `against` the file's runs beside kvcalc's."""

    engine: EngineRef  # the serving engine and its release
    model: str
    gpu: str
    gpus: int  # tp: the devices one engine runs on
    input_len: int  # prompt tokens per request (mean), images' tokens not counted
    output_len: int
    dataset_name: str  # "random" or "sharegpt"
    closed_loop: bool  # runs by concurrency (else by request rate)
    images_per_request: int = 0
    image_tokens: int = 0  # the images' tokens in each prompt
    results: tuple[BenchResult, ...] = ()  # one a load
    runs: tuple[dict, ...] = ()  # each run's JSON: its metrics, per GPU, the speculation gain
    against: Against | None = None  # with a result file: its runs beside kvcalc's
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        if self.against is not None:
            return self.against.as_dict()
        return copy.deepcopy(self.runs[0] if len(self.runs) == 1 else {"runs": list(self.runs)})

    def rows(self) -> list[dict]:
        """CSV rows: one a run (with a result file: measured, kvcalc and ratio a run)."""
        if self.against is not None:
            return self.against.rows()
        return copy.deepcopy(list(self.runs))


def bench(*, model, gpu="h100-sxm", engine: str | None = None, tp: int | None = None,
          input_len: int | None = None, output_len: int | None = None,
          num_prompts: int | None = None, concurrency: int | list[int] | None = None,
          request_rate: float | list[float] | None = None, prefix_hit: float = 0.0,
          host_hit: float = 0.0, prefix_shared: bool = False,
          max_model_len: int | None = None, kv_dtype="bf16",
          weight_dtype=None, random_range_ratio: float = 0.0, dataset_name: str = "random",
          past_saturation: bool = False, seed: int = 0, against=None,
          images_per_request: int = 0, image_size: str | None = None,
          gpu_memory_utilization: float | str | None = None, max_num_seqs: int | None = None,
          max_num_batched_tokens: int | None = None, enforce_eager: bool = False,
          speculative_config: str | None = None, acceptance_rate: float | None = None,
          limit_mm_per_prompt: str | None = None, enable_prefix_caching: bool | None = None,
          enable_lora: bool = False, max_loras: int | None = None,
          max_lora_rank: int | None = None, lora_dtype: str | None = None,
          lora_target_modules: str | None = None,
          kv_offloading_size: float | str | None = None,
          kv_offloading_backend: str | None = None, **engine_flags) -> BenchAnswer:
    """A `vllm bench serve` run predicted: TTFT, TPOT, ITL and end-to-end latency (mean,
    median, P99, in milliseconds), request, output and total token throughput.

    `model`: a ModelSpec or MODEL (a preset, Hub id, folder or config file); `gpu`: a
    Hardware, a hardware preset or a hardware YAML file; `engine`: vllm (default),
    sglang or tensorrt-llm (@release), whose start-up count sizes the pool and whose
    fitted terms time the steps; `tp`: devices (default 1, or the result file's).
    Lengths in tokens (`input_len`, `output_len`: default 1,024 and 128, each request's
    mean; `max_model_len`); `num_prompts`: requests sent (default 1,000, or 10 x the
    concurrency). `concurrency`: the closed loop's requests in flight (a list: a run
    each); `request_rate`: else the open loop's Poisson arrivals a second (a list: a run
    each; math.inf: all at once, the default). `prefix_hit`, `host_hit`: shares of each
    prompt already in the prefix cache, or in the host tier, in [0, 1); `prefix_shared`:
    the cached part is one prefix every request shares, held once in the KV pool
    (kvcalc.served.step.shared_prefix; else each request's own). `dataset_name`:
    "random" (lengths spread by `random_range_ratio` in [0, 1]) or "sharegpt".
    `past_saturation`: a rate over what the engine sustains runs anyway. `against`: a
    `vllm bench serve --save-result` JSON or SGLang bench_serving JSONL, its runs beside
    kvcalc's. `images_per_request` images of `image_size` ("WxH" pixels) in each prompt.
    vLLM's own flags by their vLLM names (`kv_offloading_size` in GiB over all ranks;
    `enable_lora` with its slots, rank, dtype and modules: the slots in the count, the
    adapters' kernels in every step, kvcalc.served.lora); another engine's by its own
    (`engine_flags`: mem_fraction_static, max_batch_size, max_loras_per_batch, ...).
    """
    p = dict(locals())  # every parameter by its name
    unexpected("bench", engine_flags, ENGINE_FLAGS)
    hardware, ref = device(gpu, "bench"), _engine(engine)
    if concurrency is not None and request_rate is not None:
        raise ParameterError("{concurrency} (closed loop) and {request_rate} (open loop) "
                             "are two kinds of run: give one", "concurrency", "request_rate")
    p["concurrency"] = _loads(concurrency, "concurrency")
    p["request_rate"] = _loads(request_rate, "request_rate")
    spec = model_spec(model)
    flags = {k: p[k] if k in p else engine_flags.get(k) for k in ENGINE_FLAGS}
    if against is not None:
        return _against(spec, hardware, ref if engine else None, flags, p)
    flags = {k: None if k in _SWITCHES and not v else v for k, v in flags.items()}
    owned(ref.name, flags)
    return _served(spec, hardware, ref, {k: v for k, v in flags.items() if v is not None}, p)


def _engine(text: str | None):
    """The serving engine (kvcalc.serving.EngineRef): vLLM's release by default."""
    from kvcalc.answers.speed import memory_engine

    ref = memory_engine(text or "vllm")
    if ref is None:
        raise ParameterError("{engine} " + literal(text) + ": bench serves with vllm, "
                             "sglang or tensorrt-llm", "engine")
    return ref


def _loads(value, name: str) -> list | None:
    """concurrency or request_rate: None, or a list of positive numbers (one a run)."""
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ParameterError("{" + name + "} values must be positive, got "
                                 + literal(repr(v) if isinstance(v, str) else v), name)
    return values


def _against(spec, hardware, engine, flags: dict, p: dict) -> BenchAnswer:
    """The result file's runs beside kvcalc's (kvcalc.served.against); `engine` None: the
    file's backend."""
    from kvcalc.served.against import against as compare

    if p["acceptance_rate"] is not None or any(flags[k] is not None for k in (
            "speculative_config", "speculative_algorithm", "extra_llm_api_options")):
        raise ParameterError("{against} predicts the file's runs as measured; bench a "
                             "speculative run without {against}", "against")
    if flags["enable_lora"]:
        raise ParameterError("{against} predicts the file's runs as measured; bench a "
                             "LoRA run without {against}", "against")
    if p["prefix_shared"]:
        raise ParameterError("{against} predicts the file's runs as measured; bench a "
                             "shared prefix without {against}", "against", "prefix_shared")
    for name in ("tp", "input_len", "output_len", "num_prompts"):
        if p[name] is not None and p[name] < 1:
            raise ParameterError("{" + name + "} must be a positive whole number, got "
                                 + literal(p[name]), name)
    got = compare(p["against"], spec, hardware, engine=engine,
                  **{k: p[k] for k in ("tp", "input_len", "output_len", "concurrency",
                                       "request_rate", "num_prompts", "prefix_hit", "seed",
                                       "kv_dtype", "weight_dtype", "max_model_len")})
    first = got.runs[0]
    gpus = first.predicted.tp if first.predicted else (p["tp"] or first.run.tp or 1)
    return BenchAnswer(engine=got.engine, model=got.model, gpu=got.gpu, gpus=gpus,
                       input_len=first.run.input_len or 0, output_len=first.run.output_len or 0,
                       dataset_name="random", closed_loop=p["concurrency"] is not None,
                       against=got)


def _images(spec, images: int, size: str | None) -> tuple[int, int]:
    """(tokens, vision FLOPs) `images` images of `size` add to a request."""
    if not images:
        if size is not None:
            raise ParameterError("{image_size} sizes the images of {images_per_request}: "
                                 "give both", "image_size", "images_per_request")
        return 0, 0
    from kvcalc.formulas.images import parse_image_size
    from kvcalc.served.images import image_load

    if size is None and "fixed" not in (spec.extra.get("image") or {"fixed": 0}):
        raise ParameterError("{images_per_request}: " + literal(spec.name) + "'s image "
                             "tokens depend on the image's size; give {image_size} WxH",
                             "images_per_request", "image_size")
    width, height = parse_image_size(size) if size is not None else (1, 1)
    return image_load(spec, images, width, height)


def _served(spec, hardware, ref, flags: dict, p: dict) -> BenchAnswer:
    """One predicted run a load, each beside its run without speculation where it drafts."""
    tp, images = p["tp"] or 1, p["images_per_request"]
    input_len = p["input_len"] or DEFAULT_INPUT_LEN
    output_len = p["output_len"] or DEFAULT_OUTPUT_LEN
    image_tokens, encode_flops = _images(spec, images, p["image_size"])
    if p["concurrency"] is not None:
        loads = [dict(concurrency=c, num_prompts=p["num_prompts"] or 10 * c)
                 for c in p["concurrency"]]
    else:
        loads = [dict(request_rate=r, num_prompts=p["num_prompts"] or 1000)
                 for r in p["request_rate"] or [math.inf]]
    dataset, ratio = p["dataset_name"], p["random_range_ratio"]
    if dataset not in ("random", "sharegpt"):
        raise ParameterError("{dataset_name} must be random or sharegpt, got "
                             + literal(repr(dataset)), "dataset_name")
    if dataset == "sharegpt" and ratio:
        raise ParameterError("{random_range_ratio} spreads the random dataset's lengths; "
                             "ShareGPT's spread is its own", "random_range_ratio")
    results, gains = _runs(spec, hardware, ref, flags, loads, tp=tp, input_len=input_len,
                           output_len=output_len, image_tokens=image_tokens,
                           encode_flops=encode_flops, range_ratio=ratio,
                           sharegpt=dataset == "sharegpt",
                           **{k: p[k] for k in ("prefix_hit", "host_hit", "prefix_shared", "seed",
                                                "max_model_len", "kv_dtype", "weight_dtype",
                                                "past_saturation", "acceptance_rate")})

    def row(r, i) -> dict:
        d = {**r.as_dict(), **(gains[i] if gains else {})}
        d["output_throughput_per_gpu"] = d["output_throughput"] / tp
        d["total_token_throughput_per_gpu"] = d["total_token_throughput"] / tp
        return d

    return BenchAnswer(engine=ref, model=spec.name, gpu=hardware.name, gpus=tp,
                       input_len=input_len, output_len=output_len, dataset_name=dataset,
                       closed_loop=p["concurrency"] is not None, images_per_request=images,
                       image_tokens=image_tokens, results=tuple(results),
                       runs=tuple(row(r, i) for i, r in enumerate(results)),
                       notes=tuple(sorted({n for r in results for n in r.notes})))


def _runs(spec, hardware, ref, flags: dict, loads: list, *, tp, input_len, output_len,
          image_tokens, encode_flops, range_ratio, sharegpt, prefix_hit, host_hit,
          prefix_shared, seed,
          max_model_len, kv_dtype, weight_dtype, past_saturation, acceptance_rate) -> tuple:
    """(kvcalc.served.bench's result a load, the speculation gain of each that drafts)."""
    from kvcalc.served import Load, bench as run, random_lengths, sharegpt_lengths
    from kvcalc.served.speculative import gain, without_speculation

    common = dict(engine=ref, tp=tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
                  max_model_len=max_model_len, past_saturation=past_saturation)
    results, gains = [], []
    for kw in loads:
        lengths = (random_lengths(input_len, output_len, kw["num_prompts"], range_ratio,
                                  "vllm", seed) if range_ratio else ())
        if sharegpt:
            lengths = sharegpt_lengths(input_len, output_len, kw["num_prompts"], seed)
        hits = dict(host_hit=host_hit, prefix_block=1) if host_hit else {}
        lengths = tuple((p + image_tokens, o) for p, o in lengths)  # images in each prompt
        load = Load(input_len=input_len + image_tokens, output_len=output_len,
                    prefix_hit=prefix_hit, prefix_shared=prefix_shared, seed=seed,
                    lengths=lengths,
                    encode_flops=encode_flops, **hits, **kw)
        results.append(run(spec, hardware, load, engine_flags=flags or None,
                           acceptance_rate=acceptance_rate, **common))
        if "speculative" in results[-1].extra:  # its baseline: speculation off
            gains.append(gain(results[-1], run(
                spec, hardware, load, engine_flags=without_speculation(flags) or None,
                **common)))
    return results, gains
