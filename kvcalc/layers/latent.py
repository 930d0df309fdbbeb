"""Multi-head latent attention over a sliding window (dots.llm3's sliding layers): MLA's
cache entry (the latent and the shared RoPE key) for the last `window` tokens only, as a
sliding attention layer keeps them (transformers' DynamicSlidingWindowLayer; vLLM's
SlidingWindowSpec). `SlidingLatent` adds the window to `Latent`; everything else is MLA's.
"""

from __future__ import annotations

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.layers import Latent


@record
class SlidingLatent(Latent):
    """MLA keeping the last `window` tokens."""

    window: int = 4096

    kind = "sliding"
    cache_kind = "sliding"
    bounded = True

    @property
    def label(self) -> str:
        return f"mla sliding {self.window:,}"

    def kv_cache_spec(self, specs):
        return specs.sliding(self.window)

    def tokens_held(self, seq_len, encoder_len=None):
        return _num.minimum(seq_len, self.window)

    tokens_read = tokens_held

    def step_flops(self, seq_len, encoder_len=None):
        return self.decode_flops(self.tokens_read(seq_len))

    def prefill_positions(self, seq_len):
        m = _num.minimum(seq_len, self.window)
        return m * (m + 1) // 2 + (seq_len - m) * self.window
