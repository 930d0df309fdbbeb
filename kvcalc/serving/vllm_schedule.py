"""vLLM's scheduler as kvcalc.served runs it, by release (the vLLM wing's rules for speed
as served; its memory rules are kvcalc.capacity's)."""

from __future__ import annotations

from kvcalc.serving.record import Schedule

# v0.14.0's release notes, "Breaking Changes": "Async scheduling is now enabled by
# default" (vllm-project/vllm#27614: the engine core schedules step n+1 while step n
# runs); before it, --async-scheduling was opt-in (#19970, v0.10.x) and the core
# scheduled, ran and read each step's output in turn.
ASYNC_SCHEDULING_DEFAULT = (14, 0)  # (minor, patch) of 0.x, as parse_version reads it


def _parts(release: str) -> tuple[int, int]:
    from kvcalc.capacity.engine import parse_version

    return parse_version(release)


def schedule(release: str) -> Schedule:
    """V1's scheduler (vllm/v1/core/sched/scheduler.py, Scheduler.schedule): running
    requests first, then waiting ones while the step's token budget
    (max_num_batched_tokens) and max_num_seqs allow and KVCacheManager.allocate_slots
    finds blocks for the tokens scheduled now; a running request that finds none
    preempts the newest running one (_preempt_request: its blocks freed, back to the
    front of the waiting queue, computed again from its first token)."""
    return Schedule(admission="greedy", mixed=True,
                    overlaps_host=_parts(release) >= ASYNC_SCHEDULING_DEFAULT,
                    source="vllm/v1/core/sched/scheduler.py Scheduler.schedule; async "
                           "scheduling by default from v0.14.0 (#27614)")
