"""KV offload to CPU memory: the host tier each engine adds beside its GPU pool, as that
engine sizes it from its own flags (the GPU pool stays as the engine counts it).

The flags differ in units between engines, and each is read as its engine reads it:

* vLLM `--kv-offloading-size` is GiB (2^30 bytes, a float) over ALL tp x pp ranks, with
  `--kv-offloading-backend native|lmcache`; the host tier is counted in GPU blocks
  (`CPUOffloadingSpec.num_blocks`, 0.33's `num_chunks`);
* SGLang `--hicache-size` is GB (10^9 bytes, an int) PER RANK, else `--hicache-ratio`
  (default 2.0) x the device pool's tokens, in pages; it logs "Allocating X GB host memory
  for hierarchical KV cache.";
* TensorRT-LLM `kv_cache_config.host_cache_size` is bytes PER RANK, in blocks of
  tokens_per_block ("Number of blocks in KV cache secondary pool: N").

Each release's rule is in its wing's rules table (`kv_offloading`, `hicache`,
`host_cache`); this module applies it to a start-up count (kvcalc.serving.record
ServingCount). A refusal is the engine's own, in its words.
"""

from __future__ import annotations

from dataclasses import field
from fractions import Fraction

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["HostTier", "OFFLOAD_FLAGS", "OFFLOAD_UNITS", "PoolFacts", "host_tier", "offload_given",
           "vllm_host_tier"]

GiB = 1 << 30
GB = 10 ** 9
PAGE_ALIGN = 4096  # vLLM 0.33 SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT (mmap.PAGESIZE)

# parameter name -> the engine that takes it (kvcalc.serving.flags joins these)
OFFLOAD_FLAGS = {
    "kv_offloading_size": "vllm", "kv_offloading_backend": "vllm",
    "enable_hierarchical_cache": "sglang", "hicache_ratio": "sglang",
    "hicache_size": "sglang", "hicache_write_policy": "sglang",
    "host_cache_size": "tensorrt-llm",
}
# the unit each engine's size flag is in, for a refusal that names another engine's
OFFLOAD_UNITS = {"kv_offloading_size": "GiB over all tp x pp ranks",
                 "hicache_size": "GB per rank", "host_cache_size": "bytes per rank"}


@record
class HostTier:
    """The host (CPU) tier one engine keeps beside its GPU pool. `tokens`: what it holds
    (whole blocks/pages of `block_tokens`); `host_bytes_per_rank` and `host_bytes` (every
    rank of one pool's tp x pp) the pinned host memory it takes; `engine_says`: the
    figures under the names the engine's own log or config gives them."""

    engine: str
    flags: tuple[tuple[str, object], ...]
    block_tokens: int
    blocks: int
    tokens: int
    bytes_per_block: int  # one host block as the engine sizes it (see `per`)
    per: str  # "all ranks" (vLLM's block holds every rank's copy) or "rank"
    ranks: int
    host_bytes_per_rank: int
    host_bytes: int
    engine_says: tuple[tuple[str, object], ...] = ()
    refusal: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: str = ""

    def as_dict(self) -> dict:
        return {"engine": self.engine, "flags": {k: _figure(k, v) for k, v in self.flags},
                "host_tokens": self.tokens, "host_blocks": self.blocks,
                "block_tokens": self.block_tokens, "bytes_per_block": self.bytes_per_block,
                "bytes_per_block_covers": self.per, "ranks": self.ranks,
                "host_bytes_per_rank": self.host_bytes_per_rank,
                "host_bytes": self.host_bytes, "engine_says": dict(self.engine_says),
                "refusal": self.refusal, "notes": list(self.notes), "source": self.source}


def _figure(name: str, value):
    """A size or ratio flag as JSON types it, a number (its text as given stays in
    `flags`, which the table prints): whole as an integer, else a float."""
    if name not in OFFLOAD_UNITS and name != "hicache_ratio" or isinstance(value, bool):
        return value
    f = Fraction(str(value).strip())
    return int(f) if f.denominator == 1 else float(f)


