"""`kvcalc bench` (kvcalc.served): a benchmark run predicted under continuous batching.

Checked against what vllm bench serve defines (its metric names and formulas), against the
engine's own count (the pool and the running limit bound the batch), and against the
published serving runs of tests/data/served (benchmarks/score_served.py scores them all;
here, floors under the share within 15% so that a change that loses them fails)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.presets import load_hardware, load_model
from kvcalc.served import METRICS, Load, bench
from kvcalc.serving import engine_ref

SPEC, HW = load_model("llama3.1-8b"), load_hardware("h100-sxm")
# The names vllm bench serve writes in its --save-result JSON (vllm/benchmarks/serve.py)
VLLM_BENCH_NAMES = {"request_throughput", "output_throughput", "total_token_throughput",
                    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                    "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
                    "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"}


def test_the_metrics_carry_vllm_bench_serves_names():
    assert set(METRICS) == VLLM_BENCH_NAMES
    r = bench(SPEC, HW, Load(input_len=512, output_len=64, num_prompts=20, concurrency=4))
    assert set(r.metrics) == VLLM_BENCH_NAMES


def test_one_request_alone_is_its_prefill_then_its_decode_steps():
    """A lone request: TPOT = (e2el - ttft) / (out - 1) exactly, ITL = TPOT (every gap is
    one decode step), throughput = out / e2el; definitions of vllm bench serve."""
    r = bench(SPEC, HW, Load(input_len=1024, output_len=128, num_prompts=1))
    m = r.metrics
    assert m["mean_tpot_ms"] == pytest.approx((m["mean_e2el_ms"] - m["mean_ttft_ms"]) / 127)
    assert m["output_throughput"] == pytest.approx(128 / (m["mean_e2el_ms"] / 1e3))
    assert m["median_ttft_ms"] == m["mean_ttft_ms"] == m["p99_ttft_ms"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_the_engines_count_bounds_the_batch(engine):
    """The KV the running requests hold never exceeds the pool the engine's own count
    gives. TensorRT-LLM reserves every request's whole length (GUARANTEED_NO_EVICT), so
    it runs at most pool // length at once; vLLM admits on the prompt alone and preempts
    the newest when decoding outgrows the pool, SGLang on the prompt and a share of the
    outputs to come (new_token_ratio), retracting likewise: both run more at once."""
    ref = engine_ref(engine)
    r = bench(SPEC, HW, Load(input_len=8000, output_len=2000, num_prompts=200,
                             concurrency=200), engine=ref, max_model_len=10000)
    assert r.peak_kv_tokens <= r.kv_cache_tokens
    assert r.running_limit <= r.kv_cache_tokens // 10000
    assert any("saturated" in n for n in r.notes)
    if engine == "tensorrt-llm":
        assert r.max_running <= r.running_limit
    else:
        assert r.max_running > r.running_limit
    if engine == "vllm":
        assert any("preemptions" in n for n in r.notes)
    small = bench(SPEC, HW, Load(input_len=1000, output_len=100, num_prompts=40,
                                 concurrency=4), engine=ref)
    assert small.max_running == 4 and small.completed == 40


def test_a_rate_over_capacity_says_where_it_saturates():
    with pytest.raises(KvcalcError, match=r"saturates at [\d.]+ requests/s of 1,024 \+ 128"):
        bench(SPEC, HW, Load(input_len=1024, output_len=128, num_prompts=100,
                             request_rate=1000.0))
    ok = bench(SPEC, HW, Load(input_len=1024, output_len=128, num_prompts=100,
                              request_rate=2.0))
    assert ok.metrics["request_throughput"] == pytest.approx(2.0, rel=0.3)


def test_more_load_never_makes_a_token_faster():
    tpot = [bench(SPEC, HW, Load(input_len=1024, output_len=128, num_prompts=8 * c,
                                 concurrency=c)).metrics["mean_tpot_ms"] for c in (1, 8, 64)]
    assert tpot == sorted(tpot)


def test_cli_bench_json_and_one_line_errors():
    r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--concurrency", "1,8",
                                 "--input-len", "512", "--output-len", "64", "--format",
                                 "json"])
    assert r.exit_code == 0, r.output
    runs = json.loads(r.stdout)["runs"]
    assert [x["max_concurrency"] for x in runs] == [1, 8] and all(x["prediction"] for x in runs)
    assert runs[0]["output_throughput_per_gpu"] == runs[0]["output_throughput"]
    for args, message in ((["--concurrency", "4", "--request-rate", "2"], "two kinds of run"),
                          (["--concurrency", "0"], "--concurrency values must be positive"),
                          (["--engine", "llama.cpp"], "bench serves with vllm, sglang")):
        r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", *args])
        assert r.exit_code == 2 and r.stderr.startswith("kvcalc: error: ") and \
            message in r.stderr and r.stderr.count("\n") == 1, r.stderr


def _scorer():
    """benchmarks/score_served.py and tests/served.py (the published runs' loader); skips
    in a copy of tests/ without the repository."""
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parent.parent / "benchmarks"
    if not (scripts / "score_served.py").is_file():
        pytest.skip("benchmarks/score_served.py is not beside tests/")
    sys.path.insert(0, str(scripts))
    import score_served
    import served

    return score_served, served


def _published_within(regime: str) -> tuple[int, int]:
    """benchmarks/score_served.py's predictions of tests/data/served's runs in `regime`:
    (rows within 15%, rows) of time per output token and output throughput."""
    score_served, served = _scorer()

    within = total = 0
    for run_id, measured in served.runs([r for r in served.load() if not r.excluded]).items():
        run = measured[0]
        if score_served.regime(run) != regime:
            continue
        got, why = score_served.predict(run)
        if got is None:
            continue
        for row in measured:
            if row.metric in ("mean_tpot_ms", "output_throughput"):
                value = got[row.metric] / (row.gpus if row.per == "gpu" else 1)
                total += 1
                within += abs(value / row.value - 1) <= 0.15
    return within, total


def test_published_runs_floors():
    """The batch-1 runs: time per output token and output throughput within 15% for at
    least 60% of them (70% today)."""
    within, total = _published_within("batch 1")
    assert total >= 10 and within / total >= 0.6, (within, total)


def test_an_mla_cache_is_read_whole_on_every_tensor_parallel_rank():
    """DeepSeek-V3's latent: (kv_lora_rank 512 + rope 64) x 2 bytes x 61 layers = 70,272 B
    a token, kept whole on every rank (vLLM and SGLang replicate it under tp), so one
    device reads all of it each step however many share the weights: a decode step at
    1,000 positions reads 1,000 tokens and writes one, on 1 device or on 8."""
    from kvcalc.formulas.step import decode_step

    spec = load_model("deepseek-v3")
    per_token = (512 + 64) * 2 * 61
    assert per_token == 70_272
    for tp in (1, 8):
        step = decode_step(spec, 1000, 1, "bf16", "bf16", "bf16", tp, prefill=False)
        assert step.per_device_breakdown["kv"] == per_token * 1001
    # the weights do split: one device of 8 reads about an eighth
    w1 = decode_step(spec, 1000, 1, "bf16", "bf16", "bf16", 1, prefill=False)
    w8 = decode_step(spec, 1000, 1, "bf16", "bf16", "bf16", 8, prefill=False)
    assert 7.5 < w1.per_device_breakdown["weights"] / w8.per_device_breakdown["weights"] <= 8


def test_each_engines_scheduler_at_its_release():
    """vLLM's async scheduling is the default from v0.14.0 (its release notes: "Async
    scheduling is now enabled by default", #27614), opt-in before; SGLang's overlap
    scheduler is on and its prefill steps are not mixed with decode by default;
    TensorRT-LLM reserves whole requests (GUARANTEED_NO_EVICT)."""
    from kvcalc.serving import schedule_for

    assert not schedule_for(engine_ref("vllm@0.13.0")).overlaps_host
    assert schedule_for(engine_ref("vllm@0.14.0")).overlaps_host
    assert schedule_for(engine_ref("vllm")).admission == "greedy"
    sgl = schedule_for(engine_ref("sglang@0.5.4"))
    assert (sgl.admission, sgl.mixed, sgl.overlaps_host) == ("ratio", False, True)
    assert (sgl.reserve_ratio, sgl.reserve_floor) == (0.7, 0.1)
    assert schedule_for(engine_ref("tensorrt-llm")).admission == "reserve"


def test_each_engines_cuda_graphs_at_its_release():
    """Which steps replay a CUDA graph, as each engine's source captures them. vLLM V1:
    capture sizes up to min(2 x max_num_seqs, 512), padded, piecewise graphs for steps of
    prompts too (0.10.1.1 SchedulerConfig.cuda_graph_sizes; 0.14.1-0.27.1
    VllmConfig._set_cudagraph_sizes); --enforce-eager none. SGLang
    (cuda_graph_runner.get_batch_sizes_to_capture, server_args): 0.5.1 up to 160 on an
    80 GB card, 256 on H200's 141 GB, 512 on B200's; 0.5.4's table 256 at tp < 4 and
    512 at tp >= 4 on an H100; prefills eager. TensorRT-LLM's PyTorch flow
    (CudaGraphConfig._generate_cuda_graph_batch_sizes): 1-32, 64 and 128 exactly,
    decode-only; trtllm-bench's llm_options (enable_padding, batch_sizes up to 8192):
    any decode batch up to 8192; a built engine launches nothing from Python."""
    from kvcalc.serving import schedule_for

    h100, h200, b200 = 81_559, 143_771, 183_359  # MiB, as torch reports them
    v = schedule_for(engine_ref("vllm@0.11.0"), {"max_num_seqs": 1024})
    assert v.graphed(512, 0) and not v.graphed(513, 0)
    assert v.graphed(100, 412) and not v.graphed(100, 413)
    assert schedule_for(engine_ref("vllm@0.11.0"), {"max_num_seqs": 128}).graphed(256, 0)
    assert not schedule_for(engine_ref("vllm@0.11.0"), {"max_num_seqs": 128}).graphed(257, 0)
    assert not schedule_for(engine_ref("vllm"), {"enforce_eager": True}).graphed(1, 0)
    for mib, top in ((h100, 160), (h200, 256), (b200, 512)):
        s = schedule_for(engine_ref("sglang@0.5.1"), {"gpu_memory_mib": mib, "tp_size": 8})
        assert s.graphed(top, 0) and not s.graphed(top + 1, 0)
        assert not s.graphed(0, 100)
    for tp, top in ((1, 256), (8, 512)):
        s = schedule_for(engine_ref("sglang@0.5.4"), {"gpu_memory_mib": h100, "tp_size": tp})
        assert s.graphed(top, 0) and not s.graphed(top + 1, 0)
    assert not schedule_for(engine_ref("sglang@0.5.4"), {"disable_cuda_graph": True}).graphed(1, 0)
    t = schedule_for(engine_ref("tensorrt-llm@1.0"))
    assert [b for b in range(1, 300) if t.graphed(b, 0)] == [*range(1, 33), 64, 128]
    assert not t.graphed(1, 1)
    bench_options = {"cuda_graph_config": {"enable_padding": True, "batch_sizes": [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]},
        "max_batch_size": 8192}
    t = schedule_for(engine_ref("tensorrt-llm@1.0"), bench_options)
    assert t.graphed(3000, 0) and not t.graphed(8193, 0)
    assert schedule_for(engine_ref("tensorrt-llm@1.0"), {"backend": "tensorrt"}).graphed(5000, 9)


def test_the_options_files_cuda_graphs_reach_the_scheduler_through_the_count(tmp_path):
    """trtllm-serve's --extra_llm_api_options cuda_graph_config, read once by the count:
    padded graphs up to 1,024 take a decode batch of 33, which the default exact sizes
    (1-32, 64, 128) launch eagerly."""
    from kvcalc.served.step import ServedTerms

    f = tmp_path / "extra.yaml"
    f.write_text("cuda_graph_config:\n  enable_padding: true\n  max_batch_size: 1024\n")
    terms = ServedTerms(request_s=0.0, running_s=0.0, moe_share=0.2, kv_share=0.0,
                        eager_layer_s=1e-3)
    load = Load(input_len=128, output_len=64, num_prompts=66, concurrency=33)
    ref = engine_ref("tensorrt-llm")
    eager = bench(SPEC, HW, load, engine=ref, terms=terms)
    padded = bench(SPEC, HW, load, engine=ref, terms=terms,
                   engine_flags={"extra_llm_api_options": str(f)})
    assert eager.metrics["median_tpot_ms"] >= SPEC.layers * 1e-3 * 1e3
    assert padded.metrics["median_tpot_ms"] < 0.8 * eager.metrics["median_tpot_ms"]


def test_a_step_without_a_graph_waits_on_its_launches():
    """A step that replays no CUDA graph takes at least its layers' Python launches
    (ServedTerms.eager_layer_s): vLLM with --enforce-eager at batch 1 is launch-bound,
    and the same engine with its graphs is not."""
    from kvcalc.served import Load, bench
    from kvcalc.served.step import ServedTerms

    spec, hw = load_model("llama3-8b"), load_hardware("h100-sxm")
    terms = ServedTerms(request_s=0.0, running_s=0.0, moe_share=0.2, kv_share=0.0,
                        eager_layer_s=1e-3)
    load = Load(input_len=128, output_len=64, num_prompts=2, concurrency=1)
    eager = bench(spec, hw, load, terms=terms, engine_flags={"enforce_eager": True})
    graphed = bench(spec, hw, load, terms=terms)
    assert eager.metrics["mean_tpot_ms"] >= spec.layers * 1e-3 * 1e3
    assert graphed.metrics["mean_tpot_ms"] < 0.5 * eager.metrics["mean_tpot_ms"]


def test_sharegpt_lengths_are_the_draw_vllm_bench_serve_sends():
    """ShareGPT's lengths: the published 320-request draw (presets/served/sharegpt.yaml,
    Lambda's n320 result file) scaled to the means asked. Held against Lambda's other
    result files of the same client and model (tests/data/served/lengths): a run of n
    prompts sends the first n of the draw, so at the n10 and n20 files' own means the
    prompts come out as those files list them, the outputs within a few tokens each (the
    model's replies differ a little between runs), and the longest output as far above
    the mean as the file's (928 against a mean of 249 in n10: what sets a burst's end)."""
    import served

    from kvcalc.served import sharegpt_lengths

    for run in ("lambda-mistral-7b-h100-sxm-vllm-sharegpt-n10",
                "lambda-mistral-7b-h100-sxm-vllm-sharegpt-n20"):
        published = served.lengths(run)
        n = len(published)
        mean_in = sum(p for p, _ in published) / n
        mean_out = sum(o for _, o in published) / n
        drawn = sharegpt_lengths(mean_in, mean_out, n)
        assert [p for p, _ in drawn] == [p for p, _ in published]
        assert all(abs(o - max(q, 1)) <= max(3, 0.05 * q)
                   for (_, o), (_, q) in zip(drawn, published, strict=True))
        assert max(o for _, o in drawn) / mean_out == pytest.approx(
            max(o for _, o in published) / mean_out, rel=0.05)
    pairs = sharegpt_lengths(220, 200, 5000, seed=1)
    assert len(pairs) == 5000 and all(p >= 1 and o >= 1 for p, o in pairs)
    assert sum(p for p, _ in pairs) / 5000 == pytest.approx(220, rel=1e-3)
    assert sum(o for _, o in pairs) / 5000 == pytest.approx(200, rel=1e-3)
    with pytest.raises(KvcalcError, match="1 token or more"):
        sharegpt_lengths(0.5, 200, 10)
    bad = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                   "--dataset-name", "sharegpt", "--random-range-ratio", "0.5"])
    assert bad.exit_code == 2 and "ShareGPT's spread is its own" in bad.output


def test_random_lengths_as_each_client_draws_them():
    """vllm bench serve's random dataset: uniform whole numbers between floor(len x
    (1 - r)) and ceil(len x (1 + r)); SGLang's bench_serving: between max(int(len x r), 1)
    and len (its default ratio 0: from 1 up to len, half the length on average)."""
    from kvcalc.served import random_lengths

    v = random_lengths(1000, 100, 4000, 0.5, "vllm")
    assert min(p for p, _ in v) >= 500 and max(p for p, _ in v) <= 1500
    assert min(o for _, o in v) >= 50 and max(o for _, o in v) <= 150
    assert abs(sum(p for p, _ in v) / len(v) - 1000) < 20
    s = random_lengths(1000, 1000, 4000, 0.0, "sglang")
    assert min(p for p, _ in s) >= 1 and max(p for p, _ in s) <= 1000
    assert abs(sum(p for p, _ in s) / len(s) - 500.5) < 15
    assert set(random_lengths(1000, 100, 50, 1.0, "sglang")) == {(1000, 100)}
    with pytest.raises(KvcalcError, match="random_range_ratio"):
        random_lengths(1000, 100, 5, 1.5)


def test_the_clients_warm_up_leaves_the_first_prompt_cached():
    """vllm bench serve sends the first prompt once before the run: with the engine's
    prefix cache, that request's prefill is all but its last block shorter."""
    warm = bench(SPEC, HW, Load(input_len=4096, output_len=16, num_prompts=1))
    cold = bench(SPEC, HW, Load(input_len=4096, output_len=16, num_prompts=1, warmup=False))
    assert warm.metrics["mean_ttft_ms"] < 0.5 * cold.metrics["mean_ttft_ms"]
    assert warm.metrics["mean_tpot_ms"] == pytest.approx(cold.metrics["mean_tpot_ms"], rel=0.05)


