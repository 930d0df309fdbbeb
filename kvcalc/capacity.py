"""Serving capacity as vLLM counts it: KV-cache memory, blocks, tokens, concurrency.

Serving policy apart from physics. `formulas` says how many bytes a token costs in
each layer (`cache_groups`) and how many weights a device holds; this module says
what an engine does with a GPU: how much memory it lets itself use, what it sets
aside before the cache, how it cuts the rest into blocks, and how it reports them.

Which vLLM this follows
-----------------------
The default is the V1 engine of vLLM 0.33 (`vllm_version="0.33"`), as read in the
Python source of the wheels (kvcalc's ../shared/reference/serving-capacity.md gives
the file and function of each fact, with the version it was read in); the block and
concurrency arithmetic was checked again in vllm-project/vllm at commit
001cabc1be16a59a70d720ed61a13b678c060a18 (`vllm/v1/core/kv_cache_utils.py`,
`get_max_concurrency_for_kv_cache_config`: blocks per request summed over groups,
concurrency = num_blocks / that sum). Older engines are selected by `vllm_version`
and `engine` because the public logs kvcalc is tested against span 0.6.4 to 0.11;
every branch names the versions it stands for. Facts (quoted, not copied code):

* budget: `torch.cuda.mem_get_info` total x gpu_memory_utilization; from 0.20
  `request_memory` rounds it up (ceil). `kv_cache_memory_bytes` (0.11+) replaces
  the whole computation.
* available KV memory = budget - weights - activation peak of the profile run -
  non-torch memory [- CUDA-graph estimate, subtracted from 0.20 unless
  enforce_eager]. V0 and V1 alike; what "non-torch" covers changed (see below).
* profile run (`gpu_model_runner.profile_run`, 0.33): one forward pass of
  max_num_batched_tokens tokens over min(tokens, max_num_seqs) requests, then the
  sampler on one hidden state per request: logits [num_reqs, vocab], last pipeline
  stage only (V0: the driver worker, rank 0 of TP, only).
* default batch limits (`EngineArgs.get_batch_defaults`, 0.33; 0.8.5 for 0.8-0.29):
  see `default_batch_limits`.
* page = block_size x per-token bytes of one layer (`AttentionSpec.page_size_bytes`);
  MLA keeps one latent per token; KV heads per rank max(1, kv_heads // tp).
* grouping (`get_kv_cache_groups`): one group when every layer caches alike;
  otherwise layers are bucketed by kind, group size = the smallest bucket (the
  largest if largest < 1.5 x smallest), each bucket cut into groups of that size,
  padded. Blocks: num_blocks = available // max over groups of the group's summed
  pages; every worker is cut to the minimum over workers.
* per-request need (`max_memory_usage_bytes`): full/MLA: cdiv(len, block) pages;
  sliding: cdiv(min(window - 1 + in_flight, len), block) + 1; chunked local:
  cdiv(min(chunk + in_flight, len), block); state (mamba): one page (1 + speculative
  blocks); in_flight = max_num_batched_tokens x (2 with async scheduling, 0.27+,
  PP = 1; else 1).
* reported capacity (0.24+): concurrency = num_blocks / sum over groups of
  cdiv(need_g, page_g); "GPU KV cache size" = int(concurrency x max_model_len).
  Up to 0.20 (and V1 0.7-0.20): tokens = num_blocks // groups x block_size. V0:
  "# GPU blocks", tokens = blocks x block_size, concurrency = tokens / len.
* refusal: V1 refuses when one max_model_len request needs more bytes than are
  available (`check_enough_kv_cache_memory`) and names the largest length that
  fits (`estimate_max_model_len`); V0 refuses when max_model_len exceeds
  blocks x block_size.

What is modelled, what is calibrated
------------------------------------
vLLM *measures* three of its terms; kvcalc models them from what drives them and
calibrates the constants against the logs in tests/data/vllm/ (README there):

* weights (modelled): parameters per device x weight dtype (kvcalc.formulas), plus
  the RoPE cos/sin cache vLLM builds (max_position x head_dim in the model dtype:
  Llama-3.1-8B's 14.9888 GiB in vllm#10517 is exactly that over 2 x 8.03e9).
  Quantized checkpoints are not modelled here (issue 12, part 2): pass the
  measured `weights_bytes` ("model weights took X GiB").
* activation peak (modelled + 2 calibrated constants): max of
  - forward: tokens x dtype bytes x (FWD_MLP_COPIES x MLP width per device +
    FWD_HIDDEN_COPIES x d_model); 3 and 3 reproduce vllm#10517 (Llama-3.1-8B,
    RTX 3090, 20,000 and 29,000 tokens: 2.07 and 2.99 GiB) to 0.01 GiB;
  - sampler: num_reqs x vocab x SAMPLER_BYTES_PER_LOGIT (fp32 logits, softmax,
    sorted values and int64 indices of top-k/top-p...): 40 from the logs where the
    sampler dominates (vllm#13882: 1.42 GiB for 256 x 152,064; PR vllm#10511:
    1.26 GiB for 256 x 128,256 at TP 1 and 2). Before 0.6.5 the profile only made
    the bf16 logits (2 bytes each: vllm#10517 at 35k tokens, 0.06 GiB).
* non-torch memory (calibrated): from 0.6.4.post1 (V0) and 0.10.1 (V1) vLLM counts
  only the increase since a snapshot taken after the CUDA context and NCCL exist:
  NON_TORCH_INCREASE (0.25 GiB: 0.35, 0.25, 0.03 GiB in vllm#10517, #13061,
  #13882). V1 0.7-0.10.0 (and V0 before 0.6.4.post1) counted everything the process
  held outside torch: CONTEXT_BYTES + COMM_BYTES_PER_RANK x tp for tp > 1,
  calibrated on vllm#21348 (Qwen3-235B-A22B-FP8, TP 4, H100) only.
* CUDA graphs (modelled, uncalibrated against a full log): from 0.20, captured
  graphs x CUDA_GRAPH_BYTES_PER_GRAPH plus the forward activation of the largest
  capture size; the quoted "Estimated CUDA graph memory" lines (0.36 GiB for 16
  piecewise graphs, 0.73 GiB for 51 + 35) bracket the per-graph constant.

Everything is exact integer arithmetic on bytes (utilization is read as a decimal
fraction); functions are pure; inputs and results are frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from fractions import Fraction

from kvcalc import formulas
from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.formulas import CacheGroup
from kvcalc.dtypes import MAX_SEQ_LEN, check_size, dtype
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.dtypes import weight_dtype as _weight_dtype

__all__ = [
    "CONTEXT_BYTES", "COMM_BYTES_PER_RANK", "CUDA_GRAPH_BYTES_PER_GRAPH", "FWD_HIDDEN_COPIES",
    "FWD_MLP_COPIES", "GiB", "NON_TORCH_INCREASE", "SAMPLER_BYTES_PER_LOGIT",
    "Capacity", "DeviceMemory", "EngineSettings", "GroupPlan",
    "activation_peak_bytes", "blocks_per_request", "cuda_graph_bytes", "cuda_graph_sizes",
    "default_batch_limits", "forward_activation_bytes", "kv_cache_groups", "non_torch_bytes",
    "page_size_bytes", "parse_version", "pipeline_layers", "sampler_bytes", "serving_capacity",
    "stage_weight_bytes",
]

GiB = 1 << 30
MiB = 1 << 20

# --- calibrated constants (see the module docstring for the logs behind each) -------
FWD_MLP_COPIES = 3  # gate_up output (2 x d_ff) + activation output (1 x d_ff)
FWD_HIDDEN_COPIES = 3  # residual, normed hidden, attention/MLP output
SAMPLER_BYTES_PER_LOGIT = 40  # 0.6.5+ and V1: fp32 logits, probs, sort values+int64 idx...
SAMPLER_BYTES_PER_LOGIT_OLD = 2  # < 0.6.5: the profile made only the model-dtype logits
NON_TORCH_INCREASE = GiB // 4  # cuBLAS/attention workspaces since the snapshot
CONTEXT_BYTES = GiB // 2  # CUDA context, when the whole process is counted
COMM_BYTES_PER_RANK = 480 * MiB  # NCCL + custom all-reduce buffers per TP peer (one log)
CUDA_GRAPH_BYTES_PER_GRAPH = 8 * MiB  # 0.73 GiB / 86 graphs ~ 8.7 MiB; 0.36 / 16 ~ 23

KINDS = ("full", "sliding", "chunked", "mla", "state", "cross")


def parse_version(v: str | tuple[int, ...]) -> tuple[int, int]:
    """'0.6.4.post1' -> (6, 4); '0.33' -> (33, 0); (0, 11) -> (11, 0). Minor, patch of 0.x."""
    if isinstance(v, tuple):
        parts = [int(p) for p in v]
    else:
        parts = []
        for p in str(v).strip().lstrip("v").split("."):
            digits = "".join(ch for ch in p if ch.isdigit()) if not p.isdigit() else p
            if not digits:
                break
            parts.append(int(digits))
            if not p.isdigit():
                break
    if not parts or parts[0] != 0 or len(parts) < 2:
        raise KvcalcError(f"vllm_version must look like 0.MINOR[.PATCH], got {v!r}")
    return (parts[1], parts[2] if len(parts) > 2 else 0)


@record
class EngineSettings:
    """The engine flags that decide capacity (vLLM's names; None = the engine default).

    `engine`: "v1" (default) or "v0" (the pre-2025 engine: blocks of all layers,
    driver-only sampler). `vllm_version` picks the era of each rule (see module doc).
    `weights_bytes`: measured weights per device, overrides kvcalc's count (use it for
    quantized checkpoints). `kv_cache_memory_bytes`: vLLM's --kv-cache-memory.
    `usage`: "server" (vllm serve, the default) or "llm" (the LLM class), for defaults.
    """

    max_model_len: int
    gpu_memory_utilization: float | str = "0.9"
    tp: int = 1
    pp: int = 1
    block_size: int | None = None  # None: 16 (raised for hybrid state models)
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_dtype: str = "auto"  # "auto": the model dtype
    mamba_ssm_dtype: str = "auto"  # recurrent-state dtype; "auto": the model dtype (vLLM 0.33)
    model_dtype: str = "bf16"
    weight_dtype: str | None = None  # None: as the config stores (else the model dtype);
    # a dtype: every matrix but embeddings, quantized ones with scales per group_size
    group_size: int | None = None
    weights_bytes: int | None = None
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool = False
    chunked_prefill: bool | None = None  # None: the engine's default
    async_scheduling: bool | None = None  # None: on for V1 0.27+ with PP = 1
    engine: str = "v1"
    vllm_version: str = "0.33"
    usage: str = "server"
    num_gpu_blocks_override: int | None = None
    encoder_len: int | None = None  # cross-attention tokens (encoder-decoder); None: max_model_len
    # vLLM refuses a max_model_len above the model's own context unless the environment
    # sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; the CLI reads that variable into this flag.
    allow_long_max_model_len: bool = False

    def __post_init__(self) -> None:
        check_size("max_model_len", self.max_model_len, MAX_SEQ_LEN)
        check_size("tp", self.tp, 4096)
        check_size("pp", self.pp, 4096)
        for name in ("block_size", "max_num_batched_tokens", "max_num_seqs", "weights_bytes",
                     "group_size",
                     "kv_cache_memory_bytes", "num_gpu_blocks_override", "encoder_len"):
            v = getattr(self, name)
            if v is not None:
                check_size(name, v, 1 << 60)
        if self.engine not in ("v0", "v1"):
            raise KvcalcError(f"engine must be 'v0' or 'v1', got {self.engine!r}")
        if self.usage not in ("server", "llm"):
            raise KvcalcError(f"usage must be 'server' or 'llm', got {self.usage!r}")
        util = self.utilization
        if not 0 < util <= 1:
            raise KvcalcError(f"gpu_memory_utilization must be in (0, 1], got {util}")
        parse_version(self.vllm_version)
        dtype(self.model_dtype)
        for name in ("kv_dtype", "mamba_ssm_dtype"):
            if getattr(self, name) != "auto":
                dtype(getattr(self, name))
        if self.weight_dtype is not None:
            _weight_dtype(self.weight_dtype)  # a dtype, or awq/gptq

    @property
    def utilization(self) -> Fraction:
        """gpu_memory_utilization as an exact fraction ("0.9" -> 9/10, not 0.9000000000000000222)."""
        u = self.gpu_memory_utilization
        try:
            return Fraction(str(u)) if not isinstance(u, Fraction) else u
        except (ValueError, ZeroDivisionError):
            raise KvcalcError(f"gpu_memory_utilization must be a number, got {u!r}") from None

    @property
    def version(self) -> tuple[int, int]:
        return parse_version(self.vllm_version)

    def replace(self, **changes) -> "EngineSettings":
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------------
# Defaults the engine picks
# --------------------------------------------------------------------------------
def default_batch_limits(hw: Hardware, s: EngineSettings) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM fills them in, the user's own first.

    V1 0.30-0.33 (`EngineArgs.get_batch_defaults`, server / LLM class): device total
    >= 160 GiB: 16384/16384 tokens, 1024 seqs; >= 70 GiB and not A100/GB10:
    16384 (LLM) / 8192 (server) tokens, 1024 seqs; otherwise 8192 / 2048, 256 seqs.
    0.8-0.29: the same without the 160 GiB tier and without the A100 exclusion.
    V1 0.7: 8192 (LLM) / 2048 (server), 256 seqs. Then, chunked prefill off:
    tokens = max(max_model_len, tokens); finally min(tokens, seqs x max_model_len).
    V0 (<= 0.10): chunked prefill is on only above 32K context; then 512 tokens
    before 0.7 and 2048 from 0.7 (the profile peaks of vllm#10517 at 35K and #13061
    at 128K match these), otherwise one max_model_len batch (>= 2048); 256 seqs.
    """
    minor, _ = s.version
    total = _visible(hw)
    chunked = _chunked_prefill(s)
    if s.engine == "v0":
        seqs = 256
        tokens = (512 if minor < 7 else 2048) if chunked else max(s.max_model_len, 2048)
    else:
        name = hw.name.lower()
        big = total >= 70 * GiB
        if minor >= 30 and ("a100" in name or "gb10" in name or "spark" in name):
            big = False
        if minor >= 30 and total >= 160 * GiB:
            tokens, seqs = 16384, 1024
        elif minor >= 8 and big:
            tokens, seqs = (16384 if s.usage == "llm" else 8192), 1024
        elif minor >= 8:
            tokens, seqs = (8192 if s.usage == "llm" else 2048), 256
        else:
            tokens, seqs = (8192 if s.usage == "llm" else 2048), 256
        if not chunked:
            tokens = max(s.max_model_len, tokens)
    if s.max_num_seqs is not None:
        seqs = s.max_num_seqs
    if s.max_num_batched_tokens is not None:
        tokens = s.max_num_batched_tokens
    else:
        tokens = min(tokens, seqs * s.max_model_len)
    return tokens, seqs


