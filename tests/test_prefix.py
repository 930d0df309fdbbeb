"""Prefix caching per engine (kvcalc.serving.prefix) and what `kvcalc bench` does with it:
each engine's switch and default, a hit cut to the engine's unit as its source cuts it
(cited per rule below), a host tier's hit fetched over the GPU's host link (its datasheet
figure), and the flags refused for another engine."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving import engine_ref
from kvcalc.serving.prefix import prefix_cache, split_prefix
from kvcalc.serving.record import ServingCount


def test_vllm_hit_is_whole_blocks_and_never_the_last_token():
    """0.33 v1/core/kv_cache_manager.py get_computed_blocks: the hit is found block by
    block, max_cache_hit_length = prompt_length - 1."""
    assert split_prefix(1000, 0.5, 0.0, 16) == (496, 0)
    assert split_prefix(1024, 0.999, 0.0, 16) == (1008, 0)  # 1,023 tokens at most: 63 blocks


def test_sglang_hit_is_whole_pages_of_page_size():
    """0.5.4 radix_cache.py match_prefix: page_aligned_len = len(key) // page_size *
    page_size; schedule_batch.py init_next_round_input: max_prefix_len = input_len - 1."""
    assert split_prefix(1000, 0.999, 0.0, 1) == (999, 0)
    assert split_prefix(1000, 0.5, 0.0, 64) == (448, 0)


def test_host_share_ends_on_a_block_after_the_gpu_share():
    assert split_prefix(8192, 0.5, 0.4, 16) == (4096, 7372 // 16 * 16 - 4096)


def _count(engine: str, page: int) -> ServingCount:
    from kvcalc.serving.layout import Layout

    return ServingCount(engine=engine_ref(engine), hardware="h100-sxm", layout=Layout(),
                        context_len=8192, page_size=page, bytes_per_token=131072,
                        kv_cache_tokens=400_000, max_running_requests=256,
                        max_concurrency=None, terms=(), flags=(), starts=True)


@pytest.mark.parametrize("engine,page,given,on,block", [
    ("vllm", 16, {}, True, 16),  # V1: on by default
    ("vllm", 16, {"enable_prefix_caching": False}, False, 16),
    ("vllm@0.7.3", 16, {}, False, 16),  # V0 before 0.8: off by default
    ("sglang@0.5.4", 1, {}, True, 1),  # the radix cache
    ("sglang@0.5.4", 64, {"disable_radix_cache": True}, False, 64),
    # TensorRT-LLM: enable_block_reuse and enable_partial_reuse default True (llm_args.py
    # KvCacheConfig): a partly matched block is reused, so no block cut
    ("tensorrt-llm", 32, {}, True, 1),
    ("tensorrt-llm", 32, {"enable_block_reuse": False}, False, 1),
])
def test_each_engines_switch_and_default(engine, page, given, on, block):
    got = prefix_cache(load_model("llama3.1-8b"), _count(engine, page), given)
    assert (got.on, got.block) == (on, block)
    assert bool(got.note) == (not on)


def _bench(*args):
    r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                 "--concurrency", "4", "--num-prompts", "8", "--input-len",
                                 "4096", "--output-len", "16", "--format", "json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_caching_off_computes_every_prompt_and_a_host_hit_is_fetched_at_the_link_rate():
    on = _bench("--prefix-hit", "0.5", "--enable-prefix-caching")
    off = _bench("--prefix-hit", "0.5", "--no-enable-prefix-caching")
    assert off["prefix_cache"]["prefix_caching"] is False
    assert off["mean_ttft_ms"] > on["mean_ttft_ms"]
    assert any("--prefix-hit counts 0" in n for n in off["notes"])
    fetched = _bench("--prefix-hit", "0.25", "--host-hit", "0.5", "--kv-offloading-size", "16")
    f = fetched["host_fetch"]
    # H100 SXM's PCIe Gen5 x16: 128 GB/s both directions (datasheet), 64 GB/s each way;
    # a pinned host-to-device copy over it reaches 54.8 GB/s in CUDA bandwidthTest
    # (presets/hardware/h100-sxm.yaml host_link_copy_source), the rate a fetch takes.
    # Llama-3.1-8B bf16: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes a token
    per_token = 32 * 8 * 128 * 2 * 2
    assert load_hardware("h100-sxm").host_link_bandwidth_bytes_per_s == 64 * 10**9
    assert f["tokens"] == split_prefix(4096, 0.25, 0.5, 16)[1]
    assert f["fetch_ms"] == pytest.approx(f["tokens"] * per_token / 54.8e9 * 1e3)
    assert (f["link_bytes_per_s"], f["link_rate"]) == (54_800_000_000, "published copy")
    assert any("at 54.8 GB/s, a published pinned host-to-device copy's rate" in n
               for n in fetched["notes"])
    assert f["fetch_ms"] < f["recompute_ms"]


def test_a_gpu_without_a_published_copy_rate_fetches_at_the_datasheet_rate_and_says_so():
    """The H100 PCIe card has no published host-to-device copy measurement in its preset:
    its fetch takes PCIe Gen5 x16's datasheet 64 GB/s one way, and the note says so."""
    r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-pcie",
                                 "--concurrency", "4", "--num-prompts", "8", "--input-len",
                                 "4096", "--output-len", "16", "--format", "json",
                                 "--prefix-hit", "0.25", "--host-hit", "0.5",
                                 "--kv-offloading-size", "16"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    f = got["host_fetch"]
    assert (f["link_bytes_per_s"], f["link_rate"]) == (64 * 10**9, "datasheet")
    assert f["fetch_ms"] == pytest.approx(f["tokens"] * 32 * 8 * 128 * 2 * 2 / 64e9 * 1e3)
    assert any("at 64 GB/s, its datasheet rate one way: no published copy measurement"
               in n for n in got["notes"])


def test_host_hit_needs_a_tier():
    r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                 "--concurrency", "2", "--prefix-hit", "0.2",
                                 "--host-hit", "0.5"])
    assert r.exit_code == 2 and "host KV tier" in r.output


def test_the_hits_blocks_are_pinned_once_when_shared_and_per_request_otherwise():
    """A 4,096-token prompt with half of it cached: 2,048 tokens, 128 blocks of 16, each
    token 131,072 B of Llama-3.1-8B's bf16 K/V (32 layers x 8 K/V heads x 128 x 2 x 2 B):
    256 MiB, held once when every request shares the prefix."""
    shared = _bench("--prefix-hit", "0.5", "--enable-prefix-caching", "--shared-prefix")
    assert shared["prefix_cache"]["pinned"] == {
        "blocks": 128, "tokens": 2048, "bytes_per_device": 128 * 16 * 32 * 8 * 128 * 2 * 2,
        "held": "once, for every request"}
    own = _bench("--prefix-hit", "0.5", "--enable-prefix-caching")
    assert own["prefix_cache"]["pinned"]["held"] == "by each running request"
