"""Speculative decoding under load (`kvcalc bench` with an engine's speculative flag): every
decode step of the served run becomes a speculative round.

Each running request drafts k tokens and the target verifies k + 1 positions of it in one
pass, emitting on average

    E = (1 - a^(k+1)) / (1 - a)          (kvcalc.serving.speculative.expected_tokens)

tokens a request a step for a per-token acceptance rate `a`. The step's time is the
served step's (kvcalc.served.step.StepTimes) on the verification pass
(kvcalc.serving.speculative_time.verify_step: the weights once, FLOPs, activations and
the step's token budget for batch x (k + 1) tokens, each request's K/V read once) plus the
draft's k forward passes at the batch (its own StepTimes: an EAGLE head or MTP layer as
kvcalc.serving.speculative_time.draft_step_spec builds it, or the draft model; its weights,
its own KV, its FLOPs; its first pass also covers the step's prompt tokens; ngram drafts on
the host). At small batches the step reads weights whatever the batch, so verifying
k + 1 positions costs little more than one and speculation pays about E; as the batch grows
the verification's FLOPs (batch x (k + 1) tokens) make the step compute-bound, its time
grows with (k + 1) x batch, and speculation stops paying. The KV pool is the engine's own
count with the draft (its layers' cache beside the target's).

Pure: no I/O.
"""

from __future__ import annotations

__all__ = ["SPECULATIVE_FLAGS", "gain", "speculate", "without_speculation"]


# SGLang runs EAGLE, EAGLE-3, MTP (NEXTN) and draft-model speculation without its overlap
# scheduler: server_args.py logs "Overlap scheduler is disabled because of using eagle3
# or standalone speculative decoding." (v0.5.6; its first EAGLE release disabled it for
# EAGLE likewise); the host's step then adds to the GPU's.
NO_OVERLAP = {"sglang"}


def speculate(spec, steps, draft, acceptance_rate=None, engine: str = "vllm") -> tuple[dict, str]:
    """Make `steps` (a StepTimes of `spec`) time speculative rounds with `draft`
    (kvcalc.serving.speculative.Draft) at `acceptance_rate` (None: the method's published
    one, else an error naming --acceptance-rate) under `engine` (its scheduler's overlap,
    NO_OVERLAP). Returns (the JSON's `speculative`
    fields, a note)."""
    from dataclasses import replace

    from kvcalc.served.step import StepTimes
    from kvcalc.serving.speculative import expected_tokens
    from kvcalc.serving.speculative_time import acceptance_of, draft_step_spec

    a, source = acceptance_of(draft, acceptance_rate)
    k = draft.num_speculative_tokens
    e = expected_tokens(a, k)
    drafting = draft_step_spec(draft, spec)
    draft_steps = None
    if drafting is not None:  # the draft's weights in the target's dtype, unquantized
        w = replace(steps.w, quantization=None, prompt_len=None)
        draft_steps = StepTimes(drafting, steps.hw, steps.e, w, None, steps.terms,
                                steps.schedule)
    steps.speculate(k, e, draft_steps)
    if engine in NO_OVERLAP:
        steps.overlaps = False
    info = {"method": draft.method, "num_speculative_tokens": k, "acceptance_rate": a,
            "acceptance_source": source, "expected_tokens_per_step": e,
            "verified_tokens_per_request": k + 1}
    note = (f"speculative decoding ({draft.method}, {k} draft tokens, acceptance "
            f"{a:g} {'given' if source == 'given' else 'from ' + source}): "
            f"{e:.2f} tokens a request a step; each step verifies {k + 1} positions a "
            f"request and runs {k if draft_steps is not None else 0} draft passes")
    return info, note


# Each engine's speculative flags, by parameter name (kvcalc.serving.flags.OWNER)
SPECULATIVE_FLAGS = ("speculative_config", "speculative_algorithm",
                     "speculative_draft_model_path", "speculative_num_steps",
                     "speculative_eagle_topk", "speculative_num_draft_tokens",
                     "extra_llm_api_options")


def without_speculation(engine_flags: dict) -> dict:
    """The same engine flags with speculation off: its run is the baseline a
    speculative one is set beside (the pool grows by the draft's share back)."""
    return {k: v for k, v in engine_flags.items() if k not in SPECULATIVE_FLAGS}


def gain(on, off) -> dict:
    """A speculative run (BenchResult) beside its baseline: the JSON's fields."""
    m, b = on.metrics, off.metrics
    return {"without_speculation": {k: b[k] for k in ("output_throughput", "mean_tpot_ms",
                                                      "mean_ttft_ms")},
            "speculation_gain": m["output_throughput"] / b["output_throughput"]
            if b["output_throughput"] else 0.0}
