"""Layer kinds: how one decoder layer mixes tokens (and what it caches), and its MLP.

A decoder layer is `Layer(mixer, mlp, norms)`. Each mixer kind is a small frozen
class answering the same questions, exactly, for a sequence at context `seq_len`
(a Python int, or a numpy array in a sweep):

- `token_bytes(dt, tp, scale_bytes)`: bytes one cached token adds on one of `tp` devices
- `tokens_held(seq_len, encoder_len)`: tokens the layer keeps for one sequence (the
  encoder's length, `encoder_len` or else `seq_len`, is what a cross-attention keeps)
- `tokens_read(seq_len, encoder_len)`: tokens one decode step attends to
- `tokens_written`: tokens one decode step adds to the cache (1, or 0: cross-attention's
  K/V are written once, at prefill; a state is rewritten, not grown)
- `bounded`: what it keeps stops growing with the decoder's length
- `state_bytes(conv_dt, state_dt, tp, conv_len)`: constant bytes per sequence, whatever
  its length (`conv_len`: convolution inputs kept, None: the layer's own count; state
  kinds name their kernel width `conv_taps`, since engines keep one input fewer)
- `kv_cache_spec(specs)`: which of a serving engine's cache specs it is (`specs.full()`,
  `.sliding(window)`, `.chunked(chunk)`, `.state(mixer)` or `.cross()`; whether an engine
  pages that kind at all is the engine's table, not the layer's): the engine's rules
  for each live in the engine's wing (vLLM's: kvcalc.serving.vllm), as vLLM keeps them on its spec classes
- `param_key`: the first part of its keys in a parameter breakdown ("attention", ...)
- `tensors(d_model)`: every weight by name: a `Linear` per projection matrix (its shape
  and transformers' module name), an element count for the rest (norms, convolutions)
- `params(d_model)`: parameters by name, from `tensors`
- `matmuls(d_model)`: (fan_in, fan_out) of the projections one token runs
- `decode_flops(context)`, `step_flops(seq_len, encoder_len)`, `prefill_positions(seq_len)`,
  `prefill_flops(seq_len, encoder_len)`: the attention (or recurrent) term of one decode
  token and of a prompt

What a layer holds follows transformers' own cache after a prefill and a decode
step (tests/data/hf/CACHE_BEHAVIOUR.md): a sliding layer keeps `window` tokens, a
chunked layer min(L, chunk), linear-attention and state-space layers a constant
recurrent state (own dtype, fp32 by default) plus a convolution state (the cache
dtype). Sources: Mistral 7B (arXiv:2310.06825) sec. 2 rolling buffer; Gemma 2/3
tech reports (local/global layers); Llama 4 `attention_chunk_size`; DeepSeek-V2
(arXiv:2405.04434) sec. 2.1 MLA; Mamba (arXiv:2312.00752) sec. 3; Gated DeltaNet
(arXiv:2412.06464) and Qwen3-Next's config; LFM2's short convolutions.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.ground import num as _num
from kvcalc.ground.num import Linear, params_by_name
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import MAX_WIDTH, DType, check_size
from kvcalc.layers.mlp import MLP, Dense, MoE  # noqa: F401 (the layer's MLP kinds)

# --------------------------------------------------------------------------------
# What an attention layer keeps: every token, a sliding window, or a chunk
# --------------------------------------------------------------------------------
class _Full:
    """Every token stays."""

    bounded = False

    def label(self, window: int) -> str:
        return "full"

    def held(self, seq_len, window: int):
        return seq_len

    read = held

    def prefill_positions(self, s, window: int):
        return s * (s + 1) // 2

    def kv_cache_spec(self, specs, window: int):
        return specs.full()


class _Sliding:
    """The last `window` tokens (Mistral 7B sec. 2: a rolling buffer)."""

    bounded = True

    def label(self, window: int) -> str:
        return f"sliding {window:,}"

    def held(self, seq_len, window: int):
        return _num.minimum(seq_len, window)

    read = held

    def prefill_positions(self, s, window: int):
        m = _num.minimum(s, window)
        return m * (m + 1) // 2 + (s - m) * window

    def kv_cache_spec(self, specs, window: int):
        return specs.sliding(window)


class _Chunked:
    """Llama 4's local attention: fixed chunks of `window` tokens; at most one chunk
    kept, and the newest token reads back to its chunk's start."""

    bounded = True

    def label(self, window: int) -> str:
        return f"chunked {window:,}"

    def held(self, seq_len, window: int):
        return _num.minimum(seq_len, window)

    def read(self, seq_len, window: int):
        return (seq_len - 1) % window + 1  # a chunk restarts every `window` tokens

    def prefill_positions(self, s, window: int):
        q, r = s // window, s % window  # whole chunks, then the last partial one
        return q * (window * (window + 1) // 2) + r * (r + 1) // 2

    def kv_cache_spec(self, specs, window: int):
        return specs.chunked(window)


_KEEPS = {"full": _Full(), "sliding": _Sliding(), "chunked": _Chunked()}
ATTENTION_KINDS = tuple(_KEEPS)


# --------------------------------------------------------------------------------
# Mixers that cache K/V per token
# --------------------------------------------------------------------------------
@record
class Attention:
    """Softmax attention over cached K/V heads (MHA, GQA, MQA).

    kind "full" keeps every token; "sliding" the last `window` tokens; "chunked"
    (Llama 4 local attention) attends within fixed chunks of `window` tokens and
    keeps at most `window` of them.
    """

    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int = 0  # 0: head_dim
    kind: str = "full"
    window: int = 0  # sliding window or chunk size in tokens
    qkv_bias: bool = False  # q, k and v projections
    out_bias: bool = False
    qk_norm: int = 0  # weights of q/k norms together (Qwen3: 2 x head_dim)
    sinks: bool = False  # gpt-oss: one learned sink logit per query head
    gated: bool = False  # Qwen3-Next: q_proj also emits an output gate per head
    k_is_v: bool = False  # Gemma 4's attention_k_eq_v: no v_proj, K's projection is V's too
    head_gate: bool = False  # LFM3: g_proj, one sigmoid output gate per head from the input

    def __post_init__(self) -> None:
        if not self.v_head_dim:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        for name in ("heads", "kv_heads", "head_dim", "v_head_dim"):
            check_size(f"attention {name}", getattr(self, name), MAX_WIDTH)
        if self.kind not in ATTENTION_KINDS:
            raise KvcalcError(f"attention kind must be one of {ATTENTION_KINDS}, got {self.kind!r}")
        if self.kind == "full":
            if self.window:
                raise KvcalcError("a full-attention layer has no window")
        else:
            check_size(f"{self.kind} window", self.window, 1 << 34)
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise KvcalcError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        # What it keeps, chosen once from the kind its config names.
        object.__setattr__(self, "_keeps", _KEEPS[self.kind])

    attends = True  # softmax attention over cached tokens
    module = "self_attn"  # the mixer's name in a transformers decoder layer
    param_key = "attention"
    tokens_written = 1

    @property
    def label(self) -> str:
        return self._keeps.label(self.window)

    @property
    def cache_kind(self) -> str:
        return self.kind

    @property
    def bounded(self) -> bool:
        return self._keeps.bounded

    def kv_cache_spec(self, specs):
        return self._keeps.kv_cache_spec(specs, self.window)

    def kv_heads_per_device(self, tp: int) -> int:
        """Megatron TP: kv_heads/tp each, or one whole head replicated when tp > kv_heads."""
        if self.heads % tp:
            raise KvcalcError(f"tp={tp} must divide the query heads ({self.heads})")
        if self.kv_heads % tp == 0:
            return self.kv_heads // tp
        if tp % self.kv_heads == 0:
            return 1
        raise KvcalcError(
            f"tp={tp} neither divides kv_heads={self.kv_heads} nor is a multiple of it")

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        g = self.kv_heads_per_device(tp)
        return dt.nbytes(g * self.head_dim) + dt.nbytes(g * self.v_head_dim) + 2 * g * scale_bytes

    def tokens_held(self, seq_len, encoder_len=None):
        return self._keeps.held(seq_len, self.window)

    def tokens_read(self, seq_len, encoder_len=None):
        """Positions the newest token attends to."""
        return self._keeps.read(seq_len, self.window)

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return 0

    def decode_flops(self, context):
        """Scores (q.K) and the weighted sum of V for one query token over `context` tokens."""
        return 2 * self.heads * context * (self.head_dim + self.v_head_dim)

    def step_flops(self, seq_len, encoder_len=None):
        """One decode token's attention over what it reads at this length."""
        return self.decode_flops(self.tokens_read(seq_len, encoder_len))

    def prefill_positions(self, seq_len):
        """Sum over a causal prompt of the positions each token attends to."""
        return self._keeps.prefill_positions(seq_len, self.window)

    def prefill_flops(self, seq_len, encoder_len=None):
        return self.decode_flops(1) * self.prefill_positions(seq_len)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, h, g, b = d_model, self.heads, self.kv_heads, self.qkv_bias
        out: dict[str, Linear | int] = {
            "q": Linear(d, h * self.head_dim * (2 if self.gated else 1), b, "q_proj"),
            "k": Linear(d, g * self.head_dim, b, "k_proj", kv=True),
            "v": Linear(d, g * self.v_head_dim, b, "v_proj", kv=True),
            "o": Linear(h * self.v_head_dim, d, self.out_bias, "o_proj"),
        }
        if self.k_is_v:
            del out["v"]  # the cache still holds K and V (V normed apart from K)
        if self.qk_norm:
            out["qk_norm"] = self.qk_norm
        if self.sinks:
            out["sinks"] = h
        if self.head_gate:
            out["g"] = Linear(d, h, module="g_proj")
        return out

    def params(self, d_model: int) -> dict[str, int]:
        return params_by_name(self.tensors(d_model))

    def kv_projection_params(self, d_model: int) -> int:
        """k and v weights: these follow their heads under TP (replicated with them)."""
        return sum(t.params for t in self.tensors(d_model).values()
                   if isinstance(t, Linear) and t.kv)

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        q_out = self.heads * self.head_dim * (2 if self.gated else 1)
        kv_out = self.kv_heads * (self.head_dim + (0 if self.k_is_v else self.v_head_dim))
        gate = self.heads if self.head_gate else 0
        return [(d_model, q_out + kv_out + gate), (self.heads * self.v_head_dim, d_model)]

    def decode_act_elements(self) -> int:
        """q read and attention output written per token (K/V counted as cache)."""
        return self.heads * (self.head_dim + self.v_head_dim)

    def with_kv_heads(self, kv_heads: int) -> "Attention":
        return replace(self, kv_heads=kv_heads)


@record
class Latent:
    """Multi-head latent attention (DeepSeek-V2 sec. 2.1): one compressed latent of
    kv_lora_rank plus one shared RoPE key per token, for all heads together."""

    heads: int
    kv_lora_rank: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    q_lora_rank: int = 0  # 0: queries use a full-rank projection
    bias: bool = False  # attention_bias: q (or q_a), kv_a and o
    head_gate: bool = False  # Ling 3 (bailing_hybrid): g_proj, one output gate per head
    rope_norm: bool = False  # dots.llm3: an RMSNorm on the shared RoPE key
    value_gate: bool = False  # HY V4: gate_proj, a sigmoid gate per output element (h x v)
    sinks: bool = False  # HY V4: one learned sink logit per query head

    kind = "mla"
    label = "mla"
    cache_kind = "mla"
    attends = True
    module = "self_attn"
    param_key = "attention"
    tokens_written = 1
    bounded = False

    def kv_cache_spec(self, specs):
        return specs.full()  # vLLM's MLAAttentionSpec is a full-attention spec

    def kv_heads_per_device(self, tp: int) -> int:
        if self.heads % tp:
            raise KvcalcError(f"tp={tp} must divide the query heads ({self.heads})")
        return 1  # the latent is shared by every head: each device holds all of it

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        self.kv_heads_per_device(tp)
        return dt.nbytes(self.kv_lora_rank + self.rope_dim) + scale_bytes

    def tokens_held(self, seq_len, encoder_len=None):
        return seq_len

    tokens_read = tokens_held

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return 0

    def decode_flops(self, context):
        """Weights absorbed (the decode form, sec. 2.1.3): scores over the latent and
        RoPE key, values over the latent, for every head."""
        return 2 * self.heads * context * (2 * self.kv_lora_rank + self.rope_dim)

    def step_flops(self, seq_len, encoder_len=None):
        return self.decode_flops(seq_len)

    def prefill_flops_per_position(self) -> int:
        """Prefill decompresses K and V once per token: per-head dims."""
        return 2 * self.heads * (self.nope_dim + self.rope_dim + self.v_dim)

    def prefill_positions(self, seq_len):
        return seq_len * (seq_len + 1) // 2

    def prefill_flops(self, seq_len, encoder_len=None):
        """Causal, with K and V decompressed once per token: per-head dims."""
        return self.prefill_flops_per_position() * self.prefill_positions(seq_len)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, h, b = d_model, self.heads, self.bias
        qk_head = self.nope_dim + self.rope_dim
        out: dict[str, Linear | int] = {}
        if self.q_lora_rank:
            out["q_a"] = Linear(d, self.q_lora_rank, b, "q_a_proj")
            out["q_a_norm"] = self.q_lora_rank
            out["q_b"] = Linear(self.q_lora_rank, h * qk_head, module="q_b_proj")
        else:
            out["q"] = Linear(d, h * qk_head, module="q_proj")
        out["kv_a"] = Linear(d, self.kv_lora_rank + self.rope_dim, b, "kv_a_proj_with_mqa")
        out["kv_a_norm"] = self.kv_lora_rank + (self.rope_dim if self.rope_norm else 0)
        out["kv_b"] = Linear(self.kv_lora_rank, h * (self.nope_dim + self.v_dim), module="kv_b_proj")
        out["o"] = Linear(h * self.v_dim, d, b, "o_proj")
        if self.head_gate:
            out["g"] = Linear(d, h, module="g_proj")
        if self.value_gate:
            out["gate"] = Linear(d, h * self.v_dim, module="gate_proj")
        if self.sinks:
            out["sinks"] = h
        return out

    def params(self, d_model: int) -> dict[str, int]:
        return params_by_name(self.tensors(d_model))

    def kv_projection_params(self, d_model: int) -> int:
        return 0  # the latent projection is shared, split like everything else

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        d, h = d_model, self.heads
        qk_head = self.nope_dim + self.rope_dim
        mm = ([(d, self.q_lora_rank), (self.q_lora_rank, h * qk_head)] if self.q_lora_rank
              else [(d, h * qk_head)])
        return mm + [(d, self.kv_lora_rank + self.rope_dim),
                     (self.kv_lora_rank, h * (self.nope_dim + self.v_dim)),
                     (h * self.v_dim, d)] + ([(d, h)] if self.head_gate else []) + (
                         [(d, h * self.v_dim)] if self.value_gate else [])

    def decode_act_elements(self) -> int:
        return self.heads * (2 * self.kv_lora_rank + self.rope_dim)

    def with_kv_heads(self, kv_heads: int) -> "Latent":
        raise KvcalcError("an MLA layer has no K/V heads to change")


@record
class CrossAttention(Attention):
    """Encoder-decoder cross-attention (T5): a decoder token's queries over the
    encoder's output. K and V are projected from the encoder's `encoder_len` tokens
    once, at prefill, and every decoder layer keeps them for the whole generation
    (transformers' EncoderDecoderCache; vLLM's CrossAttentionSpec)."""

    module = "EncDecAttention"
    param_key = "cross_attention"
    label = "cross"
    cache_kind = "cross"
    tokens_written = 0  # a decode step reads the encoder's K/V, adds none
    bounded = False  # the encoder length follows the decoder's unless given

    def kv_cache_spec(self, specs):
        return specs.cross()

    def tokens_held(self, seq_len, encoder_len=None):
        return seq_len if encoder_len is None else encoder_len

    tokens_read = tokens_held

    def prefill_flops(self, seq_len, encoder_len=None):
        """Every prompt token attends to every encoder token."""
        return seq_len * self.decode_flops(self.tokens_read(seq_len, encoder_len))

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        """A decoder token runs q and o; k and v ran over the encoder's output."""
        return [(d_model, self.heads * self.head_dim), (self.heads * self.v_head_dim, d_model)]

    def encoder_matmuls(self, d_model: int) -> list[tuple[int, int]]:
        """What each encoder token runs once, at prefill: the fused k and v projection."""
        return [(d_model, self.kv_heads * (self.head_dim + self.v_head_dim))]


@record
class ImageCrossAttention(CrossAttention):
    """Mllama's (Llama 3.2 Vision's) cross-attention layers: CrossAttention's cache, the
    encoder being the vision model (its length: the image's tokens). vLLM has served no
    Mllama since 0.10.2 (0.32's _PREVIOUSLY_SUPPORTED_MODELS): no engine page for it, and
    the engine counts are withheld."""



# --------------------------------------------------------------------------------
# Mixers with a constant state per sequence: kvcalc/layers/state.py, loaded on first use
# --------------------------------------------------------------------------------
_STATE_KINDS = ("Mamba", "Mamba2", "GatedDeltaNet", "ShortConv", "NoMixer", "Lightning", "KimiDelta",
                "RGLRU", "RWKV", "MLSTM")


def __getattr__(name: str):
    if name in _STATE_KINDS or name == "_Stateful":
        from kvcalc.layers import state as layers_state
        return getattr(layers_state, name)
    raise AttributeError(f"module 'kvcalc.layers' has no attribute {name!r}")


# Attention, Latent, or one of the state kinds above.
Mixer = object





@record
class Layer:
    """One decoder layer: a mixer, an MLP (None for Mamba blocks) and its norms; an
    encoder-decoder's decoder layer also cross-attends to the encoder; a parallel hybrid's
    layer runs a second mixer `beside` the first on the same input, their outputs summed
    (Falcon-H1: attention and Mamba-2 in every layer, each with its own cache). A looped
    model runs layers again with the same weights (Dory's recurrent section, HRM's
    cycles): such a pass is a layer that does not own its weights (their parameters are
    counted with the earlier layer that holds them) but caches, computes and reads them
    as any layer does (ModelSpec checks an earlier twin owns them)."""

    mixer: Mixer
    mlp: MLP | None
    norms: int = 2  # d_model-wide norms: input, post-attention (Gemma 2/3: four; T5 decoder: three)
    cross: CrossAttention | None = None
    beside: Mixer | None = None
    owns_weights: bool = True  # False: a later pass over an earlier layer's weights

    @property
    def mixers(self) -> tuple:
        """What it mixes tokens with: its own mixer, any mixer beside it, then any
        cross-attention."""
        return tuple(mx for mx in (self.mixer, self.beside, self.cross) if mx is not None)

    @property
    def label(self) -> str:
        mlp = "" if self.mlp is None else f" + {self.mlp.kind}"
        beside = "" if self.beside is None else f" beside {self.beside.label}"
        again = "" if self.owns_weights else " (again, same weights)"
        return f"{self.mixer.label}{beside}{mlp}{again}"


@record
class Run:
    """`count` consecutive layers alike."""

    layer: Layer
    count: int


@record
class HeadShape:
    """An attention layer's heads in the words a config file uses: query heads, K/V
    heads, and K's and V's head widths (MLA: its heads, each with its own K and V once
    decompressed, q/k of nope + rope width)."""

    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int


def head_shape(mixer) -> HeadShape:
    """The heads of one attention layer kind (kvcalc.layers)."""
    if isinstance(mixer, Latent):
        return HeadShape(mixer.heads, mixer.heads, mixer.nope_dim + mixer.rope_dim, mixer.v_dim)
    head_dim = mixer.head_dim
    return HeadShape(mixer.heads, getattr(mixer, "kv_heads", 1), head_dim,
                     getattr(mixer, "v_head_dim", head_dim))
