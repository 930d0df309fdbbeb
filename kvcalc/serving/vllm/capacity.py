"""vLLM's start-up arithmetic, whole: the memory budget, what each kind of rank sets
aside, the blocks the rest makes, the capacity the engine reports, and whether it starts.

Facts (quoted, not copied code; see the package docstring for the versions read):

* budget: `torch.cuda.mem_get_info` total x gpu_memory_utilization; from 0.20
  `request_memory` rounds it up (ceil). `kv_cache_memory_bytes` (0.11+) replaces
  the whole computation.
* available KV memory = budget - weights - activation peak of the profile run -
  non-torch memory [- CUDA-graph estimate, subtracted from 0.20 unless
  enforce_eager]. V0 and V1 alike; what "non-torch" covers changed (kvcalc.serving.vllm.memory).
* reported capacity (0.24+): concurrency = num_blocks / sum over groups of
  cdiv(need_g, page_g); "GPU KV cache size" = int(concurrency x max_model_len).
  Up to 0.20 (and V1 0.7-0.20): tokens = num_blocks // groups x block_size. V0:
  "# GPU blocks", tokens = blocks x block_size, concurrency = tokens / len.
* refusal: V1 refuses when one max_model_len request needs more bytes than are
  available (`check_enough_kv_cache_memory`) and names the largest length that
  fits (`estimate_max_model_len`); V0 refuses when max_model_len exceeds
  blocks x block_size.
"""

from __future__ import annotations

from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import dtype
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.formulas.cache import cache_groups
from kvcalc.serving.layout import groups_on_stage, pipeline_layers
from kvcalc.serving.vllm.block_size import engine_block_size
from kvcalc.serving.vllm.blocks import (GroupPlan, kv_cache_groups, largest_fitting_len,
                                        pad_state_pages, request_bytes)
from kvcalc.serving.vllm.memory import activation_peak_bytes, cuda_graph_bytes, non_torch_bytes
from kvcalc.serving.vllm.settings import (GiB, EngineSettings, async_scheduling_on,
                                          default_batch_limits, device_total_bytes)
from kvcalc.serving.vllm.state import (StateCache, engine_state_groups, state_cache,
                                       unpaged_kinds, why_unpaged)
from kvcalc.serving.speculative import merge_groups
from kvcalc.serving.weights import stage_weights
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["Capacity", "DeviceMemory", "budget_bytes", "cannot_hold_weights", "serving_capacity"]


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
    block_size: int | None  # None where a kind's paging is not modelled
    max_num_batched_tokens: int
    max_num_seqs: int
    groups: tuple[GroupPlan, ...]
    devices: tuple[DeviceMemory, ...]  # one per distinct kind of rank (stage, samples)
    deciding: DeviceMemory  # the rank with the fewest blocks: it sizes every rank
    # None, with max_model_len_fit, where a state kind's paging is not modelled (a note says)
    num_gpu_blocks: int | None
    kv_cache_tokens: int | None  # "GPU KV cache size: N tokens" as that version prints it
    max_concurrency: float | None  # "Maximum concurrency for L tokens per request: X"
    fits: bool  # one max_model_len request fits: the engine starts
    max_model_len_fit: int | None  # the largest max_model_len that would fit (0: none)
    refusal: str  # vLLM's reason for refusing, "" when it starts
    notes: tuple[str, ...] = field(default_factory=tuple)
    # What a count at another length reuses (kvcalc.serving.vllm.verdict): tokens in flight
    # per request, the state pages' rule, and one max_model_len request's bytes.
    in_flight: int = 0
    state: StateCache | None = None
    request_bytes: int = 0
    # --speculative-config: the draft's method, weights and KV bytes a token (empty: none)
    draft: dict = field(default_factory=dict)
    lora_bytes: int = 0  # --enable-lora: the adapters' slots, inside the weights
    # a vision model's multimodal profile (kvcalc.serving.vllm.encoder), None: none run
    encoder: object = None

    @property
    def memory(self) -> dict[str, int]:
        """Per-device breakdown of the deciding rank, in bytes."""
        return self.deciding.as_dict()


