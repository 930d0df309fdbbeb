"""Every key a family's transformers configuration class accepts is read by kvcalc or
named here as irrelevant, with the reason (issue #40: LFM2-1.2B's `block_ff_dim`, a name
Lfm2Config accepts and kvcalc did not, made kvcalc refuse a published config).

The accepted keys are walked from the class itself (transformers 5.24): its fields (the
keyword arguments of its generated __init__), the names its __post_init__ takes out of
**kwargs (legacy names: Lfm2Config's `block_ff_dim` and `tie_embedding`), and its
attribute_map. The fields every PreTrainedConfig has (BOOKKEEPING) are set apart once.

What kvcalc reads is watched, not listed: its reader runs on the family's published
configs (tests/data/hf) and the class's default config, and every key it asks for
(Config.raw, Config.has; a tower's _Fields) is recorded. To hold another family to this,
add a FAMILIES entry: its class, how kvcalc reads it, and the keys kvcalc leaves alone
(and `variants`, class-default configs with a switch on, where a key is read only once a
layer kind is present).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import warnings
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from kvcalc import towers  # noqa: E402
from kvcalc.hfconfig import config as config_mod  # noqa: E402
from kvcalc.hfconfig import multimodal  # noqa: E402
from kvcalc.hfconfig import spec_from_hf_config  # noqa: E402

DATA = Path(__file__).parent / "data" / "hf"

TOKEN_IDS = "a token id: the tokenizer's, no weight or cache"
INIT = "weight initialisation for training; no shape"
RUNTIME = "a runtime switch of transformers' forward pass; no shape"
VALUE = "a value the forward pass uses (epsilon, activation, scale, cap); no shape"
ROPE = "rotary frequencies: computed, not stored; no parameter or cache byte"
DROPOUT = "dropout: training only"
ROUTING = "how the router picks or weighs experts; no shape"
AUX = "the router's auxiliary loss: training only"

# PreTrainedConfig's own fields, on every class (transformers 5.24)
BOOKKEEPING = {
    "architectures": "the class names to load; kvcalc reads model_type",
    "chunk_size_feed_forward": "a memory-saving chunking of the forward pass; no shape",
    "dtype": "the checkpoint's dtype; kvcalc takes weight and cache dtypes as options",
    "id2label": "a classification head's labels; kvcalc counts causal LMs",
    "label2id": "a classification head's labels; kvcalc counts causal LMs",
    "is_encoder_decoder": "read from model_type's family, not this flag",
    "output_hidden_states": RUNTIME,
    "problem_type": "a classification head's loss; kvcalc counts causal LMs",
    "return_dict": RUNTIME,
    "transformers_version": "bookkeeping of the writer",
}


@dataclasses.dataclass(frozen=True)
class Family:
    cls: str                       # transformers' configuration class
    reader: str                    # "text": spec_from_hf_config; "tower": towers; "wrapper"
    configs: tuple[str, ...]       # published files under tests/data/hf (stems)
    irrelevant: dict[str, str]     # key -> why kvcalc need not read it
    wrapper: str = ""              # the multimodal model_type a tower belongs to
    # class-default configs with these switches on, read too: a key that a reader asks for
    # only when a layer kind is present (SmolLM3's window, read once a layer slides)
    variants: tuple[dict, ...] = ()
    # the class-default config with these keys left out, read too: a legacy key the class
    # turns into them (Qwen3.5's full_attention_interval into layer_types) is read only then
    without: tuple[str, ...] = ()


FAMILIES = {
    "lfm2": Family("Lfm2Config", "text", ("LiquidAI__LFM2-350M", "LiquidAI__LFM2-1.2B"), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "norm_eps": VALUE, "rope_parameters": ROPE,
        "use_cache": RUNTIME,
    }),
    "gemma4_text": Family("Gemma4TextConfig", "text", (
        "google__gemma-4-E2B-it-text", "google__gemma-4-26B-A4B-it-text"), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_activation": VALUE,
        "final_logit_softcapping": VALUE, "rope_parameters": ROPE,
        "attention_dropout": DROPOUT, "use_cache": RUNTIME,
    }),
    "gemma4_vision": Family("Gemma4VisionConfig", "tower", ("google__gemma-4-26B-A4B-it",), {
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_activation": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT,
        "attention_bias": "read by no Gemma4Vision module (their linears are bias-free)",
        "max_position_embeddings": "the vision rotary table's reach; no parameter",
        "pooling_kernel_size": "the pooler averages patches: no parameter",
        "standardize": "std_bias and std_scale are buffers, not parameters",
        "use_clipped_linears": "the clip bounds are buffers, not parameters",
    }, wrapper="gemma4"),
    "gemma4": Family("Gemma4Config", "wrapper", ("google__gemma-4-26B-A4B-it",), {
        "audio_token_id": TOKEN_IDS, "boa_token_id": TOKEN_IDS, "boi_token_id": TOKEN_IDS,
        "eoa_token_index": TOKEN_IDS, "eoi_token_id": TOKEN_IDS, "image_token_id": TOKEN_IDS,
        "video_token_id": TOKEN_IDS, "initializer_range": INIT,
    }),
    # Families whose published configs came with issue #40 point 1 (tests/data/hf/SOURCES.md)
    "qwen3_next": Family("Qwen3NextConfig", "text", ("Qwen__Qwen3-Next-80B-A3B-Thinking",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "norm_topk_prob": ROUTING, "output_router_logits": RUNTIME, "router_aux_loss_coef": AUX,
    }),
    "smollm3": Family("SmolLM3Config", "text", ("HuggingFaceTB__SmolLM3-3B",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "no_rope_layers": "which layers rotate (NoPE elsewhere): " + ROPE,
        "no_rope_layer_interval": "which layers rotate (NoPE elsewhere): " + ROPE,
    }, variants=({"use_sliding_window": True, "sliding_window": 64, "num_hidden_layers": 4},)),
    "glm_moe_dsa": Family("GlmMoeDsaConfig", "text", ("zai-org__GLM-5",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "n_group": ROUTING, "topk_group": ROUTING, "norm_topk_prob": ROUTING,
        "routed_scaling_factor": VALUE, "output_router_logits": RUNTIME,
        "head_dim": "__post_init__ sets it to qk_rope_head_dim, the rotary width: " + ROPE,
        "num_key_value_heads": "MLA: keys and values come from the kv_lora_rank latent "
                               "(GlmMoeDsaAttention's num_key_value_groups only); no shape",
        "layer_types": "every layer indexed_attention, as __post_init__ fills it: it picks "
                       "transformers' cache class, no layer of another kind (indexer_types, "
                       "read, says which layers run an indexer)",
    }),
    "mimo_v2_flash": Family("MiMoV2FlashConfig", "text", ("XiaomiMiMo__MiMo-V2-Flash",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "attention_value_scale": VALUE, "n_group": ROUTING, "topk_group": ROUTING,
        "norm_topk_prob": ROUTING, "routed_scaling_factor": VALUE,
        "output_router_logits": RUNTIME,
    }),
    "laguna": Family("LagunaConfig", "text", (
        "poolside__Laguna-XS.2-FP8", "poolside__Laguna-S-2.1-FP8"), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "moe_apply_router_weight_on_input": ROUTING, "moe_routed_scaling_factor": VALUE,
        "moe_router_logit_softcapping": VALUE, "output_router_logits": RUNTIME,
        "router_aux_loss_coef": AUX,
    }),
    "qwen2_moe": Family("Qwen2MoeConfig", "text", ("Qwen__Qwen1.5-MoE-A2.7B-Chat",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "norm_topk_prob": ROUTING, "output_router_logits": RUNTIME, "router_aux_loss_coef": AUX,
        # Qwen2MoeConfig slides only with use_sliding_window true, which kvcalc reads and
        # refuses ("sliding layers in MoE Qwen configs are not supported"); false in every
        # published Qwen MoE config
        "sliding_window": "used only with use_sliding_window true, which kvcalc refuses",
        "max_window_layers": "used only with use_sliding_window true, which kvcalc refuses",
        "layer_types": "sliding entries only with use_sliding_window true, which kvcalc "
                       "refuses; full attention otherwise",
    }),
    "stablelm": Family("StableLmConfig", "text", ("stabilityai__stablelm-2-zephyr-1_6b",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "layer_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "hidden_dropout": DROPOUT,
        "use_cache": RUNTIME,
    }),
    "glm4_moe_lite": Family("Glm4MoeLiteConfig", "text", ("zai-org__GLM-4.7-Flash",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "rope_interleave": ROPE, "attention_dropout": DROPOUT,
        "use_cache": RUNTIME, "n_group": ROUTING, "topk_group": ROUTING,
        "norm_topk_prob": ROUTING, "routed_scaling_factor": VALUE,
        "output_router_logits": RUNTIME,
        "pretraining_tp": "a tensor-parallel slicing of the original training code; no shape",
        "num_key_value_heads": "MLA: keys and values come from the kv_lora_rank latent; "
                               "no shape",
    }),
    "qwen3_5_text": Family("Qwen3_5TextConfig", "text", ("Qwen__Qwen3.5-27B",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
    }, without=("layer_types",)),
    "qwen3_5_moe_text": Family("Qwen3_5MoeTextConfig", "text", (
        "Qwen__Qwen3.5-35B-A3B", "Qwen__Qwen3.5-397B-A17B"), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "output_router_logits": RUNTIME, "router_aux_loss_coef": AUX,
    }, without=("layer_types",)),
    "ernie4_5_moe": Family("Ernie4_5_MoeConfig", "text", ("baidu__ERNIE-4.5-21B-A3B-Thinking",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "use_cache": RUNTIME,
        "moe_norm_min": "the floor of the router's weight normalisation: " + ROUTING,
        "output_router_logits": RUNTIME, "router_aux_loss_coef": AUX,
    }),
    "bloom": Family("BloomConfig", "text", ("bigscience__bloomz-560m",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "layer_norm_epsilon": VALUE, "use_cache": RUNTIME,
        "attention_dropout": DROPOUT, "hidden_dropout": DROPOUT,
        "apply_residual_connection_post_layernorm": "which tensor the residual adds "
                                                    "(normed or not); no shape",
        "pretraining_tp": "a tensor-parallel slicing of the original training code; no shape",
        "slow_but_exact": "a slower, exact merge of tensor-parallel slices; no shape",
    }),
    "ministral3": Family("Ministral3Config", "text", (), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
    }),
    "mamba2": Family("Mamba2Config", "text", ("mistralai__Mamba-Codestral-7B-v0.1",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "layer_norm_epsilon": VALUE, "hidden_act": VALUE,
        "use_cache": RUNTIME, "residual_in_fp32": VALUE, "time_step_limit": VALUE,
        "rescale_prenorm_residual": INIT, "time_step_floor": INIT, "time_step_max": INIT,
        "time_step_min": INIT,
        "chunk_size": "the SSD scan's chunk length: compute only, no shape or state",
        "expand": "Mamba2Config requires hidden_size * expand == num_heads * head_dim, "
                  "the inner width kvcalc reads from those two",
        "time_step_rank": "set on Mamba2Mixer but sizes no module (dt_bias is num_heads wide)",
    }),
    "exaone4": Family("Exaone4Config", "text", ("LGAI-EXAONE__EXAONE-4.0-32B",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
    }, without=("layer_types",)),
    "olmo3": Family("Olmo3Config", "text", ("allenai__Olmo-3.1-32B-Instruct",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
    }),
    "granite": Family("GraniteConfig", "text", ("ibm-granite__granite-3.3-8b-instruct",), {
        "bos_token_id": TOKEN_IDS, "eos_token_id": TOKEN_IDS, "pad_token_id": TOKEN_IDS,
        "initializer_range": INIT, "rms_norm_eps": VALUE, "hidden_act": VALUE,
        "rope_parameters": ROPE, "attention_dropout": DROPOUT, "use_cache": RUNTIME,
        "attention_multiplier": VALUE, "embedding_multiplier": VALUE,
        "residual_multiplier": VALUE, "logits_scaling": VALUE,
    }),
}

# What kvcalc reads of a wrapper (multimodal.text_config, towers, with_towers): the dict
# lookups are not watched, so each key must be named in the reading module's source.
WRAPPER_READS = {"gemma4": {"text_config": multimodal, "vision_config": towers,
                            "audio_config": multimodal,
                            "tie_word_embeddings": multimodal}}


def _class(name: str):
    return getattr(transformers, name)


def accepted_keys(cls) -> set[str]:
    """Keyword names the class accepts: its own fields, the names its __post_init__
    takes from **kwargs, its attribute_map's keys."""
    base = {f.name for f in dataclasses.fields(transformers.PreTrainedConfig)}
    keys = {f.name for f in dataclasses.fields(cls)} - base
    for klass in cls.__mro__:
        if klass is transformers.PreTrainedConfig:
            break
        post = vars(klass).get("__post_init__")
        if post is None:
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(post)))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("pop", "get")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "kwargs"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                keys.add(node.args[0].value)
    keys |= set(getattr(cls, "attribute_map", {}) or {})
    return keys


