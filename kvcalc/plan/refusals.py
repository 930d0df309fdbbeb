"""Why plan gives no layout: none starts under the engine's count (the closest one and
what it lacks), or none meets the time targets even with one request (the closest)."""

from __future__ import annotations

from kvcalc.errors import ParameterError, literal
from kvcalc.serving.vllm.settings import GiB


class NothingFits(ParameterError):
    """No layout starts (or none meets the latency targets): the reason and the closest.
    A template as ParameterError's: {ttft_ms} names the parameter, other text literal()."""


def nothing_starts(spec, hw, gpus, length, auto, refused) -> str:
    what = "at any length" if auto else f"at max_model_len {length:,}"
    counted = [r for r in refused if r[4] is not None]
    if not counted:
        reasons = sorted({r[5] for r in refused})
        return (f"no layout of up to {gpus} x {hw.name} starts {spec.name}: "
                f"{reasons[0] if reasons else 'no tensor-parallel size divides its heads'}")
    tp, pp, kv, util, cap, _ = max(counted, key=lambda r: (
        r[4].max_model_len_fit, r[4].deciding.kv_cache, -r[0] * r[1]))
    d = cap.deciding
    where = (f"tp={tp} pp={pp}, KV {'fp8' if kv == 'fp8' else 'auto'}, "
             f"utilization {util}")
    if d.kv_cache <= 0:
        why = (f"weights {d.weights / GiB:.2f} GiB + activation peak "
               f"{d.activation_peak / GiB:.2f} GiB + non-torch {d.non_torch / GiB:.2f} GiB + "
               f"CUDA graphs {d.cuda_graphs / GiB:.2f} GiB per device are "
               f"{-d.kv_cache / GiB:.2f} GiB over its {d.budget / GiB:.2f} GiB budget, "
               f"before any KV cache")
    else:
        why = (f"the {d.kv_cache / GiB:.2f} GiB left per device for the KV cache holds "
               f"{cap.max_model_len_fit:,} tokens per request at most")
    return (f"no layout of up to {gpus} x {hw.name} starts {spec.name} {what}; closest: "
            f"{where}: {why}")


def nothing_meets(search, counted: list) -> str:
    def one(cap):
        s = cap.settings
        return search.times(s, 1, cap.max_num_batched_tokens)[:2]

    cap = min(counted, key=lambda c: one(c)[1])
    (ttft, tpot), s = one(cap), cap.settings
    targets = " and ".join(f for f, v in (("{ttft_ms}", search.ttft_s),
                                          ("{tpot_ms}", search.tpot_s)) if v is not None)
    return (f"no layout meets {targets} even with one request ({len(counted)} settings "
            f"start); closest: " + literal(f"tp={s.tp} pp={s.pp}, KV {s.kv_dtype}")
            + f": time to first token {ttft * 1000:,.3g} ms, per output token "
            f"{tpot * 1000:,.3g} ms")