def test_per_request_lengths_are_served_and_counted():
    lengths = ((100, 10), (2000, 50), (700, 200))
    r = bench(SPEC, HW, Load(input_len=933, output_len=87, num_prompts=3, lengths=lengths))
    assert r.completed == 3 and r.total_input_tokens == 2800 and r.total_output_tokens == 260
    with pytest.raises(KvcalcError, match="lengths gives 3 requests"):
        Load(input_len=1, output_len=1, num_prompts=4, lengths=lengths)


def test_published_runs_under_load_floor():
    """The runs under load (every publisher's): TPOT and output throughput within 15% for
    at least 45% of the rows (54% today, with the served terms fitted on these runs:
    benchmarks/fit_served.py scores them leave one publisher out, 36% of all rows held
    out; a change that loses ground fails here first)."""
    within, total = _published_within("under load")
    assert total >= 120 and within / total >= 0.45, (within, total)


def test_tensorrt_llm_takes_a_prompt_whole_unless_chunked_prefill_is_on():
    """TensorRT-LLM's chunked prefill is off by default (llmapi/llm_args.py,
    BaseLlmArgs.enable_chunked_prefill = False): the micro-batch scheduler takes a
    context whole and stops at the first that the step's max_num_tokens cannot hold
    (batch_manager/microBatchScheduler.cpp), and llmapi/llm.py refuses a prompt over
    max_num_tokens ("should not exceed max_num_tokens"). Three 5,000-token prompts at
    once with 8,192 tokens a step: whole, one prompt a step (first tokens after 5,000,
    10,000 and 15,000 prompt tokens); chunked, 8,192 then 6,808 tokens, the second and
    third prompts' first tokens both after 15,000: the median first token 1.5x later."""
    trt = engine_ref("tensorrt-llm")
    load = Load(input_len=5000, output_len=2, num_prompts=3, concurrency=3)
    whole = bench(SPEC, HW, load, engine=trt, max_model_len=8192)
    chunked = bench(SPEC, HW, load, engine=trt, max_model_len=8192,
                    engine_flags={"enable_chunked_prefill": True})
    assert whole.step_budget == chunked.step_budget == 8192
    assert chunked.metrics["median_ttft_ms"] > 1.3 * whole.metrics["median_ttft_ms"]
    with pytest.raises(KvcalcError, match="refuses a 9,000-token prompt: without chunked "
                                          "prefill a prompt must fit one step's 8,192"):
        bench(SPEC, HW, Load(input_len=9000, output_len=8, num_prompts=2), engine=trt,
              max_model_len=16384)
    bench(SPEC, HW, Load(input_len=9000, output_len=8, num_prompts=2), engine=trt,
          max_model_len=16384, engine_flags={"enable_chunked_prefill": True})


