"""Ground truth from Hugging Face transformers itself: parameter counts and KV-cache bytes.

Nothing here uses kvcalc's formulas. Parameters are counted on a model that transformers
builds for a config.json dict on the meta device; cache bytes are read off the cache object
that transformers returns after a real prefill + decode step of a small random-weight copy
of the model (same per-layer cache geometry, tiny vocabulary / MLP widths / layer count).

torch and transformers are imported lazily (inside the functions), so importing this module
is free; test files call ``pytest.importorskip("torch")`` / ``("transformers")`` first.

API
---
``meta_param_count(cfg) -> {"total", "text", "towers", "model_class", "tied"}``
``text_config_dict(cfg) -> dict``                       canonical dict of the language model
``reduced_config(cfg, window=8) -> dict``               small real copy (text model only)
``cache_bytes_after_decode(cfg, seq_len, batch=1, dtype="bfloat16", window=8,
                           decode=True, reduce=True) -> list[dict]``
``cache_bytes_after_prefill(cfg, seq_len, ...)``        same, bare prefill of seq_len tokens
``layer_signatures(cfg) -> list``                       per-layer structural signature (meta)

See tests/data/hf/CACHE_BEHAVIOUR.md for what the measurements show.
"""

from __future__ import annotations

import contextlib
import copy
import math
import functools
import inspect
import warnings

# config.json keys that never matter for shapes and that make transformers do extra work
# (quantizers, remote code) when a model is built from the config.
_DROP_KEYS = ("quantization_config", "auto_map", "_name_or_path", "transformers_version")

# Families whose recurrent / conv state width is derived from hidden_size: hidden stays.
# xLSTM's mLSTM heads are hidden_size x qk_dim_factor / v_dim_factor over num_heads whatever
# its head_dim says (NX-AI/xLSTM-7b states 512), and its embedding_dim, the same width under
# its original name, stays beside a shrunk hidden_size in the class: a reduced copy whose
# blocks and norms disagree.
_HIDDEN_IS_STATE = {
    "mamba", "falcon_mamba", "mamba2", "jamba", "lfm2", "lfm2_moe", "bamba", "zamba",
    "zamba2", "falcon_h1", "granitemoehybrid", "nemotron_h", "rwkv", "xlstm",
}

# Families whose o_proj is Linear(hidden_size, hidden_size) whatever heads x head_dim is
# (Helium): hidden stays, or the reduced copy could not run.
_HIDDEN_IS_O_PROJ = {"helium"}

# Width keys (canonical transformers names) that are MLP / expert widths only.
_WIDTH_KEYS = (
    "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
    "intermediate_size_mlp", "ffn_hidden_size", "n_inner", "ffn_dim", "expert_intermediate_size",
    "dense_intermediate_size", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "dff",
)
_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk", "num_experts_per_token",
              "moe_k", "top_k_experts")
_WINDOW_KEYS = ("sliding_window", "attention_chunk_size", "window_size", "attention_window_size")
# Lists of layer indices (not per-layer flags): filtered to the kept prefix.
_INDEX_LIST_KEYS = ("mlp_only_layers", "full_attn_idxs", "moe_layers", "attn_layer_indices")

SMALL_VOCAB = 128
SMALL_WIDTH = 32
SMALL_HIDDEN = 64
SMALL_EXPERTS = 4
SMALL_TOPK = 2


# ----------------------------------------------------------------------------- config


