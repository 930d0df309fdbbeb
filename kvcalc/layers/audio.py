"""Attention of MusicGen's decoder over audio codes (transformers' `modeling_musicgen.py`,
`modeling_musicgen_melody.py`): plain multi-head attention, the cache of a full layer.

One decoder position is one audio frame, whatever the number of codebooks: the codebooks'
embeddings are summed into it, so a frame caches one K and one V per head. MusicGen's
decoder also cross-attends to the T5 encoder's output (the text prompt's tokens), kept
for the whole generation; MusicGen Melody prepends its conditioning (text, chroma) to the
frames instead, so its self-attention holds those tokens too.

No vLLM release serves MusicGen (0.32's model registry has no Musicgen architecture):
neither kind has an engine page (vLLM's table, kvcalc.serving.vllm.support), and the engine's counts
are withheld.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.ground.num import Linear
from kvcalc.ground.record import record
from kvcalc.layers import Attention, CrossAttention


def _out_proj(tensors: dict) -> dict:
    """MusicgenAttention names its output projection out_proj."""
    return {**tensors, "o": replace(tensors["o"], module="out_proj")}


@record
class AudioAttention(Attention):
    """MusicGen's causal self-attention over audio frames (and Melody's conditioning)."""

    label = "audio"


    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        return _out_proj(super().tensors(d_model))


@record
class AudioCrossAttention(CrossAttention):
    """MusicGen's cross-attention (`encoder_attn`) to the text encoder's tokens: their
    K/V are projected once, at prefill, and kept."""

    module = "encoder_attn"


    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        return _out_proj(super().tensors(d_model))