def _default_config(cls, **switches) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json.loads(json.dumps(cls(**switches).to_dict(), default=str))


def keys_read(family: Family, monkeypatch) -> set[str]:
    """The keys kvcalc asks for while reading the family's configs."""
    read: set[str] = set()
    configs = [json.loads((DATA / f"{stem}.json").read_text()) for stem in family.configs]
    if family.reader == "text":
        raw, has = config_mod.Config.raw, config_mod.Config.has

        def spy_raw(self, key, *aliases):
            read.update((key, *aliases))
            return raw(self, key, *aliases)

        def spy_has(self, key):
            read.add(key)
            return has(self, key)

        configs.append(_default_config(_class(family.cls)))
        configs += [_default_config(_class(family.cls), **v) for v in family.variants]
        if family.without:
            configs.append({k: v for k, v in _default_config(_class(family.cls)).items()
                            if k not in family.without})
        with monkeypatch.context() as m:
            m.setattr(config_mod.Config, "raw", spy_raw)
            m.setattr(config_mod.Config, "has", spy_has)
            for cfg in configs:
                spec_from_hf_config(cfg, "keys")
    elif family.reader == "tower":
        get_int, get_bool = towers._Fields.int, towers._Fields.bool

        def spy_int(self, key, default=None):
            read.add(key)
            return get_int(self, key, default)

        def spy_bool(self, key, default):
            read.add(key)
            return get_bool(self, key, default)

        with monkeypatch.context() as m:
            m.setattr(towers._Fields, "int", spy_int)
            m.setattr(towers._Fields, "bool", spy_bool)
            for cfg in configs:
                towers.tower_params(cfg, family.wrapper, 1024, "keys")
    else:
        name = next(k for k, f in FAMILIES.items() if f is family)
        for key, module in WRAPPER_READS[name].items():
            if f'"{key}"' in inspect.getsource(module):
                read.add(key)
    return read


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_accepted_key_is_read_or_named_irrelevant(name, monkeypatch):
    family = FAMILIES[name]
    accepted = accepted_keys(_class(family.cls))
    read = keys_read(family, monkeypatch)
    unaccounted = accepted - read - set(family.irrelevant) - set(BOOKKEEPING)
    assert not unaccounted, (
        f"{family.cls} accepts {sorted(unaccounted)}: kvcalc neither reads them nor names "
        "them irrelevant (FAMILIES) with a reason")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_irrelevant_keys_are_the_class_own_and_not_read(name, monkeypatch):
    """No stale entry (a key the class no longer accepts), none contradicted (kvcalc reads
    it after all), and every reason written out."""
    family = FAMILIES[name]
    accepted = accepted_keys(_class(family.cls))
    assert set(family.irrelevant) <= accepted, sorted(set(family.irrelevant) - accepted)
    assert not set(family.irrelevant) & keys_read(family, monkeypatch)
    assert all(reason.strip() for reason in family.irrelevant.values())


def test_the_walk_finds_legacy_names_and_attribute_maps():
    """Lfm2Config's legacy names come from its __post_init__; an attribute_map's keys are
    accepted too (GPT-2's n_embd is hidden_size)."""
    assert {"block_ff_dim", "tie_embedding"} <= accepted_keys(transformers.Lfm2Config)
    assert {"hidden_size", "num_attention_heads"} <= accepted_keys(transformers.GPT2Config)
