"""kvcalc.workload: the Workload and Memory records the estimate, fit, latency and sweep
take by keyword."""

from __future__ import annotations

import dataclasses

import pytest

from kvcalc.ground.dtypes import DTYPES
from kvcalc.errors import KvcalcError
from kvcalc.spec import Hardware
from kvcalc.workload import Memory, Workload

# 80 GiB, as the H100 preset holds it.
GPU = Hardware(name="gpu", memory_bytes=80 * 2**30, memory_bandwidth_bytes_per_s=10**12,
               flops_per_s={"bf16": 10**15})


def test_dtype_names_are_read_once_when_made():
    w = Workload(seq_len=8192, kv_dtype="FP8", weight_dtype="awq")
    assert (w.kv_dtype, w.weight_dtype) == (DTYPES["fp8"], DTYPES["int4"])  # awq: int4 values
    assert Workload(seq_len=1).kv_dtype is DTYPES["bf16"]
    with pytest.raises(KvcalcError, match="unknown dtype 'fp12'; choose one of"):
        Workload(seq_len=1, kv_dtype="fp12")
    with pytest.raises(KvcalcError, match="unknown dtype 'fp12' for weights"):
        Workload(seq_len=1, weight_dtype="fp12")


def test_frozen_and_replaced_field_by_field():
    w = Workload(seq_len=4096, batch=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.batch = 9
    assert dataclasses.replace(w, batch=9).batch == 9 and w.batch == 8


def test_the_prompt_follows_the_context_unless_given():
    assert Workload(seq_len=4096).prompt_tokens == 4096
    assert Workload(seq_len=4096, prompt_len=512).prompt_tokens == 512


def test_usable_memory_by_hand():
    # 80 GiB x 0.9 = 77,309,411,328 B (exact: the fraction is read as the decimal 9/10).
    assert Memory(hardware=GPU, fraction="0.9").usable_bytes == 77_309_411_328
    assert Memory(hardware=GPU, fraction=0.9, reserve_bytes=2 * 2**30).usable_bytes == (
        77_309_411_328 - 2_147_483_648)
    assert Memory(hardware=GPU).usable_bytes == 85_899_345_920


@pytest.mark.parametrize("kwargs, message", [
    ({"fraction": 0}, r"memory fraction must be in \(0, 1\], got 0"),
    ({"fraction": "nan"}, r"memory fraction must be in \(0, 1\], got nan"),
    ({"reserve_bytes": -1}, "reserve bytes must be >= 0"),
    ({"reserve_bytes": 10**12}, r"reserve of 1,000,000,000,000 B exceeds the memory of gpu "
                                r"\(85,899,345,920 B\)"),
    ({"fraction": "0.5", "reserve_bytes": 10**12},
     r"exceeds the usable memory of gpu \(85,899,345,920 B x memory fraction 0.5 = "
     r"42,949,672,960 B\)"),
])
def test_memory_is_checked_on_first_use(kwargs, message):
    memory = Memory(hardware=GPU, **kwargs)  # made freely; the fit's first use checks it
    with pytest.raises(KvcalcError, match=message):
        memory.usable_bytes


@pytest.mark.parametrize("tp, message", [(0, "tp must be positive, got 0"),
                                         (-2, "tp must be positive, got -2"),
                                         (2.5, "tp must be an integer, got 2.5")])
def test_python_fit_refuses_a_bad_tp_in_kvcalcs_words(tp, message):
    """kvcalc.floor(..., tp=0) divided by zero (ZeroDivisionError) before any check."""
    import kvcalc

    with pytest.raises(KvcalcError) as e:
        kvcalc.floor("llama3-8b", "h100-sxm", 8192, tp=tp)
    assert str(e.value) == message
    with pytest.raises(KvcalcError) as e:
        kvcalc.estimate(model="llama3-8b", seq_len=8192, gpu="h100-sxm", tp=tp)
    assert str(e.value) == message
    with pytest.raises(KvcalcError) as e:
        kvcalc.figures("llama3-8b", 8192, hardware="h100-sxm", tp=tp)
    assert str(e.value) == message
