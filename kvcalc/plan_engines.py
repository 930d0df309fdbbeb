"""Layouts under SGLang's and TensorRT-LLM's own start-up counts, and each engine's launch
line: `plan --engine sglang`, and the engine comparison of `plan --engine any`.

The same search as kvcalc.plan's for vLLM, over each engine's knobs: tensor x pipeline
parallel x replicas, the KV cache dtype (the model's, fp8), and the requests each
replica runs (powers of two up to what the engine's pool and running-request limit
hold at the request length); the memory fraction stays the engine's default. Whether a
setting starts and how many requests it holds is the engine's count
(kvcalc.serving); the times are kvcalc.latency with that engine's fitted terms
(presets/engines). Ranked by output tokens/s per GPU among the layouts meeting the
latency targets.

Launch lines use only flags each engine's parser takes (tests/test_plan_engines.py
checks them against SGLang's own argument parser and TensorRT-LLM's `trtllm-serve`
options as its source declares them).
"""

from __future__ import annotations

import shlex

from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.plan import DEFAULT_OUTPUT_LEN, NothingFits, hub_id, pp_sizes, tp_sizes

__all__ = ["EngineLayout", "EnginePlan", "engine_plan", "launch_line"]

KV_CHOICES = {"sglang": ("auto", "fp8_e4m3"), "tensorrt-llm": ("auto",)}


@record
class EngineLayout:
    tp: int
    pp: int
    replicas: int
    requests: int  # in flight across the replicas
    batch: int  # per replica: --max-running-requests / --max_batch_size
    kv_dtype: str
    context_len: int
    kv_cache_tokens: int
    ttft_s: float
    tpot_s: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.requests / self.tpot_s / self.gpus

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1 / self.tpot_s

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "replicas": self.replicas, "gpus": self.gpus,
                "requests": self.requests, "batch": self.batch, "kv_cache_dtype": self.kv_dtype,
                "context_len": self.context_len, "kv_cache_tokens": self.kv_cache_tokens,
                "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tokens_per_s_per_user": self.tokens_per_s_per_user}


@record
class EnginePlan:
    engine: object  # kvcalc.serving.EngineRef
    model: str
    gpu: str
    gpus: int
    best: EngineLayout
    command: str
    searched: int
    kept: int

    def as_dict(self) -> dict:
        return {"engine": self.engine.name, "engine_release": self.engine.release,
                "model": self.model, "gpu": self.gpu, "gpus": self.gpus,
                "searched": self.searched, "kept": self.kept,
                "best": {**self.best.as_dict(), "command": self.command}}


def launch_line(engine: str, model: str, x: EngineLayout) -> str:
    """The engine's own command for layout `x`."""
    q = shlex.quote(model)
    if engine == "sglang":
        parts = ["python", "-m", "sglang.launch_server", "--model-path", q,
                 "--tp-size", str(x.tp)]
        if x.pp > 1:
            parts += ["--pp-size", str(x.pp)]
        if x.replicas > 1:
            parts += ["--dp-size", str(x.replicas)]
        # --max-running-requests is each replica's scheduler's own (no DP attention)
        parts += ["--context-length", str(x.context_len),
                  "--max-running-requests", str(x.batch)]
        if x.kv_dtype != "auto":
            parts += ["--kv-cache-dtype", x.kv_dtype]
        return " ".join(parts)
    if engine == "tensorrt-llm":
        parts = ["trtllm-serve", q, "--backend", "pytorch", "--tp_size", str(x.tp)]
        if x.pp > 1:
            parts += ["--pp_size", str(x.pp)]
        parts += ["--max_batch_size", str(x.batch), "--max_seq_len", str(x.context_len)]
        return " ".join(parts)
    raise KvcalcError(f"no launch line for {engine}")


