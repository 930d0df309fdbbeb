"""What every engine's wing answers: `ServingCount`, one start-up as that engine counts it.

The figures are per device of the rank that sizes the pool (the engines cut every rank
to the smallest), in bytes and tokens, exact integers; `deployment` multiplies the pool's
by the layout's data-parallel ranks. `terms` are the memory terms in
the order the engine meets them, under the names its own log gives them, so that a
start-up log can be read back term by term (`kvcalc check`).
"""

from __future__ import annotations

from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.serving.room import Room, serves

__all__ = ["ServingCount"]


@record
class ServingCount:
    engine: object  # kvcalc.serving.EngineRef
    hardware: str
    layout: object  # kvcalc.serving.layout.Layout
    context_len: int  # the longest request the engine admits (its max_model_len)
    page_size: int  # tokens per page / block
    bytes_per_token: int  # one token in every layer of the pool, on one device (0: none)
    kv_cache_tokens: int | None  # tokens the KV pool holds (None: not modelled)
    max_running_requests: int | None  # the most requests the engine runs at once
    max_concurrency: float | None  # requests of context_len the pool holds at once
    terms: tuple[tuple[str, int], ...]  # (the engine's name for it, bytes), per device
    flags: tuple[tuple[str, object], ...]  # every flag that decided it, the engine's names
    starts: bool
    refusal: str = ""  # the engine's reason for not starting, "" when it starts
    pools: tuple[tuple[str, int], ...] = ()  # further pools: swa tokens, state slots
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Where the engine keeps a pool per attention window (TensorRT-LLM's VSWA), the one
    # that limits requests of context_len: (its blocks, the blocks one request takes
    # there, the bytes of one of its blocks); None: one pool, kv_cache_tokens' pages.
    binding: tuple[int, int, int] | None = None

    @property
    def memory(self) -> dict[str, int]:
        return dict(self.terms)

    @property
    def deployment(self) -> dict:
        """The whole deployment's figures: every data-parallel rank's pool and requests
        (the layout's kv_pools of them), on the layout's GPUs."""
        n = self.layout.kv_pools
        return {"gpus": self.layout.gpus, "kv_pools": n,
                "kv_cache_tokens": None if self.kv_cache_tokens is None
                else n * self.kv_cache_tokens,
                "max_running_requests": None if self.max_running_requests is None
                else n * self.max_running_requests,
                "max_concurrency": None if self.max_concurrency is None
                else n * self.max_concurrency}

    def serves(self, batch: int) -> bool:
        """Whether `batch` requests of context_len tokens run at once: the engine
        starts, runs that many, and its pages hold them (kvcalc.serving.room's one rule,
        `serves`, on this count's Room)."""
        return bool(serves(self.room(), batch))

    def room(self):
        """The count as a Room (kvcalc.serving.room) for requests of context_len: pages
        of page_size tokens, one request taking cdiv(context_len, page_size) of them, at
        most max_running_requests at once."""
        page = max(self.page_size, 1)
        tokens = self.kv_cache_tokens if self.starts and self.kv_cache_tokens else 0
        per = -(-self.context_len // page)
        blocks, block_bytes = tokens // page, page * self.bytes_per_token
        if self.binding is not None and tokens:
            blocks, per, block_bytes = self.binding
        return Room(max_model_len=self.context_len, starts=self.starts and bool(tokens),
                    num_blocks=blocks, blocks_per_request=per,
                    max_num_seqs=self.max_running_requests or 0,
                    request_bytes=self.context_len * self.bytes_per_token,
                    block_bytes=block_bytes,
                    kv_cache_bytes=dict(self.terms).get("kv_cache", 0), refusal=self.refusal)

    def as_dict(self) -> dict:
        return {
            "engine": self.engine.name, "engine_release": self.engine.release,
            "gpu": self.hardware, **self.layout.as_dict(),
            "context_len": self.context_len, "page_size": self.page_size,
            "bytes_per_token": self.bytes_per_token,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_running_requests": self.max_running_requests,
            "max_concurrency": self.max_concurrency,
            "starts": self.starts, "refusal": self.refusal,
            # sizes, never negative: what the terms lack is the named shortfall
            "memory": {k: max(0, v) for k, v in self.memory.items()},
            "kv_cache_shortfall_bytes": max([0, *(-v for v in self.memory.values())]),
            "pools": dict(self.pools),
            "flags": dict(self.flags), "notes": list(self.notes),
            "deployment": self.deployment,
        }


ADMISSIONS = ("greedy", "ratio", "reserve")


@record
class Schedule:
    """`admission`: when a waiting request joins the running batch.
    greedy: when its prompt's KV fits now; a decode step that finds the pool full
    preempts the newest running request, whose KV is freed and whose prompt and output
    so far are computed again when it resumes (vLLM's recompute preemption);
    ratio: when its prompt plus `reserve_ratio` of every running request's remaining
    output fits (SGLang's new_token_ratio, decaying from `reserve_ratio` to
    `reserve_floor` over `reserve_decay_steps` decode steps); reserve: when its whole
    prompt and output fit (TensorRT-LLM's GUARANTEED_NO_EVICT: nothing is preempted).
    `mixed`: decode tokens share a step with prompt chunks (else a prefill step runs
    whenever a prompt waits). `chunks_prompts`: a prompt longer than what is left of the
    step's token budget is split across steps (chunked prefill); else it waits, whole,
    for a step with room for all of it, and the steps after it wait behind it.
    `overlaps_host`: the host prepares step n+1 while the GPU runs step n (a step takes
    the longer of the two; else their sum).
    CUDA graphs: a decode-only step whose batch is in `graph_batches` (with
    `graph_pads`, any batch up to the largest, padded to the next) replays a captured
    graph, and a step carrying prompt tokens does when its tokens are at most
    `graph_tokens` (vLLM's piecewise graphs, SGLang's prefill graphs); any other step
    launches its kernels one by one from Python (eager; `graphed`). None: a built
    TensorRT engine, whose steps launch no Python kernels at all.
    Cascade attention: a decode step of at least `cascade_requests` requests that all
    share a cached prefix of at least `cascade_prefix` tokens reads that prefix's K/V
    once, not once a request (0: the engine never does).
    `host_path`: where a release's host does other work per running request than the
    engine's other releases (vLLM before 0.6.0: its API server in the engine's own
    process), the name its served terms are fitted under (presets/served/terms.yaml
    `paths`); "": the engine's own."""

    admission: str
    mixed: bool
    overlaps_host: bool
    source: str
    reserve_ratio: float = 1.0
    reserve_floor: float = 1.0
    reserve_decay_steps: int = 0
    chunks_prompts: bool = True
    graph_batches: tuple[int, ...] | None = None
    graph_pads: bool = True
    graph_tokens: int = 0
    cascade_prefix: int = 0
    cascade_requests: int = 0
    host_path: str = ""

    def graphed(self, decoding: int, prompt_tokens: int) -> bool:
        """Whether a step of `decoding` requests and `prompt_tokens` prompt tokens runs
        without Python launching its kernels (a CUDA graph, or a built engine)."""
        if self.graph_batches is None:
            return True
        if prompt_tokens:
            return decoding + prompt_tokens <= self.graph_tokens
        if not self.graph_batches:
            return False
        if self.graph_pads:
            return decoding <= self.graph_batches[-1]
        return decoding in self.graph_batches
