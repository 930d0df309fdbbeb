"""vLLM's scheduler as kvcalc.served runs it, at a release (the rule itself is in
kvcalc.serving.vllm.rules)."""

from __future__ import annotations

from kvcalc.serving.record import Schedule
from kvcalc.serving.vllm.rules import default_engine, rules_for

# V1's cascade attention (v1/attention/backends/flash_attn.py use_cascade_attention,
# main of 2025-08, commit 0084b783): "common_prefix_len < 256: return False", "num_reqs
# < 8: return False"
CASCADE_MIN_PREFIX, CASCADE_MIN_REQUESTS = 256, 8
# the host path of releases before 0.6.0 (Rules.frontend_in_engine): its served terms'
# name in presets/served/terms.yaml
FRONTEND_IN_ENGINE = "api-server-in-engine"


def schedule(release: str, *, max_num_seqs: int = 256, enforce_eager: bool = False) -> Schedule:
    """V1's scheduler (vllm/v1/core/sched/scheduler.py, Scheduler.schedule): running
    requests first, then waiting ones while the step's token budget
    (max_num_batched_tokens) and max_num_seqs allow and KVCacheManager.allocate_slots
    finds blocks for the tokens scheduled now; a running request that finds none
    preempts the newest running one (_preempt_request: its blocks freed, back to the
    front of the waiting queue, computed again from its first token). The host's work
    overlaps the GPU's where async scheduling is on by default (Rules.async_scheduling);
    its CUDA graphs as Rules.cuda_graphs captures them.
    Cascade attention (V1, the default engine from 0.8): when every running request
    shares a prefix of 256 tokens or more, the scheduler counts the blocks every request
    holds (KVCacheManager.get_num_common_prefix_blocks: ref_cnt equal to the requests')
    and FlashAttention's cascade_attention attends to that prefix once for all the step's
    queries, then to each request's own suffix. use_cascade_attention takes it with 8
    requests or more whenever a step carries a prompt chunk, and for pure decode when its
    CTA estimate beats FlashDecoding's, once requests x KV heads outnumber the SMs (about
    17 requests for 8 KV heads on 132 SMs); kvcalc, with no SM count in its presets, takes
    it from 8 on, where the prefix's K/V is a small share of a step's reads."""
    rules = rules_for(release)
    batches, tokens = rules.cuda_graphs(max_num_seqs, enforce_eager)
    v1 = default_engine(release) == "v1"
    return Schedule(admission="greedy", mixed=True,
                    overlaps_host=rules.async_scheduling(pp=1),
                    graph_batches=batches, graph_tokens=tokens,
                    cascade_prefix=CASCADE_MIN_PREFIX if v1 else 0,
                    cascade_requests=CASCADE_MIN_REQUESTS if v1 else 0,
                    host_path=FRONTEND_IN_ENGINE if rules.frontend_in_engine() else "",
                    source="vllm/v1/core/sched/scheduler.py Scheduler.schedule; async "
                           "scheduling by default from v0.14.0 (#27614)")
