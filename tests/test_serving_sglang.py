"""SGLang's count (kvcalc.serving.sglang) against public SGLang start-up logs
(tests/data/sglang: each log quoted with its source, release and settings).

What is checked, each against the log, never against kvcalc itself:
- the default --mem-fraction-static kvcalc computes for the release, GPU and layout
  equals the one the log's server_args echo prints (where the user left it unset);
- the KV pool's tokens from the settings alone (model, GPU, layout, the flags the log
  states) within 5% of the logged max_total_num_tokens;
- the running-request limit equals the logged one where the pool decides it;
- the weights term within 0.5 GiB of "Load weight end ... mem usage" (or of the drop in
  free memory across the load).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yamlload

from kvcalc.errors import KvcalcError
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving import engine_ref, count
from kvcalc.serving.layout import Layout
from kvcalc.serving.sglang import SglangFlags
from kvcalc.serving.sglang.log import read_sglang_log
from kvcalc.serving.sglang.rules import parse_release
from kvcalc.serving.weights import Weights

DATA = Path(__file__).parent / "data" / "sglang"
HF = Path(__file__).parent / "data" / "hf"
GiB = 1 << 30


def _logs():
    out = []
    for path in sorted(DATA.glob("*.yaml")):
        d = yamlload.safe_load(path.read_text())
        out.append(pytest.param(path.stem, d, id=path.stem))
    return out


LOGS = _logs()


def _spec(d):
    if d.get("preset"):
        return load_model(d["preset"])
    from kvcalc.model_source import resolve_model

    for key, folder in (("hf_config", HF), ("config_file", DATA / "configs")):
        if d.get(key):
            return resolve_model(str(folder / d[key]))
    return None


def _release(d) -> str | None:
    v = str(d.get("kvcalc_release") or d["sglang_version"])
    try:
        parse_release(v)
    except KvcalcError:
        return None
    return v


def _count(d, **change):
    s = dict(d.get("settings") or {})
    spec = _spec(d)
    hw = load_hardware(d["gpu"])
    given = {}
    for name in ("context_length", "max_running_requests", "max_total_tokens", "page_size",
                 "chunked_prefill_size", "cuda_graph_max_bs", "max_mamba_cache_size"):
        if s.get(name) is not None:
            given[name] = int(s[name])
    if s.get("mem_fraction_static_given") and s.get("mem_fraction_static") is not None:
        given["mem_fraction_static"] = str(s["mem_fraction_static"])
    if s.get("disable_cuda_graph"):
        given["disable_cuda_graph"] = True
    if s.get("enable_lora"):
        # the adapters' slots as the echo gives them (kvcalc.serving.lora)
        given.update(enable_lora=True, max_loras_per_batch=int(s["max_loras_per_batch"]),
                     max_lora_rank=int(s["max_lora_rank"]),
                     lora_target_modules=str(s["lora_target_modules"]))
    weight_dtype = {"fp8": "fp8", "w8a8_fp8": "fp8"}.get(s.get("quantization") or "", None)
    kv = s.get("kv_cache_dtype") or "auto"
    layout = Layout(tp=int(s.get("tp_size") or 1), pp=int(s.get("pp_size") or 1),
                    dp=int(s.get("dp_size") or 1),
                    dp_attention=bool(s.get("enable_dp_attention")))
    flags = SglangFlags(engine=engine_ref(f"sglang@{_release(d)}"),
                        weights=Weights(weight_dtype=weight_dtype), layout=layout,
                        kv_cache_dtype=kv, **{**given, **change})
    return spec, hw, count(spec, hw, flags)


def _countable(d) -> str:
    """Why a log cannot be counted from its settings, or '' when it can."""
    if d.get("gpu") in (None, "unknown"):
        return "the GPU is not named and kvcalc has no preset for it"
    if _release(d) is None:
        return f"SGLang {d['sglang_version']} is not a release kvcalc encodes"
    if _spec(d) is None:
        return "no preset or published config for the model in tests/data"
    if d.get("logged", {}).get("refused"):
        return ""
    return ""


@pytest.mark.parametrize("name, d", LOGS)
def test_default_mem_fraction_static_is_the_logged_one(name, d):
    s = d.get("settings") or {}
    if s.get("mem_fraction_static_given") or s.get("mem_fraction_static") is None:
        pytest.skip("the user gave --mem-fraction-static (or the log does not echo it)")
    why = _countable(d)
    if why:
        pytest.skip(why)
    _, _, c = _count(d)
    assert float(dict(c.flags)["mem_fraction_static"]) == pytest.approx(
        float(s["mem_fraction_static"]), abs=5e-4)


@pytest.mark.parametrize("name, d", LOGS)
def test_tokens_from_the_settings_alone_within_five_percent(name, d):
    why = _countable(d)
    if why:
        pytest.skip(why)
    logged = d["logged"]
    want = logged.get("max_total_num_tokens") or logged.get("kv_tokens")
    if not want:
        pytest.skip("the log prints no token count")
    _, _, c = _count(d)
    assert c.kv_cache_tokens is not None, c.notes
    assert c.kv_cache_tokens == pytest.approx(want, rel=0.05), (c.kv_cache_tokens, want)


@pytest.mark.parametrize("name, d", LOGS)
def test_running_requests_as_logged(name, d):
    why = _countable(d)
    want = (d.get("logged") or {}).get("max_running_requests")
    if why or not want:
        pytest.skip(why or "the log prints no running-request limit")
    if d.get("flags_uncertain"):
        pytest.skip("the log's limit is not the one its stated flags give")
    _, _, c = _count(d)
    tokens = (d.get("logged") or {}).get("max_total_num_tokens")
    if tokens and c.kv_cache_tokens != tokens:
        # the limit follows from the tokens: count it from the logged ones
        assert c.max_running_requests == pytest.approx(want, rel=0.05)
    else:
        assert c.max_running_requests == want


@pytest.mark.parametrize("name, d", LOGS)
def test_weights_within_half_a_gib(name, d):
    why = _countable(d)
    logged = d.get("logged") or {}
    if why:
        pytest.skip(why)
    used = logged.get("weights_mem_gb")
    if used is None and logged.get("avail_mem_start_gb") and logged.get(
            "avail_mem_after_weights_gb"):
        used = logged["avail_mem_start_gb"] - logged["avail_mem_after_weights_gb"]
    if used is None:
        pytest.skip("the log gives no weight-load figure")
    _, _, c = _count(d)
    assert c.memory["weights"] / GiB == pytest.approx(used, abs=0.5)


@pytest.mark.parametrize("name, d", LOGS)
def test_lora_buffers_and_pool_within_a_tenth_of_a_gib_of_the_logged_drop(name, d):
    """With --enable-lora SGLang builds the adapters' slots after "Load weight end" and
    before the pool (`ModelRunner.initialize`), so the free memory it logs falls, between
    "Load weight end" and "Memory pool end", by the slots, the request-to-token table and
    the K and V pool, each as the segments PyTorch's allocator takes for them: kvcalc's
    drop within 0.1 GiB of the logged one (the logged GB are GiB; 0.01 GiB off on the
    free H200, 0.08 on the shared 0.5.1.post3 machine, as the non-LoRA capped 0.4.10 and
    0.5.0rc0 runs are 0.06-0.07 GiB over kvcalc)."""
    why = _countable(d)
    logged = d.get("logged") or {}
    if why or not (d.get("settings") or {}).get("enable_lora"):
        pytest.skip(why or "LoRA is not enabled")
    _, _, c = _count(d)
    drop = logged["avail_mem_after_weights_gb"] - logged["avail_mem_after_pool_gb"]
    got = c.memory["avail_mem_after_weights"] - c.memory["avail_mem_after_pool"]
    assert c.memory["lora_buffers"] > 0
    assert got / GiB == pytest.approx(drop, abs=0.1), (got / GiB, drop)


@pytest.mark.parametrize("name, d", LOGS)
def test_the_pools_bytes_a_token_as_logged(name, d):
    """The bytes the pool stores a token (kvcalc's KV cache term over its tokens) times
    the logged tokens give the logged "KV size" (two decimals of GiB; the pool's padding
    row of a page, at most 64 tokens, within that). For DeepSeek sparse attention this
    is the stored layout (the fp8 latent's 656 B and the indexer's 132 B a layer), not
    the budget's cell."""
    why = _countable(d)
    logged = d.get("logged") or {}
    size = logged.get("kv_size_gb")
    if why or size is None or not logged.get("kv_tokens"):
        pytest.skip(why or "the log prints no MLA 'KV size' with its tokens")
    spec, _, c = _count(d)
    if type(spec.mla).__name__ != "IndexedLatent":
        pytest.skip("checked for DeepSeek sparse attention's pool only")
    stored = c.memory["kv_cache"] // c.kv_cache_tokens
    pad = 64 * stored / GiB
    assert logged["kv_tokens"] * stored / GiB == pytest.approx(size, abs=0.005 + pad)


def test_deepseek_v32_cell_by_hand_from_its_config():
    """DeepSeek-V3.2's cell a token, by hand from the published config's fields (not from
    kvcalc's model): the MLA latent (kv_lora_rank + qk_rope_head_dim) at the cache dtype
    and the indexer's key, index_head_dim fp8 values and a fp32 scale per 128, a layer;
    the fp8 pool's latent row is kv_lora_rank fp8 values, a fp32 scale per 128 and the
    rope part in bf16. Budget and stored bytes per release as SGLang's source reads."""
    import json

    cfg = json.loads((HF / "deepseek-ai__DeepSeek-V3.2-Exp.json").read_text())
    layers, lora, rope = cfg["num_hidden_layers"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    index = cfg["index_head_dim"] + cfg["index_head_dim"] // 128 * 4
    fp8_row = lora + lora // 128 * 4 + rope * 2
    assert (layers, lora + rope, index, fp8_row) == (61, 576, 132, 656)
    spec = _spec({"hf_config": "deepseek-ai__DeepSeek-V3.2-Exp.json"})
    want = {  # release, GPU, --kv-cache-dtype: (budget, stored) bytes a token
        ("0.5.3", "h200", "auto"): (layers * (lora + rope) * 2,
                                    layers * ((lora + rope) * 2 + index)),
        ("0.5.3", "h200", "fp8_e4m3"): (layers * (lora + rope), layers * (fp8_row + index)),
        ("0.5.4", "h200", "auto"): (layers * ((lora + rope) * 2 + index),) * 2,
        ("0.5.4", "b200", "auto"): (layers * (lora + rope + index),
                                    layers * (fp8_row + index)),
        ("0.5.8", "h200", "fp8_e4m3"): (layers * (lora + rope + index),
                                        layers * (fp8_row + index)),
        ("0.5.14", "h200", "auto"): (layers * ((lora + rope) * 2 + index),) * 2,
        ("0.5.23", "h200", "fp8_e4m3"): (layers * (fp8_row + index),) * 2,
        ("0.5.23", "b200", "auto"): (layers * (lora + rope + index),) * 2,
    }
    for (release, gpu, kv), (budget, stored) in want.items():
        flags = SglangFlags(engine=engine_ref(f"sglang@{release}"),
                            weights=Weights(weight_dtype="fp8"), layout=Layout(tp=8),
                            kv_cache_dtype=kv)
        c = count(spec, load_hardware(gpu), flags)
        assert c.page_size == 64, (release, gpu, kv)
        assert c.bytes_per_token == budget, (release, gpu, kv)
        assert c.memory["kv_cache"] == c.kv_cache_tokens * stored, (release, gpu, kv)
    assert (78_324, 43_188, 48_068) == (layers * 1284, layers * 708, layers * 788)
    old = count(spec, load_hardware("h200"), SglangFlags(
        engine=engine_ref("sglang@0.5.2"), weights=Weights(weight_dtype="fp8"),
        layout=Layout(tp=8)))
    assert old.kv_cache_tokens is None and "served from 0.5.3" in old.notes[0]


# Start-ups whose count kvcalc does not yet reproduce, each with what is known of why.
# Strict: when one starts to pass, the mark must go.
NOT_YET = {
    ("qwen3-235b-a22b-fp8-4xh100-tp4-vllm21348",
     "test_tokens_from_the_settings_alone_within_five_percent"): (
        "tp 4: the pool is 1.3 GiB smaller than kvcalc's (its cell, 48,128 B a token, is the "
        "logged one); the log quotes no memory line, so whether the weights or the "
        "communication buffers taken before 'Load weight begin' hold it is not known"),
    ("qwen3-8b-b200-tp1-sglang-skill",
     "test_check_reproduces_the_pool_from_the_logged_terms"): (
        "a main build of 2026-04-27 (after 0.5.10.post1) that captures piecewise CUDA graphs "
        "by default: its pool implies a default fraction of 0.854 where 0.5.8's rule gives "
        "0.857 (0.5.8 reserves 8 MiB a piecewise size only when they are turned on); the "
        "release that turned them on was not read"),
    ("deepseek-v3.2-exp-8xb200-tp8-dp8-sglang11309",
     "test_tokens_from_the_settings_alone_within_five_percent"): (
        "an excerpt of two pool lines, no start memory, weights or fraction: kvcalc's pool "
        "is 1.40 x the logged one; with DP attention every rank holds the whole attention "
        "(and indexer) weights, which kvcalc's weights term does not replicate, and "
        "37.71 GiB stay free after the pool"),
}


@pytest.fixture(autouse=True)
def _known_gaps(request):
    name = request.node.callspec.params.get("name") if hasattr(request.node, "callspec") else None
    reason = NOT_YET.get((name, request.node.originalname))
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.mark.parametrize("name, d", LOGS)
def test_the_reader_reads_back_every_logged_figure(name, d):
    log = read_sglang_log(d.get("log") or "")
    for key, want in (d.get("logged") or {}).items():
        if key == "refused":
            assert bool(log.failure) == bool(want) or not want, (log.failure, want)
            continue
        assert log.figures.get(key) == want, key
    s = d.get("settings") or {}
    if log.server_args and s.get("mem_fraction_static") is not None:
        assert log.server_args["mem_fraction_static"] == s["mem_fraction_static"]


def test_the_logs_cover_the_release_lines():
    releases = {str(d["sglang_version"]) for _, d in (p.values for p in LOGS)}
    assert len(LOGS) >= 20 and len(releases) >= 5


def test_another_engines_flag_is_one_error():
    from kvcalc.serving.flags import check_owners

    with pytest.raises(KvcalcError, match="gpu_memory_utilization is vLLM's flag .* SGLang's "
                                          "is mem_fraction_static"):
        check_owners("sglang", {"gpu_memory_utilization": "0.9"})


@pytest.mark.parametrize("name, d", LOGS)
def test_check_reproduces_the_pool_from_the_logged_terms(name, d):
    """`kvcalc check`: from the free memory and the weights the log measured, the pool's
    tokens as logged (SGLang's fraction, cell size and page arithmetic; the logged GiB
    figures have two decimals, so within 0.2%)."""
    from kvcalc.serving.sglang.check import check_sglang

    why = _countable(d)
    logged = d.get("logged") or {}
    want = logged.get("max_total_num_tokens") or logged.get("kv_tokens")
    if why or not want or logged.get("avail_mem_start_gb") is None:
        pytest.skip(why or "the log gives no start memory or tokens")
    if (d.get("settings") or {}).get("max_total_tokens"):
        pytest.skip("the pool is capped by --max-total-tokens")
    result = check_sglang(d["log"], _spec(d), load_hardware(d["gpu"]), release=_release(d))
    assert result.tokens_from_logged_start == pytest.approx(want, rel=0.002)


def test_check_cli_reads_an_sglang_log(tmp_path):
    from typer.testing import CliRunner

    from kvcalc.cli import app

    d = yamlload.safe_load((DATA / "llama31-8b-h100-tp1-docs-0.4.1.yaml").read_text())
    path = tmp_path / "sglang.log"
    path.write_text(d["log"])
    r = CliRunner().invoke(app, ["check", str(path), "llama3.1-8b", "--gpu", "h100-sxm",
                                 "--engine", "sglang@0.4.1", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = yamlload.safe_load(r.stdout)
    figures = {f["figure"]: f for f in got["figures"]}
    assert figures["KV tokens"]["logged"] == 444_500
    assert got["tokens_from_logged_start"] == pytest.approx(444_500, rel=0.002)
    r = CliRunner().invoke(app, ["check", str(path), "llama3.1-8b"])
    assert r.exit_code == 2 and "SGLang logs do not name the GPU" in r.stderr


def test_allocator_segments_by_pytorchs_rules():
    """PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp at 001074d2:
    kSmallSize 1 MiB, kSmallBuffer 2 MiB, kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB,
    kRoundLarge 2 MiB, best fit, a large block split only past 1 MiB left), by hand:
    Llama-3.1-8B's K buffer of 20,480 + 1 tokens (8 heads x 128 x bf16) takes a segment
    rounded up to 21 x 2 MiB; Qwen2.5-0.5B's (2 heads x 64) is 5 MiB + 256 B, three to a
    20 MiB segment; requests up to 1 MiB share 2 MiB segments."""
    from kvcalc.serving.sglang.segments import segments

    MiB = 1 << 20
    llama = 20481 * 8 * 128 * 2
    assert segments([llama]) == 21 * 2 * MiB
    assert segments([llama] * 64) == 64 * 21 * 2 * MiB
    qwen = 20481 * 2 * 64 * 2
    assert segments([qwen] * 48) == 16 * 20 * MiB
    assert segments([700 * 1024] * 2) == 2 * MiB  # two in one 2 MiB segment
    assert segments([700 * 1024] * 3) == 2 * 2 * MiB  # the third past it
