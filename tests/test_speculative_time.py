"""Speculative decoding's TPOT at batch 1 (kvcalc.serving.speculative_time) against a
published measurement (tests/data/speculative/published.yaml, quoted with its source)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yamlload

from kvcalc.engines import load_engine
from kvcalc.errors import KvcalcError
from kvcalc.estimate import workload_for
from kvcalc.hfconfig import spec_from_hf_config_file
from kvcalc.presets import load_hardware
from kvcalc.serving.speculative import draft_for, expected_tokens
from kvcalc.serving.speculative_time import acceptance_for_length, speculative_time

DATA = Path(__file__).parent / "data"
PUBLISHED = yamlload.safe_load((DATA / "speculative" / "published.yaml").read_text())


def test_acceptance_for_length_inverts_the_expected_tokens():
    for k, length in ((1, 1.92), (3, 2.82), (5, 3.01)):
        assert expected_tokens(acceptance_for_length(length, k), k) == pytest.approx(length)
    with pytest.raises(KvcalcError):
        acceptance_for_length(4.5, 3)


def _trtllm_mtp():
    d = PUBLISHED["trtllm-deepseek-r1-mtp-b200"]
    spec = spec_from_hf_config_file(DATA / "hf" / d["model_config"])
    w = workload_for(spec, seq_len=d["isl"] + d["osl"] // 2, tp=d["tp"], weight_dtype="int4")
    engine, _ = load_engine(d["engine"])
    return d, spec, w, engine, load_hardware(d["gpu"])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_trtllm_deepseek_r1_mtp_speedup_at_batch_1(k):
    """TensorRT-LLM's DeepSeek-R1 on 8 x B200 at batch 1 (its blog's MTP table): the
    speedup kvcalc predicts from the published tokens a step, on TensorRT-LLM's fitted
    terms (presets/engines), within 8% of the published TPS/user speedup."""
    d, spec, w, engine, hw = _trtllm_mtp()
    length, speedup = d["rows"][k]
    t = speculative_time(spec, w, draft_for(spec, "mtp", k), hardware=hw, engine=engine,
                         acceptance_rate=acceptance_for_length(length, k),
                         draft_weight_dtype=d["mtp_weights"])
    assert t.expected_tokens == pytest.approx(length)
    assert t.speedup == pytest.approx(speedup, rel=0.08)


def test_the_gain_stops_growing_with_more_draft_tokens():
    """The published speedup peaks at 3 MTP layers and falls after; kvcalc's rises less
    than 5% past 3 and falls by 5."""
    d, spec, w, engine, hw = _trtllm_mtp()
    s = {k: speculative_time(spec, w, draft_for(spec, "mtp", k), hardware=hw, engine=engine,
                             acceptance_rate=acceptance_for_length(d["rows"][k][0], k),
                             draft_weight_dtype=d["mtp_weights"]).speedup
         for k in (1, 3, 4, 5)}
    assert s[3] > s[1] and s[4] < 1.05 * s[3] and s[5] < s[4]


def test_no_default_acceptance_without_a_published_figure():
    d, spec, w, engine, hw = _trtllm_mtp()
    from kvcalc.presets import load_model

    target = load_model("llama3.1-8b")
    head = draft_for(target, "eagle3", 3, str(DATA / "speculative" / "eagle3-llama3.1-8b.json"))
    with pytest.raises(KvcalcError, match="give acceptance_rate"):
        speculative_time(target, workload_for(target, seq_len=4096), head,
                         hardware=load_hardware("h100-sxm"))
    mtp = speculative_time(spec, w, draft_for(spec, "mtp", 1), hardware=hw, engine=engine)
    assert mtp.acceptance_rate == 0.85 and "2412.19437" in mtp.acceptance_source
