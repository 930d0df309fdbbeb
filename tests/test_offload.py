"""KV offload to CPU memory (kvcalc.serving.offload): each engine's host tier from its own
size flag, in its own unit, checked against public start-up log lines and the engines'
own words (tests/data/offload/public.yaml) and against each engine's source rule as the
rules tables cite it (file and function per release); the flags on `fit`, refused by
name and unit when given for another engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.serving import engine_ref
from kvcalc.serving.offload import PoolFacts, host_tier

DATA = yaml.safe_load((Path(__file__).parent / "data" / "offload" / "public.yaml").read_text())
GiB = 1 << 30


def _pool(engine: str, *, per_token: int, tokens: int = 100_000, tp: int = 1, page: int = 1,
          **kw) -> PoolFacts:
    return PoolFacts(engine=engine_ref(engine), tp=tp, pp=1, page_size=page,
                     bytes_per_token=per_token, kv_cache_tokens=tokens, **kw)


def _sglang_size_per_token(m: dict, tp: int = 1) -> int:
    """SGLang's MHATokenToKVPoolHost.get_size_per_token (0.5.4 memory_pool_host.py):
    head_dim x head_num x layer_num x itemsize x 2, the heads of one rank."""
    return m["head_dim"] * (m["kv_heads"] // tp) * m["layers"] * m["dtype_bytes"] * 2


# -- SGLang --------------------------------------------------------------------------
def test_sglang_ratio_host_pool_matches_the_public_log():
    d = DATA["sglang_ratio_log"]
    pool = _pool(f"sglang@{d['release']}", per_token=_sglang_size_per_token(d["model"]),
                 tokens=d["max_total_num_tokens"])
    tier = host_tier(pool, {"enable_hierarchical_cache": True,
                            "hicache_ratio": d["hicache_ratio"]})
    assert dict(tier.engine_says)["host_memory_gb"] == d["logged_gb"]
    assert tier.tokens == 2 * d["max_total_num_tokens"] and not tier.refusal


def test_sglang_hicache_size_is_gb_per_rank():
    d = DATA["sglang_size_per_rank"]
    per_token = _sglang_size_per_token(DATA["sglang_ratio_log"]["model"], tp=d["tp"])
    tier = host_tier(_pool("sglang@0.5.4", per_token=per_token, tp=d["tp"]),
                     {"enable_hierarchical_cache": True, "hicache_size": d["hicache_size"]})
    assert dict(tier.engine_says)["host_memory_gb"] == d["logged_gb"]
    # every rank its own: the tier is tp times the size, whole tokens of it
    assert tier.host_bytes == d["tp"] * tier.host_bytes_per_rank
    assert d["tier_gb"] * 10**9 - d["tp"] * per_token < tier.host_bytes <= d["tier_gb"] * 10**9


def test_sglang_hicache_size_40_prints_40_00():
    d = DATA["sglang_size_refused_host_memory"]
    tier = host_tier(_pool("sglang@0.5.4", per_token=131072),
                     {"enable_hierarchical_cache": True, "hicache_size": d["hicache_size"]})
    assert dict(tier.engine_says)["host_memory_gb"] == d["logged_gb"]


def test_sglang_refuses_a_host_pool_no_larger_than_the_device_pool():
    """memory_pool_host.py HostKVCache.__init__: assert self.size > device_pool.size."""
    tier = host_tier(_pool("sglang@0.5.4", per_token=131072, tokens=400_000),
                     {"enable_hierarchical_cache": True, "hicache_size": 40})
    assert tier.tokens == 40 * 10**9 // 131072 < 400_000
    assert "larger than the device memory" in tier.refusal
    # the ratio's pool, rounded down to whole pages (page_size 64)
    tier = host_tier(_pool("sglang@0.5.4", per_token=1000, tokens=1001, page=64),
                     {"enable_hierarchical_cache": True, "hicache_ratio": "1.5"})
    assert tier.tokens == 1501 // 64 * 64 and tier.blocks == 1501 // 64


def test_sglang_hicache_flags_need_the_switch_and_a_read_release():
    with pytest.raises(KvcalcError, match="--enable-hierarchical-cache"):
        host_tier(_pool("sglang@0.5.4", per_token=1), {"hicache_size": 8})
    with pytest.raises(KvcalcError, match="not read"):
        host_tier(_pool("sglang@0.5.23", per_token=1), {"enable_hierarchical_cache": True})
    with pytest.raises(KvcalcError, match="whole number"):
        host_tier(_pool("sglang@0.5.4", per_token=1),
                  {"enable_hierarchical_cache": True, "hicache_size": "7.5"})


# -- vLLM ----------------------------------------------------------------------------
def test_vllm_size_is_gib_over_all_ranks():
    """0.14-0.20 CPUOffloadingSpec.__init__: num_blocks = cpu_bytes_to_use //
    (one GPU block's bytes on a rank x world_size), cpu_bytes_to_use = size x 2^30; the
    same GiB holds the same tokens at tp 1 and tp 2 (public.yaml: "the total across all
    TP ranks")."""
    assert "total across all TP ranks" in DATA["vllm_size_over_all_ranks"]["quote"]
    one = host_tier(_pool("vllm@0.20", per_token=131072, page=16), {"kv_offloading_size": "8"})
    two = host_tier(_pool("vllm@0.20", per_token=65536, page=16, tp=2),
                    {"kv_offloading_size": "8"})
    assert one.blocks == 8 * GiB // (16 * 131072) == two.blocks == 4096
    assert one.tokens == two.tokens == 65536
    assert two.host_bytes_per_rank * 2 == two.host_bytes == 8 * GiB
    frac = host_tier(_pool("vllm@0.20", per_token=131072, page=16),
                     {"kv_offloading_size": "0.5"})
    assert dict(frac.engine_says)["cpu_bytes_to_use"] == GiB // 2


def test_vllm_033_aligns_chunks_to_pages_and_keeps_one_latent_copy():
    """0.33 cpu/spec.py: each chunk rounded up to mmap.PAGESIZE (4096); offloading/config.py
    replicated_layout: an MLA model at tp > 1 (pp 1) keeps one copy."""
    odd = host_tier(_pool("vllm@0.33", per_token=1000, page=16), {"kv_offloading_size": "1"})
    assert odd.bytes_per_block == 16384 and odd.blocks == GiB // 16384
    old = host_tier(_pool("vllm@0.20", per_token=1000, page=16), {"kv_offloading_size": "1"})
    assert old.bytes_per_block == 16000 and old.blocks == GiB // 16000
    mla = host_tier(_pool("vllm@0.33", per_token=4096, page=64, tp=8),
                    {"kv_offloading_size": "4"}, mla=True)
    assert mla.bytes_per_block == 64 * 4096 and mla.blocks == 4 * GiB // (64 * 4096)


def test_vllm_releases_before_native_offloading():
    pool = dict(per_token=131072, page=16)
    with pytest.raises(KvcalcError, match="0.11.1"):
        host_tier(_pool("vllm@0.11.0", **pool), {"kv_offloading_size": "8"})
    # 0.11.1: no backend by default, the size alone keeps nothing
    alone = host_tier(_pool("vllm@0.11.1", **pool), {"kv_offloading_size": "8"})
    assert alone.tokens == 0 and "no host tier" in alone.notes[0]
    native = host_tier(_pool("vllm@0.11.1", **pool),
                       {"kv_offloading_size": "8", "kv_offloading_backend": "native"})
    assert "num_cpu_blocks must be specified" in native.refusal
    lm = host_tier(_pool("vllm@0.11.1", tp=4, **pool),
                   {"kv_offloading_size": "8", "kv_offloading_backend": "lmcache"})
    assert dict(lm.engine_says)["lmcache.max_local_cpu_size"] == 2.0
    lm33 = host_tier(_pool("vllm@0.33", **pool),
                     {"kv_offloading_size": "8", "kv_offloading_backend": "lmcache"})
    assert lm33.tokens == 0 and "not passed" in lm33.notes[0]
    # a backend without a size: 0.11.1 refuses it (VllmConfig._post_init_kv_transfer_config
    # raises), 0.14 on return before offloading anything
    bare = host_tier(_pool("vllm@0.11.1", **pool), {"kv_offloading_backend": "native"})
    assert "You must set kv_offloading_size" in bare.refusal
    bare = host_tier(_pool("vllm@0.20", **pool), {"kv_offloading_backend": "native"})
    assert bare.tokens == 0 and not bare.refusal
    zero = host_tier(_pool("vllm@0.33", **pool), {"kv_offloading_size": "0"})
    assert "cpu_bytes_to_use must be specified" in zero.refusal


# -- TensorRT-LLM --------------------------------------------------------------------
def test_trtllm_host_cache_size_is_bytes_per_rank_in_blocks():
    """resource_manager.py KVCacheManager.calculate_max_num_blocks: blocks_in_secondary_pool
    = host_cache_size // get_cache_bytes_per_token() // tokens_per_block."""
    assert "(in bytes)" in DATA["trtllm_host_cache_bytes"]["quote"]
    tier = host_tier(_pool("tensorrt-llm", per_token=131072, page=32, tp=2),
                     {"host_cache_size": str(45 * 10**9)})
    assert tier.blocks == 45 * 10**9 // 131072 // 32 == 10728
    assert tier.tokens == tier.blocks * 32 and tier.host_bytes == 2 * tier.host_bytes_per_rank
    assert dict(tier.engine_says)["secondary_blocks"] == tier.blocks


# -- the command line ----------------------------------------------------------------
def _run(*args):
    return CliRunner().invoke(app, list(args))


def test_fit_json_carries_the_host_tier_beside_the_unchanged_pool():
    base = ["fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine",
            "tensorrt-llm", "--max-seq-len", "8192", "--format", "json"]
    plain = json.loads(_run(*base).stdout)
    tiered = json.loads(_run(*base, "--host-cache-size", "40000000000").stdout)
    assert tiered["kv_cache_tokens"] == plain["kv_cache_tokens"]  # the GPU pool as counted
    assert "host_tier" not in plain
    tier = tiered["host_tier"]
    assert tier["host_blocks"] == 40 * 10**9 // (tiered["bytes_per_token"] * 32)


@pytest.mark.parametrize("engine,flag,value,theirs", [
    ("sglang", "--kv-offloading-size", "8", "--hicache-size (GB per rank)"),
    ("vllm", "--hicache-size", "8", "--kv-offloading-size (GiB over all tp x pp ranks)"),
    ("tensorrt-llm", "--kv-offloading-size", "8", "--host-cache-size (bytes per rank)"),
    ("sglang", "--no-enable-prefix-caching", None, "--disable-radix-cache"),
])
def test_an_offload_flag_for_another_engine_is_one_line(engine, flag, value, theirs):
    args = ["fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine", engine, flag]
    r = _run(*args, *([value] if value else []))
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: ") and theirs in lines[0]


def test_sglang_log_reader_takes_the_host_pool_line():
    """`kvcalc check` reads the host pool's line beside the pool's (kvcalc.serving.sglang.log)."""
    from kvcalc.serving.sglang.log import read_sglang_log

    d = DATA["sglang_ratio_log"]
    text = "\n".join(["[2026-07-30 10:00:00] max_total_num_tokens=1547424, "
                      "chunked_prefill_size=8192, max_running_requests=4096",
                      "[2026-07-30 10:00:01] " + d["quote"][0].split('"')[0].strip()])
    log = read_sglang_log(text)
    assert log.figures["host_memory_gb"] == float(d["logged_gb"])
    assert log.tokens == d["max_total_num_tokens"]


def test_sglang_host_pool_of_a_public_tp4_start_up():
    """sgl-project/sglang#7059: the log's own device pool, and the bytes a token takes on
    one of four ranks as kvcalc's SGLang count has them (its cell), give the logged GB;
    the log reader takes the line, and `check`'s row sets the two side by side."""
    from kvcalc.serving import count
    from kvcalc.serving.flags import engine_flags
    from kvcalc.serving.sglang.check import _host_row
    from kvcalc.serving.sglang.log import read_sglang_log
    from kvcalc.estimate import workload_for
    from kvcalc.presets import load_hardware, load_model
    from kvcalc.serving.vllm.settings import settings_for

    d = DATA["sglang_ratio_log_llama_tp4"]
    spec = load_model(d["model_preset"])
    ref = engine_ref(f"sglang@{d['release']}")
    w = workload_for(spec, seq_len=8192, batch=1, kv_dtype="bf16", weight_dtype=None,
                     tp=d["tp"], group_size=None)
    counted = count(spec, load_hardware("h100-sxm"),
                    engine_flags(ref, settings_for(w), context_length=8192))
    assert counted.bytes_per_token == 32 * (8 // d["tp"]) * 128 * 2 * 2
    log = read_sglang_log("\n".join(d["quote"]))
    assert log.tokens == d["max_total_num_tokens"]
    (_, logged, ours), = _host_row(log, counted)
    assert logged == float(d["logged_gb"]) and f"{ours:.2f}" == d["logged_gb"]