def offload_given(given: dict) -> dict:
    """The offload flags among `given` (parameter name -> value; None and False: not
    given)."""
    return {k: v for k, v in given.items()
            if k in OFFLOAD_FLAGS and v is not None and v is not False}


def _decimal(value, name: str) -> Fraction:
    try:
        f = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise ParameterError("{" + name + "} must be a number, got " + literal(repr(value)),
                             name) from None
    if f < 0:
        raise ParameterError("{" + name + "} must be >= 0, got " + literal(repr(value)), name)
    return f


def _whole(value, name: str) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise ParameterError("{" + name + "} must be a whole number (its engine's type is "
                             "int), got " + literal(repr(value)), name)
    return int(text)


@record
class PoolFacts:
    """What a host tier is sized from: the engine (EngineRef) and the GPU pool as its
    start-up count has it (kvcalc.serving.record.ServingCount, or vLLM's Capacity)."""

    engine: object  # kvcalc.serving.EngineRef
    tp: int
    pp: int
    page_size: int  # tokens per GPU block / page
    bytes_per_token: int  # one token in every layer, on one rank
    kv_cache_tokens: int  # the GPU pool's tokens
    second_pool: bool = False  # a sliding-window or state pool beside it
    backend: str = "pytorch"  # TensorRT-LLM's runtime
    bytes_per_block: int = 0  # one GPU block on one rank (vLLM's; 0: page x per token)

    @classmethod
    def of(cls, count) -> "PoolFacts":
        return cls(engine=count.engine, tp=count.layout.tp, pp=count.layout.pp,
                   page_size=count.page_size, bytes_per_token=count.bytes_per_token,
                   kv_cache_tokens=count.kv_cache_tokens or 0, second_pool=bool(count.pools),
                   backend=str(dict(count.flags).get("backend", "pytorch")))


def host_tier(pool, given: dict, *, mla: bool = False) -> HostTier | None:
    """The host tier a GPU pool (a PoolFacts, or a ServingCount) gets from the offload
    flags in `given` (parameter names; kvcalc.serving.flags), or None where none is
    given. `mla`: the model caches one latent per token (vLLM 0.33 keeps one copy over
    the tp ranks)."""
    own = offload_given(given)
    if not own:
        return None
    if not isinstance(pool, PoolFacts):
        pool = PoolFacts.of(pool)
    name = pool.engine.name
    wrong = [k for k in own if OFFLOAD_FLAGS[k] != name]
    if wrong:  # kvcalc.serving.flags.check_owners words it; kept here for the Python API
        raise KvcalcError(f"{wrong[0]} is not a flag of {pool.engine.title}")
    ranks = pool.tp * pool.pp
    if name == "vllm":
        return _vllm(pool, own, ranks, mla)
    if name == "sglang":
        return _sglang(pool, own, ranks)
    return _trtllm(pool, own, ranks)


