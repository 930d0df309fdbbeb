"""Typed access to one config.json dict: each field read as its config class reads it,
and every error names the field (and the model_type when one is missing).

`MISSING` is what `Config.raw` returns for an absent field, so that absent and null
(`None`) stay apart: several config classes default the two differently.
"""

from __future__ import annotations

import json
from typing import Any

from kvcalc.dtypes import MAX_LAYERS, MAX_WIDTH
from kvcalc.errors import KvcalcError

MISSING = object()


def json_kind(value: Any) -> str:
    """What a JSON document holds, in words: null, a list, a number, a string, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), "something else")


def describe(value: Any) -> str:
    """A JSON value for a message: scalars as written (long ones cut), containers by kind."""
    if isinstance(value, list):
        return f"a list of {len(value):,}"
    if isinstance(value, dict):
        return f"an object of {len(value):,} keys"
    if isinstance(value, str):  # never quoted back: a config may hold anything
        return "a string"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length():,}-bit integer"
    return json.dumps(value)


_LAYER_COUNT_KEYS = frozenset({
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers",
    "decoder_layers", "encoder_layers", "num_encoder_layers", "num_nextn_predict_layers",
    "first_k_dense_replace", "max_window_layers"})


_MAX_CONFIG_INT = MAX_WIDTH * 1_000_000


# Fields a family's transformers configuration class fills in with a number of its own
# when config.json leaves them out, where that number is not what an absent field means
# to kvcalc's reader for the family (null keeps its meaning: no q LoRA, no experts, one K/V
# head per query head). transformers 5.24: DeepseekV2Config, DeepseekV3Config,
# Starcoder2Config, Qwen2MoeConfig, Qwen3MoeConfig, JambaConfig, OlmoeConfig;
# tests/test_hf_defaults.py holds every optional field kvcalc reads to the class's own
# value.
CLASS_DEFAULTS = {
    ("deepseek_v2", "q_lora_rank"): 1536,
    ("deepseek_v2", "n_routed_experts"): 64,
    ("deepseek_v2", "n_shared_experts"): 2,
    ("deepseek_v3", "q_lora_rank"): 1536,
    ("deepseek_v3", "n_routed_experts"): 256,
    ("deepseek_v3", "n_shared_experts"): 1,
    ("deepseek_v3", "first_k_dense_replace"): 3,
    ("starcoder2", "num_key_value_heads"): 2,
    ("qwen2_moe", "num_experts"): 60,
    ("qwen2_moe", "num_key_value_heads"): 16,
    ("qwen3_moe", "num_experts"): 128,
    ("qwen3_moe", "num_key_value_heads"): 4,
    ("jamba", "num_key_value_heads"): 8,
    ("olmoe", "max_position_embeddings"): 4096,
}


class Config:
    """Typed access to one config dict, with errors that name the field."""

    def __init__(self, cfg: dict, model_type: str, where: str) -> None:
        self.cfg = cfg
        self.model_type = model_type
        self.where = where

    def error(self, message: str) -> KvcalcError:
        return KvcalcError(f"{self.where}: {message}")

    def has(self, key: str) -> bool:
        return key in self.cfg

    def raw(self, key: str, *aliases: str) -> Any:
        """The value under `key` (or the first alias present), or MISSING."""
        for k in (key, *aliases):
            if k in self.cfg:
                return self.cfg[k]
        return MISSING

    def missing(self, key: str, why: str = "") -> KvcalcError:
        """The error for a required field that is absent (`why` adds the reason)."""
        return self.error(
            f"missing required field {key!r} for model_type {self.model_type!r}{why}"
        )

    def check_int(self, key: str, value: Any) -> int:
        """`value`, read from `key`, if it is an integer within what kvcalc reads."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"field {key!r} must be an integer, got {describe(value)}")
        # Bounded here, before any reader builds a per-layer list from it: 10^7 layers
        # once took minutes and gigabytes to refuse, 2^63 overflowed range().
        upper = MAX_LAYERS if key in _LAYER_COUNT_KEYS else _MAX_CONFIG_INT
        if abs(value) > upper:
            what = f"{upper:,} layers" if upper == MAX_LAYERS else f"{upper:,}"
            raise self.error(f"field {key!r} is over the {what} kvcalc reads")
        return value

    def req_int(self, key: str, *aliases: str, why: str = "") -> int:
        value = self.raw(key, *aliases)
        if value is MISSING or value is None:
            raise self.missing(key, why)
        return self.check_int(key, value)

    def req_dim(self, key: str, *aliases: str) -> int:
        """A required size that later divides or multiplies (heads, widths): positive."""
        value = self.req_int(key, *aliases)
        if value <= 0:
            given = next(k for k in (key, *aliases) if k in self.cfg)
            raise self.error(f"field {given!r} must be positive, got {value}")
        return value

    def opt_int(self, key: str, default: int | None, *aliases: str) -> int | None:
        """An int, or `default` when the field is null or absent; absent from a family
        whose configuration class has its own default (CLASS_DEFAULTS), that default, as
        transformers fills it in."""
        value = self.raw(key, *aliases)
        if value is MISSING:
            value = CLASS_DEFAULTS.get((self.model_type, key))
        if value is None:
            return default
        return self.check_int(key, value)

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is MISSING or value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"field {key!r} must be true or false, got {value!r}")
        return value

    def kv_heads_required(self, heads: int) -> int:
        """A family whose config class defaults kv heads to a checkpoint's number.

        Absent: an error (transformers would use that other model's value);
        null: every head has its own K/V (the class's `None -> heads`).
        """
        value = self.raw("num_key_value_heads")
        if value is MISSING:
            raise self.missing(
                "num_key_value_heads", " (write null for one K/V head per query head)"
            )
        if value is None:
            return heads
        return self.check_int("num_key_value_heads", value)

    def head_dim(self, hidden: int, heads: int, required: bool = False) -> int:
        value = self.raw("head_dim")
        if value is MISSING and required:
            raise self.missing("head_dim")
        if value is MISSING or value is None:
            if hidden % heads:
                raise self.error(
                    f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads}) "
                    "and no head_dim is given"
                )
            return hidden // heads
        return self.check_int("head_dim", value)


def core_dims(c: Config) -> tuple[int, int, int, int, int]:
    """hidden_size, num_hidden_layers, num_attention_heads, vocab_size, intermediate_size:
    the sizes the Llama-style and DeepSeek configs name alike, each required positive."""
    return tuple(c.req_dim(key) for key in ("hidden_size", "num_hidden_layers",
                                            "num_attention_heads", "vocab_size",
                                            "intermediate_size"))
