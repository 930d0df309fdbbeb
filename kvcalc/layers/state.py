"""The mixer kinds with a constant state per sequence (Mamba, Mamba-2, Gated DeltaNet,
LFM2's short convolution) and the MLP-only block's NoMixer.

Split from kvcalc.layers so that a model without them (most presets) does not pay for
defining their classes at start-up; `kvcalc.layers.Mamba` and the rest still resolve
here on first use. See kvcalc.layers for what every kind answers.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.ground.num import Linear, params_by_name, split as _split
from kvcalc.ground.dtypes import DType

# --------------------------------------------------------------------------------
# Mixers with a constant state per sequence
# --------------------------------------------------------------------------------
class _Stateful:
    """Shared answers of the state kinds: nothing grows with the context."""

    cache_kind = "state"
    attends = False
    module = "mixer"  # the mixer's name in a transformers decoder layer
    tokens_written = 0  # the state is rewritten in place, not grown
    bounded = True

    @property
    def param_key(self) -> str:
        return self.kind

    def kv_cache_spec(self, specs):
        return specs.state(self)

    def params(self, d_model: int) -> dict[str, int]:
        return params_by_name(self.tensors(d_model))

    def kv_heads_per_device(self, tp: int) -> int:
        return 0

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        return 0

    def tokens_held(self, seq_len, encoder_len=None):
        return 0 * seq_len

    tokens_read = tokens_held

    def decode_flops(self, context):
        return 0 * context

    def prefill_positions(self, seq_len):
        return 0 * seq_len

    def step_flops(self, seq_len, encoder_len=None):
        """The recurrence, once per token: no context to attend over."""
        return self.recurrent_flops() + 0 * seq_len

    def prefill_flops(self, seq_len, encoder_len=None):
        """The recurrence, once per prompt token."""
        return self.recurrent_flops() * seq_len

    def kv_projection_params(self, d_model: int) -> int:
        return 0

    def decode_act_elements(self) -> int:
        return 0

    def with_kv_heads(self, kv_heads: int):
        return self  # no K/V heads: MHA/GQA/MQA variants leave it as it is


@record
class Mamba(_Stateful):
    """A Mamba-1 selective state-space mixer (Mamba, Falcon-Mamba, Jamba).

    State per sequence: the SSM state d_inner x d_state (state dtype, fp32 in
    transformers) and the convolution's last `conv_len` inputs, d_inner x conv_len
    (cache dtype). Recurrent work per token: about 2 x 3 x d_inner x d_state FLOPs.
    """

    d_inner: int
    d_state: int
    d_conv: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False  # in_proj and out_proj
    inner_norms: bool = False  # Jamba: RMSNorms on dt (dt_rank), B and C (d_state)
    conv_len: int = 0  # conv inputs kept per sequence; 0: d_conv (transformers' cache)

    kind = "mamba"
    label = "mamba"

    @property
    def conv_taps(self) -> int:
        return self.d_conv

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        inner = _split(self.d_inner, tp)
        return (state_dt.nbytes(inner * self.d_state)
                + conv_dt.nbytes(inner * (conv_len or self.conv_len or self.d_conv)))

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, n = d_model, self.d_inner
        out: dict[str, Linear | int] = {
            "in_proj": Linear(d, 2 * n, self.proj_bias),
            "conv1d": n * self.d_conv + (n if self.conv_bias else 0),
            "x_proj": Linear(n, self.dt_rank + 2 * self.d_state),
            "dt_proj": Linear(self.dt_rank, n, True),
            "A_log": n * self.d_state,
            "D": n,
            "out_proj": Linear(n, d, self.proj_bias),
        }
        if self.inner_norms:
            out["inner_norms"] = self.dt_rank + 2 * self.d_state
        return out

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        n = self.d_inner
        return [(d_model, 2 * n), (n, self.dt_rank + 2 * self.d_state), (self.dt_rank, n),
                (n, d_model)]

    def recurrent_flops(self) -> int:
        return 6 * self.d_inner * self.d_state


@record
class ZambaMamba(Mamba):
    """Zamba's Mamba-1 mixer, cut into `n_mamba_heads` heads (its x_proj and dt_proj per
    head: the same weights and state as Mamba-1's over d_inner). No vLLM release serves
    Zamba (0.32's registry has Zamba2 only): its state has no page rule to follow."""

    label = "mamba (zamba)"



@record
class GatedDeltaNet(_Stateful):
    """Gated DeltaNet linear attention (Qwen3-Next's `linear_attention` layers).

    State per sequence: one v_heads x k_dim x v_dim recurrent matrix (state dtype)
    and the causal convolution's last `conv_len` inputs over q, k and v channels.
    """

    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    conv_kernel: int
    conv_len: int = 0  # 0: conv_kernel

    kind = "linear"
    label = "linear attention"
    module = "linear_attn"

    @property
    def conv_channels(self) -> int:
        return 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim

    @property
    def conv_taps(self) -> int:
        return self.conv_kernel

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        rec = _split(self.v_heads, tp) * self.k_dim * self.v_dim
        conv = _split(self.conv_channels, tp) * (conv_len or self.conv_len or self.conv_kernel)
        return state_dt.nbytes(rec) + conv_dt.nbytes(conv)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d = d_model
        key, value = self.k_heads * self.k_dim, self.v_heads * self.v_dim
        return {
            "in_proj_qkvz": Linear(d, 2 * key + 2 * value),
            "in_proj_ba": Linear(d, 2 * self.v_heads),
            "conv1d": self.conv_channels * self.conv_kernel,
            "dt_bias": self.v_heads,
            "A_log": self.v_heads,
            "norm": self.v_dim,
            "out_proj": Linear(value, d),
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        key, value = self.k_heads * self.k_dim, self.v_heads * self.v_dim
        return [(d_model, 2 * key + 2 * value + 2 * self.v_heads), (value, d_model)]

    def recurrent_flops(self) -> int:
        return 8 * self.v_heads * self.k_dim * self.v_dim


@record
class ShortConv(_Stateful):
    """LFM2's gated short convolution: in_proj to B, C, x; a depthwise conv of
    `kernel` taps; out_proj. State per sequence: the last `conv_len` inputs."""

    width: int
    kernel: int
    bias: bool = False
    conv_len: int = 0  # 0: kernel

    kind = "conv"
    label = "short conv"
    module = "conv"

    @property
    def conv_taps(self) -> int:
        return self.kernel

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return conv_dt.nbytes(_split(self.width, tp) * (conv_len or self.conv_len or self.kernel))

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        w = self.width
        return {
            "in_proj": Linear(d_model, 3 * w, self.bias),
            "conv": w * self.kernel + (w if self.bias else 0),
            "out_proj": Linear(w, d_model, self.bias),
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [(d_model, 3 * self.width), (self.width, d_model)]

    def recurrent_flops(self) -> int:
        return 2 * self.width * self.kernel


@record
class LaraGatedDeltaNet(GatedDeltaNet):
    """Lara Mini's Gated DeltaNet: Qwen3.5's, in a model no vLLM release serves (0.32's
    registry has no Lara Mini, and its Transformers backend takes no linear attention):
    its state has no page rule to follow."""

    label = "linear attention (lara mini)"



@record
class Lfm3ShortConv(ShortConv):
    """LFM3's short convolution: LFM2's, in a model no vLLM release serves (0.32's registry
    has no LFM3): its state has no page rule to follow."""

    label = "short conv (lfm3)"



@record
class Mamba2(_Stateful):
    """A Mamba-2 (SSD) mixer (Nemotron-H, Bamba, Granite 4 hybrids): `heads` heads of
    `head_dim`, B and C shared within `groups`. State per sequence: heads x head_dim x
    d_state (state dtype) and the convolution's last `conv_kernel` inputs over x, B, C."""

    heads: int
    head_dim: int
    d_state: int
    groups: int
    conv_kernel: int
    conv_bias: bool = True
    proj_bias: bool = False
    gated_norm: bool = True  # the gated RMSNorm before out_proj (Falcon-H1: mamba_rms_norm)

    kind = "mamba2"
    label = "mamba2"

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        return self.d_inner + 2 * self.groups * self.d_state

    @property
    def conv_taps(self) -> int:
        return self.conv_kernel

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return (state_dt.nbytes(_split(self.heads, tp) * self.head_dim * self.d_state)
                + conv_dt.nbytes(_split(self.conv_channels, tp) * (conv_len or self.conv_kernel)))

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        n, c = self.d_inner, self.conv_channels
        return {
            "in_proj": Linear(d_model, n + c + self.heads, self.proj_bias),
            "conv1d": c * self.conv_kernel + (c if self.conv_bias else 0),
            "dt_bias": self.heads, "A_log": self.heads, "D": self.heads,
            "norm": n if self.gated_norm else 0,
            "out_proj": Linear(n, d_model, self.proj_bias),
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [(d_model, self.d_inner + self.conv_channels + self.heads), (self.d_inner, d_model)]

    def recurrent_flops(self) -> int:
        return 6 * self.d_inner * self.d_state


@record
class NoMixer(_Stateful):
    """A layer that mixes no tokens and caches nothing: Nemotron-H's MLP-only and
    MoE-only blocks (the state kinds' zero answers, and no state either)."""

    kind = "none"
    label = "no cache"
    cache_kind = "none"

    conv_taps = 0

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return 0

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        return {}

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return []

    def recurrent_flops(self) -> int:
        return 0


# --------------------------------------------------------------------------------
# Recurrent kinds of the 2025-2026 families: lightning attention (MiniMax-Text-01),
# Kimi Delta Attention (Kimi Linear), RG-LRU (RecurrentGemma), RWKV-4's time mixing
# --------------------------------------------------------------------------------
@record
class Lightning(_Stateful):
    """MiniMax-Text-01's lightning attention (linear attention with a per-head decay,
    arXiv:2501.08313): qkv_proj, an output gate, an RMSNorm over all heads, out_proj.

    State per sequence: one heads x head_dim x head_dim matrix (the running K^T V), in
    the activations' dtype (transformers' MiniMaxCache keeps the matmul's result; vLLM's
    linear_attention_state_dtype is --mamba-cache-dtype, auto = the model dtype): the
    `conv_dt` argument, not the fp32 recurrent-state dtype. No convolution."""

    heads: int
    head_dim: int

    kind = "lightning"
    label = "lightning attention"
    module = "self_attn"
    conv_taps = 0

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        return conv_dt.nbytes(_split(self.heads, tp) * self.head_dim * self.head_dim)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        w = self.width
        return {"qkv_proj": Linear(d_model, 3 * w), "output_gate": Linear(d_model, w),
                "norm": w, "out_proj": Linear(w, d_model)}

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [(d_model, 4 * self.width), (self.width, d_model)]

    def recurrent_flops(self) -> int:
        # k^T v added to the decayed state, then q times the state: two head_dim^2 products
        return 4 * self.heads * self.head_dim * self.head_dim


@record
class KimiDelta(_Stateful):
    """Kimi Delta Attention (Kimi Linear's `linear_attention` layers): a gated delta rule
    with a per-channel decay. q, k, v projections through one causal convolution, a
    low-rank forget gate (f_a, f_b) and output gate (g_a, g_b), a beta projection.

    State per sequence: heads x head_dim x head_dim (state dtype; vLLM's kda_state_dtype
    makes "auto" fp32, not the model dtype) and the convolution's last `conv_len` inputs
    over q, k and v (3 x heads x head_dim channels, cache dtype)."""

    heads: int
    head_dim: int
    conv_kernel: int
    conv_len: int = 0  # 0: conv_kernel
    low_rank: bool = True  # False: full-rank forget and output gates (Ling 3's f_proj, g_proj)

    kind = "kda"
    label = "kimi delta attention"
    module = "self_attn"
    engine_auto_state_dtype = "fp32"  # vLLM 0.32 MambaStateDtypeCalculator.kda_state_dtype

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        return 3 * self.width

    @property
    def conv_taps(self) -> int:
        return self.conv_kernel

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        rec = _split(self.heads, tp) * self.head_dim * self.head_dim
        conv = _split(self.conv_channels, tp) * (conv_len or self.conv_len or self.conv_kernel)
        return state_dt.nbytes(rec) + conv_dt.nbytes(conv)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, w, r = d_model, self.width, self.head_dim
        low = self.low_rank
        forget = ({"f_a_proj": Linear(d, r), "f_b_proj": Linear(r, w)} if low
                  else {"f_proj": Linear(d, w)})
        output = ({"g_a_proj": Linear(d, r), "g_b_proj": Linear(r, w)} if low
                  else {"g_proj": Linear(d, w)})
        return {
            "q_proj": Linear(d, w), "k_proj": Linear(d, w), "v_proj": Linear(d, w),
            "conv1d": self.conv_channels * self.conv_kernel,
            **forget, "dt_bias": w, "A_log": self.heads,
            "b_proj": Linear(d, self.heads),
            **output, "o_norm": r, "o_proj": Linear(w, d),
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        d, w, r = d_model, self.width, self.head_dim
        if not self.low_rank:
            return [(d, 5 * w + self.heads), (w, d)]
        return [(d, 3 * w + 2 * r + self.heads), (r, w), (r, w), (w, d)]

    def recurrent_flops(self) -> int:
        return 8 * self.heads * self.head_dim * self.head_dim


@record
class RGLRU(_Stateful):
    """RecurrentGemma's recurrent block (Griffin, arXiv:2402.19427): a GeLU branch
    (linear_y) times a causal convolution and a Real-Gated Linear Recurrent Unit over
    `width` channels (linear_x, conv_1d, rg_lru), then linear_out; every linear biased;
    the RG-LRU's two gates block-diagonal over `heads` blocks.

    State per sequence: the recurrence, `width` values (fp32 in transformers), and the
    convolution's inputs (cache dtype): transformers keeps a view of the last
    conv_width - 1 of the conv_width it concatenated at the last decode step, so its
    storage holds conv_width, as the other kinds' conv states do."""

    width: int
    heads: int
    conv_width: int

    kind = "rglru"
    label = "rg-lru"
    module = "temporal_block"


    @property
    def conv_taps(self) -> int:
        return self.conv_width

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        w = _split(self.width, tp)
        return state_dt.nbytes(w) + conv_dt.nbytes(w * (conv_len or self.conv_width))

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, w = d_model, self.width
        block = w // self.heads
        return {
            "linear_y": Linear(d, w, True), "linear_x": Linear(d, w, True),
            "conv_1d": w * self.conv_width + w,
            "rg_lru": w + 2 * (self.heads * block * block + w),  # a, input and recurrence gates
            "linear_out": Linear(w, d, True),
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        block = self.width // self.heads
        return [(d_model, 2 * self.width), (block, 2 * block * self.heads), (self.width, d_model)]

    def recurrent_flops(self) -> int:
        return 2 * self.width * self.conv_width + 6 * self.width


@record
class RWKV(_Stateful):
    """RWKV-4's time mixing (the WKV recurrence over `width` channels: key, value,
    receptance, output; per-channel decay and bonus) and its channel mixing's receptance
    gate and token-shift mixes; the channel mixing's key and value are the layer's MLP.

    State per sequence (transformers' `state`, five hidden_size vectors per layer): the
    two token shifts (last input of time and of channel mixing, cache dtype) and the
    WKV numerator, denominator and running maximum (fp32). transformers sizes all five
    by hidden_size (`d_model`), whatever attention_hidden_size is."""

    width: int  # attention_hidden_size
    d_model: int  # hidden_size: the state's width

    kind = "rwkv"
    label = "rwkv"
    module = "attention"
    conv_taps = 0


    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        d = _split(self.d_model, tp)
        return conv_dt.nbytes(2 * d) + state_dt.nbytes(3 * d)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, a = d_model, self.width
        return {
            "time_decay": a, "time_first": a, "time_mix": 3 * d,
            "key": Linear(d, a), "value": Linear(d, a), "receptance": Linear(d, a),
            "output": Linear(a, d),
            "ffn_time_mix": 2 * d, "ffn_receptance": Linear(d, d),
        }

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        return [(d_model, 3 * self.width), (self.width, d_model), (d_model, d_model)]

    def recurrent_flops(self) -> int:
        return 10 * self.width


@record
class MLSTM(_Stateful):
    """xLSTM's mLSTM layer (xLSTM 7B, arXiv:2503.13427): q, k, v, an output gate, input and
    forget gates per head (biased), a per-head LayerNorm over the values, out_proj.

    State per sequence: each head's matrix memory C (qk_head_dim x v_head_dim), its
    normaliser n (qk_head_dim) and its stabiliser m (1), in the activations' dtype
    (transformers' xLSTMCache holds them in the model dtype: the `conv_dt` argument). No
    convolution. No vLLM release serves xLSTM (0.32's registry has none): no page rule."""

    heads: int
    qk_head_dim: int
    v_head_dim: int
    bias: bool = False  # use_bias: q, k, v, output gate, out_proj and the norm

    kind = "mlstm"
    label = "mlstm"
    module = "mlstm_layer"
    conv_taps = 0

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        dk, dv = self.qk_head_dim, self.v_head_dim
        return conv_dt.nbytes(_split(self.heads, tp) * (dk * dv + dk + 1))


    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, b, h = d_model, self.bias, self.heads
        qk, v = h * self.qk_head_dim, h * self.v_head_dim
        return {"q": Linear(d, qk, b), "k": Linear(d, qk, b), "v": Linear(d, v, b),
                "ogate_preact": Linear(d, v, b), "igate_preact": Linear(d, h, True),
                "fgate_preact": Linear(d, h, True), "multihead_norm": v * (2 if b else 1),
                "out_proj": Linear(v, d, b)}

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        qk, v = self.heads * self.qk_head_dim, self.heads * self.v_head_dim
        return [(d_model, 2 * qk + 2 * v + 2 * self.heads), (v, d_model)]

    def recurrent_flops(self) -> int:
        # C += k v^T and the read q^T C, each qk_head_dim x v_head_dim per head
        return 4 * self.heads * self.qk_head_dim * self.v_head_dim
