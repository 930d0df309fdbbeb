"""Frozen descriptions of what kvcalc reasons about: models and hardware.

Everything here is plain data plus validation. Sizes are Python ints; nothing is
derived (head_dim is a field of its own, never d_model // heads).
"""

from __future__ import annotations

import dataclasses
import re
from itertools import groupby
from dataclasses import field

from kvcalc._record import record
from kvcalc.dtypes import MAX_LAYERS, MAX_WIDTH, check_size, dtype
from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention, CrossAttention, Dense, Latent, Layer, Run
from kvcalc.layers import MoE as MoEMLP

@record
class MLA:
    """Multi-head latent attention (DeepSeek-V2 section 2.1, DeepSeek-V3 config).

    The cache holds one compressed latent (kv_lora_rank) plus one shared RoPE key
    (qk_rope_head_dim) per token per layer, for all heads together.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: queries use a full-rank d_model x heads*qk_head_dim matrix


@record
class MoE:
    """Mixture of experts replacing the MLP of every layer but the first `dense_layers`."""

    experts: int  # routed experts per MoE layer
    active: int  # routed experts each token goes to
    expert_d_ff: int  # width of one routed expert's MLP
    shared_experts: int = 0  # always-on experts of width expert_d_ff (DeepSeek)
    dense_layers: int = 0  # leading layers with an ordinary MLP of width d_ff
    router_bias: bool = False  # a per-expert bias (DeepSeek-V3's e_score_correction_bias)


# Mixers that attend (kvcalc.layers cache kinds), and the state mixers' names in words.
_ATTENDING = ("full", "sliding", "chunked", "mla")
_MIXER_NAMES = {"mamba": "Mamba", "mamba2": "Mamba-2", "linear": "Gated DeltaNet",
                "conv": "short convolution"}

NORM_KINDS = ("rmsnorm", "layernorm")
MLP_KINDS = ("gated", "plain")


@record
class ModelSpec:
    """One transformer, as its config file describes it.

    Counts are for the decoder stack unless `encoder_layers` is set, in which case
    the model is an encoder-decoder (T5) whose decoder layers also cross-attend
    (`Layer.cross`); its encoder stack is then `encoder_runs`, derived like `runs`.
    """

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    v_head_dim: int = 0  # 0: same as head_dim
    mlp: str = "gated"  # gated: gate, up, down (SwiGLU/GeGLU); plain: up, down
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    norm: str = "rmsnorm"  # rmsnorm: weight only; layernorm: weight and bias
    norm_bias: bool = False  # layernorm bias (False for T5-style or bias-free layernorms)
    norms_per_layer: int = 2  # 1 for parallel attention+MLP sharing a norm, 4 for Gemma 2
    final_norm: bool = True
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3), head_dim weights each
    tied_embeddings: bool = False
    learned_pos: int = 0  # rows of a learned position table (GPT-2/3), 0 for RoPE/ALiBi
    relative_attention_buckets: int = 0  # T5: a buckets x heads bias table per stack
    max_context: int = 0  # 0: unknown
    sliding_window: int = 0  # 0: full attention in every layer
    global_every: int = 0  # 0: all layers slide; n: every n-th layer is global (Gemma 2: 2)
    encoder_layers: int = 0  # T5: encoder stack depth (decoder depth is `layers`)
    mla: MLA | None = None
    moe: MoE | None = None
    source: str = ""
    notes: str = ""
    published_params: int = 0  # the headline count the source gives, for checks
    extra: dict = field(default_factory=dict, compare=False, hash=False, repr=False)
    # The decoder, layer by layer, as runs of alike layers (kvcalc.layers.Run). Empty:
    # built from the flat fields above (one uniform layer, windows and MoE as flagged).
    # Given: it is the model; the flat fields then describe its attention layers for
    # display and for the single-layer questions (measure, the attention step).
    runs: tuple = ()
    embedding_norm: bool = False  # a norm right after the embedding (BLOOM)
    extra_params: int = 0  # parameters outside the decoder layers not named above

    def __post_init__(self) -> None:
        if not self.v_head_dim:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        _positive(self, "layers", MAX_LAYERS)
        for name in ("d_model", "heads", "kv_heads", "head_dim", "d_ff", "vocab", "v_head_dim"):
            _positive(self, name, MAX_WIDTH)
        for name in ("learned_pos", "max_context", "sliding_window", "global_every",
                     "encoder_layers", "relative_attention_buckets", "published_params"):
            if getattr(self, name) < 0:
                raise KvcalcError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.mlp not in MLP_KINDS:
            raise KvcalcError(f"mlp must be one of {MLP_KINDS}, got {self.mlp!r}")
        if self.norm not in NORM_KINDS:
            raise KvcalcError(f"norm must be one of {NORM_KINDS}, got {self.norm!r}")
        if not 0 <= self.norms_per_layer <= 8:
            raise KvcalcError(f"norms_per_layer must be 0..8, got {self.norms_per_layer}")
        if self.kv_heads > self.heads:
            raise KvcalcError(
                f"kv_heads ({self.kv_heads}) cannot exceed heads ({self.heads})"
            )
        if self.heads % self.kv_heads:
            raise KvcalcError(
                f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})"
            )
        if self.global_every and not self.sliding_window:
            raise KvcalcError("global_every needs a sliding_window")
        if self.moe is not None:
            m = self.moe
            if not 1 <= m.active <= m.experts:
                raise KvcalcError(f"moe.active must be 1..experts ({m.experts}), got {m.active}")
            if not 0 <= m.dense_layers <= self.layers:
                raise KvcalcError("moe.dense_layers must be between 0 and layers")
            check_size("moe.experts", m.experts, MAX_WIDTH)
            check_size("moe.expert_d_ff", m.expert_d_ff, MAX_WIDTH)
            if m.shared_experts < 0 or m.shared_experts > MAX_WIDTH:
                raise KvcalcError(f"moe.shared_experts must be 0..{MAX_WIDTH}, got {m.shared_experts}")
        if self.mla is not None:
            for f in dataclasses.fields(MLA):
                v = getattr(self.mla, f.name)
                if f.name == "q_lora_rank" and v == 0:
                    continue  # full-rank queries
                check_size(f"mla.{f.name}", v, MAX_WIDTH)
        if self.runs:
            if sum(r.count for r in self.runs) != self.layers:
                raise KvcalcError(
                    f"the layer runs add up to {sum(r.count for r in self.runs)} layers, "
                    f"not layers={self.layers}")
        else:
            object.__setattr__(self, "runs", _uniform_runs(self))
        object.__setattr__(self, "_groups", _merge(self.runs))
        object.__setattr__(self, "encoder_runs", _encoder_runs(self))

    # --- the layers --------------------------------------------------------------
    def groups(self) -> tuple:
        """((Layer, count), ...): equal layers merged, first appearance first. Formulas
        cost O(distinct kinds), not O(layers)."""
        return self._groups

    def layer_list(self) -> list:
        """Every decoder layer in order (for display and pipeline stages)."""
        return [r.layer for r in self.runs for _ in range(r.count)]

    @property
    def uniform(self) -> bool:
        """One kind of layer throughout (windows, MoE and MLA aside, today's flat model)."""
        return len(self._groups) == 1

    @property
    def attention_mixer(self):
        """The attention the flat fields describe, as a layer kind (kvcalc.layers): a
        full-attention `Attention`, or `Latent` for MLA: the uniform decoder's and the
        encoder's layers are built from it (formulas.kv_bytes_per_token_per_layer asks it too)."""
        if self.mla is not None:
            m = self.mla
            return Latent(heads=self.heads, kv_lora_rank=m.kv_lora_rank,
                          rope_dim=m.qk_rope_head_dim, nope_dim=m.qk_nope_head_dim,
                          v_dim=m.v_head_dim, q_lora_rank=m.q_lora_rank, bias=self.qkv_bias)
        return Attention(heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim,
                         v_head_dim=self.v_head_dim, qkv_bias=self.qkv_bias,
                         out_bias=self.out_bias, qk_norm=2 * self.head_dim if self.qk_norm else 0)

    # --- derived counts (pure, cheap) -------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads sharing one K/V head: 1 for MHA, heads for MQA."""
        return self.heads // self.kv_heads

    @property
    def attention_free(self) -> bool:
        """No layer attends (Mamba, Falcon-Mamba): a constant state per sequence and no
        K/V heads; heads, kv_heads and head_dim are then placeholders."""
        return not any(layer.mixer.cache_kind in _ATTENDING for layer, _ in self._groups)

    @property
    def attention_kind(self) -> str:
        """MHA, GQA, MQA, MLA, or "none" for a model without attention."""
        if self.attention_free:
            return "none"
        if self.mla is not None:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        if self.kv_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def mixing(self) -> str:
        """What mixes tokens, in words: 'GQA, 8 K/V heads', 'MLA', or for a model
        without attention 'Mamba, no attention, constant state'."""
        if self.attention_free:
            return f"{self.state_mixers}, no attention, constant state"
        if self.mla is not None:
            return "MLA"
        return f"{self.attention_kind}, {self.kv_heads} K/V heads"

    @property
    def state_mixers(self) -> str:
        """The state mixers' names, in layer order: 'Mamba', 'Mamba-2 + short convolution'."""
        kinds = dict.fromkeys(_MIXER_NAMES.get(layer.mixer.kind, layer.mixer.kind)
                              for layer, _ in self._groups
                              if layer.mixer.cache_kind not in (*_ATTENDING, "none"))
        return " + ".join(kinds) or "no mixer"

    @property
    def sliding_layers(self) -> int:
        """Layers whose attention (and cache) is limited to a window of tokens."""
        return sum(n for layer, n in self._groups if layer.mixer.cache_kind == "sliding")

    @property
    def moe_layers(self) -> int:
        return sum(n for layer, n in self._groups if layer.mlp is not None and layer.mlp.kind == "moe")

    def layers_of(self, cache_kind: str) -> int:
        """Decoder layers whose cache is of `cache_kind` (full, sliding, chunked, mla, state)."""
        return sum(n for layer, n in self._groups if layer.mixer.cache_kind == cache_kind)

    def with_kv_heads(self, kv_heads: int) -> "ModelSpec":
        """The same model with another number of K/V heads (its GQA/MQA/MHA variant):
        every attention layer with the model's K/V head count takes the new one."""
        if self.mla is not None:
            raise KvcalcError(f"{self.name} uses MLA: it has no K/V heads to change")
        name = _variant_name(self.name, kv_heads, self.heads)
        if not self.extra.get("explicit_runs"):
            return self.replace(kv_heads=kv_heads, name=name)
        def swap(layer):
            m = layer.mixer
            if isinstance(m, Attention) and m.kv_heads == self.kv_heads:
                if m.heads % kv_heads:
                    raise KvcalcError(
                        f"heads ({m.heads}) must be divisible by kv_heads ({kv_heads})")
                return dataclasses.replace(layer, mixer=m.with_kv_heads(kv_heads))
            return layer

        runs = tuple(Run(swap(r.layer), r.count) for r in self.runs)
        return dataclasses.replace(self, kv_heads=kv_heads, name=name, runs=runs)

    def replace(self, **changes) -> "ModelSpec":
        """A copy with fields changed. A model built from flat fields is rebuilt from
        them; one described layer by layer keeps its runs (changing its shape through
        the flat fields would silently disagree with them, so that is refused)."""
        if self.extra.get("explicit_runs"):
            shape = set(changes) - {"name", "source", "notes", "published_params", "extra",
                                    "max_context", "kv_heads", "runs"}
            if shape:
                raise KvcalcError(
                    f"{self.name} is described layer by layer: {', '.join(sorted(shape))} "
                    "cannot be changed by a flag")
        elif "runs" not in changes:
            changes["runs"] = ()
        return dataclasses.replace(self, **changes)


def _uniform_runs(spec: "ModelSpec") -> tuple:
    """Runs from the flat fields: MoE after `moe.dense_layers` dense layers; a
    sliding window on every layer, or on all but every `global_every`-th (layer i
    is global when (i + 1) % global_every == 0: Gemma 2's odd layers)."""
    full = spec.attention_mixer
    sliding = (dataclasses.replace(full, kind="sliding", window=spec.sliding_window)
               if spec.sliding_window and spec.mla is None else full)
    gated = spec.mlp == "gated"
    dense = Dense(spec.d_ff, gated, spec.mlp_bias)
    mlps = [dense] * spec.layers
    # An encoder-decoder's decoder layers cross-attend too, behind a norm of their own.
    cross = _cross_attention(spec)
    norms = spec.norms_per_layer + (cross is not None)
    if spec.moe is not None:
        e = spec.moe
        moe = MoEMLP(experts=e.experts, active=e.active, expert_d_ff=e.expert_d_ff,
                     shared_experts=e.shared_experts, router_bias=e.router_bias, gated=gated,
                     expert_bias=spec.mlp_bias)
        mlps = [dense] * e.dense_layers + [moe] * (spec.layers - e.dense_layers)
    mixers = [sliding if spec.sliding_window and not (spec.global_every and (i + 1) % spec.global_every == 0)
              else full for i in range(spec.layers)]
    # Equal neighbours are the same objects here: group them before making Layers.
    return tuple(Run(Layer(mx, mlp, norms, cross), sum(1 for _ in same))
                 for (mx, mlp), same in groupby(zip(mixers, mlps)))


def _cross_attention(spec: "ModelSpec") -> CrossAttention | None:
    """T5's cross-attention: the flat fields' heads over the encoder's output."""
    if not spec.encoder_layers:
        return None
    return CrossAttention(heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim,
                          v_head_dim=spec.v_head_dim, qkv_bias=spec.qkv_bias,
                          out_bias=spec.out_bias, qk_norm=2 * spec.head_dim if spec.qk_norm else 0)


def _encoder_runs(spec: "ModelSpec") -> tuple:
    """T5's encoder stack, as runs of layers: the flat fields' attention (bidirectional)
    and MLP; () for a decoder-only model."""
    if not spec.encoder_layers:
        return ()
    mlp = Dense(spec.d_ff, spec.mlp == "gated", spec.mlp_bias)
    return (Run(Layer(spec.attention_mixer, mlp, spec.norms_per_layer), spec.encoder_layers),)


def compress(layers: list) -> tuple:
    """Consecutive equal layers as Runs."""
    return tuple(Run(layer, sum(1 for _ in same)) for layer, same in groupby(layers))


def _merge(runs: tuple) -> tuple:
    counts: dict = {}
    for r in runs:
        counts[r.layer] = counts.get(r.layer, 0) + r.count
    return tuple(counts.items())


_VARIANT_SUFFIX = re.compile(r"\[(?:MHA|MQA|GQA-[0-9]+)\]$")


def base_name(name: str) -> str:
    """The name without its attention-variant suffix: 'gpt3[MQA]' -> 'gpt3'; other
    brackets stay ('llama2-7b[layers=2][GQA-8]' -> 'llama2-7b[layers=2]')."""
    return _VARIANT_SUFFIX.sub("", name)


def _variant_name(name: str, kv_heads: int, heads: int) -> str:
    base = base_name(name)
    kind = "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else f"GQA-{kv_heads}"
    return f"{base}[{kind}]"


def _positive(obj: object, name: str, upper: int) -> None:
    check_size(name, getattr(obj, name), upper)


@record
class Hardware:
    """One accelerator (or CPU socket) from its datasheet.

    FLOP/s are dense (no 2:4 sparsity); `flops_per_s` maps a dtype name to that
    dtype's dense peak. Bandwidth is in decimal bytes/s as datasheets give it
    (3.35 TB/s = 3_350_000_000_000). Capacity is in bytes as the chips hold it:
    HBM comes in binary sizes, so the H100's "80GB" is 80 GiB = 85_899_345_920
    bytes (each preset's notes give the usable share the driver leaves).
    """

    name: str
    memory_bytes: int
    memory_bandwidth_bytes_per_s: int
    flops_per_s: dict[str, int]
    l2_bytes: int = 0
    sparse_flops_per_s: dict[str, int] = field(default_factory=dict)
    source: str = ""
    notes: str = ""
    # What a process sees: torch.cuda.mem_get_info()'s total (the driver keeps the rest),
    # the base of vLLM's gpu_memory_utilization. 0: unknown (memory_bytes is used).
    visible_memory_bytes: int = 0
    visible_memory_source: str = ""  # the log or nvidia-smi/torch output it comes from
    # Device-to-device bandwidth per GPU, one direction, decimal bytes/s (NVLink,
    # Infinity Fabric, or PCIe for cards without a GPU link). 0: unknown.
    interconnect_bandwidth_bytes_per_s: int = 0
    interconnect: str = ""  # its name, e.g. "NVLink 4 (18 links)"
    # Seconds one small all-reduce takes over that interconnect (its fixed cost, what a
    # decode step's few-KB messages pay each time), as published; 0: unknown.
    allreduce_latency_s: float = 0.0
    allreduce_latency_source: str = ""
    # Dense FP4 (NVFP4/MXFP4) tensor peak, FLOP/s; 0 where the chip has no FP4 unit.
    # Kept apart from flops_per_s because kvcalc has no fp4 storage dtype.
    fp4_flops_per_s: int = 0

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise KvcalcError(f"hardware {self.name}: {name} must be a positive integer")
        for name in ("visible_memory_bytes", "interconnect_bandwidth_bytes_per_s",
                     "fp4_flops_per_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise KvcalcError(f"hardware {self.name}: {name} must be an integer >= 0")
        lat = self.allreduce_latency_s
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not 0 <= lat < 1:
            raise KvcalcError(f"hardware {self.name}: allreduce_latency_s must be seconds in "
                              "[0, 1), e.g. 9.5e-6")
        if self.visible_memory_bytes > self.memory_bytes:
            raise KvcalcError(f"hardware {self.name}: visible_memory_bytes exceeds memory_bytes")
        if not self.flops_per_s:
            raise KvcalcError(f"hardware {self.name}: flops_per_s needs at least one dtype")
        for key, v in {**self.flops_per_s, **self.sparse_flops_per_s}.items():
            dtype(key)  # validates the name
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise KvcalcError(f"hardware {self.name}: flops_per_s.{key} must be a positive integer")

    @property
    def usable_memory_bytes(self) -> int:
        """Driver-visible memory when the preset knows it, else the nominal capacity."""
        return self.visible_memory_bytes or self.memory_bytes

    def peak_flops(self, dtype_name: str) -> int:
        """Dense peak for a dtype; falls back to the closest wider type the chip has.

        int4 falls back to int8, fp8 to fp16/bf16, fp16 to bf16 and back, bf16 to
        fp32: a chip without a native unit runs the wider one.
        """
        fallbacks = {
            "int4": ("int4", "int8", "fp8", "bf16", "fp16", "fp32"),
            "int8": ("int8", "fp8", "bf16", "fp16", "fp32"),
            "fp8": ("fp8", "bf16", "fp16", "fp32"),
            "fp16": ("fp16", "bf16", "fp32"),
            "bf16": ("bf16", "fp16", "fp32"),
            "fp32": ("fp32",),
        }
        for name in fallbacks[dtype(dtype_name).name]:
            if name in self.flops_per_s:
                return self.flops_per_s[name]
        raise KvcalcError(f"hardware {self.name} gives no FLOP/s usable for {dtype_name}")
