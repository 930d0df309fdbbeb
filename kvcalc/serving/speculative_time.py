"""Speculative decoding's time per output token at batch 1, on kvcalc's latency model
(kvcalc.speed.latency: the roofline at stated efficiencies, a device's calibration, or an
engine's fitted terms) and its decode step (kvcalc.formulas.step).

A round drafts `k` tokens, one draft forward pass each, then the target verifies them in
one pass over k + 1 positions of the same sequence; it yields E tokens,

    E = (1 - a^(k+1)) / (1 - a)          (k + 1 when a = 1)

for a per-token acceptance rate `a` (Leviathan, Kalman and Matias 2023, "Fast Inference
from Transformers via Speculative Decoding", eq. 1; `expected_tokens`), so

    TPOT = (verify(k + 1) + k x draft_step) / E.

verify(k + 1): the decode step of k + 1 tokens (kvcalc.formulas.step.decode_step at a
batch of k + 1: their matmuls, attention over the context for each, a MoE layer's
experts the k + 1 tokens route to), reading the sequence's cache once, not k + 1 times
(the k + 1 positions are one request's). draft_step: the draft's decode step at the same
context: an MTP layer with the target's lm_head (and the embedding row it reads), an
EAGLE head with its own lm_head of draft_vocab_size rows and its fc, a draft model
whole. ngram drafts on the host: no GPU step.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["SpeculativeTime", "acceptance_for_length", "acceptance_of", "draft_step_spec",
           "speculative_time", "verify_step"]

# Per-token acceptance rates kvcalc assumes when none is given, each with its source.
PUBLISHED_ACCEPTANCE = {
    # DeepSeek-V3 Technical Report (arXiv 2412.19437), section 5.4.3: "the acceptance
    # rate of the second token prediction ranges between 85% and 90%" (one MTP module);
    # the lower end.
    "mtp": ("0.85", "DeepSeek-V3 report, arXiv 2412.19437, 5.4.3"),
}


def acceptance_for_length(length: float, k: int) -> float:
    """The per-token acceptance rate whose expected tokens per round at `k` drafted is
    `length` (a published "acceptance length"), by bisection: E rises with a."""
    from kvcalc.serving.speculative import expected_tokens

    if not 1 <= length <= k + 1:
        raise KvcalcError(f"an acceptance length of {length} is not possible with {k} "
                          f"drafted tokens (1 to {k + 1})")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@record
class SpeculativeTime:
    """One round of speculative decoding at batch 1 and what it makes of TPOT (s)."""

    method: str
    num_speculative_tokens: int
    acceptance_rate: float
    acceptance_source: str  # "given", or where the default comes from
    expected_tokens: float  # tokens a round yields
    verify_s: float  # the target's pass over k + 1 positions
    draft_step_s: float  # one draft forward pass (0 for ngram)
    baseline_tpot_s: float  # the target alone, one token a step
    host_s: float = 0.0  # the engine's host time a step (0 on the roofline), once a round

    @property
    def round_s(self) -> float:
        """The GPU's verification and k draft passes, or the host's step when longer."""
        return max(self.verify_s + self.num_speculative_tokens * self.draft_step_s,
                   self.host_s)

    @property
    def tpot_s(self) -> float:
        return self.round_s / self.expected_tokens

    @property
    def speedup(self) -> float:
        return self.baseline_tpot_s / self.tpot_s

    def as_dict(self) -> dict:
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "acceptance_rate": self.acceptance_rate,
                "acceptance_source": self.acceptance_source,
                "expected_tokens_per_step": self.expected_tokens,
                "verify_s": self.verify_s, "draft_step_s": self.draft_step_s,
                "host_s": self.host_s, "round_s": self.round_s, "tpot_s": self.tpot_s,
                "baseline_tpot_s": self.baseline_tpot_s, "speedup": self.speedup}


def draft_step_spec(draft, target):
    """The model one draft forward pass runs, for the decode step to time: an MTP layer
    with the target's embedding and lm_head (one layer a step: a vanilla MTP's k layers
    take turns); an EAGLE head with its own lm_head rows as its vocabulary and its fc
    (and wider q/k/v) as extra parameters; a draft model as it is."""
    from kvcalc.layers import Run

    if draft.spec is None:
        return None
    if draft.method == "draft_model":
        return draft.spec
    if draft.method == "mtp":
        layer = draft.spec.runs[0].layer
        return target.replace(name=draft.spec.name, layers=1, runs=(Run(layer, 1),),
                              extra_params=draft.extra_replicated // draft.layers)
    rows = draft.own_lm_head_rows or target.vocab
    return draft.spec.replace(vocab=rows, tied_embeddings=False,
                              extra_params=draft.extra_split + draft.extra_replicated)


def acceptance_of(draft, acceptance_rate=None) -> tuple[float, str]:
    """(per-token acceptance rate, where it comes from): the one given, else the
    method's published figure (PUBLISHED_ACCEPTANCE), else an error naming the flag."""
    if acceptance_rate is not None:
        a = float(acceptance_rate)
        if not 0 <= a <= 1:
            raise ParameterError(f"{{acceptance_rate}} must be in [0, 1], got "
                                 + literal(acceptance_rate), "acceptance_rate")
        return a, "given"
    if draft.method not in PUBLISHED_ACCEPTANCE:
        raise ParameterError("give {acceptance_rate}: kvcalc has no published acceptance "
                             "rate for " + literal(draft.method) + " drafts", "acceptance_rate")
    text, source = PUBLISHED_ACCEPTANCE[draft.method]
    return float(text), source


