"""The flags of the features people turn on at launch (issue #41): speculative decoding
and LoRA adapters, spelled as each engine's own command line spells them
(kvcalc.serving.flags says whose each is), and the acceptance rate kvcalc times
speculative decoding with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

_V = "vLLM: "
_E = "SGLang: "
_T = "TensorRT-LLM: "

SpeculativeConfigOpt = Annotated[Optional[str], typer.Option(
    "--speculative-config", show_default=False, metavar="<json>",
    help=_V + "speculative decoding as vLLM takes it, JSON: '{\"method\": \"eagle3\", "
    "\"model\": \"HUB_ID|FOLDER|config.json\", \"num_speculative_tokens\": 3}' (methods: "
    "eagle, eagle3, mtp and the MTP model types, ngram, draft_model): the draft's weights "
    "in the weights, its layers in the KV cache (default: none).")]
SpecAlgorithmOpt = Annotated[Optional[str], typer.Option(
    "--speculative-algorithm", "--speculative-algo", show_default=False, metavar="NAME",
    help=_E + "speculative decoding, EAGLE, EAGLE3, NEXTN, STANDALONE or NGRAM: the draft "
    "worker's weights and its KV pool (default: none).")]
SpecDraftPathOpt = Annotated[Optional[str], typer.Option(
    "--speculative-draft-model-path", "--speculative-draft", show_default=False,
    help=_E + "the draft (Hub id, folder, config.json or preset); none with NEXTN or an "
    "MTP checkpoint: the target's own MTP layers.")]
SpecStepsOpt = Annotated[Optional[int], typer.Option(
    "--speculative-num-steps", show_default=False,
    help=_E + "draft passes a round (default: SGLang's choice for the model, 3 or 5).")]
SpecTopkOpt = Annotated[Optional[int], typer.Option(
    "--speculative-eagle-topk", show_default=False,
    help=_E + "branches a draft step keeps (default: SGLang's choice, 1 or 4).")]
SpecDraftTokensOpt = Annotated[Optional[int], typer.Option(
    "--speculative-num-draft-tokens", show_default=False,
    help=_E + "tokens verified a round (default: SGLang's choice; steps + 1 with topk 1).")]
ExtraLlmApiOptionsOpt = Annotated[Optional[Path], typer.Option(
    "--extra-llm-api-options", "--extra_llm_api_options", show_default=False,
    metavar="<yaml>",
    help=_T + "trtllm-serve's LLM API options file; its speculative_config (decoding_type "
    "MTP with num_nextn_predict_layers, Eagle3 with max_draft_len and "
    "speculative_model_dir) is counted, other keys are not read.")]
EnableLoraOpt = Annotated[bool, typer.Option(
    "--enable-lora", help="vLLM and SGLang: LoRA adapters' slots on the GPU (vLLM: in the "
    "weights; SGLang: out of the KV pool's budget).")]
MaxLorasOpt = Annotated[Optional[int], typer.Option(
    "--max-loras", show_default=False,
    help=_V + "adapters in a batch, each a slot on the GPU (default 1).")]
MaxLorasPerBatchOpt = Annotated[Optional[int], typer.Option(
    "--max-loras-per-batch", show_default=False,
    help=_E + "adapters in a batch, each a slot on the GPU (default 8).")]
MaxLoraRankOpt = Annotated[Optional[int], typer.Option(
    "--max-lora-rank", show_default=False,
    help="vLLM and SGLang: the largest adapter rank each slot holds (vLLM's default 16; "
    "SGLang needs it).")]
LoraDtypeOpt = Annotated[Optional[str], typer.Option(
    "--lora-dtype", show_default=False, metavar="auto|float16|bfloat16",
    help=_V + "the slots' dtype (default auto: the model's).")]
LoraTargetModulesOpt = Annotated[Optional[str], typer.Option(
    "--lora-target-modules", show_default=False, metavar="NAMES",
    help="vLLM (0.19+) and SGLang: the modules adapted, e.g. q_proj,v_proj or all "
    "(default: vLLM every linear module and the embeddings; SGLang needs it).")]
LimitMmPerPromptOpt = Annotated[Optional[str], typer.Option(
    "--limit-mm-per-prompt", show_default=False, metavar="<json>|image=N",
    help=_V + "items a prompt may carry per modality, as vLLM takes it: '{\"image\": 2}' "
    "(0.11.2+ also '{\"image\": {\"count\": 2}}'; older spelling image=2); sizes the "
    "encoder budget and the images vLLM profiles its vision encoder with, which are in the "
    "activation peak (default: 999 images; Qwen2-VL, Qwen2.5-VL, Qwen3.5 and LLaVA 1.5 "
    "counted).")]
MmEncoderTpModeOpt = Annotated[Optional[str], typer.Option(
    "--mm-encoder-tp-mode", show_default=False, metavar="weights|data",
    help=_V + "the vision encoder over tp (0.10.2+): weights splits it like the text model "
    "(default); data keeps it whole on every rank and splits the images (Qwen2-VL from 0.11, "
    "Qwen2.5-VL, Qwen3.5; others fall back to weights).")]
AcceptanceRateOpt = Annotated[Optional[float], typer.Option(
    "--acceptance-rate", show_default=False, metavar="<0..1>",
    help="Speculative decoding: the chance each drafted token is accepted (default: the "
    "method's published figure, kvcalc.serving.speculative).")]


def speculative_given(*, speculative_config=None, speculative_algorithm=None,
                      speculative_draft_model_path=None, speculative_num_steps=None,
                      speculative_eagle_topk=None, speculative_num_draft_tokens=None,
                      extra_llm_api_options=None) -> dict:
    """The speculative flags given, by their parameter names (None: not given)."""
    return {"speculative_config": speculative_config,
            "speculative_algorithm": speculative_algorithm,
            "speculative_draft_model_path": speculative_draft_model_path,
            "speculative_num_steps": speculative_num_steps,
            "speculative_eagle_topk": speculative_eagle_topk,
            "speculative_num_draft_tokens": speculative_num_draft_tokens,
            "extra_llm_api_options": extra_llm_api_options}


def lora_given(*, enable_lora=False, max_loras=None, max_loras_per_batch=None,
               max_lora_rank=None, lora_dtype=None, lora_target_modules=None) -> dict:
    """The LoRA flags given, by their parameter names (None: not given)."""
    return {"enable_lora": enable_lora or None, "max_loras": max_loras,
            "max_loras_per_batch": max_loras_per_batch, "max_lora_rank": max_lora_rank,
            "lora_dtype": lora_dtype, "lora_target_modules": lora_target_modules}
