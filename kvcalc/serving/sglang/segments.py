"""What SGLang's start-up tensors take from the GPU, as PyTorch's CUDA caching allocator
hands them out: the drop in the free memory SGLang logs (`get_available_gpu_memory` calls
torch.cuda.empty_cache() and then torch.cuda.mem_get_info, 0.4.6.post4-0.5.9) is the
segments the allocator cudaMalloc'd, not the tensors' bytes.

PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp, pytorch/pytorch at
001074d25084fdb87a799823e395a50f5ec044d3; the same constants and `get_allocation_size`,
`should_split` and best-fit `get_free_block` under the default allocator config, no
expandable segments, which SGLang 0.5.1.post3 and 0.5.9 do not set): a request is rounded up
to 512 B; up to 1 MiB it comes from the small pool, packed in 2 MiB segments; from 1 MiB to
10 MiB from 20 MiB segments shared with other such requests; from 10 MiB a segment of its
own rounded up to 2 MiB. A request takes the smallest free block it fits; a large block is
split only when more than 1 MiB would be left.
"""

from __future__ import annotations

from bisect import bisect_left, insort

__all__ = ["segments"]

MIN_BLOCK = 512  # kMinBlockSize: every request rounded up to it
SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" request
SMALL_BUFFER = 2 << 20  # kSmallBuffer: the small pool's segment
LARGE_BUFFER = 20 << 20  # kLargeBuffer: the segment of a 1-10 MiB request
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: from here a request gets its own segment
ROUND_LARGE = 2 << 20  # kRoundLarge: ... rounded up to 2 MiB


def segments(sizes) -> int:
    """Bytes of the segments the allocator cudaMallocs for tensors of `sizes` bytes
    allocated in that order and all kept, starting with no free block."""
    free: dict[bool, list[int]] = {True: [], False: []}  # small pool?, sorted free sizes
    reserved = 0
    for size in sizes:
        size = max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)
        small = size <= SMALL_SIZE
        pool = free[small]
        fit = bisect_left(pool, size)  # the smallest free block it fits (best fit)
        if fit < len(pool):
            block = pool.pop(fit)
        else:
            block = (SMALL_BUFFER if small else LARGE_BUFFER if size < MIN_LARGE_ALLOC
                     else -(-size // ROUND_LARGE) * ROUND_LARGE)
            reserved += block
        left = block - size
        if left >= MIN_BLOCK if small else left > SMALL_SIZE:
            insort(pool, left)
    return reserved
