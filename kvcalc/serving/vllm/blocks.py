"""Pages, KV cache groups and blocks: how vLLM cuts the cache memory it has into blocks,
and what one request needs of them.

Facts (quoted, not copied code; see the package docstring for the versions read):

* page = block_size x per-token bytes of one layer (`AttentionSpec.page_size_bytes`);
  MLA keeps one latent per token; KV heads per rank max(1, kv_heads // tp).
* grouping (`get_kv_cache_groups`): one group when every layer caches alike;
  from 0.11, also one group when every layer is of one type but their pages differ
  (`UniformTypeKVCacheSpecs`, vllm-project/vllm#25101: GLM-5 and HY V4, whose layers
  with an indexer cache its key besides the latent): a block holds every layer's page
  and a request needs as many blocks as one layer would; otherwise layers are bucketed
  by kind, group size = the smallest bucket (the largest if largest < 1.5 x
  smallest), each bucket cut into groups of that size, padded. Blocks: num_blocks =
  available // max over groups of the group's summed pages; every worker is cut to the
  minimum over workers.
* per-request need (`max_memory_usage_bytes`): full/MLA: cdiv(len, block) pages;
  sliding: cdiv(min(window - 1 + in_flight, len), block) + 1; chunked local:
  cdiv(min(chunk + in_flight, len), block); state (mamba): what the release's
  mamba_cache_mode charges (kvcalc.serving.vllm.state; one page without prefix caching);
  in_flight = max_num_batched_tokens x (2 with async scheduling, 0.27+,
  PP = 1; else 1).
* pages of unequal size (`unify_kv_cache_spec_page_size`, V1): an attention layer whose
  page divides the largest page gets a block size that many times larger, so every page
  is the largest (Gemma 4's 256-wide sliding heads beside its 512-wide full heads: the
  sliding layers' blocks hold twice the tokens); one that does not divide it is padded
  to it. State pages are padded to the attention page already (pad_state_pages).
* the largest length that fits (`estimate_max_model_len`): a binary search over one
  request's bytes.
"""

from __future__ import annotations

import dataclasses

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_SEQ_LEN
from kvcalc.serving.vllm.state import NO_PREFIX_CACHING, StateCache
from kvcalc.serving.vllm.support import spec
from kvcalc.formulas.cache import CacheGroup

__all__ = ["GroupPlan", "blocks_per_request",
           "kv_cache_groups", "largest_fitting_len", "pad_state_pages", "page_size_bytes",
           "request_bytes"]


def page_size_bytes(group: CacheGroup, block_size: int) -> int:
    """Bytes of one block of one layer: block_size tokens, or the whole state (a mamba
    page); a group holds one or the other."""
    return block_size * group.token_bytes + group.state_bytes


class _BlocksPerRequest:
    """vLLM's max_memory_usage_bytes of each KV cache spec, in blocks of one layer, for
    one request at `length` tokens (an int, or an array of lengths: the sweep's). A layer kind names the spec it is
    (`mixer.kv_cache_spec(rules)`), these are the engine's rules for each."""

    def __init__(self, block_size: int, length: int, in_flight: int, encoder_len: int | None,
                 state: StateCache):
        self.block, self.length = block_size, length
        self.in_flight, self.encoder_len = in_flight, encoder_len
        self.state_cache = state

    def full(self) -> int:  # FullAttentionSpec, MLAAttentionSpec
        return _num.cdiv(self.length, self.block)

    def sliding(self, window: int) -> int:  # SlidingWindowSpec: and one block more
        return _num.cdiv(_num.minimum(window - 1 + self.in_flight, self.length), self.block) + 1

    def chunked(self, chunk: int) -> int:  # ChunkedLocalAttentionSpec
        return _num.cdiv(_num.minimum(chunk + self.in_flight, self.length), self.block)

    def state(self, mixer) -> int:  # MambaSpec: by the release's mamba_cache_mode
        return self.state_cache.blocks_per_request(mixer, self.block, self.length)

    def cross(self) -> int:  # CrossAttentionSpec: the encoder's tokens
        return _num.cdiv(self.encoder_len or self.length, self.block)

    def unpaged(self, mixer) -> int:
        """A kind no vLLM release pages: a state (RWKV, RG-LRU) counted as one page, as a
        MambaSpec would be, attention (JetMoE's) as full attention's pages, so the memory
        arithmetic runs; serving_capacity withholds its counts."""
        return self.full() if mixer.attends else 1


