"""Speculative decoding in the serving counts: the draft an engine loads beside the
target, its weights and the KV cache its layers keep, written once for every engine;
each engine's wing decides where they land (its rules table says per release).

A draft is one of (kvcalc's words; each engine's own spellings are read in
`vllm_draft`, `sglang_draft` and `trtllm_draft`):

- `eagle3` / `eagle`: a small head (one Llama-like decoder layer, its own config) that
  reads the target's hidden states. Read in vLLM 0.33
  `model_executor/models/llama_eagle3.py` (`Eagle3LlamaForCausalLM`): the layer's q/k/v
  projection takes 2 x hidden_size (the embedding and the hidden state side by side,
  `qkv_input_size`), a `hidden_norm`, an `fc` (ReplicatedLinear) from
  num_aux_hidden_states (3 unless `eagle_config.eagle_aux_hidden_state_layer_ids` says) x
  target_hidden_size to hidden_size, the final norm, its own lm_head of
  `draft_vocab_size` rows and, when that differs from the target's vocabulary,
  `draft_id_to_target_id` (int64, one per draft row); the embedding is the target's
  (`llm_base_proposer.py::_maybe_share_embeddings`, when the checkpoint has none of its
  own or an identical one). EAGLE-1 (`llama_eagle.py`): an fc from 2 x hidden_size, the
  first layer's input norm removed, the target's lm_head.
- `mtp`: the target checkpoint's own multi-token-prediction layers
  (`num_nextn_predict_layers`: DeepSeek V3/R1, GLM-4.5, MiMo; `mtp_num_hidden_layers`:
  Qwen3-Next): each a copy of the target's last decoder layer plus `enorm`, `hnorm` (two
  norms of hidden_size), `eh_proj` (nn.Linear 2 x hidden_size -> hidden_size, not
  split) and `shared_head.norm` (vLLM 0.33 `deepseek_mtp.py::
  DeepSeekMultiTokenPredictorLayer`); vLLM shares the target's embedding and lm_head
  (`_maybe_share_lm_head`, "Detected MTP model"), SGLang's MTP worker loads its own
  (`with_embedding`: the MiMo log in tests/data/sglang).
- `draft_model`: a whole smaller model, its own embedding and lm_head, every layer cached.
- `ngram`: prompt lookup, no weights and no cache.

All sizes are exact integers; the draft's own layer model is kvcalc's (kvcalc.layers),
read from its config by kvcalc's reader (kvcalc.hfconfig, kvcalc.model_source).
"""

from __future__ import annotations

import functools
import json

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.spec import ModelSpec

__all__ = ["Draft", "METHODS", "draft_for", "expected_tokens", "merge_groups",
           "sglang_draft", "trtllm_draft", "vllm_draft"]

METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram")
INT64 = 8

# vLLM's MTP method names, each release's `MTPModelTypes` (0.33 `config/speculative.py`):
# all count as the target's own MTP layers.
_VLLM_MTP = ("deepseek_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
             "ernie_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
             "pangu_ultra_moe_mtp", "mtp")
# SGLang's --speculative-algorithm (`speculative/spec_info.py::SpeculativeAlgorithm`):
# NEXTN is EAGLE over the target's own MTP layers (`server_args.py`: "NEXTN shares the same
# implementation of EAGLE").
_SGLANG = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model",
           "NGRAM": "ngram"}
# TensorRT-LLM's speculative_config decoding_type (`llmapi/llm_args.py`, DecodingBaseConfig
# subclasses): the one-model ones keep the draft's layers in the target's pool.
_TRTLLM = {"MTP": "mtp", "Eagle3": "eagle3", "Eagle": "eagle", "NGram": "ngram",
           "DraftTarget": "draft_model"}