def engine_plan(spec, hw, ref, *, gpus: int = 1, max_model_len: int | None = None,
                concurrency: int | None = None, prompt_len: int | None = None,
                output_len: int | None = None, ttft_s: float | None = None,
                tpot_s: float | None = None, model: str | None = None) -> EnginePlan:
    """The best layout of up to `gpus` devices like `hw` for `spec` under engine `ref`'s
    count (SGLang or TensorRT-LLM), and its launch line. Raises NothingFits."""
    from kvcalc.dtypes import check_size
    from kvcalc.engines import load_engine
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.latency import latency
    from kvcalc.plan import _batches
    from kvcalc.serving import count
    from kvcalc.serving.flags import engine_flags
    from kvcalc.serving.vllm.settings import settings_for

    check_size("gpus", gpus, 4096)
    length = max_model_len or (prompt_len + output_len if prompt_len and output_len
                               else spec.max_context)
    if not length:
        raise KvcalcError(f"{spec.name} states no context length: give --max-model-len")
    out_len = output_len if output_len is not None else min(DEFAULT_OUTPUT_LEN, length - 1)
    p_len = prompt_len if prompt_len is not None else length - out_len
    if p_len < 1 or p_len + out_len > length:
        raise KvcalcError(f"--prompt-len + --output-len ({p_len + out_len:,} tokens) do not "
                          f"fit max_model_len {length:,}")
    timing = load_engine(ref.name)[0]
    length_flag = "context_length" if ref.name == "sglang" else "max_seq_len"
    w = workload_for(spec, seq_len=length, batch=1)
    base = settings_for(w)
    kept: list[EngineLayout] = []
    searched = 0
    refusals: list[str] = []
    times: dict = {}

    def timed(tp: int, kv: str, batch: int, prompts: int) -> tuple[float, float]:
        key = (tp, kv, batch, prompts)
        if key not in times:
            kv_name = "auto" if kv == "auto" else "fp8"
            wl = workload_for(spec, seq_len=p_len + out_len, batch=batch, prompt_len=p_len,
                              kv_dtype=base.model_dtype if kv_name == "auto" else kv_name, tp=tp)
            lat = latency(spec, wl, hardware=hw, engine=timing,
                          stored=stored_weights(spec, wl.quantization, tp))
            first = latency(spec, workload_for(
                spec, seq_len=p_len + out_len, batch=prompts, prompt_len=p_len,
                kv_dtype=base.model_dtype if kv_name == "auto" else kv_name, tp=tp),
                hardware=hw, engine=timing, stored=stored_weights(spec, wl.quantization, tp))
            times[key] = (first.ttft_s, lat.tpot_s)
        return times[key]

    for tp in tp_sizes(spec, gpus):
        for pp in pp_sizes(spec, gpus // tp):
            for kv in KV_CHOICES[ref.name]:
                settings = base.replace(tp=tp, pp=pp,
                                        kv_dtype="auto" if kv == "auto" else "fp8")
                try:
                    flags = engine_flags(ref, settings, **{length_flag: length})
                    c = count(spec, hw, flags)
                except KvcalcError as e:
                    refusals.append(str(e))
                    continue
                if not c.starts or not c.kv_cache_tokens:
                    refusals.append(c.refusal or "; ".join(c.notes))
                    continue
                held = min(c.max_running_requests or 0, c.kv_cache_tokens // length)
                if held < 1:
                    refusals.append(f"tp={tp} pp={pp}: {c.kv_cache_tokens:,} KV tokens hold "
                                    f"no request of {length:,}")
                    continue
                step = dict(c.flags).get("chunked_prefill_size") or dict(c.flags).get(
                    "max_num_tokens") or 8192
                most = gpus // (tp * pp)
                top = held if concurrency is None else min(held, concurrency)
                for batch in _batches(top):
                    searched += 1
                    replicas = most if concurrency is None else min(
                        most, -(-concurrency // batch))
                    requests = replicas * batch if concurrency is None else min(
                        concurrency, replicas * batch)
                    micro = -(-batch // pp)
                    ttft, tpot = timed(tp, kv, micro, max(1, min(batch, step // p_len)))
                    if (ttft_s is not None and ttft > ttft_s) or (
                            tpot_s is not None and tpot > tpot_s):
                        break
                    kept.append(EngineLayout(
                        tp=tp, pp=pp, replicas=replicas, requests=requests, batch=batch,
                        kv_dtype=kv, context_len=length, kv_cache_tokens=c.kv_cache_tokens,
                        ttft_s=ttft, tpot_s=tpot))
    if not kept:
        why = refusals[0] if refusals else "no layout meets the latency targets"
        raise NothingFits(f"{ref.title}: no layout of up to {gpus} x {hw.name} serves "
                          f"{spec.name} at {length:,} tokens: {why}")
    best = min(kept, key=lambda x: (-x.tokens_per_s_per_gpu, -x.tokens_per_s_per_user,
                                    x.kv_dtype != "auto", x.tp * x.pp))
    name = model or hub_id(spec) or spec.name
    return EnginePlan(engine=ref, model=spec.name, gpu=hw.name, gpus=gpus, best=best,
                      command=launch_line(ref.name, name, best), searched=searched,
                      kept=len(kept))
