"""Time to first token and per output token, against hand arithmetic on a tiny model."""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.speed.latency import latency, max_batch_for_slo
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.workload import Workload

# 1 layer, d 8, 2 heads of 4 (MHA), gated MLP of 16, vocab 10, untied.
TINY = ModelSpec.uniform(name="tiny", layers=1, d_model=8, heads=2, kv_heads=2, head_dim=4, d_ff=16,
                         vocab=10)
# 1,000 FLOP/s dense bf16 and 100 B/s: slow enough that the numbers read by hand.
SLOW = Hardware(name="slow", memory_bytes=10**9, memory_bandwidth_bytes_per_s=100,
                flops_per_s={"bf16": 1000})
PROMPT_3 = Workload(seq_len=3)  # one prompt of 3 tokens, decoded at 3


def _batch(b: int) -> Workload:
    return Workload(seq_len=3, batch=b)


def test_prefill_flops_and_ttft_by_hand():
    # Per prompt token: fused qkv 8 -> 24 (2*8*24 = 384), o 8 -> 8 (128), gate+up 8 -> 32
    # (512), down 16 -> 8 (256): 1,280. lm_head once: 2*8*10 = 160. Attention: 2 heads x
    # (4 + 4) x 2 = 32 per attended position, causal 1 + 2 + 3 = 6 positions.
    flops = 1280 * 3 + 160 + 32 * 6
    lat = latency(TINY, PROMPT_3, hardware=SLOW, mfu="0.5", bandwidth_efficiency="0.25")
    assert lat.prefill_flops == flops == 4192
    assert lat.prefill_compute_s == pytest.approx(flops / 500)
    assert lat.prefill_memory_s == pytest.approx(lat.prefill_bytes / 25)
    assert lat.ttft_s == max(lat.prefill_compute_s, lat.prefill_memory_s)


def test_decode_bytes_and_tpot_by_hand():
    # Weights read per step: everything but the untied input table's unused rows:
    # 384/2 + 64 + 256 + 128 (layer) + 2*8 (norms) + 8 (final norm) + 80 (lm_head)
    # + 8 (one embedding row) = 752 parameters x 2 B = 1,504 B. Cache at 3 tokens:
    # 2 x 2 heads x 4 x 3 x 2 B = 96 B read, 32 B written. Activations: each matmul's
    # input and output ((8+24) + (8+8) + (8+32) + (16+8) + (8+10) = 130) plus q and the
    # attention output (2 x 2 x 4 = 16): 146 elements x 2 B = 292 B.
    lat = latency(TINY, PROMPT_3, hardware=SLOW, mfu="1", bandwidth_efficiency="1")
    assert lat.decode_bytes == 1504 + 96 + 32 + 292
    assert lat.tpot_s == pytest.approx(max(lat.decode_bytes / 100, lat.decode_flops / 1000))
    assert lat.tokens_per_s == pytest.approx(1 / lat.tpot_s)


def test_efficiencies_are_checked_and_printed():
    lat = latency(TINY, PROMPT_3, hardware=SLOW)
    assert (lat.as_dict()["mfu"], lat.as_dict()["bandwidth_efficiency"]) == (0.5, 0.8)
    with pytest.raises(KvcalcError, match="MFU must be in"):
        latency(TINY, PROMPT_3, hardware=SLOW, mfu="1.5")


def test_largest_batch_meeting_both_targets():
    # Targets just above batch 4's TTFT and batch 6's TPOT: batch 4 is the answer.
    ttft = latency(TINY, _batch(4), hardware=SLOW).ttft_s * 1.000001
    tpot = latency(TINY, _batch(6), hardware=SLOW).tpot_s * 1.000001
    b = max_batch_for_slo(TINY, PROMPT_3, hardware=SLOW, ttft_s=ttft, tpot_s=tpot,
                          limit=10_000)
    assert b == 4
    ok = latency(TINY, _batch(b), hardware=SLOW)
    over = latency(TINY, _batch(b + 1), hardware=SLOW)
    assert ok.ttft_s <= ttft and ok.tpot_s <= tpot
    assert over.ttft_s > ttft or over.tpot_s > tpot
    assert max_batch_for_slo(TINY, PROMPT_3, hardware=SLOW, ttft_s=1e-9, tpot_s=None,
                             limit=10) == 0
    assert max_batch_for_slo(TINY, PROMPT_3, hardware=SLOW, ttft_s=None, tpot_s=None,
                             limit=7) == 7


@pytest.mark.parametrize("flag", ["--mfu", "--bandwidth-efficiency"])
@pytest.mark.parametrize("value", ["1e-320", "0.0009", "0", "-0.5", "1.01", "nan", "inf"])
def test_shares_outside_a_thousandth_to_one_are_one_line_errors(flag, value):
    """1e-320 once overflowed a float (a traceback); every value outside [0.001, 1] is
    refused in kvcalc's words, with exit code 2."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kvcalc", "estimate", "--preset", "gpt3", flag,
                        value], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("kvcalc: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "[0.001, 1]" in r.stderr and "Traceback" not in r.stderr


def test_a_thousandth_is_the_smallest_share():
    slow = latency(TINY, PROMPT_3, hardware=SLOW, mfu="0.001", bandwidth_efficiency="0.001")
    fast = latency(TINY, PROMPT_3, hardware=SLOW, mfu="1", bandwidth_efficiency="1")
    assert slow.tpot_s == pytest.approx(1000 * fast.tpot_s)