@record
class Draft:
    """What speculative decoding adds to a serving count.

    `spec`: the draft's decoder layers (cached and weighed; None for ngram);
    `own_lm_head_rows`: rows of an lm_head of its own (0: the target's is used);
    `with_embedding`: it holds an embedding of its own; `extra_split` /
    `extra_replicated`: parameters beside its layers (split over TP / whole on every
    rank); `extra_bytes`: integer buffers (EAGLE-3's draft-to-target map)."""

    method: str
    num_speculative_tokens: int
    model: str = ""
    spec: ModelSpec | None = None
    own_lm_head_rows: int = 0
    with_embedding: bool = False
    extra_split: int = 0
    extra_replicated: int = 0
    extra_bytes: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise KvcalcError(f"speculative method must be one of {', '.join(METHODS)}, got "
                              f"{self.method!r}")
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= 64:
            raise KvcalcError(f"num_speculative_tokens must be a whole number in 1..64, got "
                              f"{k!r}")

    @property
    def layers(self) -> int:
        """Decoder layers the draft adds (cached ones among them: `cache_groups`)."""
        return self.spec.layers if self.spec is not None else 0

    def cache_groups(self, kv_dtype, tp: int, scale_bytes: int = 0, state_dtype="fp32"):
        """The draft's layers grouped as kvcalc.formulas.cache groups the target's."""
        if self.spec is None:
            return ()
        from kvcalc.formulas.cache import cache_groups

        return cache_groups(self.spec, kv_dtype, tp, scale_bytes, state_dtype=state_dtype)

    def weight_bytes(self, weights, tp: int) -> int:
        """The draft's weights on one device of `tp`: its layers (kvcalc.serving.weights,
        the target's dtype or quantization, the layers alone), its own lm_head and
        embedding in the model dtype over tp, the parameters beside its layers in the
        weight dtype, and its integer buffers."""
        if self.spec is None:
            return 0
        from kvcalc.ground.dtypes import dtype, weight_dtype
        from kvcalc.serving.weights import stage_weights

        if self.method == "draft_model":
            return stage_weights(self.spec, weights, tp=tp)
        model_dt = dtype(weights.model_dtype)
        body_dt = weight_dtype(weights.weight_dtype) if weights.weight_dtype else model_dt
        d = self.spec.d_model
        total = stage_weights(self.spec, weights, tp=tp, ends=False)
        total += model_dt.nbytes(-(-self.own_lm_head_rows * d // tp))
        if self.with_embedding:
            total += model_dt.nbytes(-(-self.spec.vocab * d // tp))
        total += body_dt.nbytes(-(-self.extra_split // tp) + self.extra_replicated)
        return total + self.extra_bytes

    def as_dict(self) -> dict:
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "draft_model": self.model, "draft_layers": self.layers}


def merge_groups(target: tuple, draft: tuple) -> tuple:
    """The target's cache groups with the draft's layers joined to the group of the same
    kind and bytes (vLLM's `get_kv_cache_groups`: layers of one spec share a group), any
    other kind appended."""
    from dataclasses import replace

    out = list(target)
    for g in draft:
        for i, t in enumerate(out):
            if (t.mixer.label, t.token_bytes, t.state_bytes) == (g.mixer.label, g.token_bytes,
                                                               g.state_bytes):
                out[i] = replace(t, layers=t.layers + g.layers)
                break
        else:
            out.append(g)
    return tuple(out)


# ------------------------------------------------------------------------------------
# Building a draft from what the user names
# ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)  # a plan counts every layout with the same draft
def _resolve(model: str) -> ModelSpec:
    from kvcalc.model_source import resolve_model

    return resolve_model(model)


def mtp_layer_count(target: ModelSpec) -> int:
    """The MTP layers the target's config declares (0: none)."""
    fields = target.extra.get("speculative", {})
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers",
                "num_mtp_modules"):
        n = fields.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return 0


def _mtp(target: ModelSpec, k: int, *, layers: int | None, with_embedding: bool) -> Draft:
    from kvcalc.layers import Run

    n = layers or mtp_layer_count(target)
    if not n:
        raise KvcalcError(f"{target.name}'s config declares no MTP layers "
                          f"(num_nextn_predict_layers, mtp_num_hidden_layers): MTP needs a "
                          f"checkpoint that carries them")
    last = target.runs[-1].layer
    spec = target.replace(name=f"{target.name} MTP", layers=n, runs=(Run(last, n),),
                          extra_params=0, tied_embeddings=False)
    d = target.d_model
    # enorm, hnorm, shared_head.norm (the layer's own norms are in its layer), eh_proj
    return Draft(method="mtp", num_speculative_tokens=k, model=target.name, spec=spec,
                 own_lm_head_rows=target.vocab if with_embedding else 0,
                 with_embedding=with_embedding,
                 extra_replicated=n * (2 * d * d + 3 * d))


def _eagle(head: ModelSpec, target: ModelSpec, method: str, k: int, model: str) -> Draft:
    fields = head.extra.get("speculative", {})
    d = head.d_model
    a = head.attention_shape
    if a is None:
        raise KvcalcError(f"{model}: an EAGLE head attends; its config has no attention")
    if method == "eagle3":
        cfg = fields.get("eagle_config") or {}
        ids = cfg.get("eagle_aux_hidden_state_layer_ids") if isinstance(cfg, dict) else None
        aux = len(ids) if isinstance(ids, list) and ids else 3
        target_d = fields.get("target_hidden_size") or target.d_model
        rows = fields.get("draft_vocab_size") or head.vocab
        qkv_out = a.heads * a.head_dim + 2 * a.kv_heads * a.head_dim
        return Draft(method=method, num_speculative_tokens=k, model=model,
                     spec=head.replace(name=model), own_lm_head_rows=rows,
                     extra_split=d * qkv_out,  # the first layer's q/k/v read 2 x hidden
                     extra_replicated=aux * target_d * d + d,  # fc, hidden_norm
                     extra_bytes=INT64 * rows if rows != target.vocab else 0)
    # EAGLE-1: fc from 2 x hidden (no bias), layer 0's input norm removed
    return Draft(method=method, num_speculative_tokens=k, model=model,
                 spec=head.replace(name=model), extra_replicated=2 * d * d - d)


def draft_for(target: ModelSpec, method: str, k: int, model: str | None = None, *,
              mtp_with_embedding: bool = False) -> Draft:
    """The draft of `method` (kvcalc's words) for `target`, `model` naming its checkpoint
    (a preset, Hub id, folder or config.json) where the method needs one."""
    if method == "ngram":
        return Draft(method=method, num_speculative_tokens=k)
    if method == "mtp":
        if model:
            own = _resolve(model)
            return _mtp(own, k, layers=mtp_layer_count(own) or None,
                        with_embedding=mtp_with_embedding)
        return _mtp(target, k, layers=None, with_embedding=mtp_with_embedding)
    if not model:
        raise KvcalcError(f"speculative method {method} needs the draft's model (a Hub id, "
                          f"folder, config.json or preset)")
    draft = _resolve(model)
    if method == "draft_model":
        return Draft(method=method, num_speculative_tokens=k, model=model, spec=draft)
    return _eagle(draft, target, method, k, model)


# ------------------------------------------------------------------------------------
# Each engine's spelling
# ------------------------------------------------------------------------------------
def vllm_draft(target: ModelSpec, text: str, methods: tuple[str, ...]) -> Draft:
    """vLLM's --speculative-config (JSON: method, model, num_speculative_tokens), its
    method names as the release lists them (`methods`, kvcalc.serving.vllm.rules)."""
    try:
        cfg = json.loads(text)
    except (TypeError, ValueError) as e:
        raise ParameterError("{speculative_config} must be JSON, as vLLM reads it "
                             "('{{\"method\": \"eagle3\", \"model\": ..., "
                             "\"num_speculative_tokens\": 3}}'): " + literal(e),
                             "speculative_config") from None
    if not isinstance(cfg, dict):
        raise ParameterError("{speculative_config} must be a JSON object", "speculative_config")
    method, model = cfg.get("method"), cfg.get("model")
    k = cfg.get("num_speculative_tokens")
    if method is None:
        # vLLM (`SpeculativeConfig.__post_init__`): no method and a model is a draft
        # model; the target's own MTP layers are found by its model type
        method = "draft_model" if model else ("mtp" if mtp_layer_count(target) else None)
    if method is None:
        raise ParameterError("{speculative_config}: give \"method\" (eagle, eagle3, mtp, "
                             "ngram, draft_model) or \"model\"", "speculative_config")
    if method not in methods:
        raise ParameterError("{speculative_config}: vLLM's method " + literal(repr(method))
                             + " is not one this release counts; kvcalc counts "
                             + literal(", ".join(methods)), "speculative_config")
    if k is None:
        if method in _VLLM_MTP:
            k = 1  # vLLM: num_speculative_tokens defaults to the model's MTP layers
        else:
            raise ParameterError("{speculative_config}: give \"num_speculative_tokens\"",
                                 "speculative_config")
    kind = "mtp" if method in _VLLM_MTP else method
    if kind not in METHODS:
        raise ParameterError("{speculative_config}: kvcalc does not count method "
                             + literal(repr(method)), "speculative_config")
    return draft_for(target, kind, k, model)


def sglang_draft(target: ModelSpec, algorithm: str, model: str | None, steps: int) -> Draft:
    """SGLang's --speculative-algorithm and --speculative-draft-model-path; its draft
    runs `steps` (--speculative-num-steps) forward passes a round. A NEXTN (or EAGLE
    without a draft path) draft is the target's MTP layers, loaded by the draft worker
    with their own embedding and lm_head."""
    kind = _SGLANG.get(algorithm.upper())
    if kind is None:
        raise ParameterError("{speculative_algorithm} must be one of "
                             + literal(", ".join(_SGLANG)) + ", got " + literal(repr(algorithm)),
                             "speculative_algorithm")
    if kind in ("eagle", "eagle3") and not model:
        kind = "mtp"  # SGLang's EAGLE over the target's own MTP layers
    if kind == "mtp" and model and model == target.name:
        model = None
    return draft_for(target, kind, steps, model, mtp_with_embedding=True)


def trtllm_draft(target: ModelSpec, config: dict) -> Draft:
    """TensorRT-LLM's `speculative_config` (its LLM API options): decoding_type,
    max_draft_len, num_nextn_predict_layers (MTP), speculative_model_dir /
    speculative_model (Eagle3, DraftTarget)."""
    if not isinstance(config, dict):
        raise KvcalcError("speculative_config must be a mapping (decoding_type: MTP, ...)")
    kind = _TRTLLM.get(str(config.get("decoding_type")))
    if kind is None:
        raise KvcalcError(f"speculative_config: decoding_type must be one of "
                          f"{', '.join(_TRTLLM)}, got {config.get('decoding_type')!r}")
    if kind == "mtp":
        # `_torch/speculative/utils.py::get_num_spec_layers` (NVIDIA/TensorRT-LLM at
        # 011d0933dcb5e592f5fa2626beaf42a96324c578): MTP-Eagle (the default) keeps one MTP
        # layer in the pool and replays it; vanilla MTP (use_mtp_vanilla) every layer the
        # checkpoint has (`update_spec_config_from_model_config`)
        k = config.get("max_draft_len") or config.get("num_nextn_predict_layers") or 1
        vanilla = bool(config.get("use_mtp_vanilla"))
        layers = (mtp_layer_count(target) or 1) if vanilla else 1
        if not mtp_layer_count(target):
            raise KvcalcError(f"{target.name}'s config declares no MTP layers "
                              f"(num_nextn_predict_layers, mtp_num_hidden_layers)")
        return _mtp(target, int(k), layers=layers, with_embedding=False)
    k = config.get("max_draft_len")
    if k is None:
        raise KvcalcError("speculative_config: give max_draft_len")
    model = config.get("speculative_model_dir") or config.get("speculative_model")
    return draft_for(target, kind, int(k), model)


def llm_api_speculative_config(options: dict, where: str) -> dict | None:
    """The `speculative_config` of trtllm-serve's LLM API options (None: they have
    none)."""
    cfg = options.get("speculative_config")
    if cfg is not None and not isinstance(cfg, dict):
        raise KvcalcError(f"{where}: speculative_config must be a mapping (decoding_type: "
                          f"MTP, ...)")
    return cfg


# ------------------------------------------------------------------------------------
# Time
# ------------------------------------------------------------------------------------
def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification step yields, drafting `k` tokens each accepted with
    probability `acceptance` independently until the first rejection, plus the target's
    own: (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, "Fast Inference from Transformers
    via Speculative Decoding", eq. 1); k + 1 when every draft is accepted."""
    if not 0 <= acceptance <= 1:
        raise KvcalcError(f"acceptance rate must be in [0, 1], got {acceptance}")
    if acceptance == 1:
        return float(k + 1)
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)
