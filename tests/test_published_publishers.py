"""Who published each measurement in tests/data/published, the grouping that
reports/published.md's leave-one-publisher-out headline holds out by
(benchmarks/fit_engines.leave_one_publisher_out)."""

from __future__ import annotations

import published
import published_model as pm


def test_publishers_by_engine_as_the_sources_name_them():
    # read off each file's source URL by hand: Argonne's three CSVs are one publisher,
    # MLC's blog and its llm-perf-bench repository another, NVIDIA's TensorRT-LLM docs and
    # Model Optimizer benchmark a third
    rows = pm.scored(published.load())
    got: dict[str, set[str]] = {}
    for r in rows:
        got.setdefault(r.engine, set()).add(pm.publisher_of(r))
    # oobabooga's blog (oobabooga.github.io) measured four engines on one RTX 3090 (its
    # llama.cpp rows excluded: the page calls them obsolete); matt-c1's runs are excluded
    # (text-generation-webui's _HF loaders); torchao (github.com/pytorch/ao) is PyTorch's
    # organisation, not gpt-fast's pytorch-labs
    assert got == {
        "autoawq": {"casper-hansen", "oobabooga"},
        "exllamav2": {"turboderp", "oobabooga"},
        "gpt-fast": {"pytorch-labs", "pytorch"},
        "llama.cpp": {"XiongjieDai", "ggml-org"},
        "mlc-llm": {"mlc-ai"}, "sglang": {"gpustack", "sgl-project"},
        "tensorrt-llm": {"NVIDIA", "argonne-lcf"}, "transformers": {"h2oai", "oobabooga"},
        "vllm": {"argonne-lcf", "gpustack", "ree2raz", "vllm", "yobitelcomm"},
    }


def test_regimes_cover_every_scored_row():
    rows = pm.scored(published.load())
    assert {pm.regime(r) for r in rows} == {"batch 1", "batched", "prefill", "request"}
    # a first token is a prefill whatever its batch; a batch-16 TTFT row stays prefill
    ttft16 = [r for r in rows if r.metric in pm.TTFT_METRICS and r.batch > 1]
    assert ttft16 and all(pm.regime(r) == "prefill" for r in ttft16)