def verify_step(spec, w, k: int, batch: int, context: int, *, stored=None,
                prefill: bool = True, plain=None):
    """The target's verification pass (kvcalc.formulas.step.DecodeCost): `batch`
    requests of k + 1 positions each at `context` tokens (workload `w`'s dtypes and
    tp). Weights once, FLOPs and activations for batch x (k + 1) tokens, each request's
    cache read once, not k + 1 times (its k + 1 positions attend in one kernel).
    `plain`: the decode step of batch x (k + 1) tokens at `context`, when the caller
    has it (a served run keeps them)."""
    from kvcalc.formulas.step import decode_step
    from kvcalc.speed.roofline import compute_dtype_for

    step = plain or decode_step(spec, context, batch * (k + 1), w.weight_dtype, w.kv_dtype,
                                compute_dtype_for(w.weight_dtype), w.tp, w.kv_scale_bytes,
                                w.encoder_seq_len, prefill=prefill, stored=stored)
    if not k:
        return step
    unread = k * batch * _kv_once(spec, context, w.kv_dtype, w.tp, w.kv_scale_bytes,
                                  w.encoder_seq_len)
    by = dict(step.per_device_breakdown)
    by["kv"] -= unread
    return replace(step, per_device_bytes=step.per_device_bytes - unread,
                   per_device_breakdown=by)


@functools.lru_cache(maxsize=4096)
def _kv_once(spec, context: int, kv_dtype, tp: int, scale_bytes: int, encoder_seq_len) -> int:
    """One sequence's cache at `context` tokens on one device: what each further
    position of the same request does not read again."""
    from kvcalc.formulas.cache import kv_cache

    return kv_cache(spec, context, 1, kv_dtype, tp, scale_bytes,
                    encoder_seq_len).bytes_per_device


def speculative_time(spec, workload, draft, *, hardware, acceptance_rate=None,
                     mfu=None, bandwidth_efficiency=None, stored=None, engine=None,
                     draft_weight_dtype=None) -> SpeculativeTime:
    """TPOT at batch 1 with `draft` (kvcalc.serving.speculative.Draft) against the target
    alone, at `workload`'s context (its seq_len) and dtypes; `acceptance_rate` None: the
    method's published figure (PUBLISHED_ACCEPTANCE), else an error naming the flag."""
    from kvcalc.speed.latency import DEFAULT_BANDWIDTH_EFFICIENCY, DEFAULT_MFU, latency
    from kvcalc.serving.speculative import expected_tokens

    if workload.batch != 1:
        raise KvcalcError("speculative decoding's time is counted at batch 1")
    a, source = acceptance_of(draft, acceptance_rate)
    k = draft.num_speculative_tokens
    e = expected_tokens(a, k)
    shares = dict(hardware=hardware, mfu=mfu or DEFAULT_MFU,
                  bandwidth_efficiency=bandwidth_efficiency or DEFAULT_BANDWIDTH_EFFICIENCY,
                  engine=engine)
    base = latency(spec, workload, stored=stored, **shares).tpot_s

    # The verification pass: k + 1 positions of one sequence, its cache read once.
    w = workload
    wide = replace(w, batch=k + 1, prompt_len=None)
    step = verify_step(spec, w, k, 1, w.seq_len, stored=stored)
    verify = latency(spec, wide, stored=stored, step=step, **shares)

    drafting = draft_step_spec(draft, spec)
    draft_s = 0.0
    if drafting is not None:
        dw = replace(w, weight_dtype=draft_weight_dtype or w.weight_dtype, quantization=None,
                     prompt_len=None)
        draft_s = _gpu_s(latency(drafting, dw, **shares))
    return SpeculativeTime(method=draft.method, num_speculative_tokens=k, acceptance_rate=a,
                           acceptance_source=source, expected_tokens=e,
                           verify_s=_gpu_s(verify), draft_step_s=draft_s,
                           baseline_tpot_s=base, host_s=verify.decode_overhead_s)


def _gpu_s(lat) -> float:
    """A decode step's GPU time (the larger of its memory and compute phases, with the
    engine's serial per-layer costs), without the host's per-step time: the draft passes
    and the verification run back to back on the GPU within one scheduler step, whose
    host time is paid once a round (`SpeculativeTime.round_s`)."""
    return max(lat.decode_compute_s, lat.decode_memory_s)
