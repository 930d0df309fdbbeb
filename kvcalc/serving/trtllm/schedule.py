"""TensorRT-LLM's scheduler as kvcalc.served runs it, by release."""

from __future__ import annotations

from kvcalc.serving.record import Schedule
from kvcalc.serving.trtllm.rules import parse_release

# 0.18.2's PyTorch quickstart takes --enable_overlap_scheduler (off unless given); 1.0's
# LlmArgs has disable_overlap_scheduler=False (on unless turned off). 0.19 is the first
# release after the switch that kvcalc dates it to (the two docs read, not the releases
# between them).
OVERLAP_DEFAULT = (0, 19, 0)


def schedule(release: str) -> Schedule:
    """The capacity scheduler's default policy, GUARANTEED_NO_EVICT
    (tensorrt_llm/_torch/pyexecutor/scheduler.py and the C++ batch manager's
    capacityScheduler): a request is scheduled only when the blocks for its whole
    prompt and max_tokens are free, so nothing is evicted; context and generation
    requests run in the same in-flight batch, up to max_num_tokens."""
    return Schedule(admission="reserve", mixed=True,
                    overlaps_host=parse_release(release) >= OVERLAP_DEFAULT,
                    source="CapacitySchedulerPolicy.GUARANTEED_NO_EVICT (default); overlap "
                           "scheduler default from 0.19")
