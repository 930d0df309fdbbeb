"""ModelSpec from a local Hugging Face `config.json`, read as transformers reads it.

Each supported `model_type` is mapped field by field, following that family's
`configuration_*.py` (defaults) and `modeling_*.py` (which modules exist, their
shapes and biases) in huggingface/transformers. Nothing is downloaded: the file
must already be on disk.

Two kinds of field:
- required: dimensions a config written by `save_pretrained` always carries
  (layers, widths, heads, vocab) and any whose transformers default is some
  particular checkpoint's number (Mistral's `num_key_value_heads=8`, Gemma's
  `head_dim=256`, Mistral's `sliding_window=4096`). Missing: a KvcalcError
  naming the field, rather than a silent guess.
- optional: flags and derived values, filled in as the config class does
  (`num_key_value_heads: null` -> heads; `n_inner: null` -> 4 x width;
  `tie_word_embeddings` absent -> the family's default).

Conventions for the spec:
- head_dim: `head_dim` when present and not null, else hidden_size // heads
  (Falcon, GPT-2, GPT-BigCode, GPT-NeoX and OPT always use hidden // heads).
- MLA (DeepSeek-V2/V3): kv_heads = heads and head_dim = qk_nope + qk_rope
  describe the query/key heads; the cache is the Latent layer's `kv_lora_rank +
  rope_dim` (qk_rope_head_dim) per token per layer and does not use kv_heads/head_dim.
- a layer slides only when the model's attention applies its window; a flat family's
  global_every (ModelSpec.uniform) describes Gemma 2's alternation (layer i slides
  when i is even).

No torch, pandas or transformers import: this is plain dict reading.

The package, by question:
- config: typed access to the dict, errors that name the field
- layer_types: which kind each layer is (`layer_types` first, then the family's
  older switch); the one reader of that field
- build: what an adapter returns (flat fields, and runs for per-layer models)
- llama_like, gpt_like, moe, hybrid: the adapters, by family group
- multimodal: wrappers whose language model is `text_config`
- families: model_type -> adapter; read: the entry points re-exported here
- fallback: a model_type without an adapter but with the usual sizes, read as a uniform
  decoder and marked approximate
"""

from kvcalc.hfconfig.families import SUPPORTED_MODEL_TYPES
from kvcalc.hfconfig.read import spec_from_hf_config, spec_from_hf_config_file

__all__ = ["SUPPORTED_MODEL_TYPES", "spec_from_hf_config", "spec_from_hf_config_file"]
