"""DeepSeek-V4's attention (transformers 5.24 `modeling_deepseek_v4.py`; arXiv paper sec. 2.3):
one K/V head whose key is its value, kept for a sliding window (`SharedKVAttention`), and on
its compressed layers a compressor beside it (`Compressor`, a `Layer.beside` mixer) that
pools every `rate` tokens into one entry the same attention reads too.

What the cache holds, per sequence and layer (DeepseekV4HCACache / DeepseekV4CSACache):
- the window: one `head_dim` vector per token (K = V, one storage), the last `window` tokens;
- the compressed entries, one per `rate` tokens (heavily compressed attention, HCA: 128;
  compressed sparse attention, CSA: 4), `head_dim` each, plus on CSA layers the lightning
  indexer's own entries of `index_head_dim`, which pick the `index_topk` entries a query reads;
- a leftover: the projected keys and gates of the tokens since the last whole group, at
  most `rate` of them (`buffer_kv` / `buffer_gate`; CSA projects two series, Ca and Cb, so
  twice `head_dim`), and on CSA layers the previous group's Ca keys and gates (`overlap_kv`
  / `overlap_gate`, the gates fp32: their position bias is an fp32 parameter), for the
  compressor and the indexer each. kvcalc counts the leftover at its most, a constant per
  sequence (`state_bytes`), as a serving engine keeps one ring of it per request (vLLM's
  CircularBufferSpec); transformers holds what has arrived since the last group.

A sliding-only layer keeps the window alone. vLLM 0.32 serves DeepSeek V4 with cache specs
of its own (SlidingWindowMLASpec for the window, compressed MLA pages, CircularBufferSpec
rings for the leftover) that kvcalc does not model: the compressor has no engine page
(vLLM's table, kvcalc.serving.vllm.support) and the engine counts are withheld.
"""

from __future__ import annotations

from kvcalc.ground import num as _num
from kvcalc.ground.num import Linear, params_by_name
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_WIDTH, DType, check_size
from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention


@record
class SharedKVAttention(Attention):
    """DeepSeek-V4's attention over its sliding window: queries through a LoRA (q_a, its
    norm, q_b), one K/V head from one projection (`kv_proj`: the key is the value), a sink
    logit per head, and a grouped low-rank output (`o_groups` groups of heads each to
    `o_lora_rank`, then one matrix to the model width)."""

    q_lora_rank: int = 1024
    o_groups: int = 8
    o_lora_rank: int = 1024

    label_prefix = "shared-kv "

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kv_heads != 1:
            raise KvcalcError("DeepSeek-V4's attention has one K/V head")
        if (self.heads * self.head_dim) % self.o_groups:
            raise KvcalcError(f"o_groups ({self.o_groups}) must divide heads x head_dim "
                              f"({self.heads * self.head_dim})")

    @property
    def label(self) -> str:
        return self.label_prefix + self._keeps.label(self.window)

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        self.kv_heads_per_device(tp)
        return dt.nbytes(self.head_dim) + scale_bytes  # K is V: one vector a token

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, h, hd = d_model, self.heads, self.head_dim
        return {
            "q_a": Linear(d, self.q_lora_rank, module="q_a_proj"),
            "q_a_norm": self.q_lora_rank,
            "q_b": Linear(self.q_lora_rank, h * hd, module="q_b_proj"),
            "kv": Linear(d, hd, module="kv_proj"),
            "kv_norm": hd,
            # DeepseekV4GroupedLinear: one (o_groups x o_lora_rank) x (h x hd / o_groups)
            # weight, each group's block applied to its heads
            "o_a": Linear(h * hd // self.o_groups, self.o_groups * self.o_lora_rank,
                          module="o_a_proj"),
            "o_b": Linear(self.o_groups * self.o_lora_rank, d, module="o_b_proj"),
            "sinks": h,
        }

    def kv_projection_params(self, d_model: int) -> int:
        return 0  # one K/V head: its projection is replicated, split like everything else

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        d, hd = d_model, self.heads * self.head_dim
        # the grouped output: each group's heads to o_lora_rank, then all groups to d
        return [(d, self.q_lora_rank), (self.q_lora_rank, hd), (d, self.head_dim),
                (hd, self.o_lora_rank), (self.o_groups * self.o_lora_rank, d)]

    def with_kv_heads(self, kv_heads: int) -> "SharedKVAttention":
        raise KvcalcError("DeepSeek-V4's attention has its one K/V head fixed")


def _entries_up_to(s, rate: int):
    """sum over t = 1..s of t // rate: the compressed entries the prompt's queries see."""
    q, r = s // rate, s % rate
    return rate * q * (q - 1) // 2 + q * (r + 1)