def test_decode_steps_alike_run_as_one_with_the_same_times():
    """The simulation runs a stretch of identical decode steps at once (nothing admitted,
    arriving, finishing or preempted, the same context bucket): every metric equals the
    step-by-step run's, for each admission rule and an open loop."""
    import kvcalc.served as served_mod

    cases = [(engine_ref(e), Load(input_len=700, output_len=300, num_prompts=40,
                                  concurrency=12)) for e in ("vllm", "sglang", "tensorrt-llm")]
    cases.append((engine_ref("vllm"), Load(input_len=700, output_len=300, num_prompts=60,
                                           request_rate=20.0)))
    # TensorRT-LLM's whole prompts: one near the step's budget waits, decode steps only,
    # until a request finishes and leaves it room
    cases.append((engine_ref("tensorrt-llm"), Load(input_len=8000, output_len=300,
                                                   num_prompts=24, concurrency=8)))
    for ref, load in cases:
        fast = bench(SPEC, HW, load, engine=ref, max_model_len=16384).metrics
        original = served_mod._alike_steps
        served_mod._alike_steps = lambda *a, **k: 1
        try:
            slow = bench(SPEC, HW, load, engine=ref, max_model_len=16384).metrics
        finally:
            served_mod._alike_steps = original
        assert fast == pytest.approx(slow, rel=1e-9), ref.name


