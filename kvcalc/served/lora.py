"""LoRA adapters' time under load (`kvcalc bench` and `plan` with --enable-lora): what the
engine's LoRA kernels add to every step (kvcalc.served.step.StepTimes.gpu_s).

Each LoRA-wrapped linear layer runs, after its base GEMM, a shrink (x @ A: tokens x rank)
and an expand (that @ B, added to the base output) over the step's tokens, each token with
its own adapter's A and B. Per step:

- FLOPs: 2 x tokens x rank x (in + out) per adapted module and layer (one slot's A and B
  elements on the rank, kvcalc.serving.lora.slot_elements), at the engine's MFU;
- bytes: each distinct adapter in the step reads its A and B of every adapted module and
  layer (at most the slots, --max-loras / --max-loras-per-batch; kvcalc takes every
  request of a step as asking for an adapter, spread over every slot), and vLLM's lm_head
  slot (A rank x hidden, B vocabulary x rank), at the weights' bandwidth share;
- the larger of the two, plus a fixed time per kernel: the kernels are small (a rank of
  8-512 columns) and launched per wrapped module, so at decode their count, not their
  work, sets their time. The fixed time of one kernel is the engine's fitted fixed time of
  a layer (presets/engines layer_cycles, fitted without LoRA) over the kernels of a dense
  decoder layer (BASE_LAYER_KERNELS);
- a step that replays no CUDA graph launches them from Python too: its floor (the served
  terms' eager_layer_s a layer, kvcalc.served.step.StepTimes.time) grows by the same
  share a kernel.

Kernels per wrapped module, read in the engines' source:

- vLLM (0.10.1.1-0.33, `lora/punica_wrapper/punica_gpu.py::PunicaWrapperGPU.add_lora_linear`):
  a float32 buffer zeroed (`torch.zeros` up to 0.11; from 0.12 `torch.empty` and
  `output_tensor.zero_()` in `lora/ops/triton_ops/lora_shrink_op.py::_lora_shrink`), one
  `lora_shrink` and one `lora_expand` Triton kernel for all the module's slices: 3. The
  lm_head (`add_lora_logits`: the same 3) and the embedding
  (`lora/layers/vocab_parallel_embedding.py::VocabParallelEmbeddingWithLoRA.forward`: the
  indices' offset, `F.embedding` of A's rows, one `lora_expand`) add 3 each a step, and
  their B (and the lm_head's A) are read too.
- SGLang (0.5.8 `lora/backend/chunked_backend.py`, csgmv, the default backend;
  `triton_backend.py` likewise): `chunked_sgmv_lora_shrink_forward` and
  `chunked_sgmv_lora_expand_forward` (qkv and gate_up fused into one each, the expand
  adding into the base output): 2; no embedding or lm_head slots.

Routed experts' LoRA (vLLM's FusedMoEWithLoRA) is not timed, as it is not counted.
"""

from __future__ import annotations

from kvcalc.errors import ParameterError
from kvcalc.ground.record import record

__all__ = ["BASE_LAYER_KERNELS", "KERNELS", "VOCAB_KERNELS", "LoraTime", "lora_time"]

# Kernels per LoRA-wrapped linear layer, by engine; vLLM's lm_head's and embedding's each
KERNELS = {"vllm": 3, "sglang": 2}
VOCAB_KERNELS = 3
# The kernels of a dense decoder layer's decode step in vLLM (`models/llama.py::
# LlamaDecoderLayer.forward`): the input and post-attention fused add + RMSNorm, the qkv
# GEMM, rotary embedding, the K/V cache write, attention, the o GEMM, the gate_up GEMM,
# SiLU-and-mul, the down GEMM.
BASE_LAYER_KERNELS = 10


@record
class LoraTime:
    """What one step's LoRA kernels cost on one rank: `flops_per_token` (2 x one slot's A
    and B elements), `adapter_bytes` (one adapter's A and B read a step), `slots` (distinct
    adapters at most), `kernels` (launched a step) at `kernel_s` seconds each."""

    flops_per_token: int
    adapter_bytes: int
    slots: int
    kernels: int
    kernel_s: float

    def step_s(self, tokens: int, requests: int, flops_per_s: float, bytes_per_s: float) -> float:
        """Seconds the LoRA kernels add to a step of `tokens` tokens of `requests` requests."""
        if not tokens:
            return 0.0
        adapters = min(self.slots, max(requests, 1))
        work = max(tokens * self.flops_per_token / flops_per_s,
                   adapters * self.adapter_bytes / bytes_per_s)
        return self.kernels * self.kernel_s + work

    def as_dict(self) -> dict:
        return {"lora_flops_per_token": self.flops_per_token,
                "lora_adapter_bytes": self.adapter_bytes, "lora_slots": self.slots,
                "lora_kernels_per_step": self.kernels, "lora_kernel_us": self.kernel_s * 1e6}


def _slots(engine: str, given: dict) -> tuple[int, int, tuple | None]:
    """(slots, rank, target modules) of the engine's LoRA flags, with its defaults."""
    from kvcalc.serving.lora import lora_modules

    if engine == "vllm":
        slots, rank = given.get("max_loras") or 1, given.get("max_lora_rank") or 16
    else:
        slots, rank = given.get("max_loras_per_batch") or 8, given.get("max_lora_rank")
        if rank is None:
            raise ParameterError("{enable_lora}: give {max_lora_rank}", "enable_lora",
                                 "max_lora_rank")
    return slots, rank, lora_modules(given.get("lora_target_modules"))


def lora_time(spec, steps, given: dict, engine: str) -> tuple[LoraTime, str]:
    """The LoRA time of `steps` (a StepTimes of `spec`) under `engine`'s LoRA flags in
    `given` (kvcalc.serving.flags' names), and a note; `steps`' eager floor grows by the
    kernels' launches."""
    from kvcalc.ground.dtypes import dtype
    from kvcalc.serving.lora import slot_elements, wrapped_modules

    slots, rank, modules = _slots(engine, given)
    tp = steps.w.tp
    elements = slot_elements(spec, rank, modules, tp)
    kernels = wrapped_modules(spec, modules) * KERNELS[engine]
    d, vocab = spec.d_model, spec.vocab
    for name, more in (("lm_head", rank * d + vocab * rank), ("embed_tokens", d * rank)):
        if engine == "vllm" and (modules is None or name in modules):  # whole on every rank
            elements += more
            kernels += VOCAB_KERNELS
    lora_dtype = given.get("lora_dtype") or "auto"
    if lora_dtype == "auto":  # the activations' 16-bit dtype (8-bit weights' too)
        lora_dtype = steps.cdt if steps.cdt in ("fp16", "bf16", "fp32") else "bf16"
    dt = dtype(lora_dtype)
    kernel_s = steps.e.layer_s(steps.hw, steps.family) / BASE_LAYER_KERNELS
    got = LoraTime(flops_per_token=2 * elements, adapter_bytes=dt.nbytes(elements),
                   slots=slots, kernels=kernels, kernel_s=kernel_s)
    steps.eager_s += kernels * steps.terms.eager_layer_s / BASE_LAYER_KERNELS
    note = (f"LoRA time: {kernels:,} kernels a step at {kernel_s * 1e6:.1f} us each "
            f"(the engine's fixed time of a layer over its {BASE_LAYER_KERNELS} kernels), "
            f"plus rank {rank}'s shrink and expand FLOPs and up to {slots} adapter(s) of "
            f"{got.adapter_bytes:,} B read a step; every request asks for an adapter")
    return got, note