def _vllm(count, own: dict, ranks: int, mla: bool) -> HostTier:
    from kvcalc.serving.vllm.rules import rules_for

    rule = rules_for(count.engine.release).kv_offloading()
    release = count.engine.release
    if rule is None:
        raise ParameterError("vLLM " + literal(release) + " has no {kv_offloading_size} (from "
                             "0.11.1: config/cache.py CacheConfig)", "kv_offloading_size")
    flags = tuple(sorted(own.items()))
    block = count.page_size
    empty = dict(engine="vllm", flags=flags, block_tokens=block, blocks=0, tokens=0,
                 bytes_per_block=0, per="all ranks", ranks=ranks, host_bytes_per_rank=0,
                 host_bytes=0, source=rule["source"])
    if "kv_offloading_size" not in own:
        if rule["default_backend"] is None:
            return HostTier(**empty, refusal=(
                f"vLLM {release} refuses --kv-offloading-backend without a size: \"You must "
                "set kv_offloading_size when kv_offloading_backend is set.\""))
        return HostTier(**empty, notes=(
            f"vLLM {release} offloads only when --kv-offloading-size is set: "
            "--kv-offloading-backend alone keeps no host tier",))
    size = _decimal(own["kv_offloading_size"], "kv_offloading_size")
    backend = own.get("kv_offloading_backend") or rule["default_backend"]
    if backend not in (None, "native", "lmcache"):
        raise ParameterError("{kv_offloading_backend} is native or lmcache, got "
                             + literal(repr(backend)), "kv_offloading_backend")
    # one GPU block on one rank, every layer (vLLM 0.20+: the KV tensors' bytes // blocks)
    per_rank = count.bytes_per_block or block * count.bytes_per_token
    if backend is None:
        return HostTier(**empty, notes=(
            f"vLLM {release} offloads only with --kv-offloading-backend given (its "
            "default is none): --kv-offloading-size alone keeps no host tier",))
    if backend == "lmcache":
        if rule["lmcache"] == "server":
            return HostTier(**empty, notes=(
                f"vLLM {release} with lmcache: LMCacheMPConnector's own server holds the "
                "capacity; --kv-offloading-size is not passed to it",))
        gb = size / ranks
        return HostTier(**empty, engine_says=(("lmcache.max_local_cpu_size", float(gb)),),
                        notes=(f"vLLM {release} with lmcache: LMCache takes "
                               f"{float(gb):g} GB a rank (the size / {ranks} ranks) and "
                               "sizes its own chunks; kvcalc does not count LMCache's",))
    if not rule["native"]:
        return HostTier(**empty, refusal=(
            f"vLLM {release} refuses the native backend: it passes num_cpu_blocks 0 and "
            "CPUOffloadingSpec raises \"num_cpu_blocks must be specified in "
            "kv_connector_extra_config\""))
    cpu_bytes = int(size * GiB)  # vLLM: int(kv_offloading_size * (1 << 30))
    if cpu_bytes == 0:
        return HostTier(**empty, refusal=(
            "vLLM refuses --kv-offloading-size 0: \"cpu_bytes_to_use must be specified in "
            "kv_connector_extra_config\""))
    copies = 1 if (rule["mla_one_copy"] and mla and count.tp > 1
                   and count.pp == 1) else ranks
    chunk = per_rank * copies
    if rule["align"] > 1:
        chunk = -(-chunk // rule["align"]) * rule["align"]
    blocks = cpu_bytes // chunk if chunk else 0
    notes = []
    if copies == 1 and ranks > 1:
        notes.append("an MLA latent is whole on every rank: one copy in host memory "
                     "(0.33's replicated layout; single node, mp executor)")
    if blocks == 0:
        notes.append(f"{float(size):g} GiB is under one block of {chunk:,} bytes: no "
                     "host tier")
    said = "num_chunks" if rule["align"] > 1 else "num_blocks"
    return HostTier(engine="vllm", flags=flags, block_tokens=block, blocks=blocks,
                    tokens=blocks * block, bytes_per_block=chunk, per="all ranks",
                    ranks=ranks, host_bytes_per_rank=blocks * chunk // copies,
                    host_bytes=blocks * chunk,
                    engine_says=((said, blocks), ("cpu_bytes_to_use", cpu_bytes)),
                    notes=tuple(notes), source=rule["source"])


def _sglang(count, own: dict, ranks: int) -> HostTier:
    from kvcalc.serving.sglang.rules import rules_for

    release = count.engine.release
    rule = rules_for(release).hicache()
    flags = tuple(sorted(own.items()))
    if not own.get("enable_hierarchical_cache"):
        raise ParameterError("{hicache_ratio}, {hicache_size} and {hicache_write_policy} size "
                             "SGLang's host pool only with {enable_hierarchical_cache}",
                             "hicache_ratio", "hicache_size", "hicache_write_policy",
                             "enable_hierarchical_cache")
    if rule is None:
        raise KvcalcError(f"SGLang {release}'s hierarchical cache is not read by kvcalc "
                          "(read: 0.4.6 to 0.5.4)")
    if count.second_pool:
        raise KvcalcError("SGLang's host pool beside a second device pool (sliding-window "
                          "or state) is not counted by kvcalc")
    per_token = count.bytes_per_token  # the device pool's size_per_token, on one rank
    page = max(count.page_size, 1)
    device = count.kv_cache_tokens
    size_gb = _whole(own.get("hicache_size", 0), "hicache_size")
    ratio = _decimal(own.get("hicache_ratio", "2.0"), "hicache_ratio")
    policy = own.get("hicache_write_policy") or rule["write_policy"]
    if policy not in ("write_back", "write_through", "write_through_selective"):
        raise ParameterError("{hicache_write_policy} is write_back, write_through or "
                             "write_through_selective, got " + literal(repr(policy)),
                             "hicache_write_policy")
    if size_gb > 0:
        tokens = size_gb * GB // per_token  # int(host_size * 1e9 // size_per_token)
    else:
        tokens = int(device * ratio)  # int(device_pool.size * host_to_device_ratio)
    tokens -= tokens % page
    host = tokens * per_token
    refusal = ""
    if not tokens > device:
        refusal = (f"SGLang refuses a host pool of {tokens:,} tokens beside a device pool of "
                   f"{device:,}: \"The host memory should be larger than the device memory "
                   "with the current protocol\"")
    said = f"{host / 1e9:.2f}"
    return HostTier(engine="sglang", flags=(*flags, ("hicache_write_policy", policy)),
                    block_tokens=page, blocks=tokens // page, tokens=tokens,
                    bytes_per_block=page * per_token, per="rank", ranks=ranks,
                    host_bytes_per_rank=host, host_bytes=host * ranks,
                    engine_says=(("host_memory_gb", float(said)),
                                 ("log", f"Allocating {said} GB host memory for hierarchical "
                                         "KV cache.")),
                    refusal=refusal, source=rule["source"])


def _trtllm(count, own: dict, ranks: int) -> HostTier:
    from kvcalc.serving.trtllm.rules import rules_for

    rule = rules_for(count.engine.release).host_cache(count.backend)
    size = _whole(own["host_cache_size"], "host_cache_size")
    block = count.page_size
    per_block = block * count.bytes_per_token
    blocks = size // per_block if per_block else 0  # host / bytes_per_token / tokens_per_block
    host = blocks * per_block
    return HostTier(engine="tensorrt-llm", flags=(("host_cache_size", size),),
                    block_tokens=block, blocks=blocks, tokens=blocks * block,
                    bytes_per_block=per_block, per="rank", ranks=ranks,
                    host_bytes_per_rank=host, host_bytes=host * ranks,
                    engine_says=(("secondary_blocks", blocks),),
                    notes=(rule["note"],) if rule["note"] else (), source=rule["source"])


def vllm_host_tier(est, side: dict):
    """vLLM's host tier from --kv-offloading-size beside the count the estimate `est`
    made (None: not asked), sized per block as the count cut its blocks."""
    from kvcalc.serving import engine_ref

    if not offload_given(side):
        return None
    cap = est.verdict.capacity
    s = est.verdict.settings
    facts = PoolFacts(engine=engine_ref(f"vllm@{s.vllm_version}"), tp=s.tp, pp=s.pp,
                      page_size=cap.block_size or 0,
                      bytes_per_token=sum(p.layers * p.group.token_bytes for p in cap.groups),
                      kv_cache_tokens=cap.kv_cache_tokens or 0,
                      bytes_per_block=cap.deciding.bytes_per_block)
    return host_tier(facts, side, mla=est.spec.mla is not None)
