"""rednote's dots.llm1 (dots1, whose router's score-correction bias is a buffer, not
counted) and dots.llm3's language model (dots3_note_text: sliding-window MLA beside MLA
made sparse by a lightning indexer).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, core_dims, decoder, describe, latent_fields,
                                    with_runs)
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.layers import Dense, Latent, Layer, MoE
from kvcalc.layers.indexed import IndexedLatent
from kvcalc.layers.latent import SlidingLatent


def dots1(c: Config) -> dict:
    """dots.llm1 (Dots1Config): Qwen3's attention (per-head q/k RMSNorms), DeepSeek-V3's
    experts (routed + shared) after first_k_dense_replace dense layers; layers from
    max_window_layers on slide when a window is set (layer_types first)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)

    def older() -> list[str]:
        # Dots1Config: a window and i >= max_window_layers (62) -> sliding, whatever
        # use_sliding_window says (it reads no such field)
        if c.raw("sliding_window") is None:
            return ["full"] * layers
        first = c.opt_int("max_window_layers", layers) or 0
        return ["sliding" if i >= first else "full" for i in range(layers)]

    kinds = layer_kinds(c, layers, ATTENTION_TYPES, older)
    moe = MoE(experts=c.req_int("n_routed_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    first = c.opt_int("first_k_dense_replace", 0) or 0
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, kinds=kinds, context=2048,
                   experts=lambda dense: [dense if i < first else moe for i in range(layers)])


# Dots3NoteTextConfig: the released checkpoint's sliding-layer fields (swa_*), and the
# class's values when neither they nor per_layer_config are given.
_DOTS3_SWA = {"num_attention_heads": 64, "q_lora_rank": 1024, "kv_lora_rank": 1024,
              "head_dim": 256, "qk_nope_head_dim": 192, "v_head_dim": 128}


def _dots3_layer_config(c: Config, i: int, kind: str) -> Config:
    """Layer i's attention fields: the model's, under per_layer_config's entry for i (a
    saved config keeps only what differs), or for a sliding layer of a config without it,
    the swa_* fields and their class defaults."""
    per_layer = c.raw("per_layer_config")
    if per_layer not in (MISSING, None):
        if not isinstance(per_layer, dict):
            raise c.error(f"field 'per_layer_config' must be an object, got {describe(per_layer)}")
        # keys are layer indices, saved as strings (zero-padded: "02")
        by_index = {int(k): v for k, v in per_layer.items()
                    if isinstance(k, int) or (isinstance(k, str) and k.isdigit())}
        own = by_index.get(i) or {}
        if not isinstance(own, dict):
            raise c.error(f"per_layer_config[{i}] must be an object, got {describe(own)}")
        return c.over({**c.cfg, **own}, c.where)
    if kind != "sliding":
        return c
    swa = {key: c.cfg.get(f"swa_{key}", default) for key, default in _DOTS3_SWA.items()}
    swa["qk_rope_head_dim"] = c.cfg.get("swa_qk_rope_head_dim",
                                        swa["head_dim"] - swa["qk_nope_head_dim"])
    return c.over({**c.cfg, **swa}, c.where)


def _dots3_kinds(c: Config, layers: int) -> list[str]:
    """Dots3NoteTextConfig's layer kinds: layer_types (a legacy "full_attention" is DSA
    unless use_dsa is false), else DSA on the first two layers and every fourth from
    layer 1, sliding elsewhere (all DSA without use_sliding_window)."""
    use_dsa = c.opt_bool("use_dsa", True) if c.raw("per_layer_config") in (MISSING, None) \
        else c.raw("use_dsa")
    sliding = c.opt_bool("use_sliding_window", True)
    full = "full" if use_dsa is False else "indexed"
    kinds = layer_kinds(c, layers, {"full_attention": "full", "indexed_attention": "indexed",
                                    "sliding_attention": "sliding"},
                        lambda: [full if not sliding or i < 2 or i % 4 == 1 else "sliding"
                                 for i in range(layers)])
    if use_dsa is True:
        kinds = ["indexed" if k == "full" else k for k in kinds]
    elif use_dsa is False:
        kinds = ["full" if k == "indexed" else k for k in kinds]
    return kinds


def dots3_note_text(c: Config) -> dict:
    """dots.llm3 (Dots 3 Note) language model: MLA with q LoRA, a RoPE-key norm and a
    per-head output gate; DeepSeek Sparse Attention's indexer on "indexed_attention"
    layers, sliding-window MLA of its own geometry (per_layer_config) on the others;
    dense first layer(s), then routed experts beside shared ones fused into one MLP."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kinds = _dots3_kinds(c, layers)
    window = c.opt_int("sliding_window", None) or c.opt_int("sliding_window_size", 512) or 512
    bias = c.opt_bool("attention_bias", False)

    def mixer(i: int, kind: str):
        lc = _dots3_layer_config(c, i, kind)
        geometry = dict(heads=lc.req_dim("num_attention_heads"),
                        kv_lora_rank=lc.req_dim("kv_lora_rank"),
                        rope_dim=lc.req_dim("qk_rope_head_dim"),
                        nope_dim=lc.req_dim("qk_nope_head_dim"), v_dim=lc.req_dim("v_head_dim"),
                        q_lora_rank=lc.req_dim("q_lora_rank"), bias=bias, head_gate=True,
                        rope_norm=True)
        if kind == "sliding":
            return SlidingLatent(**geometry, window=window)
        if kind == "indexed":
            return IndexedLatent(**geometry, index_heads=c.req_dim("index_n_heads"),
                                 index_head_dim=c.req_dim("index_head_dim"),
                                 index_topk=c.req_dim("index_topk"))
        return Latent(**geometry)

    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        first = c.opt_int("first_k_dense_replace", 1) or 0
        freq = c.raw("moe_layer_freq")
        if isinstance(freq, list):
            types = ["sparse" if i >= first and freq[i] else "dense" for i in range(layers)]
        else:
            every = c.opt_int("moe_layer_freq", 1) or 1
            types = ["sparse" if i >= first and i % every == 0 else "dense"
                     for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    shared = c.opt_int("n_shared_experts", 1) or 0
    # the checkpoint's moe_shared_expert_intermediate_size wins, as the class reads it
    shared_d_ff = c.opt_int("moe_shared_expert_intermediate_size", None) or c.req_dim(
        "shared_experts_intermediate_size")
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1 if shared else 0,
              shared_d_ff=shared_d_ff * shared)
    dense = Dense(d_ff)
    mixers = [mixer(i, k) for i, k in enumerate(kinds)]
    main = mixer(-1, "full")
    layer_list = [Layer(m, moe if t == "sparse" else dense, 2) for m, t in zip(mixers, types)]
    fields = latent_fields(c, main, hidden, layers, d_ff, vocab, bias, 524288,
                           notes=["MLA: the cache holds kv_lora_rank + qk_rope_head_dim "
                                  "elements per token per layer (the sliding layers' own "
                                  "ranks), indexed layers also the indexer's key"])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "dots1": dots1, "dots3_note_text": dots3_note_text,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "dots1": {"max_window_layers": 62, "moe_intermediate_size": 1408, "num_key_value_heads": 32,
              "sliding_window": 4096},
    "dots3_note_text": {"index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048,
                        "kv_lora_rank": 512, "moe_intermediate_size": 1536,
                        "n_routed_experts": 256, "num_experts_per_tok": 8, "q_lora_rank": 1024,
                        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                        "shared_experts_intermediate_size": 1536},
}