def _clean(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    for k in _DROP_KEYS:
        cfg.pop(k, None)
    for sub in ("text_config", "vision_config"):
        if isinstance(cfg.get(sub), dict):
            for k in _DROP_KEYS:
                cfg[sub].pop(k, None)
    return cfg


def _declared_model_type(cfg: dict) -> str:
    """The config's model_type; one transformers does not know (remote code: Kimi K2's
    `kimi_k2`), the model_type of the first class in its `architectures` that transformers
    ships (DeepseekV3ForCausalLM: deepseek_v3), as that class's config would read it."""
    import transformers
    from transformers import CONFIG_MAPPING

    model_type = cfg["model_type"]
    if model_type in CONFIG_MAPPING:
        return model_type
    for name in cfg.get("architectures") or ():
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        config_class = getattr(cls, "config_class", None)
        if config_class is not None and config_class.model_type in CONFIG_MAPPING:
            return config_class.model_type
    return model_type


def make_config(cfg: dict):
    """The transformers config object for a config.json dict."""
    from transformers import AutoConfig

    cfg = _clean(cfg)
    cfg["model_type"] = _declared_model_type(cfg)
    model_type = cfg.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model(model_type, **cfg)


# Multimodal configs without a vision_config: Fuyu projects image patches itself.
_MULTIMODAL_WITHOUT_VISION_CONFIG = ("fuyu",)


def is_multimodal(config) -> bool:
    if getattr(config, "model_type", None) in _MULTIMODAL_WITHOUT_VISION_CONFIG:
        return True
    return any(
        getattr(config, k, None) is not None
        for k in ("vision_config", "audio_config")
    ) and getattr(config, "text_config", None) is not None


def text_config_dict(cfg: dict) -> dict:
    """Canonical config dict (transformers' own names, derived fields filled) of the language model."""
    config = make_config(cfg)
    # encoder-decoder configs (t5, bart) are their own text config; get_text_config(decoder=True)
    # returns a decoder view whose to_dict() loses decoder_layers / decoder_attention_heads
    text = config if getattr(config, "is_encoder_decoder", False) else config.get_text_config(decoder=True)
    if getattr(config, "model_type", None) in _COMPOSITES:
        text = config.decoder  # MusicGen's: the decoder beside the text encoder and codec
    d = text.to_dict()
    for k in _DROP_KEYS:
        d.pop(k, None)
    d.pop("architectures", None)
    return d


def _layers_key(config) -> str:
    return getattr(config, "attribute_map", {}).get("num_hidden_layers", "num_hidden_layers")


# ----------------------------------------------------------------------------- building


# Text configs the Auto classes map to no model of their own: the class that builds them.
_CAUSAL_LM_CLASSES = {"mllama_text_model": "MllamaForCausalLM",
                      "emu3_text_model": "Emu3ForCausalLM",
                      "musicgen_decoder": "MusicgenForCausalLM",
                      "musicgen_melody_decoder": "MusicgenMelodyForCausalLM"}
# Composite configs no Auto class builds from: the whole model, whose `decoder` is the
# language model (MusicGen: beside a T5 text encoder and an EnCodec codec).
_COMPOSITES = {"musicgen": "MusicgenForConditionalGeneration",
               "musicgen_melody": "MusicgenMelodyForConditionalGeneration"}
# Decoders fed every audio codebook's codes: input_ids are (batch x num_codebooks, length).
_CODEBOOK_DECODERS = ("musicgen_decoder", "musicgen_melody_decoder")
# Decoders that cross-attend to an encoder's states they are handed (MusicGen's text
# encoder's): the harness hands them seq_len states of hidden_size, and their cache is
# an EncoderDecoderCache whose cross part holds those states' K/V.
_CROSS_DECODERS = ("musicgen_decoder",)
# Models whose own cache cannot be built (BLT: DynamicCache(config=BltConfig) asks the
# composite config for num_hidden_layers): handed an EncoderDecoderCache of two plain
# DynamicCaches, as a user must. BLT keeps its local encoder's layers in the first and its
# local decoder's in the second.
_HANDED_A_CACHE = ("blt",)


def _build(config, device: str, dtype, multimodal: bool):
    """The model transformers builds for ``config``. On "meta" nothing is allocated and
    transformers itself skips weight init (ties are still made). On a real device weight
    init is skipped (transformers' no_init_weights), ties are made with tie_weights(), and
    parameters are filled by _fill_random, ~10x faster than transformers' own init."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    kw = dict(dtype=dtype, attn_implementation="eager")
    if device == "meta":
        no_init = contextlib.nullcontext()
    else:
        from transformers.initialization import no_init_weights

        no_init = no_init_weights()
    with warnings.catch_warnings(), no_init:
        warnings.simplefilter("ignore")
        with torch.device(device):
            model = None
            composite = _COMPOSITES.get(getattr(config, "model_type", None))
            if composite:
                import transformers

                model = getattr(transformers, composite)(config)
            elif getattr(config, "is_encoder_decoder", False):
                from transformers import AutoModelForSeq2SeqLM

                model = AutoModelForSeq2SeqLM.from_config(config, **kw)
            if multimodal:
                from transformers import AutoModelForImageTextToText

                try:
                    model = AutoModelForImageTextToText.from_config(config, **kw)
                except ValueError:
                    pass
            own = _CAUSAL_LM_CLASSES.get(getattr(config, "model_type", None))
            if model is None and own:
                import transformers

                model = getattr(transformers, own)._from_config(config, **kw)
            if model is None:
                try:
                    model = AutoModelForCausalLM.from_config(config, **kw)
                except ValueError:
                    from transformers import AutoModel

                    model = AutoModel.from_config(config, **kw)
    if device != "meta":
        model.tie_weights()
        _fill_random(model)
    return model


def _fill_random(model, std: float = 0.02) -> None:
    """Deterministic pseudo-random weights: norms 1, biases 0, the rest a repeated random
    pattern (values never change cache shapes; this only keeps activations finite)."""
    import torch

    g = torch.Generator().manual_seed(0)
    base = torch.randn(65521, generator=g) * std
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.view(-1)
            n = flat.numel()
            low = name.lower()
            if "norm" in low and p.dim() == 1:
                flat.fill_(1.0)
            elif low.endswith("bias") and "correction" not in low:
                flat.zero_()
            else:
                m = base.numel()
                k = n // m
                if k:
                    flat[: k * m].view(k, m).copy_(base.expand(k, m))
                flat[k * m:].copy_(base[: n - k * m])
        for name, b in model.named_buffers():
            if b.is_floating_point() and not torch.isfinite(b).all():
                b.zero_()


def meta_param_count(cfg: dict) -> dict:
    """Parameters of the model transformers builds for ``cfg``, counted on the meta device.

    Shared (tied) Parameters are counted once: ``model.parameters()`` yields each Parameter
    object once. Returns {"total", "text", "towers", "model_class", "tied"}: for multimodal
    configs "text" is the language model (embeddings, decoder, final norm, lm_head) and
    "towers" the rest (vision tower, projector); text-only: text == total, towers == 0.
    "tied": whether lm_head.weight is the input embedding's Parameter.
    """
    import torch

    config = make_config(cfg)
    mm = is_multimodal(config)
    if mm and getattr(config, "model_type", None) in _TOWERS_NEED_TIMM:
        return _language_model_alone(config)
    model = _build(config, "meta", torch.bfloat16, mm)
    total = sum(p.numel() for p in model.parameters())
    text = total
    if getattr(config, "model_type", None) in _COMPOSITES:
        text = sum(p.numel() for p in model.decoder.parameters())
    if mm:
        lm = _language_model(model)
        seen = {id(p) for p in lm.parameters()}
        text = sum(p.numel() for p in lm.parameters())
        head = getattr(model, "lm_head", None)
        if head is not None:
            text += sum(p.numel() for p in head.parameters() if id(p) not in seen)
    # towers the text model holds as modules of its own (Phi-4-multimodal, GIT)
    held = {id(p): p.numel() for name, m in model.named_modules()  # each Parameter once
            if name.rsplit(".", 1)[-1] in _TOWERS_INSIDE_TEXT_MODEL for p in m.parameters()}
    inside = sum(held.values())
    if inside:
        return {"total": total, "text": total - inside, "towers": inside,
                "model_class": type(model).__name__, "tied": False}
    tied = False
    try:
        emb = model.get_input_embeddings()
        out = model.get_output_embeddings()
        tied = out is not None and out.weight is emb.weight
    except (AttributeError, NotImplementedError):
        pass
    return {"total": total, "text": text, "towers": total - text,
            "model_class": type(model).__name__, "tied": tied}


# Wrappers whose vision tower is a timm model (TimmWrapperModel needs timm, which the test
# environments do not install): Gemma 3n. Their language model is built alone.
_TOWERS_NEED_TIMM = ("gemma3n",)


def _language_model_alone(config) -> dict:
    """The language model of a wrapper whose towers cannot be built here: the text model
    from text_config (Gemma3nModel.language_model is AutoModel.from_config(text_config))
    with the wrapper's lm_head, tied as the wrapper ties it. Its towers are not built:
    "total" and "towers" are None."""
    import copy as _copy

    import torch

    text = _copy.deepcopy(config.get_text_config(decoder=True))
    text.tie_word_embeddings = config.tie_word_embeddings
    model = _build(text, "meta", torch.bfloat16, False)
    n = sum(p.numel() for p in model.parameters())
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return {"total": None, "text": n, "towers": None, "model_class": type(model).__name__,
            "tied": tied}


# Modules inside a text model that are its towers: Phi-4-multimodal's image and audio
# encoders sit in Phi4MultimodalModel.embed_tokens_extend, beside its decoder layers; GIT's
# CLIP image encoder, its projection and per-image embeddings in GitModel.
_TOWERS_INSIDE_TEXT_MODEL = ("embed_tokens_extend", "image_encoder", "visual_projection",
                             "img_temporal_embedding")


def _language_model(model):
    for path in ("model.language_model", "language_model", "model.text_model", "text_model"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return obj
    raise ValueError(f"no language model inside {type(model).__name__}")


def _decoder_layers(model, n_layers: int):
    """The ModuleList of decoder layers (the largest ModuleList of length n_layers)."""
    from torch import nn

    best = None
    for name, m in model.named_modules():
        if (isinstance(m, nn.ModuleList) and len(m) == n_layers and "vision" not in name
                and not any(t in name for t in _TOWERS_INSIDE_TEXT_MODEL)):
            size = sum(p.numel() for p in m.parameters())
            if best is None or size > best[0]:
                best = (size, m)
    if best is None:
        raise ValueError("no decoder layer list found")
    return list(best[1])


_GEOMETRY_ATTRS = (
    "head_dim", "num_heads", "num_key_value_heads", "num_kv_heads", "kv_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "ssm_state_size", "conv_kernel_size",
    "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "key_dim", "value_dim", "conv_dim",
    "L_cache", "n_heads", "d_state", "d_conv", "new_decoder_architecture", "multi_query",
)


def _is_mixer(module) -> bool:
    n = type(module).__name__.lower()
    if any(x in n for x in ("mlp", "expert", "moe", "norm", "rotary", "linear", "router", "gate")):
        if not any(x in n for x in ("linearattention", "gateddeltanet", "attention")):
            return False
    return any(x in n for x in ("attn", "attention", "mixer", "mamba", "conv", "deltanet"))


def _layer_signature(layer, layer_type):
    names = tuple(sorted((n, type(m).__name__) for n, m in layer.named_modules()))
    flags = []
    for n, m in layer.named_modules():
        for a in ("use_rope", "is_sliding", "attention_type", "layer_type"):
            if hasattr(m, a) and not callable(getattr(m, a)):
                flags.append((n, a, str(getattr(m, a))))
        if _is_mixer(m) and getattr(m, "sliding_window", None) is not None:
            flags.append((n, "sliding", True))
    return (layer_type, names, tuple(flags))


def _layer_geometry(layer):
    out = []
    for n, m in layer.named_modules():
        if not _is_mixer(m):
            continue
        for a in _GEOMETRY_ATTRS:
            v = getattr(m, a, None)
            if isinstance(v, (int, bool)):
                out.append((n, a, v))
    return tuple(out)


def _text_layer_types(text_config):
    lt = getattr(text_config, "layer_types", None)
    if lt is not None:
        return list(lt)
    lt = getattr(text_config, "attention_layers", None)  # gpt_neo: global / local
    if lt is not None:
        return list(lt)
    return None


def _meta_text_model(text_dict: dict):
    import torch

    config = make_config(text_dict)
    model = _build(config, "meta", torch.bfloat16, False)
    n = getattr(config, "num_hidden_layers")
    return config, model, _decoder_layers(model, n)


def layer_signatures(cfg: dict) -> list:
    """Per decoder layer of the language model: (layer_type, module structure, flags)."""
    td = text_config_dict(cfg)
    config, _, layers = _meta_text_model(td)
    types = _text_layer_types(config) or [None] * len(layers)
    return [_layer_signature(l, t) for l, t in zip(layers, types)]


# ----------------------------------------------------------------------------- reduction


def _shrink_list_for_prefix(d: dict, n_old: int, n: int) -> None:
    for k, v in list(d.items()):
        if k in _INDEX_LIST_KEYS and isinstance(v, list):
            d[k] = [i for i in v if isinstance(i, int) and i < n]
        elif isinstance(v, list) and len(v) == n_old and k not in ("architectures",):
            d[k] = v[:n]
        elif isinstance(v, str) and len(v) == n_old and k.endswith("pattern"):
            d[k] = v[:n]
    if isinstance(d.get("per_layer_config"), dict):  # heterogeneous overrides by layer index
        d["per_layer_config"] = {k: v for k, v in d["per_layer_config"].items() if int(k) < n}
    if isinstance(d.get("num_kv_shared_layers"), int) and d["num_kv_shared_layers"]:
        # Gemma 4: the last layers reuse K/V; the cut keeps the producers before them
        d["num_kv_shared_layers"] = max(0, d["num_kv_shared_layers"] - (n_old - n))
    if d.get("model_type") == "gpt_neo":
        kinds = d.get("attention_layers") or []
        d["attention_types"] = [[[k], 1] for k in kinds[:n]]


def _compaction_candidates(d: dict) -> list[dict]:
    out = []
    if isinstance(d.get("first_k_dense_replace"), int) and d["first_k_dense_replace"] > 1:
        out.append({"first_k_dense_replace": 1})
    if isinstance(d.get("attn_layer_period"), int):  # jamba-style periodic patterns
        eps = [(d.get("expert_layer_period"), d.get("expert_layer_offset"))]
        if isinstance(d.get("expert_layer_period"), int):
            eps = [(p, o) for p in (1, 2) for o in range(p)]
        for ap in (2, 3, 4):
            for ao in range(ap):
                for ep, eo in eps:
                    c = {"attn_layer_period": ap, "attn_layer_offset": ao}
                    if ep is not None:
                        c.update(expert_layer_period=ep, expert_layer_offset=eo)
                    out.append(c)
    # Layers named by index or by kind (Bamba's attn_layer_indices, Nemotron-H's
    # hybrid_override_pattern, which transformers reads as layers_block_type): each kind's
    # first layer moved up front, the rest as it was, so the prefix that shows every kind is
    # a few layers, not the 8-10 before the first attention layer (the SSM mixers'
    # reference scan on CPU is what takes the time).
    for k, v in d.items():
        if (k in _INDEX_LIST_KEYS and isinstance(v, list) and v and isinstance(v[0], int)
                and v[0] > 1):
            out.append({k: [1] + [i for i in v[1:] if i > 1]})
        elif (isinstance(v, str) and k.endswith("pattern")) or (
                k == "layers_block_type" and isinstance(v, list)):
            kinds = list(dict.fromkeys(v))
            if kinds != list(v[:len(kinds)]):
                moved = kinds + list(v[len(kinds):])
                out.append({k: "".join(moved) if isinstance(v, str) else moved})
    return out


def reduced_config(cfg: dict, window: int = 8) -> dict:
    """A small real copy of the language model of ``cfg`` with the same per-layer pattern
    and cache geometry.

    Kept: attention heads, kv heads, head_dim / v_head_dim, MLA ranks and rope dims, SSM and
    linear-attention state dims, conv kernels, every per-layer flag. Shrunk: vocab (128),
    MLP / expert widths (32), expert count (4, top-k <= 2), sliding windows / attention
    chunks / gpt_neo window (-> ``window``), q_lora_rank (32), hidden_size (64) where the
    family takes an explicit head_dim and no state width derives from hidden_size. Layers:
    the shortest prefix of the original layer list that holds every distinct layer
    signature (cache kind, module structure such as MoE vs dense, rope / sliding flags), or
    of a compacted list of the same signatures (_compaction_candidates: a shorter period,
    each kind's first layer moved up front) where that prefix is shorter;
    per-layer lists are cut to that prefix, index lists filtered. For a multimodal config the
    result is the text model's config (towers do not cache). Checked on the meta device: the
    reduced layers have the same signatures and attention geometry as the original prefix.
    """
    import json

    return json.loads(_reduced_cached(json.dumps(cfg, sort_keys=True, default=str), window))


@functools.lru_cache(maxsize=64)
def _reduced_cached(key: str, window: int) -> str:
    import json

    return json.dumps(_reduced_config(json.loads(key), window), sort_keys=True, default=str)


def _reduced_config(cfg: dict, window: int) -> dict:
    td = text_config_dict(cfg)
    if td.get("model_type") in _BLOCK_FAMILIES:
        return _reduced_blocks(td)
    if td.get("model_type") == "blt":
        return _reduced_blt(td)
    if td.get("model_type") in _LOOPED_FAMILIES:
        return _reduced_looped(td, window)
    config, _, layers = _meta_text_model(td)
    types = _text_layer_types(config) or [None] * len(layers)
    sigs = [_layer_signature(l, t) for l, t in zip(layers, types)]
    geom_of = {}
    for s, l in zip(sigs, layers):
        geom_of.setdefault(s, _layer_geometry(l))

    # Compaction of counting fields: fewer layers, same set of layer signatures. Each
    # candidate override is kept only if the signature set is unchanged and the prefix that
    # shows every signature gets shorter.
    d = copy.deepcopy(td)
    target = set(sigs)

    def prefix_len(sg):
        first = {}
        for i, s in enumerate(sg):
            first.setdefault(s, i)
        return max(first.values()) + 1

    n_old = len(layers)
    lkey = _layers_key(config)
    n = prefix_len(sigs)
    for cand in _compaction_candidates(d):
        trial = {**copy.deepcopy(td), **cand}
        trial[lkey] = n - 1
        _shrink_list_for_prefix(trial, n_old, n - 1)
        try:
            tconfig, _, tlayers = _meta_text_model(trial)
        except Exception:
            continue
        ttypes = _text_layer_types(tconfig) or [None] * len(tlayers)
        tsigs = [_layer_signature(l, t) for l, t in zip(tlayers, ttypes)]
        if set(tsigs) == target:
            d, sigs, config, n = {**copy.deepcopy(td), **cand}, tsigs, tconfig, prefix_len(tsigs)

    mt = d["model_type"]
    if mt == "zamba":
        # transformers 5.24 cannot build a Zamba with one hybrid layer (its tie pattern then
        # names no other layer): keep a second one
        hybrid = [i for i, t in enumerate(d.get("layers_block_type") or []) if t == "hybrid"]
        n = max(n, hybrid[1] + 1) if len(hybrid) > 1 else n
    d[lkey] = n
    for k in ("num_decoder_layers", "encoder_layers", "decoder_layers", "num_blocks"):
        if isinstance(d.get(k), int):
            d[k] = n
    if "num_hidden_layers" in d:
        d["num_hidden_layers"] = n
    _shrink_list_for_prefix(d, n_old, n)

    # vocabulary and token ids
    # Inkling 2's output head has unpadded_vocab_size rows (200,058 by default)
    for k in ("vocab_size", "vocab_size_per_layer_input", "unpadded_vocab_size"):
        if k in d:
            d[k] = SMALL_VOCAB
    for k in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        v = d.get(k)
        if isinstance(v, int) and v >= SMALL_VOCAB:
            d[k] = 1 if k != "pad_token_id" else 0
        elif isinstance(v, list):
            d[k] = [x if x < SMALL_VOCAB else 1 for x in v]

    # widths of MLPs / experts only
    for k in _WIDTH_KEYS:
        if mt in ("mamba", "falcon_mamba") and k == "intermediate_size":
            continue  # derived: expand * hidden_size (the SSM width)
        if isinstance(d.get(k), int) and d[k] > SMALL_WIDTH:
            d[k] = SMALL_WIDTH
    # DBRX nests its MLP in ffn_config: left whole, one layer's 16 experts of 6144 x 10752
    # were 3.2 billion parameters (a 7.8 GB test process, 750 s under load).
    ffn = d.get("ffn_config")
    if isinstance(ffn, dict):
        ffn = d["ffn_config"] = dict(ffn)
        if isinstance(ffn.get("ffn_hidden_size"), int) and ffn["ffn_hidden_size"] > SMALL_WIDTH:
            ffn["ffn_hidden_size"] = SMALL_WIDTH
        if isinstance(ffn.get("moe_num_experts"), int) and ffn["moe_num_experts"] > SMALL_EXPERTS:
            ffn["moe_num_experts"] = SMALL_EXPERTS
        if isinstance(ffn.get("moe_top_k"), int) and ffn["moe_top_k"] > SMALL_TOPK:
            ffn["moe_top_k"] = SMALL_TOPK
    if mt == "gpt_neo":
        d["intermediate_size"] = SMALL_WIDTH
    if mt == "codegen" and d.get("n_inner") is None:
        d["n_inner"] = SMALL_WIDTH  # None: 4 x n_embd (16,384 by default)
    if mt == "phi4_multimodal":
        # its towers are built with the text model: one block each (they cache nothing)
        d["vision_config"] = {**d["vision_config"], "num_hidden_layers": 1}
        d["audio_config"] = {**d["audio_config"], "num_blocks": 1}
    if mt == "gpt_neox_japanese":
        d["intermediate_multiple_size"] = 1  # the MLP is hidden_size x this wide
    if mt == "lfm2":
        d["block_multiple_of"] = 16
    if mt == "deepseek_v4":
        # its grouped output's rank and the indexer's query heads shape no cache
        d["o_lora_rank"] = min(d.get("o_lora_rank") or SMALL_WIDTH, SMALL_WIDTH)
        d["index_n_heads"] = min(d.get("index_n_heads") or SMALL_TOPK, SMALL_TOPK)
    if isinstance(d.get("q_lora_rank"), int) and d["q_lora_rank"] > SMALL_WIDTH:
        d["q_lora_rank"] = SMALL_WIDTH

    # experts
    for k in _EXPERT_COUNT_KEYS:
        if isinstance(d.get(k), int) and d[k] > SMALL_EXPERTS:
            d[k] = SMALL_EXPERTS
    for k in _TOPK_KEYS:
        if isinstance(d.get(k), int) and d[k] > SMALL_TOPK:
            d[k] = SMALL_TOPK
    for k in ("n_group", "topk_group"):
        if isinstance(d.get(k), int):
            d[k] = 1

    # windows / chunks
    for k in _WINDOW_KEYS:
        if isinstance(d.get(k), int) and d[k] > window:
            d[k] = window
    # the Inklings' window under its own name (their sliding layers' relative bias spans it)
    if mt.startswith("inkling") and d.get("sliding_window_size", 0) > window:
        d["sliding_window_size"] = window

    # hidden size, only where head_dim is an explicit, honoured field
    # a per-layer attribute raises on the global config (Gemma 4; dots.llm3's
    # AmbiguousGlobalPerLayerAttributeError): the config's own top-level value then
    try:
        heads = getattr(config, "num_attention_heads", None)
    except Exception:  # noqa: BLE001
        heads = d.get("num_attention_heads")
    try:
        eff_head_dim = getattr(config, "head_dim", None)
    except Exception:  # noqa: BLE001
        eff_head_dim = d.get("head_dim")
    eff_head_dim = eff_head_dim or (config.hidden_size // heads if heads else None)
    if (mt not in _HIDDEN_IS_STATE and mt not in _HIDDEN_IS_O_PROJ and "head_dim" in d
            and eff_head_dim
            and d.get("hidden_size", 0) > SMALL_HIDDEN and not d.get("is_encoder_decoder")):
        # some configs validate hidden_size % heads == 0: use a multiple of the head counts
        step = math.lcm(*(x for x in (heads, d.get("num_key_value_heads"))
                          if isinstance(x, int) and x > 0)) if heads else 1
        small = -(-SMALL_HIDDEN // step) * step
        if small < d["hidden_size"]:
            trial = {**d, "head_dim": eff_head_dim, "hidden_size": small}
            try:
                make_config(trial)
            except Exception:  # the family rejects a narrow hidden size: keep it
                trial = d
            d = trial

    # mamba / falcon_mamba: d_inner = expand * hidden_size is the state width; keep d_inner
    # and shrink hidden_size by raising expand.
    if mt in ("mamba", "falcon_mamba") and d.get("hidden_size", 0) > SMALL_HIDDEN:
        d_inner = int(config.intermediate_size)
        if d_inner % SMALL_HIDDEN == 0:
            d["expand"] = d_inner // SMALL_HIDDEN
            d["hidden_size"] = SMALL_HIDDEN
            d["intermediate_size"] = d_inner
            if isinstance(d.get("time_step_rank"), int):
                d["time_step_rank"] = math.ceil(SMALL_HIDDEN / 16)

    # check: same layer signatures and same attention geometry as the original prefix
    rconfig, _, rlayers = _meta_text_model(d)
    rtypes = _text_layer_types(rconfig) or [None] * len(rlayers)
    rsigs = [_layer_signature(l, t) for l, t in zip(rlayers, rtypes)]
    if rsigs != sigs[:n]:
        raise AssertionError(f"{mt}: reduced layer pattern differs from the original prefix")
    for i, (s, l) in enumerate(zip(rsigs, rlayers)):
        if _layer_geometry(l) != geom_of[s]:
            raise AssertionError(
                f"{mt}: reduced layer {i} geometry {_layer_geometry(l)} != {geom_of[s]}")
    return d


# LongCat-Flash: its decoder layer list holds num_layers blocks, each two attention
# sublayers (num_hidden_layers = 2 x num_layers cache layers), two MLPs and one MoE, all
# blocks alike; the signature reduction above looks for a list of num_hidden_layers.
_BLOCK_FAMILIES = ("longcat_flash",)


def _reduced_blocks(td: dict) -> dict:
    """One block of a block-structured family, its MLP and expert widths, expert counts,
    q LoRA rank and vocabulary shrunk; the attention geometry (heads, MLA ranks) kept."""
    d = copy.deepcopy(td)
    d.update(num_layers=1, vocab_size=SMALL_VOCAB, ffn_hidden_size=SMALL_WIDTH,
             expert_ffn_hidden_size=SMALL_WIDTH, n_routed_experts=SMALL_EXPERTS,
             zero_expert_num=min(d.get("zero_expert_num") or 0, SMALL_EXPERTS),
             moe_topk=SMALL_TOPK, q_lora_rank=min(d["q_lora_rank"], SMALL_WIDTH))
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(d.get(k), int) and d[k] >= SMALL_VOCAB:
            d[k] = 1 if k != "pad_token_id" else 0
    return d


# Looped families: their layer lists count passes (Dory's released layer_types list an
# attention and an mlp block per layer, HRM's num_hidden_layers its cache slots), which the
# signature reduction above cannot cut; their test configs are short already.
_LOOPED_FAMILIES = ("dory", "hrm_text")


def _reduced_looped(td: dict, window: int) -> dict:
    """The layers and loops as given; vocabulary, MLP width and windows shrunk, and
    hidden_size narrowed to a multiple of the head counts (head_dim is explicit)."""
    d = copy.deepcopy(td)
    d.update(vocab_size=SMALL_VOCAB, intermediate_size=SMALL_WIDTH)
    if isinstance(d.get("sliding_window"), int):
        d["sliding_window"] = min(d["sliding_window"], window)
    step = math.lcm(*(x for x in (d["num_attention_heads"], d.get("num_key_value_heads"))
                      if isinstance(x, int)))
    d["hidden_size"] = min(d["hidden_size"], -(-SMALL_HIDDEN // step) * step)
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(d.get(k), int) and d[k] >= SMALL_VOCAB:
            d[k] = 1 if k != "pad_token_id" else 0
    return d


def _reduced_blt(td: dict) -> dict:
    """BLT: the local encoder's and decoder's attention geometry kept (they cache), two
    decoder layers; MLP widths, the global transformer and the patcher (which cache
    nothing) cut to one narrow layer (the global one behind the projection a width other
    than the encoder's patch output builds), the hashed n-gram vocabulary to SMALL_VOCAB."""
    d = copy.deepcopy(td)
    for key in ("encoder_config", "decoder_config", "global_config", "patcher_config"):
        d[key] = {**d[key], "intermediate_size": SMALL_WIDTH}
    d["decoder_config"]["num_hidden_layers"] = min(d["decoder_config"]["num_hidden_layers"], 2)
    d["global_config"].update(num_hidden_layers=1, hidden_size=4 * SMALL_HIDDEN,
                              num_attention_heads=4, num_key_value_heads=4,
                              head_dim=SMALL_HIDDEN)
    d["decoder_config"]["hidden_size_global"] = 4 * SMALL_HIDDEN
    d["patcher_config"].update(num_hidden_layers=1, hidden_size=SMALL_HIDDEN,
                               num_attention_heads=4, num_key_value_heads=4,
                               head_dim=SMALL_HIDDEN // 4)
    d["encoder_hash_byte_group_vocab"] = SMALL_VOCAB
    return d


# ----------------------------------------------------------------------------- cache


def _dtype(name):
    import torch

    return getattr(torch, name) if isinstance(name, str) else name


@contextlib.contextmanager
def _fast_bf16_conv1d():
    """CPU speed shim: torch's bf16/fp16 depthwise conv1d on CPU is ~300x slower than fp32
    (2 s for 8192 channels x 22 steps). Inside this context F.conv1d computes in fp32 and
    casts the result back to the input dtype, so every tensor the model sees or caches keeps
    its dtype and shape (conv states are cached from the conv *input* anyway)."""
    import torch
    import torch.nn.functional as F

    orig = F.conv1d

    def conv1d(input, weight, bias=None, *args, **kwargs):
        if input.device.type == "cpu" and input.dtype in (torch.bfloat16, torch.float16):
            b = bias.float() if bias is not None else None
            return orig(input.float(), weight.float(), b, *args, **kwargs).to(input.dtype)
        return orig(input, weight, bias, *args, **kwargs)

    F.conv1d = conv1d
    try:
        yield
    finally:
        F.conv1d = orig


# The names transformers has given the cache argument and output field, newest first:
# 5.24 renamed both to `cache` (past_key_values / cache_params deprecated). A model's
# forward takes **kwargs, so a cache passed under a name it no longer reads is dropped
# without a word and the step starts a fresh cache: the harness checks itself (below).
CACHE_NAMES = ("cache", "past_key_values", "cache_params")
# RWKV has no Cache object: its forward takes and returns `state`, a list of five
# (batch, hidden_size, layers) tensors (two token shifts, then the WKV numerator,
# denominator and maximum), which its blocks update in place.
STATE_NAME = "state"
# Families whose recurrent layers keep their state on their own modules, not in the cache
# (RecurrentGemma: each recurrent block's conv1d_state and rg_lru.recurrent_states; its
# forward returns no cache, so the harness hands one in and reads the modules after).
MODULE_STATE_ATTRS = ("conv1d_state", "recurrent_states")
MODULE_STATE_FAMILIES = ("recurrent_gemma",)


class HarnessBroken(AssertionError):
    """The harness did not run the model as intended: its readings are not the truth.
    tests/conftest.py reports the first one and skips the tests it would fail."""


def _cache_kw(model) -> str:
    """The name under which ``model.forward`` takes the cache."""
    params = inspect.signature(model.forward).parameters
    for name in (*CACHE_NAMES, STATE_NAME):
        if name in params:
            return name
    raise HarnessBroken(f"{type(model).__name__}.forward takes none of {CACHE_NAMES} "
                        "(a transformers release renamed the cache argument?)")


def _returned_cache(out, passed=None):
    for k in (*CACHE_NAMES, STATE_NAME):
        c = getattr(out, k, None)
        if c is not None:
            return c
    if passed is not None:  # a model that fills the cache it is given and returns none
        return passed
    raise HarnessBroken(f"the model returned no cache under any of {CACHE_NAMES}")


def _check_decode_kept_cache(passed, returned, rows: list[dict], seq_len: int) -> None:
    """After a prefill of seq_len-1 tokens and one decode step with the prefill's cache:
    the step updated that cache (not a fresh one), and every attention layer has seen
    seq_len tokens. A step that started a fresh cache would show one."""
    if returned is not passed:
        raise HarnessBroken(
            f"the decode step returned a new {type(returned).__name__} instead of updating "
            "the prefill's cache: it was not handed over under the name the model reads")
    seen = {r["seq_length"] for r in rows
            if r["part"] == "self" and r["tokens_exposed"] is not None}
    if seen and seen != {seq_len}:
        raise HarnessBroken(
            f"after a prefill of {seq_len - 1} tokens and one decode step the attention "
            f"layers have seen {sorted(seen)} tokens, not {seq_len}")


def _layer_tensors(layer) -> dict:
    """Named tensors a cache layer object exposes."""
    import torch

    t = {}
    for a in ("keys", "values", "indexer_keys", "idx_keys"):  # idx_keys: MiniMax-M3's indexer
        v = getattr(layer, a, None)
        if isinstance(v, torch.Tensor):
            t[a] = v
    # DeepSeek-V4's compressed layers: per compressor ("compressor", "indexer") the
    # entries, the tokens since the last one (keys and gates) and the previous group's Ca
    for a in ("conv_states", "recurrent_states", "compressed_kv", "buffer_kv", "buffer_gate",
              "overlap_kv", "overlap_gate"):
        v = getattr(layer, a, None)
        if isinstance(v, dict):
            for i, x in v.items():
                if isinstance(x, torch.Tensor):
                    t[f"{a}[{i}]"] = x
    return t


def _storage_key(x):
    s = x.untyped_storage()
    return (s.data_ptr(), s.nbytes())


def inspect_cache(cache, layer_types=None, module_states=None) -> list[dict]:
    """Per-layer view of a transformers Cache object (see cache_bytes_after_decode).
    EncoderDecoderCache: the self-attention layers ("part": "self"), then the
    cross-attention layers ("part": "cross"). RWKV's `state` list: one row per layer of
    its slices. MiniMaxCache: each layer's lightning state (`linear_cache`) joins its row.
    `module_states`: per layer, tensors the model keeps on its modules, joined likewise."""
    if isinstance(cache, list):
        return _inspect_state_list(cache, layer_types)
    if isinstance(getattr(cache, "rnn_state", None), dict):
        return _inspect_rnn_state(cache.rnn_state, layer_types)
    if hasattr(cache, "self_attention_cache"):
        rows = _inspect_layers(cache.self_attention_cache.layers, layer_types, "self")
        return rows + _inspect_layers(cache.cross_attention_cache.layers, layer_types, "cross")
    extra = [dict(m) for m in module_states or []]
    linear = getattr(cache, "linear_cache", None)
    if isinstance(linear, list):
        import torch

        extra += [{} for _ in range(len(linear) - len(extra))]
        for i, x in enumerate(linear):
            if isinstance(x, torch.Tensor):
                extra[i]["linear_cache"] = x
    layers = list(cache.layers)
    layers += [None] * (len(extra) - len(layers))
    return _inspect_layers(layers, layer_types, "self", extra)


def _inspect_state_list(state, layer_types) -> list[dict]:
    """RWKV: layer i holds [:, :, i] of each of the five state tensors."""
    n = state[0].shape[-1]
    rows = []
    for i in range(n):
        ts = {f"state[{k}]": x[:, :, i] for k, x in enumerate(state)}
        size = sum(x.numel() * x.element_size() for x in ts.values())
        rows.append({
            "layer": i, "part": "self", "cache_class": "state list",
            "kind": layer_types[i] if layer_types and i < len(layer_types) else None,
            "exposed_bytes": size, "stored_bytes": size,  # slices of five shared tensors
            "tokens_exposed": None, "tokens_stored": None,
            "shapes": {k: tuple(x.shape) for k, x in ts.items()},
            "state_dtypes": {k: str(x.dtype).replace("torch.", "") for k, x in ts.items()},
            "sliding_window": None, "seq_length": None,
        })
    return rows


def _inspect_rnn_state(state: dict, layer_types) -> list[dict]:
    """xLSTM's xLSTMCache: per layer a tuple of its mLSTM state tensors (C, n, m)."""
    rows = []
    for i in sorted(state):
        ts = {f"rnn_state[{k}]": x for k, x in enumerate(state[i])}
        size = sum(x.numel() * x.element_size() for x in ts.values())
        rows.append({
            "layer": i, "part": "self", "cache_class": "xLSTMCache",
            "kind": layer_types[i] if layer_types and i < len(layer_types) else None,
            "exposed_bytes": size, "stored_bytes": size,
            "tokens_exposed": None, "tokens_stored": None,
            "shapes": {k: tuple(x.shape) for k, x in ts.items()},
            "state_dtypes": {k: str(x.dtype).replace("torch.", "") for k, x in ts.items()},
            "sliding_window": None, "seq_length": None,
        })
    return rows


def _module_states(model, n_layers: int) -> list[dict]:
    """Per decoder layer, the state tensors its modules hold (MODULE_STATE_ATTRS)."""
    import torch

    out = []
    for layer in _decoder_layers(model, n_layers):
        found = {}
        for name, m in layer.named_modules():
            for a in MODULE_STATE_ATTRS:
                x = getattr(m, a, None)
                if isinstance(x, torch.Tensor):
                    found[f"{name}.{a}" if name else a] = x
        out.append(found)
    return out


def _inspect_layers(layers, layer_types, part, extra=None) -> list[dict]:
    rows = []
    for i, layer in enumerate(layers):
        ts = _layer_tensors(layer) if layer is not None else {}
        if extra and i < len(extra):
            ts.update(extra[i])
        exposed = sum(x.numel() * x.element_size() for x in ts.values())
        storages = {}
        for x in ts.values():
            storages[_storage_key(x)] = x.untyped_storage().nbytes()
        stored = sum(storages.values())
        keys = ts.get("keys")
        tokens_exposed = tokens_stored = None
        if keys is not None and keys.dim() == 4 and keys.numel() > 0:
            tokens_exposed = keys.shape[-2]
            per_token = keys.shape[0] * keys.shape[1] * keys.shape[3] * keys.element_size()
            tokens_stored = keys.untyped_storage().nbytes() // per_token
        rows.append({
            "layer": i,
            "part": part,
            "cache_class": type(layer).__name__,
            "kind": layer_types[i] if layer_types and i < len(layer_types) else None,
            "exposed_bytes": exposed,
            "stored_bytes": stored,
            "tokens_exposed": tokens_exposed,
            "tokens_stored": tokens_stored,
            "shapes": {k: tuple(x.shape) for k, x in ts.items()},
            "state_dtypes": {k: str(x.dtype).replace("torch.", "") for k, x in ts.items()},
            "sliding_window": getattr(layer, "sliding_window", None),
            "seq_length": (layer.get_seq_length() if hasattr(layer, "get_seq_length")
                           else None),
        })
    return rows


@functools.lru_cache(maxsize=32)
def _built(key: str, dtype_name: str):
    """A reduced random-weight CPU model for a frozen config (cached across calls)."""
    import json

    import torch

    d = json.loads(key)
    config = make_config(d)
    torch.manual_seed(0)
    model = _build(config, "cpu", _dtype(dtype_name), False)
    model.eval()
    return config, model


def _run(cfg: dict, seq_len: int, batch: int, dtype, window: int, decode: bool, reduce: bool,
         encoder_len: int | None = None):
    import json

    import torch

    d = reduced_config(cfg, window) if reduce else text_config_dict(cfg)
    config, model = _built(json.dumps(d, sort_keys=True, default=str), str(dtype).replace("torch.", ""))
    vocab = getattr(config, "vocab_size", SMALL_VOCAB)
    g = torch.Generator().manual_seed(1)
    n_prefill = seq_len - 1 if decode else seq_len
    mt = getattr(config, "model_type", None)
    streams = config.num_codebooks if mt in _CODEBOOK_DECODERS else 1
    ids = torch.randint(2, vocab, (batch * streams, seq_len), generator=g)
    kw = _cache_kw(model)
    extra = {}
    if mt in _CROSS_DECODERS:  # the encoder output every layer keeps: encoder_len tokens
        states = torch.randn(batch, encoder_len or seq_len, config.hidden_size, generator=g)
        extra_states = {"encoder_hidden_states": states.to(_dtype(dtype))}
    else:
        extra_states = {}
    if getattr(config, "is_encoder_decoder", False):
        # encoder input: seq_len tokens; the decoder runs the prefill / decode below
        extra["input_ids"] = torch.randint(2, vocab, (batch, seq_len), generator=g)
    ids_key = "decoder_input_ids" if extra else "input_ids"
    given = {}
    if getattr(config, "model_type", None) in MODULE_STATE_FAMILIES:
        from transformers import DynamicCache

        given = {kw: DynamicCache(config=config)}
    elif mt in _HANDED_A_CACHE:
        from transformers import DynamicCache, EncoderDecoderCache

        given = {kw: EncoderDecoderCache(DynamicCache(), DynamicCache())}
    with torch.no_grad(), _fast_bf16_conv1d():
        out = model(**extra, **extra_states, **{ids_key: ids[:, :n_prefill]}, use_cache=True,
                    **given)
        cache = _returned_cache(out, given.get(kw))
        if decode:
            prefill_cache = cache
            if extra:
                extra = {"encoder_outputs": (out.encoder_last_hidden_state,)}
            pos = torch.full((batch, 1), n_prefill, dtype=torch.long)
            args = {kw: cache, "use_cache": True, ids_key: ids[:, n_prefill:], **extra,
                    **extra_states}
            fwd = inspect.signature(model.forward).parameters
            if "cache_position" in fwd:
                args["cache_position"] = torch.tensor([n_prefill])
            if "position_ids" in fwd and not extra:
                args["position_ids"] = pos
            out = model(**args)
            cache = _returned_cache(out, given.get(kw))
    held = None
    if given and mt in MODULE_STATE_FAMILIES:
        held = _module_states(model, getattr(config, "num_hidden_layers"))
    rows = inspect_cache(cache, _text_layer_types(config), held)
    if decode:
        _check_decode_kept_cache(prefill_cache, cache, rows, seq_len)
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        inferred, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
        for r, t in zip(rows, inferred):
            r["cache_layer_type"] = t
    except Exception:  # older transformers: no per-layer dispatch helper
        pass
    return rows


def cache_bytes_after_decode(cfg: dict, seq_len: int, batch: int = 1, dtype="bfloat16",
                             window: int = 8, decode: bool = True, reduce: bool = True,
                             encoder_len: int | None = None) -> list[dict]:
    """Cache per decoder layer after a prefill of seq_len-1 tokens and ONE decode step.

    The reduced copy of ``cfg`` (``reduced_config(cfg, window)``; ``reduce=False`` uses the
    text config as is) is built on CPU in ``dtype`` with random weights; the prefill returns
    the cache, which is passed back for the decode step as generate() does (position ids /
    cache_position one past the prefill). ``decode=False``: a bare prefill of seq_len tokens.
    Per layer: {"layer", "cache_class", "kind" (config layer_types / gpt_neo attention_layers
    entry), "exposed_bytes" (numel * element_size of keys / values / conv / recurrent /
    indexer tensors), "stored_bytes" (their untyped storages, each counted once),
    "tokens_exposed", "tokens_stored" (key storage in tokens), "shapes", "state_dtypes",
    "sliding_window", "seq_length"}.
    """
    return _run(cfg, seq_len, batch, _dtype(dtype), window, decode, reduce, encoder_len)


def cache_bytes_after_prefill(cfg: dict, seq_len: int, batch: int = 1, dtype="bfloat16",
                              window: int = 8, reduce: bool = True) -> list[dict]:
    """Cache per decoder layer right after a bare prefill of ``seq_len`` tokens."""
    return _run(cfg, seq_len, batch, _dtype(dtype), window, False, reduce)
