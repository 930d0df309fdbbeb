"""The draft each engine's flags name (kvcalc.serving.speculative.Draft), asked of that
engine's wing: the one place that knows every wing's spelling of speculative decoding."""

from __future__ import annotations

__all__ = ["draft_of"]


def draft_of(spec, flags):
    """The draft an engine's flags name (None: no speculative decoding): vLLM's
    --speculative-config (its EngineSettings), SGLang's --speculative-algorithm (k: its
    --speculative-num-steps), TensorRT-LLM's speculative_config."""
    name = flags.engine.name if hasattr(flags, "engine") and not isinstance(
        flags.engine, str) else "vllm"
    if name == "vllm":
        from kvcalc.serving.vllm.capacity import speculative_draft

        return speculative_draft(spec, getattr(flags, "settings", flags))
    if name == "sglang":
        from kvcalc.serving.sglang import speculative_draft as sglang_speculative
        from kvcalc.serving.sglang.rules import rules_for

        return sglang_speculative(spec, flags, rules_for(flags.engine.release))[0]
    config = getattr(flags, "speculative_config", None)
    if config is None:
        return None
    from kvcalc.serving.speculative import trtllm_draft

    return trtllm_draft(spec, config)