@record
class Compressor:
    """DeepSeek-V4's compressor beside its attention: one entry of `head_dim` every `rate`
    tokens, attended to with the window (heads, head_dim: the attention's). `overlap`: CSA's
    two series (each entry pools its own group and the previous one); `index_heads` > 0:
    a lightning indexer with entries of `index_head_dim` of its own picks `index_topk`
    entries for each query (CSA), else every entry is read (HCA)."""

    heads: int
    head_dim: int
    rate: int
    overlap: bool = False
    q_lora_rank: int = 1024
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0

    attends = True
    module = "self_attn.compressor"
    param_key = "compressor"
    tokens_written = 1  # at most one entry a decode step (one every `rate` tokens)
    bounded = False
    cache_kind = "compressed"
    conv_taps = 0  # its leftover is no convolution: no engine input count to take

    def __post_init__(self) -> None:
        for name in ("heads", "head_dim", "rate"):
            check_size(f"compressor {name}", getattr(self, name), MAX_WIDTH)
        if self.index_heads:
            for name in ("index_head_dim", "index_topk"):
                check_size(f"compressor {name}", getattr(self, name), MAX_WIDTH)

    @property
    def kind(self) -> str:
        return "csa" if self.index_heads else "hca"

    @property
    def label(self) -> str:
        indexer = " + indexer" if self.index_heads else ""
        return f"compressed 1/{self.rate:,}{indexer}"

    def kv_cache_spec(self, specs):
        # a cache that grows with the context, one entry per `rate` tokens: whether an
        # engine pages it is that engine's table (vLLM: kvcalc.serving.vllm.support)
        return specs.full()

    def kv_heads_per_device(self, tp: int) -> int:
        if self.heads % tp:
            raise KvcalcError(f"tp={tp} must divide the query heads ({self.heads})")
        return 1  # one compressed K/V head, on every device

    def kv_projection_params(self, d_model: int) -> int:
        return 0

    @property
    def _series(self) -> int:
        return 2 if self.overlap else 1

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        """One compressed entry (and the indexer's), the cache dtype."""
        self.kv_heads_per_device(tp)
        return dt.nbytes(self.head_dim + self.index_head_dim) + scale_bytes

    def tokens_held(self, seq_len, encoder_len=None):
        """Entries: one per whole group of `rate` tokens."""
        return seq_len // self.rate

    def tokens_read(self, seq_len, encoder_len=None):
        held = self.tokens_held(seq_len)
        return _num.minimum(held, self.index_topk) if self.index_heads else held

    def state_bytes(self, conv_dt: DType, state_dt: DType, tp: int = 1,
                    conv_len: int | None = None) -> int:
        """The leftover at its most: `rate` tokens' projected keys and gates (two series on
        CSA), in the cache dtype; on CSA the previous group's Ca keys (cache dtype) and
        gates (`state_dt`: fp32 in transformers), for the compressor and the indexer."""
        widths = [self.head_dim] + ([self.index_head_dim] if self.index_heads else [])
        out = 0
        for w in widths:
            out += 2 * conv_dt.nbytes(self.rate * self._series * w)
            if self.overlap:
                out += conv_dt.nbytes(self.rate * w) + state_dt.nbytes(self.rate * w)
        return out

    def decode_flops(self, context):
        """Scores and the weighted sum over `context` entries (K = V, `head_dim` wide)."""
        return 2 * self.heads * context * 2 * self.head_dim

    def step_flops(self, seq_len, encoder_len=None):
        """The entries it reads, and the indexer scoring every entry."""
        index = 2 * self.index_heads * self.index_head_dim * self.tokens_held(seq_len)
        return self.decode_flops(self.tokens_read(seq_len)) + index

    def prefill_positions(self, seq_len):
        """Entries the prompt's queries read together (at most `index_topk` each)."""
        if not self.index_heads:
            return _entries_up_to(seq_len, self.rate)
        # a query reads every entry until there are index_topk of them
        cap = self.index_topk * self.rate
        below = _entries_up_to(_num.minimum(seq_len, cap - 1), self.rate)
        return below + self.index_topk * _num.maximum(seq_len - cap + 1, 0)

    def prefill_flops(self, seq_len, encoder_len=None):
        index = 2 * self.index_heads * self.index_head_dim * _entries_up_to(seq_len, self.rate)
        return self.decode_flops(1) * self.prefill_positions(seq_len) + index

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        d, w = d_model, self._series * self.head_dim
        out: dict[str, Linear | int] = {
            "kv": Linear(d, w, module="kv_proj"),
            "gate": Linear(d, w, module="gate_proj"),
            "position_bias": self.rate * w,
            "kv_norm": self.head_dim,
        }
        if self.index_heads:
            # DeepseekV4Indexer: its own two-series compressor at index_head_dim, queries
            # from the attention's q LoRA, one weight per indexer head from the input
            iw = 2 * self.index_head_dim
            out["indexer_kv"] = Linear(d, iw, module="indexer.kv_proj")
            out["indexer_gate"] = Linear(d, iw, module="indexer.gate_proj")
            out["indexer_position_bias"] = self.rate * iw
            out["indexer_kv_norm"] = self.index_head_dim
            out["indexer_q"] = Linear(self.q_lora_rank, self.index_heads * self.index_head_dim,
                                      module="indexer.q_b_proj")
            out["indexer_weights"] = Linear(d, self.index_heads,
                                            module="indexer.scorer.weights_proj")
        return out

    def params(self, d_model: int) -> dict[str, int]:
        return params_by_name(self.tensors(d_model))

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        d, w = d_model, self._series * self.head_dim
        mm = [(d, 2 * w)]
        if self.index_heads:
            mm += [(d, 4 * self.index_head_dim + self.index_heads),
                   (self.q_lora_rank, self.index_heads * self.index_head_dim)]
        return mm

    def decode_act_elements(self) -> int:
        return self.heads * 2 * self.head_dim

    def with_kv_heads(self, kv_heads: int) -> "Compressor":
        raise KvcalcError("DeepSeek-V4's compressor has its one K/V head fixed")