def blocks_per_request(group: CacheGroup, block_size: int, max_model_len: int,
                       in_flight: int, encoder_len: int | None = None,
                       state: StateCache = NO_PREFIX_CACHING) -> int:
    """Blocks one layer of `group` needs for one request at max_model_len (vLLM's
    max_memory_usage_bytes over the page size)."""
    rules = _BlocksPerRequest(block_size, max_model_len, in_flight, encoder_len, state)
    return spec(group.mixer, rules)


@record
class GroupPlan:
    """One of vLLM's KV cache groups: `layers` layers (of `slots`, padding counted) of one kind."""

    group: CacheGroup  # the layers' kind and bytes (its layer count: all of them)
    layers: int  # real layers
    slots: int  # group size (real layers + padding)
    page_bytes: int  # one layer's page
    blocks_per_request: int  # blocks of this group one max_model_len request needs
    block_size: int = 0  # its tokens per block (the engine's, or more for a smaller page)


def _unified_block(group: CacheGroup, block_size: int, largest_page: int) -> tuple[int, int]:
    """(tokens per block, page bytes) of one group once every page is the largest
    (unify_kv_cache_spec_page_size): a smaller attention page that divides it takes a
    block that many times larger; any other is padded."""
    page = page_size_bytes(group, block_size)
    if page == largest_page or not group.token_bytes or group.state_bytes:
        return block_size, page
    if largest_page % page == 0:
        return block_size * (largest_page // page), largest_page
    return block_size, largest_page


class _SpecType:
    """The KV cache spec type a layer kind is, as `kv_cache_spec` names it: layers of
    one type need the same blocks for a request whatever their pages."""

    def full(self):
        return ("full",)

    def sliding(self, window: int):
        return ("sliding", window)

    def chunked(self, chunk: int):
        return ("chunked", chunk)

    def state(self, mixer):
        return None  # pages set by the state's shape: never merged here

    def cross(self):
        return None

    def unpaged(self, mixer):
        return None


def _one_type(live: list[CacheGroup], block_size: int, max_model_len: int, in_flight: int,
              encoder_len: int | None) -> GroupPlan | None:
    """UniformTypeKVCacheSpecs: layers of one attention type with pages of several sizes
    as one group, one page per block holding every layer's (layers 1: the group is
    the whole stack), or None when the layers are of several types."""
    types = {spec(g.mixer, _SpecType()) for g in live}
    if len(types) != 1 or None in types or any(g.state_bytes for g in live):
        return None
    first = live[0]
    merged = CacheGroup(first.mixer, 1, sum(g.layers * g.token_bytes for g in live))
    return GroupPlan(merged, 1, 1, page_size_bytes(merged, block_size), blocks_per_request(
        first, block_size, max_model_len, in_flight, encoder_len), block_size)


def kv_cache_groups(groups: tuple[CacheGroup, ...], block_size: int, max_model_len: int,
                    in_flight: int, encoder_len: int | None = None,
                    state: StateCache = NO_PREFIX_CACHING,
                    unify_pages: bool = False, uniform_type: bool = False
                    ) -> tuple[GroupPlan, ...]:
    """vLLM's grouping (get_kv_cache_groups): one group when every layer caches alike,
    or (`uniform_type`, 0.11+) when every layer is of one attention type; else buckets
    by kind cut into groups of the smallest bucket's size (the largest's when largest <
    1.5 x smallest), the last group of a bucket padded. `unify_pages` (V1's per-group
    blocks): every page made the largest first."""
    live = [g for g in groups if g.layers > 0]
    if not live:
        return ()
    if uniform_type and len(live) > 1:
        one = _one_type(live, block_size, max_model_len, in_flight, encoder_len)
        if one is not None:
            return (one,)
    largest = max(page_size_bytes(g, block_size) for g in live)

    def plan(g: CacheGroup, real: int, slots: int) -> GroupPlan:
        block, page = ((block_size, page_size_bytes(g, block_size)) if not unify_pages
                       else _unified_block(g, block_size, largest))
        return GroupPlan(g, real, slots, page, blocks_per_request(
            g, block, max_model_len, in_flight, encoder_len, state), block)

    if len(live) == 1:
        g = live[0]
        return (plan(g, g.layers, g.layers),)
    counts = [g.layers for g in live]
    lo, hi = min(counts), max(counts)
    size = hi if hi < 1.5 * lo else lo
    plans = []
    for g in live:
        n_groups = -(-g.layers // size)
        left = g.layers
        for _ in range(n_groups):
            real = min(size, left)
            left -= real
            plans.append(plan(g, real, size))
    return tuple(plans)


def pad_state_pages(groups: tuple[CacheGroup, ...], block_size: int) -> tuple[CacheGroup, ...]:
    """State (mamba) pages padded to the attention page, so one block size fits both."""
    token = [g.token_bytes for g in groups if g.token_bytes and g.layers]
    if not token:
        return groups
    attn_page = block_size * max(token)
    return tuple(dataclasses.replace(g, state_bytes=max(g.state_bytes, attn_page))
                 if g.state_bytes else g for g in groups)


class _SpecRule:
    """The rule of _BlocksPerRequest a layer kind's spec names, found once (`spec` asks
    the layer), to apply at each length a search tries: a binary search asked every
    layer kind again at every length (3.2M times in test_sweep_kinds + test_verdict)."""

    def full(self):
        return _BlocksPerRequest.full

    def sliding(self, window: int):
        return lambda rules: rules.sliding(window)

    def chunked(self, chunk: int):
        return lambda rules: rules.chunked(chunk)

    def state(self, mixer):
        return lambda rules: rules.state(mixer)

    def cross(self):
        return _BlocksPerRequest.cross

    def unpaged(self, mixer):
        return lambda rules: rules.unpaged(mixer)


def _request_bytes_at(plans: tuple[GroupPlan, ...], block: int, in_flight: int,
                      encoder_len: int | None, state: StateCache):
    """request_bytes as a function of the length, each plan's spec rule found once."""
    terms = []
    for p in plans:
        rule = spec(p.group.mixer, _SpecRule())
        terms.append((p.layers * p.page_bytes, p.block_size or block,
                      rule if callable(rule) else (lambda rules, n=rule: n)))

    def at(length: int) -> int:
        return sum(page * rule(_BlocksPerRequest(size, length, in_flight, encoder_len, state))
                   for page, size, rule in terms)

    return at


def request_bytes(plans: tuple[GroupPlan, ...], block: int, length: int, in_flight: int,
                  encoder_len: int | None, state: StateCache = NO_PREFIX_CACHING) -> int:
    """Bytes one request at `length` needs on one rank: every real layer's blocks x page
    (each group's blocks of its own size, `block` where a plan names none)."""
    return _request_bytes_at(plans, block, in_flight, encoder_len, state)(length)


def largest_fitting_len(plans: tuple[GroupPlan, ...], block: int, avail: int, in_flight: int,
                        encoder_len: int | None, upper: int,
                        state: StateCache = NO_PREFIX_CACHING) -> int:
    """The largest length whose one request fits in `avail` (binary search, as vLLM's
    estimate_max_model_len); at most `upper` when that already fits... or beyond it."""
    bytes_at = _request_bytes_at(plans, block, in_flight, encoder_len, state)

    def fits(length: int) -> bool:
        return bytes_at(length) <= avail

    lo, hi = 0, max(upper, 1)
    while fits(hi) and hi < MAX_SEQ_LEN:
        lo, hi = hi, min(hi * 2, MAX_SEQ_LEN)
    if fits(hi):
        return hi
    return _num.largest(fits, lo, hi)
