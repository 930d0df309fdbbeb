"""vLLM's scheduler as kvcalc.served runs it, at a release (the rule itself is in
kvcalc.serving.vllm.rules)."""

from __future__ import annotations

from kvcalc.serving.record import Schedule
from kvcalc.serving.vllm.rules import rules_for


def schedule(release: str, *, max_num_seqs: int = 256, enforce_eager: bool = False) -> Schedule:
    """V1's scheduler (vllm/v1/core/sched/scheduler.py, Scheduler.schedule): running
    requests first, then waiting ones while the step's token budget
    (max_num_batched_tokens) and max_num_seqs allow and KVCacheManager.allocate_slots
    finds blocks for the tokens scheduled now; a running request that finds none
    preempts the newest running one (_preempt_request: its blocks freed, back to the
    front of the waiting queue, computed again from its first token). The host's work
    overlaps the GPU's where async scheduling is on by default (Rules.async_scheduling);
    its CUDA graphs as Rules.cuda_graphs captures them."""
    rules = rules_for(release)
    batches, tokens = rules.cuda_graphs(max_num_seqs, enforce_eager)
    return Schedule(admission="greedy", mixed=True,
                    overlaps_host=rules.async_scheduling(pp=1),
                    graph_batches=batches, graph_tokens=tokens,
                    source="vllm/v1/core/sched/scheduler.py Scheduler.schedule; async "
                           "scheduling by default from v0.14.0 (#27614)")
