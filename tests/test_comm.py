"""kvcalc.comm: all-reduce counts, bytes and ring time, against hand arithmetic."""

import pytest

from kvcalc.comm import (allreduce_message_bytes, allreduces_per_step, decode_allreduce,
                         ring_allreduce_s)
from kvcalc.errors import KvcalcError
from kvcalc.presets import load_model


def test_ring_time_by_hand():
    # 8 MB over 4 devices at 100 GB/s: 2 x 3/4 x 8e6 / 1e11 = 120 us, plus 10 us latency.
    assert ring_allreduce_s(8_000_000, 4, 1e11, 10e-6) == pytest.approx(130e-6)
    # Two devices: each sends half the message twice, i.e. the whole message once.
    assert ring_allreduce_s(1_000, 2, 1_000) == pytest.approx(1.0)
    assert ring_allreduce_s(10**9, 1, 1.0) == 0.0
    with pytest.raises(KvcalcError):
        ring_allreduce_s(1, 2, 0)


def test_llama_decode_allreduce_by_hand():
    spec = load_model("llama3-8b")  # 32 layers of attention + MLP, d_model 4,096
    assert allreduces_per_step(spec) == 64
    assert allreduce_message_bytes(spec, 8, "bf16") == 8 * 4_096 * 2 == 65_536
    c = decode_allreduce(spec, batch=8, tp=4, act_dtype="bf16", link_bytes_per_s=450 * 10**9)
    # 64 x 2 x 3/4 x 65,536 B on each device's link; 64 x that / 450 GB/s.
    assert c.bytes_on_link == 64 * 98_304 == 6_291_456
    assert c.time_s == pytest.approx(6_291_456 / 450e9)
    assert decode_allreduce(spec, 8, 1, "bf16", 1).time_s == 0.0
