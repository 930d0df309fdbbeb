"""A config.json whose model_type kvcalc has no reader for (remote code) is read by the
reader of the class its `architectures` names (issue #40: Kimi K2's `kimi_k2` is
DeepSeek-V3's DeepseekV3ForCausalLM), and whatever reads a config kvcalc has no reader
for refuses, rather than guesses, when the config carries fields that change the cache or
the weights that it does not read (kvcalc.hfconfig.fallback.REFUSED_UNREAD).

The truth for Kimi K2 and K2.5 is transformers' own DeepseekV3 classes
(tests/test_hf_truth.py builds the published files on the meta device and runs their
reduced copies); here, the reading itself and the refusals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import kv_cache
from kvcalc.formulas.params import param_counts
from kvcalc.hfconfig import spec_from_hf_config, spec_from_hf_config_file
from kvcalc.hfconfig.architectures import ARCHITECTURES
from kvcalc.hfconfig.fallback import REFUSED_UNREAD

DATA = Path(__file__).parent / "data" / "hf"
K2 = DATA / "moonshotai__Kimi-K2-Instruct.json"


def _cfg(path: Path) -> dict:
    return json.loads(path.read_text())


def test_kimi_k2_is_read_as_the_deepseek_v3_it_declares():
    spec = spec_from_hf_config_file(K2)
    assert spec.extra["read_as"] == "deepseek_v3" and "approximate" not in spec.extra
    # (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes x 61 layers, not 1,748,992
    assert kv_cache(spec, 1, 1, "bf16").bytes == (512 + 64) * 2 * 61 == 70_272
    assert kv_cache(spec, 8192, 1, "bf16").bytes == 70_272 * 8192
    assert param_counts(spec).total == 1_026_408_209_408  # transformers' meta-device count
    same = spec_from_hf_config({**_cfg(K2), "model_type": "deepseek_v3"}, "v3")
    assert param_counts(same).total == param_counts(spec).total


def test_kimi_k25_reads_its_text_config_as_deepseek_v3():
    spec = spec_from_hf_config_file(DATA / "moonshotai__Kimi-K2.5.json")
    assert spec.extra["hf_wrapper"] == "kimi_k25"
    assert kv_cache(spec, 1, 1, "bf16").bytes == 70_272
    assert sum(spec.extra["towers"].values()) == 471_143_920


def test_a_reader_chosen_by_architectures_names_itself_when_a_field_is_missing():
    cfg = {k: v for k, v in _cfg(K2).items() if k != "hidden_size"}
    with pytest.raises(KvcalcError, match="read as its architectures' DeepseekV3ForCausalLM"):
        spec_from_hf_config(cfg, "k2", "t")


def test_a_class_kvcalc_does_not_read_falls_back_as_before():
    cfg = {**_cfg(K2), "architectures": ["AcmeForCausalLM"]}
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config(cfg, "k2", "t")
    message = str(e.value)
    assert message.startswith("t: model_type 'kimi_k2' is not one kvcalc reads, and a uniform "
                              "decoder would not read fields that change the cache or the "
                              "weights: kv_lora_rank (latent attention")
    for key in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        assert key in message
    assert message.endswith("refused rather than guessed") and "\n" not in message


@pytest.mark.parametrize("field, value", [
    ("moe_latent_size", 1024), ("routed_expert_hidden_size", 3584),
    ("layer_types", ["linear_attention", "full_attention"]),
    ("hybrid_override_pattern", "M*M*"), ("attn_res_block_size", 12),
    ("linear_attn_config", {"full_attn_layers": [2]}),
    # Nemotron-NAS (Llama-3.3-Nemotron-Super-49B, DeciLMForCausalLM, remote code): read as
    # a uniform decoder it came out at 88.0B parameters against about 49.9B
    ("block_configs", [{"attention": {"no_op": True}, "ffn": {"ffn_mult": 1.3}}] * 2)])
def test_the_fallback_refuses_each_field_it_cannot_read(field, value):
    cfg = {"model_type": "acme_lm", "hidden_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "vocab_size": 1000, field: value}
    with pytest.raises(KvcalcError, match=f"{field} \\("):
        spec_from_hf_config(cfg, "acme")


def test_plain_layer_types_and_null_ranks_stay_approximate():
    cfg = {"model_type": "acme_lm", "hidden_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "vocab_size": 1000, "q_lora_rank": None,
           "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64}
    assert "layer_types" in spec_from_hf_config(cfg, "acme").extra["approximate"]


def test_every_refused_field_has_a_reason():
    assert all(isinstance(r, str) and r for r in REFUSED_UNREAD.values())


def test_an_unknown_wrapper_whose_language_model_has_unread_fields_is_refused():
    # Kimi K3's shape (model_type kimi_k3, KimiK3ForConditionalGeneration): its text_config
    # is a kimi_linear one (KDA heads of linear_attn_config's head_dim, MLA on the full
    # layers), with a latent MoE and attention residuals kvcalc's Kimi Linear reader does
    # not read. The values are those of the copy SOURCES.md names.
    text = {**_cfg(DATA / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json"),
            "routed_expert_hidden_size": 3584, "attn_res_block_size": 12}
    cfg = {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
           "text_config": text, "vision_config": {"vt_hidden_size": 1024}}
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config(cfg, "k3", "t")
    assert "routed_expert_hidden_size (latent MoE" in str(e.value)
    assert "attn_res_block_size (attention residuals" in str(e.value)
    # without them, the language model is read by its family's reader, towers apart
    plain = {**cfg, "text_config": _cfg(DATA / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json")}
    spec = spec_from_hf_config(plain, "k3")
    assert "approximate" not in spec.extra and "kimi_k3: a multimodal config" in spec.notes


def test_the_class_table_is_transformers_own():
    transformers = pytest.importorskip("transformers")
    for name, model_type in ARCHITECTURES.items():
        assert getattr(transformers, name).config_class.model_type == model_type, name