def _chunked_prefill(s: EngineSettings) -> bool:
    if s.chunked_prefill is not None:
        return s.chunked_prefill
    if s.engine == "v0":
        return s.max_model_len > 32768
    return True


def _async_scheduling(s: EngineSettings) -> bool:
    if s.async_scheduling is not None:
        return s.async_scheduling
    return s.engine == "v1" and s.version >= (27, 0) and s.pp == 1


def _visible(hw: Hardware) -> int:
    """Driver-visible bytes (torch.cuda.mem_get_info's total), nominal if the preset lacks it."""
    v = getattr(hw, "visible_memory_bytes", 0) or 0
    return v if v > 0 else hw.memory_bytes


# --------------------------------------------------------------------------------
# Pages, groups, blocks
# --------------------------------------------------------------------------------
def page_size_bytes(group: CacheGroup, block_size: int) -> int:
    """Bytes of one block of one layer: block_size tokens, or the state (mamba) page."""
    if group.kind == "state":
        return group.state_bytes
    return block_size * group.token_bytes


def blocks_per_request(group: CacheGroup, block_size: int, max_model_len: int,
                       in_flight: int, encoder_len: int | None = None) -> int:
    """Blocks one layer of `group` needs for one request at max_model_len (vLLM's
    max_memory_usage_bytes over the page size)."""
    b = block_size
    if group.kind in ("full", "mla"):
        return -(-max_model_len // b)
    if group.kind == "sliding":
        return -(-min(group.window - 1 + in_flight, max_model_len) // b) + 1
    if group.kind == "chunked":
        return -(-min(group.window + in_flight, max_model_len) // b)
    if group.kind == "state":
        return 1
    if group.kind == "cross":
        return -(-(encoder_len or max_model_len) // b)
    raise KvcalcError(f"unknown cache group kind {group.kind!r}")


@record
class GroupPlan:
    """One of vLLM's KV cache groups: `layers` layers (of `slots`, padding counted) of one kind."""

    kind: str
    window: int
    layers: int  # real layers
    slots: int  # group size (real layers + padding)
    page_bytes: int  # one layer's page
    blocks_per_request: int  # blocks of this group one max_model_len request needs


def kv_cache_groups(groups: tuple[CacheGroup, ...], block_size: int, max_model_len: int,
                    in_flight: int, encoder_len: int | None = None) -> tuple[GroupPlan, ...]:
    """vLLM's grouping (get_kv_cache_groups): one group when every layer caches alike,
    else buckets by kind cut into groups of the smallest bucket's size (the largest's
    when largest < 1.5 x smallest), the last group of a bucket padded."""
    live = [g for g in groups if g.layers > 0]
    if not live:
        return ()
    if len(live) == 1:
        g = live[0]
        return (GroupPlan(g.kind, g.window, g.layers, g.layers, page_size_bytes(g, block_size),
                          blocks_per_request(g, block_size, max_model_len, in_flight,
                                             encoder_len)),)
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
            plans.append(GroupPlan(g.kind, g.window, real, size, page_size_bytes(g, block_size),
                                   blocks_per_request(g, block_size, max_model_len, in_flight,
                                                      encoder_len)))
    return tuple(plans)


def _align_block_size(groups: tuple[CacheGroup, ...], block_size: int | None) -> int:
    """16, or for state (mamba) hybrids the smallest multiple of 16 whose attention page
    is at least the state page (vLLM 0.33 `_align_hybrid_block_size`; the state page is
    then padded to the attention page)."""
    if block_size is not None:
        return block_size
    state = [g.state_bytes for g in groups if g.kind == "state" and g.layers]
    token = [g.token_bytes for g in groups if g.kind != "state" and g.layers]
    if not state or not token:
        return 16
    per_token = max(token)
    need = max(state)
    tokens = -(-need // per_token)
    return -(-tokens // 16) * 16


def _pad_state_pages(groups: tuple[CacheGroup, ...], block_size: int) -> tuple[CacheGroup, ...]:
    token = [g.token_bytes for g in groups if g.kind != "state" and g.layers]
    if not token:
        return groups
    attn_page = block_size * max(token)
    return tuple(dataclasses.replace(g, state_bytes=max(g.state_bytes, attn_page))
                 if g.kind == "state" else g for g in groups)


# --------------------------------------------------------------------------------
# Pipeline stages and weights
# --------------------------------------------------------------------------------
def pipeline_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per stage as vLLM's get_pp_indices splits them: layers // pp each, the
    remainder added one by one to the second-to-last stage, then the one before it..."""
    if pp > layers:
        raise KvcalcError(f"pp={pp} exceeds the model's {layers} layers")
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def _scale_groups(groups: tuple[CacheGroup, ...], layers: int, stage_layers: int,
                  stage: int, sizes: tuple[int, ...]) -> tuple[CacheGroup, ...]:
    """The groups' layers on one stage, splitting each kind in proportion (layer order
    is not known at this level; exact for uniform models and regular interleaves)."""
    if len(sizes) == 1:
        return groups
    start = sum(sizes[:stage])
    out = []
    for g in groups:
        # layers of this kind among [start, start + stage_layers), spread evenly
        lo = g.layers * start // layers
        hi = g.layers * (start + stage_layers) // layers
        out.append(dataclasses.replace(g, layers=hi - lo))
    return tuple(out)


def stage_weight_bytes(spec: ModelSpec, s: EngineSettings, stage: int = 0) -> int:
    """Weights one device of pipeline stage `stage` holds, in bytes (exact).

    Parameters per device come from formulas.weight_params_per_device (K/V projections
    replicated like the cache when tp > kv_heads); the input embedding sits on the
    first stage and the lm_head (a copy even when tied, if pp > 1) on the last.
    `weight_dtype` applies to every matrix but the embedding and lm_head. vLLM also
    keeps a RoPE cos/sin cache of max_position x head_dim in the model dtype, counted
    on every stage. `weights_bytes` (measured) replaces all of this.
    """
    if s.weights_bytes is not None:
        return s.weights_bytes
    return _language_model_bytes(spec, s, stage) + _tower_bytes(spec, s, stage)


def _tower_bytes(spec: ModelSpec, s: EngineSettings, stage: int) -> int:
    """A multimodal model's vision tower and projector: vLLM loads them with the language
    model, on the first pipeline stage, in the model dtype, sharded by tp (as the plain fit
    counts them, kvcalc.roofline)."""
    towers = sum(spec.extra.get("towers", {}).values())
    if stage != 0 or not towers:
        return 0
    return dtype(s.model_dtype).nbytes(-(-towers // s.tp))


def _language_model_bytes(spec: ModelSpec, s: EngineSettings, stage: int) -> int:
    from kvcalc.quant.formats import adhoc, quantization_of
    from kvcalc.quant.weights import weight_bytes, weight_bytes_per_device

    q = adhoc(s.weight_dtype, s.group_size) if s.weight_dtype else quantization_of(spec)
    if q is not None:
        # Quantized as stored (kvcalc.quant): values, scales and zeros matrix by matrix.
        # The stage share splits the body by layers, with the embedding and lm_head (in
        # the model dtype) on the first and last stage, as below.
        wb = weight_bytes(spec, q, s.model_dtype)
        dev = weight_bytes_per_device(spec, q, s.tp, s.model_dtype)
        emb_dev = -(-(wb.breakdown.get("embedding", 0) + wb.breakdown.get("position_embedding", 0))
                    // s.tp)
        head_dev = -(-wb.breakdown.get("lm_head", 0) // s.tp)
        body_dev = dev - emb_dev - head_dev
        sizes = pipeline_layers(spec.layers, s.pp)
        total = body_dev * sizes[stage] // spec.layers if s.pp > 1 else body_dev
        if stage == 0:
            total += emb_dev
        if stage == s.pp - 1:
            # A tied lm_head is a copy of its own on the last stage when pp > 1.
            tied_copy = dtype(s.model_dtype).nbytes(-(-spec.vocab * spec.d_model // s.tp))
            total += head_dev if head_dev or s.pp == 1 else tied_copy
        if spec.max_context and spec.mla is None:
            total += dtype(s.model_dtype).nbytes(spec.max_context * spec.head_dim)
        return total
    counts = formulas.param_counts(spec)
    b = counts.breakdown
    tp, pp = s.tp, s.pp
    emb = b.get("embedding", 0) + b.get("position_embedding", 0)
    head = b.get("lm_head", 0)
    if spec.tied_embeddings and pp > 1:
        head = spec.vocab * spec.d_model
    body = counts.total - emb - b.get("lm_head", 0)
    body_dev = formulas.weight_params_per_device(spec, body + emb, tp, counts) - (-(-emb // tp))
    sizes = pipeline_layers(spec.layers, pp)
    body_stage = body_dev * sizes[stage] // spec.layers if pp > 1 else body_dev
    model_dt = dtype(s.model_dtype)
    weight_dt = _weight_dtype(s.weight_dtype) if s.weight_dtype else model_dt
    total = weight_dt.nbytes(body_stage)
    if stage == 0:
        total += model_dt.nbytes(-(-emb // tp))
    if stage == pp - 1:
        total += model_dt.nbytes(-(-head // tp))
    if spec.max_context and spec.mla is None:
        total += model_dt.nbytes(spec.max_context * spec.head_dim)
    return total


# --------------------------------------------------------------------------------
# Measured terms, modelled
# --------------------------------------------------------------------------------
def _mlp_width(spec: ModelSpec) -> int:
    """Intermediate width one token's MLP materialises (all routed + shared experts it visits)."""
    if spec.moe is None:
        return spec.d_ff
    m = spec.moe
    widest = (m.active + m.shared_experts) * m.expert_d_ff
    return max(widest, spec.d_ff if m.dense_layers else 0)


def forward_activation_bytes(spec: ModelSpec, tokens: int, s: EngineSettings) -> int:
    """Torch peak of a forward pass over `tokens` tokens on one TP rank (modelled):
    tokens x dtype x (FWD_MLP_COPIES x MLP width / tp + FWD_HIDDEN_COPIES x d_model)."""
    per = FWD_MLP_COPIES * -(-_mlp_width(spec) // s.tp) + FWD_HIDDEN_COPIES * spec.d_model
    return dtype(s.model_dtype).nbytes(tokens * per)


def sampler_bytes(spec: ModelSpec, num_reqs: int, s: EngineSettings) -> int:
    """The sampler's profile peak: num_reqs x vocab logits, SAMPLER_BYTES_PER_LOGIT each
    (0.6.5+ and V1; the model-dtype logits alone before)."""
    per = SAMPLER_BYTES_PER_LOGIT
    if s.engine == "v0" and s.version < (6, 5):
        per = dtype(s.model_dtype).nbytes(1) * SAMPLER_BYTES_PER_LOGIT_OLD // 2
    return num_reqs * spec.vocab * per


def activation_peak_bytes(spec: ModelSpec, s: EngineSettings, tokens: int, seqs: int,
                          samples: bool) -> tuple[int, int, int]:
    """(peak, forward, sampler) on one rank: the forward pass's peak, or the kept hidden
    states plus the sampler's, whichever is larger; `samples` for ranks that sample."""
    fwd = forward_activation_bytes(spec, tokens, s)
    if not samples:
        return fwd, fwd, 0
    reqs = min(tokens, seqs)
    samp = sampler_bytes(spec, reqs, s)
    kept = dtype(s.model_dtype).nbytes(tokens * spec.d_model)
    return max(fwd, kept + samp), fwd, samp


def non_torch_bytes(s: EngineSettings) -> int:
    """Non-torch memory vLLM subtracts (calibrated; see the module docstring).

    Counted since a snapshot after the CUDA context and NCCL (V0 0.6.4.post1+, V1
    0.10.1+): NON_TORCH_INCREASE. Whole process (V1 0.7-0.10.0, V0 before 0.6.4):
    CONTEXT_BYTES + COMM_BYTES_PER_RANK x tp when tp > 1.
    """
    v = s.version
    snapshot = (v >= (6, 4)) if s.engine == "v0" else (v >= (10, 1))
    if snapshot:
        return NON_TORCH_INCREASE
    comm = COMM_BYTES_PER_RANK * s.tp if s.tp > 1 else 0
    return CONTEXT_BYTES + NON_TORCH_INCREASE + comm


def cuda_graph_sizes(s: EngineSettings, max_num_seqs: int) -> tuple[int, ...]:
    """Batch sizes vLLM captures (0.11+): 1, 2, 4, then every 8 to 256, every 16 above,
    up to min(2 x max_num_seqs, 512)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    return tuple(x for x in sizes if x <= top)


def cuda_graph_bytes(spec: ModelSpec, s: EngineSettings, max_num_seqs: int) -> int:
    """CUDA-graph memory vLLM subtracts (0.20+, unless enforce_eager; V0 and earlier V1
    capture after sizing the cache, in the 1 - utilization headroom): piecewise and
    full graphs for every capture size x CUDA_GRAPH_BYTES_PER_GRAPH, plus the forward
    activation of the largest size (the graph pool keeps it)."""
    if s.enforce_eager or s.engine == "v0" or s.version < (20, 0):
        return 0
    sizes = cuda_graph_sizes(s, max_num_seqs)
    graphs = 2 * len(sizes)  # FULL_AND_PIECEWISE: a piecewise and a full graph per size
    return graphs * CUDA_GRAPH_BYTES_PER_GRAPH + forward_activation_bytes(spec, max(sizes), s)


# --------------------------------------------------------------------------------
# The whole computation
# --------------------------------------------------------------------------------
@record
class DeviceMemory:
    """One device's memory as the engine plans it (bytes). kv_cache < 0: nothing fits."""

    stage: int
    samples: bool  # this rank runs the sampler in the profile run
    total: int  # driver-visible memory
    budget: int  # total x gpu_memory_utilization (or kv_cache_memory_bytes' own plan)
    weights: int
    activation_peak: int
    forward_activation: int
    sampler: int
    non_torch: int
    cuda_graphs: int
    kv_cache: int  # available KV cache memory
    layers: int
    bytes_per_block: int
    num_blocks: int

    def as_dict(self) -> dict[str, int]:
        """The memory terms, in bytes, in the order vLLM subtracts them."""
        return {"budget": self.budget, "weights": self.weights,
                "activation_peak": self.activation_peak, "non_torch": self.non_torch,
                "cuda_graphs": self.cuda_graphs, "kv_cache": self.kv_cache}


@record
class Capacity:
    """What vLLM would log at start-up, and whether it would start."""

    settings: EngineSettings
    hardware: str
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    groups: tuple[GroupPlan, ...]
    devices: tuple[DeviceMemory, ...]  # one per distinct kind of rank (stage, samples)
    deciding: DeviceMemory  # the rank with the fewest blocks: it sizes every rank
    num_gpu_blocks: int
    kv_cache_tokens: int  # "GPU KV cache size: N tokens" as that version prints it
    max_concurrency: float  # "Maximum concurrency for L tokens per request: X"
    fits: bool  # one max_model_len request fits: the engine starts
    max_model_len_fit: int  # the largest max_model_len that would fit (0: none)
    refusal: str  # vLLM's reason for refusing, "" when it starts
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def memory(self) -> dict[str, int]:
        """Per-device breakdown of the deciding rank, in bytes."""
        return self.deciding.as_dict()


def serving_capacity(spec: ModelSpec, hw: Hardware, s: EngineSettings,
                     scale_bytes: int = 0) -> Capacity:
    """vLLM's start-up arithmetic for `spec` on devices like `hw` with settings `s`.

    Pure: no I/O. Raises KvcalcError for settings the engine would reject before
    sizing memory (tp not dividing the heads, pp above the layer count).
    """
    context = spec.max_context if not s.allow_long_max_model_len else 0
    if context and s.max_model_len > context:
        raise KvcalcError(
            f"max_model_len {s.max_model_len:,} is over {spec.name}'s context of {context:,} "
            f"tokens (the length its config gives); vLLM refuses it, unless the environment "
            f"sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (kvcalc reads it too: positions past the "
            f"context give garbage or NaN)")
    kv_dt = s.model_dtype if s.kv_dtype == "auto" else s.kv_dtype
    state_dt = s.model_dtype if s.mamba_ssm_dtype == "auto" else s.mamba_ssm_dtype
    groups = formulas.cache_groups(spec, kv_dt, s.tp, scale_bytes, state_dtype=state_dt)
    for g in groups:
        if g.kind not in KINDS:
            raise KvcalcError(f"cache group kind {g.kind!r} is not modelled by capacity yet")
    block = _align_block_size(groups, s.block_size)
    groups = _pad_state_pages(groups, block)
    tokens, seqs = default_batch_limits(hw, s)
    in_flight = tokens * (2 if _async_scheduling(s) else 1)
    if s.engine == "v1" and s.version < (27, 0):
        in_flight = tokens
    minor = s.version
    notes: list[str] = []

    sizes = pipeline_layers(spec.layers, s.pp)
    total = _visible(hw)
    if total == hw.memory_bytes and not getattr(hw, "visible_memory_bytes", 0):
        notes.append(f"{hw.name}: no driver-visible memory in the preset; nominal used")
    if s.engine == "v1" and minor >= (20, 0):
        budget = -(-total * s.utilization.numerator // s.utilization.denominator)
    else:
        budget = total * s.utilization.numerator // s.utilization.denominator

    plans_by_stage = []
    devices = []
    for stage, n_layers in enumerate(sizes):
        stage_groups = _scale_groups(groups, spec.layers, n_layers, stage, sizes)
        plans = kv_cache_groups(stage_groups, block, s.max_model_len, in_flight, s.encoder_len)
        plans_by_stage.append(plans)
        if s.engine == "v0" or minor < (8, 0):
            # One group of all layers: a block holds every layer's page.
            per_block = sum(p.page_bytes * p.slots for p in plans)
        else:
            per_block = max(p.page_bytes * p.slots for p in plans) if plans else 0
        last = stage == len(sizes) - 1
        kinds = [True] if (s.engine == "v1" or s.tp == 1) else [True, False]
        for samples in (kinds if last else [False]):
            weights = stage_weight_bytes(spec, s, stage)
            peak, fwd, samp = activation_peak_bytes(spec, s, tokens, seqs, samples)
            nt = non_torch_bytes(s)
            graphs = cuda_graph_bytes(spec, s, seqs)
            if s.kv_cache_memory_bytes is not None:
                avail = s.kv_cache_memory_bytes
            else:
                avail = budget - weights - peak - nt - graphs
            n_blocks = max(avail, 0) // per_block if per_block else 0
            if s.num_gpu_blocks_override is not None:
                n_blocks = s.num_gpu_blocks_override
            devices.append(DeviceMemory(
                stage=stage, samples=samples, total=total, budget=budget, weights=weights,
                activation_peak=peak, forward_activation=fwd, sampler=samp, non_torch=nt,
                cuda_graphs=graphs, kv_cache=avail, layers=n_layers, bytes_per_block=per_block,
                num_blocks=n_blocks))
    deciding = min(devices, key=lambda d: (d.num_blocks, d.kv_cache))
    num_blocks = deciding.num_blocks
    plans = plans_by_stage[deciding.stage]

    # Reported capacity.
    n_groups = max(len(plans), 1)
    per_request = sum(p.blocks_per_request for p in plans) if plans else 1
    if s.engine == "v0" or minor < (8, 0):
        kv_tokens = num_blocks * block
        concurrency = kv_tokens / s.max_model_len
    elif minor < (24, 0):
        kv_tokens = num_blocks // n_groups * block
        concurrency = num_blocks / per_request
    else:
        concurrency = num_blocks / per_request
        kv_tokens = int(concurrency * s.max_model_len)

    # Refusal, and the largest max_model_len that fits.
    if s.engine == "v0":
        fits = s.max_model_len <= num_blocks * block and num_blocks > 0
        largest = num_blocks * block
        refusal = "" if fits else (
            f"The model's max seq len ({s.max_model_len}) is larger than the maximum number "
            f"of tokens that can be stored in KV cache ({largest})")
        if num_blocks <= 0:
            refusal = "No available memory for the cache blocks"
    else:
        need = _request_bytes(plans, block, s.max_model_len, in_flight, s.encoder_len)
        avail = deciding.kv_cache
        fits = avail > 0 and need <= avail
        largest = _largest_fitting_len(plans, block, avail, in_flight, s.encoder_len,
                                       s.max_model_len) if avail > 0 else 0
        if context:
            largest = min(largest, context)  # a length the engine would accept
        if avail <= 0:
            refusal = "No available memory for the cache blocks"
        elif not fits:
            refusal = (f"To serve at least one request with the model's max seq len "
                       f"({s.max_model_len}), {need / GiB:.2f} GiB KV cache is needed, which "
                       f"is larger than the available KV cache memory ({avail / GiB:.2f} GiB). "
                       f"Based on the available memory, the estimated maximum model length "
                       f"is {largest}")
        else:
            refusal = ""
    return Capacity(
        settings=s, hardware=hw.name, block_size=block, max_num_batched_tokens=tokens,
        max_num_seqs=seqs, groups=plans, devices=tuple(devices), deciding=deciding,
        num_gpu_blocks=num_blocks, kv_cache_tokens=kv_tokens, max_concurrency=concurrency,
        fits=fits, max_model_len_fit=largest, refusal=refusal, notes=tuple(notes))


def _request_bytes(plans: tuple[GroupPlan, ...], block: int, length: int, in_flight: int,
                   encoder_len: int | None) -> int:
    """Bytes one request at `length` needs on one rank: every real layer's blocks x page."""
    total = 0
    for p in plans:
        g = CacheGroup(p.kind, p.layers, 0, 0, p.window)
        total += p.layers * p.page_bytes * blocks_per_request(g, block, length, in_flight,
                                                              encoder_len)
    return total


def _largest_fitting_len(plans: tuple[GroupPlan, ...], block: int, avail: int, in_flight: int,
                         encoder_len: int | None, upper: int) -> int:
    """The largest length whose one request fits in `avail` (binary search, as vLLM's
    estimate_max_model_len); at most `upper` when that already fits... or beyond it."""
    lo, hi = 0, max(upper, 1)
    while _request_bytes(plans, block, hi, in_flight, encoder_len) <= avail and hi < MAX_SEQ_LEN:
        lo, hi = hi, min(hi * 2, MAX_SEQ_LEN)
    if _request_bytes(plans, block, hi, in_flight, encoder_len) <= avail:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _request_bytes(plans, block, mid, in_flight, encoder_len) <= avail:
            lo = mid
        else:
            hi = mid
    return lo
