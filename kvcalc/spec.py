"""Frozen descriptions of what kvcalc reasons about: models and hardware.

Everything here is plain data plus validation. Sizes are Python ints; head_dim is a
field of its own, never d_model // heads. A model's decoder is its runs of layers
(kvcalc.layers); its flat views (mla, sliding_window) are read from them.
"""

from __future__ import annotations

import dataclasses
import re
from itertools import groupby
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_LAYERS, MAX_WIDTH, check_size, dtype
from kvcalc.errors import KvcalcError
from kvcalc.layers.hyper_connections import HyperConnections
from kvcalc.layers import Attention, HeadShape, Latent, Layer, Run, head_shape
from kvcalc.layers import MoE as MoEMLP
from kvcalc.layers.uniform import check_recipe as _check_recipe, encoder_runs as _encoder_runs
from kvcalc.layers.uniform import uniform_runs as _uniform_runs

# The state mixers' names in words.
_MIXER_NAMES = {"mamba": "Mamba", "mamba2": "Mamba-2", "linear": "Gated DeltaNet",
                "conv": "short convolution", "lightning": "lightning attention",
                "kda": "Kimi Delta Attention", "rglru": "RG-LRU", "rwkv": "RWKV",
                "mlstm": "mLSTM"}

NORM_KINDS = ("rmsnorm", "layernorm")
MLP_KINDS = ("gated", "plain")


@record
class Recipe:
    """What `ModelSpec.uniform` builds a model's layers from beyond the spec's own fields
    (heads, d_ff, norms_per_layer, ...): windows, latent attention and experts.

    A spec keeps it so that a flag can reshape the model (`--layers 2`) by building its
    layers again; every number is read from the layers, never from here.
    """

    sliding_window: int = 0  # 0: full attention in every layer
    global_every: int = 0  # 0: all layers slide; n: every n-th layer is global (Gemma 2: 2)
    mla: Latent | None = None  # every layer's attention (DeepSeek), with the spec's heads
    moe: MoEMLP | None = None  # the MLP of every layer after the first `dense_layers`
    dense_layers: int = 0  # leading layers with an ordinary MLP of width d_ff


_RECIPE_KEYS = tuple(f.name for f in dataclasses.fields(Recipe))


