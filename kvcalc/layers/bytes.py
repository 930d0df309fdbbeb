"""Attention of the Byte Latent Transformer's local encoder and decoder (BLT, arXiv:2412.09871;
transformers' `modeling_blt.py`): Llama-style attention over bytes, one cached token a byte.

Their mask slides (BltConfig.local_attention_window_len, 512 by default), but transformers
5.24 keeps every byte's K/V: BltModel hands the encoder the self-attention part of an
EncoderDecoderCache and the decoder its cross-attention part, both plain DynamicLayers
(its own DynamicCache(config=BltConfig) cannot be built: a cache must be handed in). The
global transformer over patches and the cross-attention between bytes and patches are
recomputed every step and cache nothing.

No vLLM release serves BLT (0.32's model registry has no Blt architecture): no engine
page (vLLM's table, kvcalc.serving.vllm.support), and the engine's counts are withheld.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.layers import Attention


@record
class ByteAttention(Attention):
    """BLT's causal self-attention over bytes: every byte's K/V kept (see the module)."""

    label = "byte"

