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

# The sizes that say which model a config is: refused when absent, whatever the class's
# default (tests/test_hf_defaults.py leaves them out of its walk).
CORE_FIELDS = frozenset({
    "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
    "intermediate_size", "n_embd", "n_layer", "n_head", "n_inner", "ffn_dim", "num_heads",
    "num_layers", "d_model", "n_layers", "n_heads", "ffn_hidden_size",
    "attention_heads", "dff"})


# Fields a family's transformers configuration class fills in with a number of its own
# when config.json leaves them out (transformers 5.24, `configuration_<family>.py`), where
# that number is not what an absent field means to kvcalc's reader for the family: read
# as if config.json stated it (Config.raw). Null keeps its meaning (no q LoRA, no experts,
# one K/V head per query head), and a class default of None adds nothing. Not here, and
# still refused when absent: the sizes every saved config.json carries (CORE_FIELDS),
# whose class default is one checkpoint's shape (a Llama-7B) rather than the model's.
# tests/test_hf_defaults.py holds every field kvcalc reads, for every model_type it reads,
# to the class's own value.
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
    # Fields kvcalc would otherwise refuse when absent (issue #20 point 3, the rest), and
    # context lengths where the class's differs from kvcalc's own default:
    ("cohere2", "sliding_window"): 4096,
    ("deepseek_v2", "kv_lora_rank"): 512, ("deepseek_v2", "moe_intermediate_size"): 1407,
    ("deepseek_v2", "qk_nope_head_dim"): 128, ("deepseek_v2", "qk_rope_head_dim"): 64,
    ("deepseek_v2", "v_head_dim"): 128,
    ("deepseek_v3", "kv_lora_rank"): 512, ("deepseek_v3", "moe_intermediate_size"): 2048,
    ("deepseek_v3", "num_experts_per_tok"): 8, ("deepseek_v3", "qk_nope_head_dim"): 128,
    ("deepseek_v3", "qk_rope_head_dim"): 64, ("deepseek_v3", "v_head_dim"): 128,
    ("deepseek_v32", "first_k_dense_replace"): 3, ("deepseek_v32", "index_head_dim"): 128,
    ("deepseek_v32", "index_n_heads"): 64, ("deepseek_v32", "index_topk"): 2048,
    ("deepseek_v32", "kv_lora_rank"): 512, ("deepseek_v32", "moe_intermediate_size"): 2048,
    ("deepseek_v32", "n_routed_experts"): 256, ("deepseek_v32", "n_shared_experts"): 1,
    ("deepseek_v32", "num_experts_per_tok"): 8, ("deepseek_v32", "q_lora_rank"): 1536,
    ("deepseek_v32", "qk_nope_head_dim"): 128, ("deepseek_v32", "qk_rope_head_dim"): 64,
    ("deepseek_v32", "v_head_dim"): 128,
    ("ernie4_5", "head_dim"): 128, ("ernie4_5", "num_key_value_heads"): 2,
    ("ernie4_5_moe", "moe_intermediate_size"): 1536, ("ernie4_5_moe", "moe_k"): 6,
    ("ernie4_5_moe", "moe_num_experts"): 64, ("ernie4_5_moe", "moe_num_shared_experts"): 2,
    ("ernie4_5_moe", "num_key_value_heads"): 4,
    ("exaone4", "sliding_window"): 4096,
    ("gemma", "head_dim"): 256, ("gemma", "num_key_value_heads"): 16,
    ("gemma2", "head_dim"): 256, ("gemma2", "num_key_value_heads"): 4,
    ("gemma2", "sliding_window"): 4096,
    ("gemma3_text", "head_dim"): 256, ("gemma3_text", "num_key_value_heads"): 4,
    ("gemma3_text", "sliding_window"): 4096,
    ("gemma4_text", "head_dim"): 256, ("gemma4_text", "num_key_value_heads"): 4,
    ("gemma4_text", "sliding_window"): 512,
    ("glm", "num_key_value_heads"): 2,
    ("glm4", "num_key_value_heads"): 2,
    ("glm4_moe_lite", "kv_lora_rank"): 512, ("glm4_moe_lite", "moe_intermediate_size"): 1536,
    ("glm4_moe_lite", "n_routed_experts"): 64, ("glm4_moe_lite", "n_shared_experts"): 1,
    ("glm4_moe_lite", "num_experts_per_tok"): 4, ("glm4_moe_lite", "q_lora_rank"): 768,
    ("glm4_moe_lite", "qk_nope_head_dim"): 192, ("glm4_moe_lite", "qk_rope_head_dim"): 64,
    ("glm4_moe_lite", "v_head_dim"): 256,
    ("glm_moe_dsa", "first_k_dense_replace"): 3, ("glm_moe_dsa", "index_head_dim"): 128,
    ("glm_moe_dsa", "index_n_heads"): 32, ("glm_moe_dsa", "index_topk"): 2048,
    ("glm_moe_dsa", "kv_lora_rank"): 512, ("glm_moe_dsa", "max_position_embeddings"): 202752,
    ("glm_moe_dsa", "moe_intermediate_size"): 2048, ("glm_moe_dsa", "n_routed_experts"): 256,
    ("glm_moe_dsa", "n_shared_experts"): 1, ("glm_moe_dsa", "num_experts_per_tok"): 8,
    ("glm_moe_dsa", "q_lora_rank"): 2048, ("glm_moe_dsa", "qk_nope_head_dim"): 192,
    ("glm_moe_dsa", "qk_rope_head_dim"): 64, ("glm_moe_dsa", "v_head_dim"): 256,
    ("glm4_moe", "first_k_dense_replace"): 1, ("glm4_moe", "moe_intermediate_size"): 1408,
    ("glm4_moe", "n_routed_experts"): 128, ("glm4_moe", "n_shared_experts"): 1,
    ("glm4_moe", "num_experts_per_tok"): 8, ("glm4_moe", "num_key_value_heads"): 8,
    ("gpt2", "n_positions"): 1024,
    ("gpt-sw3", "n_positions"): 1024,
    ("gpt_bigcode", "n_positions"): 1024,
    ("gpt_neo", "max_position_embeddings"): 2048,
    ("gpt_oss", "head_dim"): 64, ("gpt_oss", "num_key_value_heads"): 8,
    ("gpt_oss", "num_local_experts"): 128, ("gpt_oss", "sliding_window"): 128,
    ("granite", "max_position_embeddings"): 2048,
    ("granitemoe", "max_position_embeddings"): 2048, ("granitemoe", "num_experts_per_tok"): 2,
    ("granitemoe", "num_local_experts"): 8,
    ("granitemoeshared", "num_experts_per_tok"): 2,
    ("granitemoeshared", "num_local_experts"): 8,
    ("granite_swa", "num_key_value_heads"): 4, ("granite_swa", "sliding_window"): 128,
    ("granitemoe_swa", "num_experts_per_tok"): 2, ("granitemoe_swa", "num_local_experts"): 8,
    ("granitemoe_swa", "sliding_window"): 128,
    ("flex_olmo", "max_position_embeddings"): 4096, ("flex_olmo", "num_experts"): 7,
    ("flex_olmo", "num_experts_per_tok"): 5,
    ("bitnet", "num_key_value_heads"): 5,
    ("mellum", "head_dim"): 128, ("mellum", "moe_intermediate_size"): 896,
    ("mellum", "num_experts_per_tok"): 8, ("mellum", "num_key_value_heads"): 4,
    ("mellum", "num_local_experts"): 64, ("mellum", "sliding_window"): 1024,
    ("emu3_text_model", "num_key_value_heads"): 8,
    ("solar_open", "head_dim"): 128, ("solar_open", "moe_intermediate_size"): 1280,
    ("solar_open", "n_routed_experts"): 128, ("solar_open", "n_shared_experts"): 1,
    ("solar_open", "num_experts_per_tok"): 8, ("solar_open", "num_key_value_heads"): 8,
    ("kolibri1", "head_dim"): 128, ("kolibri1", "moe_intermediate_size"): 512,
    ("kolibri1", "num_experts_per_tok"): 6, ("kolibri1", "num_key_value_heads"): 4,
    ("kolibri1", "num_local_experts"): 384, ("kolibri1", "shared_expert_intermediate_size"): 512,
    ("kolibri1", "sliding_window"): 513,
    ("axk2", "index_head_dim"): 128, ("axk2", "index_n_heads"): 16,
    ("axk2", "index_topk"): 2048, ("axk2", "kv_lora_rank"): 128,
    ("axk2", "moe_intermediate_size"): 512, ("axk2", "n_routed_experts"): 128,
    ("axk2", "n_shared_experts"): 1, ("axk2", "num_experts_per_tok"): 8,
    ("axk2", "q_lora_rank"): 384, ("axk2", "qk_nope_head_dim"): 64,
    ("axk2", "qk_rope_head_dim"): 32, ("axk2", "v_head_dim"): 64,
    ("lfm2", "num_key_value_heads"): 8,
    ("llama4_text", "num_experts_per_tok"): 1, ("llama4_text", "num_key_value_heads"): 8,
    ("llama4_text", "num_local_experts"): 16,
    ("minicpm3", "kv_lora_rank"): 256, ("minicpm3", "q_lora_rank"): 768,
    ("minicpm3", "qk_nope_head_dim"): 64, ("minicpm3", "qk_rope_head_dim"): 32,
    ("minicpm3", "v_head_dim"): 64,
    ("minimax_m2", "head_dim"): 128, ("minimax_m2", "num_experts_per_tok"): 8,
    ("minimax_m2", "num_key_value_heads"): 8, ("minimax_m2", "num_local_experts"): 256,
    ("ministral", "num_key_value_heads"): 8, ("ministral", "sliding_window"): 4096,
    ("ministral3", "num_key_value_heads"): 8, ("ministral3", "head_dim"): 128,
    ("ministral3", "max_position_embeddings"): 262144,
    ("cwm", "num_key_value_heads"): 8, ("cwm", "head_dim"): 128,
    ("cwm", "max_position_embeddings"): 131072, ("cwm", "sliding_window"): 8192,
    ("internlm3", "num_key_value_heads"): 2, ("internlm3", "head_dim"): 128,
    ("internlm3", "max_position_embeddings"): 32768,
    ("iquestcoder", "num_key_value_heads"): 8, ("iquestcoder", "head_dim"): 128,
    ("iquestcoder", "max_position_embeddings"): 131072,
    ("exaone", "num_key_value_heads"): 8, ("exaone", "head_dim"): 128,
    ("vaultgemma", "num_key_value_heads"): 4, ("vaultgemma", "head_dim"): 256,
    ("vaultgemma", "max_position_embeddings"): 8192, ("vaultgemma", "sliding_window"): 4096,
    ("mistral", "num_key_value_heads"): 8, ("mistral", "sliding_window"): 4096,
    ("mixtral", "num_experts_per_tok"): 2, ("mixtral", "num_key_value_heads"): 8,
    ("mixtral", "num_local_experts"): 8,
    ("nemotron_h", "mamba_head_dim"): 64, ("nemotron_h", "mamba_num_heads"): 128,
    ("nemotron_h", "moe_intermediate_size"): 7688, ("nemotron_h", "n_routed_experts"): 8,
    ("nemotron_h", "n_shared_experts"): 1, ("nemotron_h", "num_experts_per_tok"): 2,
    ("nemotron_h", "num_key_value_heads"): 8, ("nemotron_h", "ssm_state_size"): 128,
    ("nemotron_h", "head_dim"): 128, ("nemotron_h", "moe_shared_expert_intermediate_size"): 7688,
    ("olmo3", "sliding_window"): 4096,
    ("olmoe", "num_experts"): 64, ("olmoe", "num_experts_per_tok"): 8,
    ("opt", "max_position_embeddings"): 2048,
    ("phimoe", "max_position_embeddings"): 131072, ("phimoe", "num_experts_per_tok"): 2,
    ("phimoe", "num_key_value_heads"): 8, ("phimoe", "num_local_experts"): 16,
    ("qwen2", "num_key_value_heads"): 32,
    ("qwen2_moe", "moe_intermediate_size"): 1408, ("qwen2_moe", "num_experts_per_tok"): 4,
    ("qwen2_moe", "shared_expert_intermediate_size"): 5632,
    ("qwen3", "head_dim"): 128, ("qwen3", "num_key_value_heads"): 32,
    ("qwen3_moe", "moe_intermediate_size"): 768, ("qwen3_moe", "num_experts_per_tok"): 8,
    ("qwen3_next", "head_dim"): 256, ("qwen3_next", "linear_key_head_dim"): 128,
    ("qwen3_next", "linear_num_key_heads"): 16, ("qwen3_next", "linear_num_value_heads"): 32,
    ("qwen3_next", "linear_value_head_dim"): 128,
    ("qwen3_next", "moe_intermediate_size"): 512, ("qwen3_next", "num_experts"): 512,
    ("qwen3_next", "num_experts_per_tok"): 10, ("qwen3_next", "num_key_value_heads"): 2,
    ("qwen3_next", "shared_expert_intermediate_size"): 512,
    ("seed_oss", "head_dim"): 128, ("seed_oss", "num_key_value_heads"): 8,
    ("smollm3", "num_key_value_heads"): 4,
    # More MoE families (moe_more)
    ("cohere2_moe", "head_dim"): 128, ("cohere2_moe", "num_experts"): 8,
    ("cohere2_moe", "num_experts_per_tok"): 2, ("cohere2_moe", "sliding_window"): 4096,
    ("dots1", "max_window_layers"): 62, ("dots1", "moe_intermediate_size"): 1408,
    ("dots1", "num_key_value_heads"): 32, ("dots1", "sliding_window"): 4096,
    ("exaone_moe", "moe_intermediate_size"): 1024, ("exaone_moe", "num_experts"): 64,
    ("exaone_moe", "num_experts_per_tok"): 8, ("exaone_moe", "num_key_value_heads"): 32,
    ("exaone_moe", "num_shared_experts"): 1, ("exaone_moe", "sliding_window"): 4096,
    ("longcat_flash", "expert_ffn_hidden_size"): 2048, ("longcat_flash", "kv_lora_rank"): 512,
    ("longcat_flash", "moe_topk"): 12, ("longcat_flash", "n_routed_experts"): 512,
    ("longcat_flash", "q_lora_rank"): 1536, ("longcat_flash", "qk_nope_head_dim"): 128,
    ("longcat_flash", "qk_rope_head_dim"): 64, ("longcat_flash", "v_head_dim"): 128,
    ("longcat_flash", "zero_expert_num"): 256,
    ("jetmoe", "kv_channels"): 128, ("jetmoe", "num_experts_per_tok"): 2,
    ("jetmoe", "num_key_value_heads"): 16, ("jetmoe", "num_local_experts"): 8,
    # Older GPT-shaped decoders (gpt_older)
    ("biogpt", "max_position_embeddings"): 1024,
    ("moshi", "sliding_window"): 3000,
    ("mllama_text_model", "num_key_value_heads"): 8,
    # Gemma 3n and the 2026 families read after it (gemma3n, ...)
    ("gemma3n_text", "head_dim"): 256, ("gemma3n_text", "num_key_value_heads"): 2,
    ("gemma3n_text", "sliding_window"): 512, ("gemma3n_text", "num_kv_shared_layers"): 15,
    ("gemma4_unified_text", "head_dim"): 256, ("gemma4_unified_text", "num_key_value_heads"): 4,
    ("gemma4_unified_text", "sliding_window"): 1024,
    ("gemma4_unified_text", "max_position_embeddings"): 262144,
    ("lfm3", "num_key_value_heads"): 4, ("lfm3", "head_dim"): 128, ("lfm3", "sliding_window"): 256,
    ("youtu", "kv_lora_rank"): 512, ("youtu", "q_lora_rank"): 1536,
    ("youtu", "qk_rope_head_dim"): 64, ("youtu", "qk_nope_head_dim"): 128,
    ("youtu", "v_head_dim"): 128,
    ("lara_mini", "head_dim"): 128, ("lara_mini", "num_key_value_heads"): 4,
    ("lara_mini", "sliding_window"): 512, ("lara_mini", "linear_key_head_dim"): 128,
    ("lara_mini", "linear_value_head_dim"): 128, ("lara_mini", "linear_num_key_heads"): 8,
    ("lara_mini", "linear_num_value_heads"): 16, ("lara_mini", "moe_intermediate_size"): 512,
    ("lara_mini", "shared_expert_intermediate_size"): 512, ("lara_mini", "num_experts"): 128,
    ("lara_mini", "num_experts_per_tok"): 4,
    # MoE with sliding/full attention, gated attention; Sarvam's two (moe_swa)
    ("mimo_v2_flash", "head_dim"): 192, ("mimo_v2_flash", "v_head_dim"): 128,
    ("mimo_v2_flash", "moe_intermediate_size"): 2048, ("mimo_v2_flash", "n_routed_experts"): 256,
    ("mimo_v2_flash", "num_experts_per_tok"): 8, ("mimo_v2_flash", "num_key_value_heads"): 4,
    ("mimo_v2_flash", "sliding_window"): 129,
    ("laguna", "head_dim"): 128, ("laguna", "moe_intermediate_size"): 512,
    ("laguna", "num_experts"): 256, ("laguna", "num_experts_per_tok"): 8,
    ("laguna", "num_key_value_heads"): 8, ("laguna", "shared_expert_intermediate_size"): 512,
    ("laguna", "sliding_window"): 512,
    ("afmoe", "head_dim"): 128, ("afmoe", "moe_intermediate_size"): 1408,
    ("afmoe", "num_dense_layers"): 1, ("afmoe", "num_experts"): 64,
    ("afmoe", "num_experts_per_tok"): 6, ("afmoe", "num_shared_experts"): 2,
    ("afmoe", "sliding_window"): 1024,
    ("beam", "head_dim"): 128, ("beam", "moe_intermediate_size"): 2560,
    ("beam", "num_experts"): 256, ("beam", "num_experts_per_tok"): 8,
    ("beam", "num_key_value_heads"): 8, ("beam", "sliding_window"): 512,
    ("flint", "head_dim"): 128, ("flint", "moe_intermediate_size"): 512,
    ("flint", "num_experts"): 256, ("flint", "num_experts_per_tok"): 6,
    ("flint", "num_key_value_heads"): 4, ("flint", "shared_expert_intermediate_size"): 1024,
    ("flint", "sliding_window"): 513,
    ("sarvam_moe", "head_dim"): 64, ("sarvam_moe", "first_k_dense_replace"): 1,
    ("sarvam_moe", "moe_intermediate_size"): 1024, ("sarvam_moe", "n_routed_experts"): 128,
    ("sarvam_moe", "n_shared_experts"): 1, ("sarvam_moe", "num_experts_per_tok"): 6,
    ("sarvam_moe", "num_key_value_heads"): 4, ("sarvam_moe", "use_qk_norm"): True,
    ("sarvam_mla", "first_k_dense_replace"): 1, ("sarvam_mla", "kv_lora_rank"): 512,
    ("sarvam_mla", "moe_intermediate_size"): 2048, ("sarvam_mla", "n_routed_experts"): 128,
    ("sarvam_mla", "n_shared_experts"): 1, ("sarvam_mla", "num_experts_per_tok"): 8,
    ("sarvam_mla", "qk_nope_head_dim"): 128, ("sarvam_mla", "qk_rope_head_dim"): 64,
    ("sarvam_mla", "v_head_dim"): 128,
    ("hy_v3", "head_dim"): 128, ("hy_v3", "num_key_value_heads"): 8,
    ("hy_v3", "num_experts"): 192, ("hy_v3", "num_experts_per_tok"): 8,
    ("hy_v3", "moe_intermediate_size"): 1536,
    ("axk1", "kv_lora_rank"): 512, ("axk1", "q_lora_rank"): 1536, ("axk1", "qk_rope_head_dim"): 64,
    ("axk1", "qk_nope_head_dim"): 128, ("axk1", "v_head_dim"): 128,
    ("axk1", "n_routed_experts"): 192, ("axk1", "n_shared_experts"): 1,
    ("axk1", "num_experts_per_tok"): 8, ("axk1", "moe_intermediate_size"): 2048,
    ("doge", "num_experts"): 16384, ("doge", "num_experts_per_tok"): 64,
    ("zaya", "head_dim"): 128, ("zaya", "num_key_value_heads"): 2, ("zaya", "num_experts"): 16,
    ("zaya", "num_experts_per_tok"): 1, ("zaya", "moe_intermediate_size"): 2048,
    ("zaya", "router_hidden_size"): 256,
    ("qwen4_exp_text", "hc_count"): 4, ("qwen4_exp_text", "hc_lowrank"): 320,
    # looped decoders (looped.py)
    ("dory", "head_dim"): 256, ("dory", "num_key_value_heads"): 4,
    ("dory", "n_input_layers"): 8, ("dory", "n_output_layers"): 8,
    ("dory", "n_recurrent_loops"): 2, ("dory", "recurrent_kv_cache_mode"): "per_loop",
    ("dory", "sliding_window"): 1024,
    ("hrm_text", "head_dim"): 128, ("hrm_text", "H_cycles"): 2, ("hrm_text", "L_cycles"): 3,
    # MiniMax-M3's language model (moe_indexed)
    ("minimax_m3_vl_text", "dense_intermediate_size"): 12288,
    ("minimax_m3_vl_text", "head_dim"): 128, ("minimax_m3_vl_text", "num_key_value_heads"): 4,
    ("minimax_m3_vl_text", "index_block_size"): 128,
    ("minimax_m3_vl_text", "index_head_dim"): 128, ("minimax_m3_vl_text", "index_n_heads"): 4,
    ("minimax_m3_vl_text", "index_local_blocks"): 1,
    ("minimax_m3_vl_text", "index_topk_blocks"): 16,
    ("minimax_m3_vl_text", "num_experts_per_tok"): 4,
    ("minimax_m3_vl_text", "num_local_experts"): 128,
    ("minimax_m3_vl_text", "max_position_embeddings"): 524288,
    ("minimax_m3_vl_text", "shared_intermediate_size"): 3072,
    # Inkling's language model (inkling)
    ("inkling_text", "conv_kernel_size"): 4, ("inkling_text", "d_rel"): 16,
    ("inkling_text", "head_dim"): 128, ("inkling_text", "moe_intermediate_size"): 3072,
    ("inkling_text", "n_routed_experts"): 256, ("inkling_text", "n_shared_experts"): 2,
    ("inkling_text", "num_experts_per_tok"): 6, ("inkling_text", "num_key_value_heads"): 8,
    ("inkling_text", "rel_extent"): 1024, ("inkling_text", "sliding_window_size"): 512,
    ("inkling_text", "swa_head_dim"): 128, ("inkling_text", "swa_num_attention_heads"): 64,
    ("inkling_text", "swa_num_key_value_heads"): 16,
    # Inkling 2 and Inkling 2 Loop's language models (inkling)
    **{(m, k): v for m in ("inkling2_text", "inkling2_loop_text") for k, v in (
        ("conv_kernel_size", 4), ("d_rel", 16), ("head_dim", 128), ("num_experts_per_tok", 8),
        ("num_key_value_heads", 8), ("rel_extent", 1024), ("sliding_window_size", 1024),
        ("swa_head_dim", 128), ("swa_num_key_value_heads", 8), ("unpadded_vocab_size", 200058))},
    ("inkling2_text", "moe_intermediate_size"): 2304, ("inkling2_text", "n_routed_experts"): 384,
    ("inkling2_text", "swa_num_attention_heads"): 48,
    ("inkling2_loop_text", "moe_intermediate_size"): 1152,
    ("inkling2_loop_text", "n_routed_experts"): 128,
    ("inkling2_loop_text", "swa_num_attention_heads"): 24,
    # dots.llm3's language model (moe_indexed)
    ("dots3_note_text", "index_head_dim"): 128, ("dots3_note_text", "index_n_heads"): 64,
    ("dots3_note_text", "index_topk"): 2048, ("dots3_note_text", "kv_lora_rank"): 512,
    ("dots3_note_text", "moe_intermediate_size"): 1536,
    ("dots3_note_text", "n_routed_experts"): 256, ("dots3_note_text", "num_experts_per_tok"): 8,
    ("dots3_note_text", "q_lora_rank"): 1024, ("dots3_note_text", "qk_nope_head_dim"): 128,
    ("dots3_note_text", "qk_rope_head_dim"): 64, ("dots3_note_text", "v_head_dim"): 128,
    ("dots3_note_text", "shared_experts_intermediate_size"): 1536,
    # HY V4 (moe_indexed)
    ("hy_v4", "hc_mult"): 4, ("hy_v4", "index_head_dim"): 128, ("hy_v4", "index_n_heads"): 16,
    ("hy_v4", "index_topk"): 2048, ("hy_v4", "kv_lora_rank"): 512,
    ("hy_v4", "moe_intermediate_size"): 768, ("hy_v4", "n_routed_experts"): 256,
    ("hy_v4", "n_shared_experts"): 1, ("hy_v4", "num_experts_per_tok"): 8,
    ("hy_v4", "q_lora_rank"): 1536, ("hy_v4", "qk_nope_head_dim"): 192,
    ("hy_v4", "qk_rope_head_dim"): 64, ("hy_v4", "v_head_dim"): 256,
    ("hy_v4_vl_text", "hc_mult"): 4, ("hy_v4_vl_text", "index_head_dim"): 128,
    ("hy_v4_vl_text", "index_n_heads"): 32, ("hy_v4_vl_text", "index_topk"): 2048,
    ("hy_v4_vl_text", "kv_lora_rank"): 512, ("hy_v4_vl_text", "moe_intermediate_size"): 2048,
    ("hy_v4_vl_text", "n_routed_experts"): 256, ("hy_v4_vl_text", "n_shared_experts"): 1,
    ("hy_v4_vl_text", "num_experts_per_tok"): 8, ("hy_v4_vl_text", "q_lora_rank"): 2048,
    ("hy_v4_vl_text", "qk_nope_head_dim"): 192, ("hy_v4_vl_text", "qk_rope_head_dim"): 64,
    ("hy_v4_vl_text", "v_head_dim"): 256,
}


class Config:
    """Typed access to one config dict, with errors that name the field."""

    def __init__(self, cfg: dict, model_type: str, where: str) -> None:
        self.cfg = cfg
        self.model_type = model_type
        self.where = where
        # every key a reader asked for (present or not): what a reader did not ask for,
        # it did not read (kvcalc.hfconfig.fallback.unread_fields)
        self.asked: set[str] = set()

    def error(self, message: str) -> KvcalcError:
        return KvcalcError(f"{self.where}: {message}")

    def has(self, key: str) -> bool:
        self.asked.add(key)
        return key in self.cfg

    def raw(self, key: str, *aliases: str) -> Any:
        """The value under `key` (or the first alias present); absent, the family's
        configuration class's own value (CLASS_DEFAULTS), else MISSING."""
        self.asked.update((key, *aliases))
        for k in (key, *aliases):
            if k in self.cfg:
                return self.cfg[k]
        return CLASS_DEFAULTS.get((self.model_type, key), MISSING)

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
        if value is MISSING or value is None:
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
