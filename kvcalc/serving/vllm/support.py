"""Which layer kinds vLLM pages: its table, not the layers'. A layer says what it keeps
(`kv_cache_spec`: full, sliding, chunked, state, cross); the kinds below have no page in
any vLLM release read (or pages of their own kvcalc does not model), so vLLM's count
treats them as unpaged and withholds what their pages would hold (kvcalc.serving.vllm.state).

Keyed by the layer's class, each with why (vLLM 0.32's model registry and cache specs,
`vllm/model_executor/models/registry.py`, `vllm/v1/kv_cache_interface.py`)."""

from __future__ import annotations

__all__ = ["UNSERVED", "served", "spec"]

# class name -> why vLLM's count withholds it ("" : no vLLM release serves such a model)
UNSERVED: dict[str, str] = {
    "RWKV": "",  # RWKV: not in the registry
    "RGLRU": "",  # RecurrentGemma: not in the registry
    "MLSTM": "",  # xLSTM
    "ZambaMamba": "",  # Zamba (v1)
    "LaraGatedDeltaNet": "",
    "Lfm3ShortConv": "",
    "MixtureOfAttention": "",  # JetMoE's mixture of attention heads
    "ConvolvedAttention": "",
    "NormalizedGatedAttention": "",
    "ByteAttention": "",  # BLT
    "AudioAttention": "",  # MusicGen
    "AudioCrossAttention": "",
    "ImageCrossAttention": "",  # Mllama's image cross-attention: a cache spec of its own
    "ConvAttention": "",  # Inkling: vLLM's own convolution paging
    "Compressor": ("vLLM 0.32 serves DeepSeek-V4 with cache specs of its own (compressed "
                   "pages, a ring per request for the leftover) that kvcalc does not model"),
    "QSAAttention": ("kvcalc does not model how an engine pages Qwen4-Exp's QSA indexer "
                     "(its compressed block states beside the K/V pages)"),
}


def served(mixer) -> bool:
    return type(mixer).__name__ not in UNSERVED


def spec(mixer, specs):
    """The cache spec vLLM gives `mixer`'s layers: what the layer keeps, or `unpaged`."""
    return mixer.kv_cache_spec(specs) if served(mixer) else specs.unpaged(mixer)


def why(mixer) -> str:
    """The kind's own reason its counts are withheld ("" : no release serves it)."""
    return UNSERVED.get(type(mixer).__name__, "")