def budget_bytes(hw: Hardware, s: EngineSettings) -> int:
    """The memory the engine may fill on one device: its total x gpu_memory_utilization,
    rounded up from 0.20 (V1), down before."""
    total, (num, den) = device_total_bytes(hw), s.utilization
    if s.rules.budget_rounds_up():
        return -(-total * num // den)
    return total * num // den


def _weights(spec: ModelSpec, s: EngineSettings, stage: int) -> int:
    """One device's weights on pipeline stage `stage`: a MoE model's routed experts over
    tp x dp GPUs (`ParallelConfig.data_parallel_size`: "MoE layers will be sharded
    according to the product of the tensor, prefill-context, and data parallel sizes"),
    whole experts with expert parallelism (`FusedMoEParallelConfig.make`: ep_size = the
    flattened tp x dp, tp_size = 1), the rest over tp."""
    return stage_weights(spec, s.weights, tp=s.tp, pp=s.pp, stage=stage,
                         expert_split=s.tp * s.dp, whole_experts=s.expert_parallel)


def cannot_hold_weights(spec: ModelSpec, hw: Hardware, s: EngineSettings) -> bool:
    """True when the first stage's weights alone exceed the budget, so the engine cannot
    start whatever its lengths (no KV memory is left), told without the whole count.
    False wherever that does not decide it: a kv_cache_memory_bytes plan sizes the cache
    without the budget, and a num_gpu_blocks override gives V0 blocks it lacks."""
    if s.kv_cache_memory_bytes is not None or s.num_gpu_blocks_override is not None:
        return False
    return _weights(spec, s, 0) > budget_bytes(hw, s)


def serving_capacity(spec: ModelSpec, hw: Hardware, s: EngineSettings, *,
                     kv_scale_bytes: int = 0) -> Capacity:
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
    groups = cache_groups(spec, kv_dt, s.tp, kv_scale_bytes, state_dtype=state_dt)
    draft = speculative_draft(spec, s)
    if draft is not None:
        groups = merge_groups(groups, draft.cache_groups(kv_dt, s.tp, kv_scale_bytes,
                                                         state_dtype=state_dt))
    if s.engine == "v1":  # state pages as vLLM's allocator sizes them
        groups = engine_state_groups(groups, dtype(s.model_dtype), dtype(state_dt), s.tp,
                                     ssm_auto=s.mamba_ssm_dtype == "auto")
    state = state_cache(groups, hw, s, s.prefix_caching)
    block = engine_block_size(groups, spec, hw, s, state)
    groups = pad_state_pages(groups, block)
    tokens, seqs = default_batch_limits(hw, s)
    rules = s.rules
    in_flight = rules.in_flight(tokens, async_scheduling_on(s))
    notes: list[str] = []
    unpaged = unpaged_kinds(groups)
    if unpaged:
        notes.append(f"{why_unpaged(groups)}: KV blocks, cache tokens, concurrency and the "
                     f"longest length that fits are not modelled")
    if state.mode == "all":
        notes.append(f"vLLM {s.vllm_version} caches every state block (mamba_cache_mode "
                     f"'all'); its block size, aligned to the Mamba chunk size, is not "
                     f"modelled")

    if s.dp > 1 or s.expert_parallel:
        notes += _parallel_note(spec, s)
    if draft is not None:
        notes.append(_draft_note(draft, s))
    lora_slot_bytes, lora_notes = lora_weights(spec, s)
    notes += lora_notes
    from kvcalc.serving.vllm.encoder import (ENCODER_FAMILIES, encoder_profile,
                                             tower_data_bytes)

    encoder = encoder_profile(spec, s, tokens, seqs)
    if encoder is not None:
        notes.append(f"multimodal profile: \"{encoder.log_line()}\" ({encoder.tokens_per_item:,} "
                     f"tokens an image at most); the encoder's peak, "
                     f"{encoder.encoder_peak:,} B, and its kept outputs, "
                     f"{encoder.outputs:,} B, are in the activation peak (modelled)")
    elif spec.extra.get("image") is not None and rules.encoder_profiled():
        family = spec.extra["image"]["family"]
        notes.append("--limit-mm-per-prompt allows no images: no encoder cache nor profile"
                     if family in ENCODER_FAMILIES else
                     f"{family}: vLLM's multimodal profile (encoder budget, vision "
                     f"activations) is not modelled")
    sizes = pipeline_layers(spec.layers, s.pp)
    total = device_total_bytes(hw)
    if total == hw.memory_bytes and not getattr(hw, "visible_memory_bytes", 0):
        notes.append(f"{hw.name}: no driver-visible memory in the preset; nominal used")
    budget = budget_bytes(hw, s)

    plans_by_stage = []
    devices = []
    for stage, n_layers in enumerate(sizes):
        stage_groups = groups_on_stage(groups, spec.layers, n_layers, stage, sizes)
        plans = kv_cache_groups(stage_groups, block, s.max_model_len, in_flight, s.encoder_len,
                                state, unify_pages=not rules.blocks_of_all_layers(),
                                uniform_type=rules.uniform_type_groups())
        plans_by_stage.append(plans)
        if rules.blocks_of_all_layers():
            # One group of all layers: a block holds every layer's page.
            per_block = sum(p.page_bytes * p.slots for p in plans)
        else:
            per_block = max(p.page_bytes * p.slots for p in plans) if plans else 0
        last = stage == len(sizes) - 1
        kinds = [True] if (s.engine == "v1" or s.tp == 1) else [True, False]
        for samples in (kinds if last else [False]):
            weights = _weights(spec, s, stage)
            if draft is not None:
                weights += draft.weight_bytes(s.weights, s.tp)
            weights += lora_slot_bytes
            if stage == 0:  # --mm-encoder-tp-mode data: the tower whole on every rank
                weights += tower_data_bytes(spec, s)
            peak, fwd, samp = activation_peak_bytes(spec, s, tokens, seqs, samples)
            if encoder is not None and stage == 0:  # the tower lives on the first stage
                peak = max(peak + encoder.outputs, encoder.encoder_peak)
            if s.activation_peak_bytes is not None:  # measured (a calibration file)
                peak = s.activation_peak_bytes
            nt = non_torch_bytes(s, hw) if s.non_torch_bytes is None else s.non_torch_bytes
            graphs = cuda_graph_bytes(spec, s, seqs, tokens)
            if s.cuda_graph_bytes is not None:
                graphs = s.cuda_graph_bytes
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
    kv_tokens, concurrency = rules.reported(num_blocks, n_groups, per_request, block,
                                            s.max_model_len)

    # Refusal, and the largest max_model_len that fits.
    need = request_bytes(plans, block, s.max_model_len, in_flight, s.encoder_len, state)
    if s.engine == "v0":
        fits = s.max_model_len <= num_blocks * block and num_blocks > 0
        largest = num_blocks * block
        refusal = "" if fits else (
            f"The model's max seq len ({s.max_model_len}) is larger than the maximum number "
            f"of tokens that can be stored in KV cache ({largest})")
        if num_blocks <= 0:
            refusal = "No available memory for the cache blocks"
    else:
        avail = deciding.kv_cache
        fits = avail > 0 and need <= avail
        largest = largest_fitting_len(plans, block, avail, in_flight, s.encoder_len,
                                      s.max_model_len, state) if avail > 0 else 0
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
    if unpaged:  # the memory before the cache stands; what the cache holds is not known
        num_blocks = kv_tokens = concurrency = largest = block = None
        fits = deciding.kv_cache > 0
        refusal = "" if fits else "No available memory for the cache blocks"
    return Capacity(
        settings=s, hardware=hw.name, block_size=block, max_num_batched_tokens=tokens,
        max_num_seqs=seqs, groups=plans, devices=tuple(devices), deciding=deciding,
        num_gpu_blocks=num_blocks, kv_cache_tokens=kv_tokens, max_concurrency=concurrency,
        fits=fits, max_model_len_fit=largest, refusal=refusal, notes=tuple(notes),
        in_flight=in_flight, state=state, request_bytes=need,
        draft=_draft_fields(draft, s, kv_dt, kv_scale_bytes, state_dt),
        lora_bytes=lora_slot_bytes, encoder=encoder)


def _draft_fields(draft, s: EngineSettings, kv_dt, scale: int, state_dt) -> dict:
    """The draft in the count's JSON: its method, its weights (inside vLLM's "Model
    loading took"), and the bytes a token takes in its layers (inside "GPU KV cache")."""
    if draft is None:
        return {}
    per_token = sum(g.layers * g.token_bytes
                    for g in draft.cache_groups(kv_dt, s.tp, scale, state_dtype=state_dt))
    return {**draft.as_dict(), "draft_weights": draft.weight_bytes(s.weights, s.tp),
            "draft_kv_bytes_per_token": per_token}


def speculative_draft(spec: ModelSpec, s: EngineSettings):
    """The draft --speculative-config names (kvcalc.serving.speculative.Draft), or None.
    Its weights load inside `GPUModelRunner.load_model`'s DeviceMemoryProfiler, after
    the target's (`self.drafter.load_model(self.model)`), so "Model loading took" holds
    them; its attention layers are in the forward context `get_kv_cache_spec` reads, so
    they join the target's KV cache groups (read in 0.10.1.1, 0.11.0, 0.12.0, 0.33.0;
    `Rules.speculative_methods`)."""
    if s.speculative_config is None:
        return None
    from kvcalc.serving.speculative import vllm_draft

    methods = s.rules.speculative_methods()
    if not methods:
        raise ParameterError("{speculative_config}: kvcalc counts speculative decoding in "
                             "vLLM's V1 engine from 0.10.1.1; vLLM " + literal(
                                 f"{s.vllm_version} ({s.engine.upper()}) is not read"),
                             "speculative_config")
    if s.pp > 1:
        raise ParameterError("{speculative_config} with {pp} over 1: where vLLM puts the "
                             "draft over pipeline stages is not counted; give {pp} 1",
                             "speculative_config", "pp")
    return vllm_draft(spec, s.speculative_config, methods)


def lora_weights(spec: ModelSpec, s: EngineSettings) -> tuple[int, list[str]]:
    """--enable-lora's slots on one device (kvcalc.serving.lora), inside "Model loading
    took" (`GPUModelRunner.load_model` wraps the model inside its DeviceMemoryProfiler),
    and the notes that go with them; (0, []) without --enable-lora."""
    given = [n for n in ("max_loras", "max_lora_rank", "lora_target_modules")
             if getattr(s, n) is not None] + (["lora_dtype"] if s.lora_dtype != "auto" else [])
    if not s.enable_lora:
        if given:
            raise ParameterError("{" + given[0] + "} needs {enable_lora}", given[0],
                                 "enable_lora")
        return 0, []
    from kvcalc.serving.lora import RANKS, LoraSlots, lora_bytes, lora_modules

    rules = s.rules
    if not rules.lora_counted():
        raise ParameterError("{enable_lora}: kvcalc counts vLLM's LoRA slots in the V1 "
                             "engine from 0.10.1.1; vLLM " + literal(
                                 f"{s.vllm_version} ({s.engine.upper()}) is not read"),
                             "enable_lora")
    if s.pp > 1:
        raise ParameterError("{enable_lora} with {pp} over 1: the slots per pipeline stage "
                             "are not counted; give {pp} 1", "enable_lora", "pp")
    if s.lora_target_modules is not None and not rules.lora_target_modules_flag():
        raise ParameterError("{lora_target_modules} is vLLM's from 0.19; vLLM "
                             + literal(s.vllm_version) + " adapts every linear module",
                             "lora_target_modules")
    rank = 16 if s.max_lora_rank is None else s.max_lora_rank  # `LoRAConfig`
    if rank not in RANKS:
        raise ParameterError("{max_lora_rank} must be one of " + ", ".join(map(str, RANKS))
                             + f" (vLLM's MaxLoRARanks), got {rank}", "max_lora_rank")
    extra, pad = rules.lora_extra_vocab()
    slots = LoraSlots(slots=1 if s.max_loras is None else s.max_loras, rank=rank,
                      target_modules=lora_modules(s.lora_target_modules), dtype=s.lora_dtype,
                      embeddings=True, extra_vocab=extra, vocab_padding=pad)
    nbytes, notes = lora_bytes(spec, slots, tp=s.tp, model_dtype=s.model_dtype)
    return nbytes, [f"LoRA: {slots.slots} adapter slot(s) of rank {rank}, {nbytes:,} B in "
                    f"\"Model loading took\"", *notes]


def _draft_note(draft, s: EngineSettings) -> str:
    if draft.spec is None:
        return (f"speculative decoding ({draft.method}, {draft.num_speculative_tokens} "
                f"tokens): no draft weights or cache")
    return (f"speculative decoding ({draft.method}, {draft.num_speculative_tokens} tokens): "
            f"the draft's {draft.weight_bytes(s.weights, s.tp):,} B of weights are in "
            f"\"Model loading took\", its {draft.layers} layer(s) in the KV cache groups")


def _parallel_note(spec: ModelSpec, s: EngineSettings) -> list[str]:
    """What data and expert parallelism change, and what kvcalc leaves out of them."""
    moe = any(getattr(layer.mlp, "experts", 0) for layer, _ in spec.groups())
    if not moe:
        return [f"data parallel: {s.dp} replicas of {s.tp * s.pp} GPU(s), each with this "
                f"count and a KV pool of its own"] if s.dp > 1 else []
    how = (f"whole experts over {s.tp * s.dp} GPUs (expert parallel)" if s.expert_parallel
           else f"every expert sliced over {s.tp * s.dp} GPUs")
    return [f"data parallel {s.dp}: the routed experts lie as {how}, the rest of the "
            f"weights and the KV pool per replica of {s.tp * s.pp} GPU(s); the buffers of "
            f"the MoE layers' exchange between ranks (all-gather or all-to-all) are not "
            f"modelled"]
