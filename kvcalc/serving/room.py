"""What an engine leaves for requests of one length, and the one rule every command
applies to it: whether a batch of them runs at once.

An engine's count (vLLM's kvcalc.serving.vllm.capacity, or any wing's ServingCount)
becomes a `Room`: whether it starts, its blocks, the blocks one request takes and the
most requests it runs. `serves` is the one rule: estimate, fit, plan and the sweep's
rows all apply it to a Room (one length's count), the sweep to whole arrays of batch
sizes; `largest_batch` is the most it admits.
"""

from __future__ import annotations

from kvcalc.ground.record import record

__all__ = ["Room", "largest_batch", "serves"]


@record
class Room:
    """What the engine leaves for requests of one length (per device, the rank that sizes
    every rank): whether it starts, its blocks, the blocks one request takes."""

    max_model_len: int
    starts: bool
    num_blocks: int
    blocks_per_request: int  # summed over the KV cache groups
    max_num_seqs: int
    request_bytes: int  # one request's KV bytes
    block_bytes: int  # one block of every layer of a group
    kv_cache_bytes: int  # available KV cache memory (negative: none)
    refusal: str  # the engine's reason for not starting, "" when it starts
    # max_num_seqs is over a state model's pool of blocks: the engine does not start
    # (vLLM from 0.19: kvcalc.serving.vllm.verdict), though its memory would; lowering
    # max_num_seqs mends it.
    seqs_over_pool: bool = False


def serves(room: Room, batch):
    """Whether `batch` requests of the room's length run at once: the engine starts, its
    blocks hold them all, and max_num_seqs admits them. `batch` is an int or a numpy
    array (the sweep's rows: rooms() folds seqs_over_pool into `starts`): the one rule
    every command applies."""
    return (room.starts & (not room.seqs_over_pool)
            & (batch * room.blocks_per_request <= room.num_blocks)
            & (batch <= room.max_num_seqs))


def largest_batch(room: Room, *, lower_max_num_seqs: bool = False) -> int:
    """The most requests `serves` admits at once (0: none), in Python ints.
    `lower_max_num_seqs`: with --max-num-seqs lowered to that batch, as plan writes its
    line (a state model then starts: each request holds at least one pool block, so
    a batch the blocks hold is never over the pool). serves(room, n) holds for every n
    up to it and not beyond (tests/test_verdict.py checks)."""
    if not room.starts or (room.seqs_over_pool and not lower_max_num_seqs):
        return 0
    if not room.blocks_per_request:  # nothing paged per request: max_num_seqs alone
        return room.max_num_seqs
    return min(room.num_blocks // room.blocks_per_request, room.max_num_seqs)