def test_cli_bench_takes_each_engines_own_scheduler_flags():
    """`kvcalc bench` takes the engine's own pool and scheduler flags as fit does, in the
    engine's spelling: vLLM's --max-num-seqs caps the running batch (its count's
    max_num_seqs); TensorRT-LLM's --enable-chunked-prefill lets a prompt over
    --max-num-tokens run; another engine's flag is one line naming this engine's."""
    runner = CliRunner()
    base = ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--format", "json"]
    r = runner.invoke(app, [*base, "--max-num-seqs", "8", "--concurrency", "32",
                            "--input-len", "512", "--output-len", "64"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["running_limit"] == d["max_running"] == 8
    long = [*base, "--engine", "tensorrt-llm", "--concurrency", "2", "--input-len", "9000",
            "--output-len", "16", "--max-model-len", "16384"]
    r = runner.invoke(app, long)
    assert r.exit_code == 2 and "without chunked prefill" in r.output
    r = runner.invoke(app, [*long, "--enable-chunked-prefill"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*base, "--engine", "sglang", "--gpu-memory-utilization", "0.8"])
    assert r.exit_code == 2
    assert "SGLang's is --mem-fraction-static" in r.output


def _vllm_steps(spec):
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.served.step import StepTimes, served_terms
    from kvcalc.serving import engine_ref, schedule_for
    from kvcalc.engines import load_engine

    ref = engine_ref("vllm")
    w = workload_for(spec, seq_len=32768, batch=1, tp=1, kv_dtype="bf16")
    return StepTimes(spec, HW, load_engine("vllm")[0], w, stored_weights(spec, w.quantization, 1),
                     served_terms(ref.name), schedule_for(ref))


def test_a_prompt_chunks_attention_grows_as_each_layer_attends():
    """Gemma 3 12B: 40 sliding layers attend to at most 1,024 positions, 8 global ones to
    all before them. A chunk of `take` tokens after `start` cached costs, per query head,
    2 (d_k + d_v) FLOPs a (query, key) pair: full layers take*start + take(take+1)/2
    pairs, window layers sum(min(i, 1024)) over the chunk's positions; the quadratic
    count for every layer (which the step charged before) is over 4x this at 32k."""
    spec = load_model("gemma3-12b")
    steps = _vllm_steps(spec)
    per_pair = 2 * 16 * (256 + 256)  # heads x (d_k + d_v), the preset's
    assert spec.layers == 48

    def pairs_full(start, take):
        return take * start + take * (take + 1) // 2

    def pairs_window(start, take, w=1024):
        return sum(min(i, w) for i in range(start + 1, start + take + 1))

    for start, take in ((0, 2048), (8192, 2048), (30720, 2048), (0, 32768)):
        flops = per_pair * (8 * pairs_full(start, take) + 40 * pairs_window(start, take))
        assert steps.chunk_attention_s(start, take) == pytest.approx(
            flops / steps.attention_flops_per_s, rel=1e-12)
    quadratic = per_pair * 48 * pairs_full(0, 32768) / steps.attention_flops_per_s
    assert quadratic > 4 * steps.chunk_attention_s(0, 32768)


def test_a_recurrent_layers_prompt_cost_is_linear():
    """Qwen3-Next: 36 of its 48 layers are Gated DeltaNet (a fixed cost a token), 12 full
    attention (16 heads of 256: 2 x 16 x 512 FLOPs a pair). What a 2,048-token prompt
    costs beyond its full layers' pairs is the recurrences' cost a token; a 32,768-token
    prompt is then that x 32,768 plus its full layers' pairs, not the 2k prompt's
    per-pair rate x 32k's pairs (the step's charge before)."""
    spec = load_model("qwen3-next-80b-a3b")
    steps = _vllm_steps(spec)
    rate = steps.attention_flops_per_s
    per_pair = 2 * 16 * (256 + 256) * 12

    def pairs(n):
        return n * (n + 1) // 2

    short = steps.chunk_attention_s(0, 2048) * rate
    recurrent_per_token = (short - per_pair * pairs(2048)) / 2048
    assert recurrent_per_token > 0
    long = steps.chunk_attention_s(0, 32768) * rate
    assert long == pytest.approx(per_pair * pairs(32768) + recurrent_per_token * 32768,
                                 rel=1e-9)
    per_pair_before = ((short - steps.chunk_attention_s(0, 1024) * rate)
                       / (pairs(2048) - pairs(1024)))
    assert long < 0.9 * per_pair_before * pairs(32768)


def test_bench_says_how_far_off_it_came_on_runs_held_out_by_publisher():
    """Each run carries its regime's held-out error band from presets/served/terms.yaml:
    the rows it was scored on are the rows fit_served.py counted held out (two tallies of
    one leave-one-publisher-out, the band's per row, the counts' per cell), and half of
    the rows lie within p50, which is no wider than p80."""
    from kvcalc.presets import read_preset

    terms = read_preset("served", "terms")
    for kind, name in (("TPOT_tput", "TPOT_tput"), ("TTFT", "TTFT")):
        for regime in ("batch_1", "under_load"):
            band = terms["held_out_error"][f"{name}_{regime}"]
            assert band["rows"] == terms["loso"][f"{regime}_{kind}"]["rows"]
            assert 0 <= band["p50"] <= band["p80"]
    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    one = bench(spec, hw, Load(input_len=512, output_len=16, num_prompts=2, concurrency=1))
    many = bench(spec, hw, Load(input_len=512, output_len=16, num_prompts=32, concurrency=16))
    for r, regime in ((one, "batch_1"), (many, "under_load")):
        got = r.as_dict()["held_out_error"]
        assert got["regime"] == regime.replace("_", " ")
        assert got["TTFT"] == terms["held_out_error"][f"TTFT_{regime}"]
        assert got["TPOT_and_throughput"] == terms["held_out_error"][f"TPOT_tput_{regime}"]
        assert any(n.startswith(f"accuracy, {got['regime']}, ") for n in r.notes)


def test_an_moe_prompts_experts_run_faster_with_more_rows_each():
    """Each expert's grouped GEMM gets tokens x top-k / experts rows a step (every rank
    holds every expert's slice under tensor parallelism): with moe_half_tokens set, a
    prompt token's routed-expert time falls as its step carries more tokens, towards the
    flat moe_share it has without it (the same at any step), and is twice that where each
    expert gets exactly moe_half_tokens rows. DeepSeek-R1: 8 of 256 experts a token."""
    from dataclasses import replace

    spec = load_model("deepseek-r1")
    steps = _vllm_steps(spec)
    assert steps.rows_per_token == 8 / 256
    flat = replace(steps.terms, moe_half_tokens=0.0)
    half = replace(steps.terms, moe_half_tokens=128.0)
    steps.terms = flat
    per_token = [steps.moe_s(n, n) / n for n in (256, 1024, 8192)]
    assert per_token == pytest.approx([steps.routed_s_per_token] * 3, rel=1e-12)
    steps.terms = half
    curve = [steps.moe_s(n, n) / n for n in (256, 1024, 4096, 8192, 65536)]
    assert curve == sorted(curve, reverse=True) and curve[-1] < 1.07 * per_token[0]
    assert steps.moe_s(4096, 4096) == pytest.approx(2 * 4096 * steps.routed_s_per_token)
    # the prompt's rows are the step's: decode tokens beside it fill the experts too
    assert steps.moe_s(256, 4096) == pytest.approx(256 * 2 * steps.routed_s_per_token)
    dense = _vllm_steps(load_model("llama3.1-8b"))
    assert dense.rows_per_token == 0 and dense.moe_s(1024, 1024) == 0


def _cookbook_deepseek_c1():
    """SGLang's cookbook's DeepSeek-R1 run at one request (B200, TP 8, random prompts of up
    to 1,000 tokens): (its measured rows, kvcalc's prediction with the fitted terms, the
    same with one MoE share at any rows an expert gets)."""
    from dataclasses import replace

    from kvcalc.served.step import served_terms

    score_served, served = _scorer()
    runs = served.runs([r for r in served.load() if not r.excluded])
    measured = runs["sglang-cookbook-deepseek-r1-b200-tp8-random-1000-1000-c1"]
    fitted = served_terms("sglang")
    got, why = score_served.predict(measured[0], fitted)
    flat, why_flat = score_served.predict(measured[0], replace(fitted, moe_half_tokens=0.0))
    assert got is not None and flat is not None, (why, why_flat)
    return {r.metric: r.value for r in measured}, got, flat


def test_large_moe_models_first_token_comes_closer_with_the_rows_an_expert_gets():
    """DeepSeek-R1 at one request on SGLang's cookbook (mean first token 153 ms, median
    140.76): with one MoE share at any rows an expert gets, kvcalc's prefill of a short
    prompt is ~30 ms and its first token far early; with the rows counted
    (moe_half_tokens) it comes closer on both, at the same fitted terms otherwise."""
    rows, got, flat = _cookbook_deepseek_c1()
    assert rows["mean_ttft_ms"] == 153 and rows["median_ttft_ms"] == 140.76
    for metric in ("mean_ttft_ms", "median_ttft_ms"):
        assert abs(got[metric] / rows[metric] - 1) < abs(flat[metric] / rows[metric] - 1)
        assert flat[metric] < got[metric] < rows[metric] * 1.15, metric


@pytest.mark.xfail(strict=True, reason=(
    "kvcalc 115.8 ms against the cookbook's mean 153 and median 140.76 (0.76, 0.82): SGLang's "
    "fitted per-request host time is 40 ms (presets/served/terms.yaml, each publisher alike "
    "in the fit), and the cookbook's runs at one request want 60-100 ms over the prefill "
    "where DataCrunch's and Livinfly's want less; 70 ms gave 145.8 (0.95, 1.04)"))
def test_large_moe_models_first_token_at_one_request_as_sglangs_cookbook_measured():
    rows, got, _ = _cookbook_deepseek_c1()
    for metric in ("mean_ttft_ms", "median_ttft_ms"):
        assert got[metric] == pytest.approx(rows[metric], rel=0.15), metric