@record
class ModelSpec:
    """One transformer: its embedding and its decoder as runs of alike layers.

    `runs` is the model: every count the formulas give comes from its layers. The flat
    fields say what its config file says: the width and vocabulary, and the attention
    and MLP shape that the encoder (T5), the single-layer questions (`kvcalc measure`,
    the attention step) and the display use. Build a model whose layers are all alike
    from that flat description with `ModelSpec.uniform`; `ModelSpec(..., runs=...)` is
    a model described layer by layer. Counts are for the decoder stack unless
    `encoder_layers` is set, in which case the model is an encoder-decoder (T5) whose
    decoder layers also cross-attend (`Layer.cross`); its encoder stack is then
    `encoder_runs`, derived like `runs`.
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
    encoder_layers: int = 0  # T5: encoder stack depth (decoder depth is `layers`)
    source: str = ""
    notes: str = ""
    published_params: int = 0  # the headline count the source gives, for checks
    extra: dict = field(default_factory=dict, compare=False, hash=False, repr=False)
    # The decoder, layer by layer, as runs of alike layers (kvcalc.layers.Run): the model.
    # Built from `recipe` when the spec has one (ModelSpec.uniform).
    runs: tuple = ()
    embedding_norm: bool = False  # a norm right after the embedding (BLOOM)
    extra_params: int = 0  # parameters outside the decoder layers not named above
    # HY V4, DeepSeek V4: the residual stream kept as several, mixed around each block
    hyper_connections: HyperConnections | None = None
    # Gemma 4's per-layer input embeddings: a second lookup table of `per_layer_rows`
    # tokens by `per_layer_width` (layers x hidden_size_per_layer_input) values.
    per_layer_rows: int = 0
    per_layer_width: int = 0
    # How ModelSpec.uniform built the runs, to build them again when a flag changes the
    # shape; None for a model described layer by layer. Not part of the model's identity.
    recipe: Recipe | None = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if not self.v_head_dim:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        _positive(self, "layers", MAX_LAYERS)
        for name in ("d_model", "heads", "kv_heads", "head_dim", "d_ff", "vocab", "v_head_dim"):
            _positive(self, name, MAX_WIDTH)
        flat = self.recipe or Recipe()
        for name, value in (("learned_pos", self.learned_pos), ("max_context", self.max_context),
                            ("sliding_window", flat.sliding_window),
                            ("global_every", flat.global_every),
                            ("encoder_layers", self.encoder_layers),
                            ("relative_attention_buckets", self.relative_attention_buckets),
                            ("published_params", self.published_params),
                            ("per_layer_rows", self.per_layer_rows),
                            ("per_layer_width", self.per_layer_width)):
            if value < 0:
                raise KvcalcError(f"{name} must be >= 0, got {value}")
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
        if self.recipe is not None:
            _check_recipe(self, self.recipe)
            built = _uniform_runs(self, self.recipe)
            if self.runs and self.runs != built:  # dataclasses.replace of a shape field
                raise KvcalcError(f"{self.name}: its runs differ from the ones its recipe "
                                  "builds; change a uniform model with .replace()")
            object.__setattr__(self, "runs", built)
        elif not self.runs:
            raise KvcalcError(f"{self.name}: no layers; give runs=..., or build a model whose "
                              "layers are alike with ModelSpec.uniform(...)")
        if sum(r.count for r in self.runs) != self.layers:
            raise KvcalcError(
                f"the layer runs add up to {sum(r.count for r in self.runs)} layers, "
                f"not layers={self.layers}")
        object.__setattr__(self, "_groups", _merge(self.runs))
        object.__setattr__(self, "encoder_runs", _encoder_runs(self))

    @classmethod
    def uniform(cls, *, sliding_window: int = 0, global_every: int = 0,
                mla: Latent | None = None, moe: MoEMLP | None = None, dense_layers: int = 0,
                **fields) -> "ModelSpec":
        """A model whose layers are alike, from the flat description presets and config
        files give: the spec's fields (layers, heads, d_ff, ...), and for the layers a
        sliding window on every layer or on all but every `global_every`-th (layer i is
        global when (i + 1) % global_every == 0: Gemma 2's odd layers), latent attention
        (`mla`, a kvcalc.layers.Latent with the model's heads) in place of the K/V heads,
        and experts (`moe`, a kvcalc.layers.MoE) as the MLP of every layer after the
        first `dense_layers`."""
        return cls(**fields, recipe=Recipe(sliding_window, global_every, mla, moe, dense_layers))

    # --- the layers --------------------------------------------------------------
    def groups(self) -> tuple:
        """((Layer, count), ...): equal layers merged, first appearance first. Formulas
        cost O(distinct kinds), not O(layers)."""
        return self._groups

    @property
    def cross_attends(self) -> bool:
        """Some layer keeps K/V of an encoder's tokens (T5's encoder, Mllama's vision model,
        MusicGen's text encoder), so an encoder length applies."""
        return any(layer.cross for layer, _ in self._groups)

    def layer_list(self) -> list:
        """Every decoder layer in order (for display and pipeline stages)."""
        return [r.layer for r in self.runs for _ in range(r.count)]

    # --- the attention layers: every attention figure is read from them ----------
    @property
    def attends(self) -> bool:
        """Some decoder layer attends: a mixer's own `attends` (kvcalc.layers) is the one
        answer, whatever its cache kind."""
        return any(mx.attends for layer, _ in self._groups for mx in layer.mixers)

    def attention_layers(self) -> tuple:
        """((mixer, layers), ...): the decoder's self-attention mixers (a layer's own and any
        beside it; cross-attention left out), equal ones merged, first appearance first."""
        counts: dict = {}
        for layer, n in self._groups:
            for mx in (layer.mixer, layer.beside):
                if mx is not None and mx.attends:
                    counts[mx] = counts.get(mx, 0) + n
        return tuple(counts.items())

    @property
    def attention(self):
        """The self-attention kind most decoder layers have (the first on a tie), or None
        without attention: what the model's one-line shape (heads, K/V heads, head_dim)
        describes. Figures that differ between attention layers are given per layer kind."""
        best = None
        for mx, n in self.attention_layers():
            if best is None or n > best[1]:
                best = (mx, n)
        return None if best is None else best[0]

    @property
    def attention_shape(self) -> "HeadShape | None":
        """heads, K/V heads, head_dim and v_head_dim of `attention`; None without attention."""
        mx = self.attention
        return None if mx is None else head_shape(mx)

    # --- views of the layers (display, JSON, CSV) -------------------------------
    @property
    def mla(self) -> Latent | None:
        """The layers' latent attention (DeepSeek's MLA), or None."""
        return next((layer.mixer for layer, _ in self._groups
                     if isinstance(layer.mixer, Latent)), None)

    @property
    def sliding_window(self) -> int:
        """The sliding layers' window in tokens; 0 when no layer slides."""
        return next((layer.mixer.window for layer, _ in self._groups
                     if layer.mixer.cache_kind == "sliding"), 0)

    # --- derived counts (pure, cheap) -------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads sharing one K/V head in `attention`: 1 for MHA, heads for MQA (0
        without attention)."""
        a = self.attention_shape
        return 0 if a is None else a.heads // a.kv_heads

    @property
    def attention_free(self) -> bool:
        """No layer attends (Mamba, Falcon-Mamba): a constant state per sequence and no
        K/V heads; the flat heads, kv_heads and head_dim are then placeholders."""
        return not self.attends

    @property
    def attention_kind(self) -> str:
        """MHA, GQA, MQA, MLA, or "none" for a model without attention."""
        if self.attention_free:
            return "none"
        if self.mla is not None:
            return "MLA"
        a = self.attention_shape
        if a.kv_heads == a.heads:
            return "MHA"
        if a.kv_heads == 1:
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
        return f"{self.attention_kind}, {self.attention_shape.kv_heads} K/V heads"

    @property
    def state_mixers(self) -> str:
        """The state mixers' names, in layer order: 'Mamba', 'Mamba-2 + short convolution'."""
        kinds = dict.fromkeys(_MIXER_NAMES.get(mx.kind, mx.kind)
                              for layer, _ in self._groups for mx in layer.mixers
                              if not mx.attends and mx.cache_kind != "none")
        return " + ".join(kinds) or "no mixer"

    @property
    def sliding_layers(self) -> int:
        """Layers whose attention (and cache) is limited to a window of tokens."""
        return sum(n for layer, n in self._groups if layer.mixer.cache_kind == "sliding")

    @property
    def moe_layers(self) -> int:
        return sum(n for layer, n in self._groups if isinstance(layer.mlp, MoEMLP))

    def layers_of(self, cache_kind: str) -> int:
        """Decoder layers whose cache is of `cache_kind` (full, sliding, chunked, mla, state)."""
        return sum(n for layer, n in self._groups if layer.mixer.cache_kind == cache_kind)

    # --- variants ------------------------------------------------------------------
    def with_kv_heads(self, kv_heads: int) -> "ModelSpec":
        """The same model with another number of K/V heads (its GQA/MQA/MHA variant):
        every attention layer with the K/V head count of `attention` takes the new one."""
        if self.mla is not None:
            raise KvcalcError(f"{self.name} uses MLA: it has no K/V heads to change")
        a = self.attention_shape
        if a is None:
            raise KvcalcError(f"{self.name} has no attention: it has no K/V heads to change")
        return self.replace(kv_heads=kv_heads, name=_variant_name(self.name, kv_heads, a.heads))

    def replace(self, **changes) -> "ModelSpec":
        """A copy with fields changed. A model built by `uniform` is built again, from its
        fields and recipe with the changes (which may name the recipe's inputs:
        sliding_window=0). One described layer by layer keeps its layers, but for its K/V
        heads: changing its shape through one flat field would leave the layers saying
        otherwise, so that is refused. Given `runs`, the copy is described layer by layer."""
        if "runs" in changes:
            return dataclasses.replace(self, recipe=None, **changes)
        if self.recipe is not None:
            recipe = {k: changes.pop(k) for k in _RECIPE_KEYS if k in changes}
            return dataclasses.replace(self, runs=(), **changes,
                                       recipe=dataclasses.replace(self.recipe, **recipe))
        shape = set(changes) - {"name", "source", "notes", "published_params", "extra",
                                "max_context", "kv_heads"}
        if shape:
            raise KvcalcError(
                f"{self.name} is described layer by layer: {', '.join(sorted(shape))} "
                "cannot be changed by a flag")
        a = self.attention_shape
        if a is not None and "kv_heads" in changes:
            changes["heads"] = a.heads  # the flat view follows the layers it describes
            if changes["kv_heads"] != a.kv_heads:
                changes["runs"] = self._runs_with_kv_heads(a.kv_heads, changes["kv_heads"])
        return dataclasses.replace(self, **changes)

    def _runs_with_kv_heads(self, old: int, kv_heads: int) -> tuple:
        """The runs, every attention (and cross-attention) with `old` K/V heads taking
        `kv_heads`."""
        def swap(m):
            if isinstance(m, Attention) and m.kv_heads == old:
                if m.heads % kv_heads:
                    raise KvcalcError(
                        f"heads ({m.heads}) must be divisible by kv_heads ({kv_heads})")
                return m.with_kv_heads(kv_heads)
            return m

        def swap_layer(layer):  # its attention, and its cross-attention (T5) alike
            return dataclasses.replace(layer, mixer=swap(layer.mixer), cross=swap(layer.cross))

        return tuple(Run(swap_layer(r.layer), r.count) for r in self.runs)


def compress(layers: list) -> tuple:
    """Consecutive equal layers as Runs."""
    return tuple(Run(layer, sum(1 for _ in same)) for layer, same in groupby(layers))


# What names and describes a model rather than shaping it.
_LABELS = ("name", "source", "notes", "published_params")


def architecture(spec: ModelSpec) -> tuple:
    """Every field that shapes the model, its labels left out: two specs with equal
    architectures have the same tensors (a checkpoint read for one fits the other)."""
    return tuple(getattr(spec, f.name) for f in dataclasses.fields(spec)
                 if f.compare and f.name not in _LABELS)


def _merge(runs: tuple) -> tuple:
    counts: dict = {}
    for r in runs:  # a pass over shared weights: an earlier equal layer holds them
        if not r.layer.owns_weights and dataclasses.replace(r.layer, owns_weights=True) not in counts:
            raise KvcalcError(f"no earlier layer owns the weights of {r.layer.label}")
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


ENGINES_MEASURED = ("torch-eager",)  # what `kvcalc measure --calibrate` times its terms as


@record
class Calibration:
    """A device's own decode terms, measured by `kvcalc measure --calibrate` on it.

    Rates are decimal bytes (or FLOPs) per second, each the median of timed calls at
    the sizes named; seconds are one call's fixed cost. `engine` is what ran the calls
    (torch eager ops, one kernel each): a calibration says how fast that engine is on
    this device, and is never mixed with another engine's figures.
    """

    engine: str
    device_type: str  # cuda | cpu: on a GPU the host's launches overlap the device's work
    dtype: str  # the dtype every term was measured in
    measured_at: str
    measured_with: str  # device, torch and kvcalc versions, the command
    read_bytes_per_s: int  # a streamed read far above the L2/LLC (the plateau)
    read_bytes_per_s_by_size: dict[int, int]  # the same at each buffer size (bytes)
    # Weights F.linear streams, by its input width (in_features), then input rows: a GEMV's
    # short rows cost more per byte (on a 2-core EPYC, 10 GB/s at 768 wide, 15 at 2048).
    linear_bytes_per_s: dict[int, dict[int, int]]
    attention_kv_bytes_per_s: int  # K/V SDPA streams in decode (one query row per K/V head)
    prefill_flops_per_s: int  # a prompt-sized matmul (4096 rows)
    layer_overhead_s: float  # one decode layer's fixed cost (its kernels on tiny tensors)
    step_overhead_s: float  # one decode step's fixed cost outside the layers

    def __post_init__(self) -> None:
        if self.engine not in ENGINES_MEASURED:
            raise KvcalcError(f"calibration.engine must be one of {', '.join(ENGINES_MEASURED)}, "
                              f"got {self.engine!r}")
        if self.device_type not in ("cuda", "cpu"):
            raise KvcalcError(f"calibration.device_type must be cuda or cpu, got {self.device_type!r}")
        dtype(self.dtype)  # validates the name
        rates = {"read_bytes_per_s": self.read_bytes_per_s,
                 "attention_kv_bytes_per_s": self.attention_kv_bytes_per_s,
                 "prefill_flops_per_s": self.prefill_flops_per_s}
        tables = {"read_bytes_per_s_by_size": self.read_bytes_per_s_by_size,
                  "linear_bytes_per_s": self.linear_bytes_per_s}
        for width, by_rows in self.linear_bytes_per_s.items():
            tables[f"linear_bytes_per_s.{width}"] = by_rows if isinstance(by_rows, dict) else {}
        for table, values in tables.items():
            if not values:
                raise KvcalcError(f"calibration.{table} needs at least one entry")
            for k, v in values.items():
                if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
                    raise KvcalcError(f"calibration.{table}: keys must be positive integers")
                if table != "linear_bytes_per_s":  # its values are the tables below it
                    rates[f"{table}.{k}"] = v
        for name, v in rates.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise KvcalcError(f"calibration.{name} must be a positive integer")
        for name in ("layer_overhead_s", "step_overhead_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise KvcalcError(f"calibration.{name} must be seconds in [0, 1)")

    @property
    def overlapped(self) -> bool:
        """A GPU runs kernels while the host launches the next: fixed costs and data
        movement overlap (the larger wins). A CPU does both on the same cores (they add)."""
        return self.device_type == "cuda"

    def linear_rate(self, rows: int, in_features: int) -> float:
        """Bytes/s F.linear streams a weight of `in_features` columns at `rows` input
        rows: interpolated in log(rows), then in log(in_features), between the measured
        points; outside them, the nearest (at large batches the compute term takes over)."""
        by_width = {w: _log_interpolate(sorted(t.items()), rows)
                    for w, t in self.linear_bytes_per_s.items()}
        return _log_interpolate(sorted(by_width.items()), in_features)


def _log_interpolate(points: list, x: float) -> float:
    """y at x from sorted (x, y) points, linear in log(x); clamped at both ends."""
    import math

    if x <= points[0][0]:
        return float(points[0][1])
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return float(y0 + math.log(x / x0) / math.log(x1 / x0) * (y1 - y0))
    return float(points[-1][1])


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
    smi_memory_bytes: int = 0  # nvidia-smi's memory.total (SGLang's defaults read it); 0: unknown
    smi_memory_source: str = ""
    # Device-to-device bandwidth per GPU, one direction, decimal bytes/s (NVLink,
    # Infinity Fabric, or PCIe for cards without a GPU link). 0: unknown.
    interconnect_bandwidth_bytes_per_s: int = 0
    interconnect: str = ""  # its name, e.g. "NVLink 4 (18 links)"
    # Seconds one small all-reduce takes over that interconnect (its fixed cost, what a
    # decode step's few-KB messages pay each time), as published; 0: unknown.
    allreduce_latency_s: float = 0.0
    allreduce_latency_source: str = ""
    # The link between the GPU and host memory, one direction, decimal bytes/s (PCIe, or
    # NVLink-C2C on Grace parts): what KV fetched from a host tier crosses. 0: unknown.
    host_link_bandwidth_bytes_per_s: int = 0
    host_link: str = ""  # its name, e.g. "PCIe Gen5 x16 (128 GB/s both directions)"
    # What a host-to-device copy from pinned memory over that link achieves, decimal
    # bytes/s, as a published run measured it (nvbandwidth, CUDA bandwidthTest): real
    # copies stop short of the datasheet (packet and protocol overhead), so a KV fetch
    # from a host tier is timed at this rate. 0: none published; the fetch is timed at
    # the datasheet rate above, and kvcalc says so.
    host_link_copy_bytes_per_s: int = 0
    host_link_copy_source: str = ""  # the run: its URL, tool, settings and quoted line
    # Dense FP4 (NVFP4/MXFP4) tensor peak, FLOP/s; 0 where the chip has no FP4 unit.
    # Kept apart from flops_per_s because kvcalc has no fp4 storage dtype.
    fp4_flops_per_s: int = 0
    # The GPU's boost clock, Hz, from its datasheet; 0: unknown. A kernel's fixed cost
    # (launch, tail, synchronisation) is a number of cycles, so an engine's per-layer GPU
    # cost is counted in cycles and turned into time at this clock (kvcalc.engines).
    boost_clock_hz: int = 0
    # Dense FP16 tensor rate with FP16 accumulation where it differs from flops_per_s'
    # fp16 (FP32 accumulation): GeForce parts run FP32 accumulation at half rate. 0: the
    # same. Only engines whose GEMMs accumulate in FP16 reach it (kvcalc.engines).
    fp16_accumulate_flops_per_s: int = 0
    # "gpu" or "cpu": serving engines' fitted terms (kvcalc.engines) are for GPUs, so a
    # CPU is timed on its roofline unless an engine is named.
    kind: str = "gpu"
    # Measured decode terms of this very device (`kvcalc measure --calibrate`); when
    # present, latency uses them instead of datasheet peaks times efficiencies.
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise KvcalcError(f"hardware {self.name}: {name} must be a positive integer")
        for name in ("visible_memory_bytes", "smi_memory_bytes", "interconnect_bandwidth_bytes_per_s",
                     "host_link_bandwidth_bytes_per_s", "host_link_copy_bytes_per_s",
                     "fp4_flops_per_s", "boost_clock_hz", "fp16_accumulate_flops_per_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise KvcalcError(f"hardware {self.name}: {name} must be an integer >= 0")
        lat = self.allreduce_latency_s
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not 0 <= lat < 1:
            raise KvcalcError(f"hardware {self.name}: allreduce_latency_s must be seconds in "
                              "[0, 1), e.g. 9.5e-6")
        if self.kind not in ("gpu", "cpu"):
            raise KvcalcError(f"hardware {self.name}: kind must be gpu or cpu, got {self.kind!r}")
        copy, sheet = self.host_link_copy_bytes_per_s, self.host_link_bandwidth_bytes_per_s
        if copy > sheet:  # a copy over the link cannot beat it (0: no datasheet rate)
            raise KvcalcError(f"hardware {self.name}: host_link_copy_bytes_per_s ({copy:,}) "
                              "needs the link's datasheet rate, host_link_bandwidth_bytes_per_s "
                              f"({sheet:,}), and cannot exceed it")
        if copy and not self.host_link_copy_source.strip():
            raise KvcalcError(f"hardware {self.name}: host_link_copy_bytes_per_s needs "
                              "host_link_copy_source: the published run it comes from")
        if self.visible_memory_bytes > self.memory_bytes:
            raise KvcalcError(f"hardware {self.name}: visible_memory_bytes exceeds memory_bytes")
        if not self.flops_per_s:
            raise KvcalcError(f"hardware {self.name}: flops_per_s needs at least one dtype")
        for key, v in {**self.flops_per_s, **self.sparse_flops_per_s}.items():
            dtype(key)  # validates the name
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise KvcalcError(f"hardware {self.name}: flops_per_s.{key} must be a positive integer")

    @property
    def host_fetch_bytes_per_s(self) -> int:
        """The rate KV fetched from host memory crosses the host link at: the published
        host-to-device copy rate where the preset has one, else the link's datasheet rate
        (0: neither is known)."""
        return self.host_link_copy_bytes_per_s or self.host_link_bandwidth_bytes_per_s

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
