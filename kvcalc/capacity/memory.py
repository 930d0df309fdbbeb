"""What vLLM sets aside on a device before the KV cache: weights per pipeline stage, the
profile run's activation and sampler peaks, non-torch memory and CUDA graphs.

Facts (quoted, not copied code; see the package docstring for the versions read):

* profile run (`gpu_model_runner.profile_run`, 0.33): one forward pass of
  max_num_batched_tokens tokens over min(tokens, max_num_seqs) requests, then the
  sampler on one hidden state per request: logits [num_reqs, vocab], last pipeline
  stage only (V0: the driver worker, rank 0 of TP, only).

What is modelled, what is calibrated
------------------------------------
vLLM *measures* three of its terms; kvcalc models them from what drives them and
calibrates the constants against the logs in tests/data/vllm/ (README there):

* weights (modelled): parameters per device x weight dtype (kvcalc.formulas), plus
  the RoPE cos/sin cache vLLM builds (max_position x head_dim in the model dtype:
  Llama-3.1-8B's 14.9888 GiB in vllm#10517 is exactly that over 2 x 8.03e9).
  Quantized checkpoints are not modelled here (issue 12, part 2): pass the
  measured `weights_bytes` ("model weights took X GiB").
* activation peak (modelled + 2 calibrated constants): max of
  - forward: tokens x dtype bytes x (FWD_MLP_COPIES x MLP width per device +
    FWD_HIDDEN_COPIES x d_model); 3 and 3 reproduce vllm#10517 (Llama-3.1-8B,
    RTX 3090, 20,000 and 29,000 tokens: 2.07 and 2.99 GiB) to 0.01 GiB;
  - sampler: num_reqs x vocab x SAMPLER_BYTES_PER_LOGIT (fp32 logits, softmax,
    sorted values and int64 indices of top-k/top-p...): 40 from the logs where the
    sampler dominates (vllm#13882: 1.42 GiB for 256 x 152,064; PR vllm#10511:
    1.26 GiB for 256 x 128,256 at TP 1 and 2). Before 0.6.5 the profile only made
    the bf16 logits (2 bytes each: vllm#10517 at 35k tokens, 0.06 GiB).
* non-torch memory (calibrated): from 0.6.4.post1 (V0) and 0.10.1 (V1) vLLM counts
  only the increase since a snapshot taken after the CUDA context and NCCL exist:
  NON_TORCH_INCREASE (0.25 GiB: 0.35, 0.25, 0.03 GiB in vllm#10517, #13061,
  #13882). V1 0.7-0.10.0 (and V0 before 0.6.4.post1) counted everything the process
  held outside torch: CONTEXT_BYTES + COMM_BYTES_PER_RANK x tp for tp > 1,
  calibrated on vllm#21348 (Qwen3-235B-A22B-FP8, TP 4, H100) only.
* CUDA graphs (modelled, uncalibrated against a full log): from 0.20, captured
  graphs x CUDA_GRAPH_BYTES_PER_GRAPH plus the forward activation of the largest
  capture size; the quoted "Estimated CUDA graph memory" lines (0.36 GiB for 16
  piecewise graphs, 0.73 GiB for 51 + 35) bracket the per-graph constant.
"""

from __future__ import annotations

from kvcalc.capacity.engine import GiB, MiB, EngineSettings
from kvcalc.dtypes import dtype, weight_dtype as _weight_dtype
from kvcalc.errors import KvcalcError
from kvcalc.formulas.params import param_counts, weight_params_per_device
from kvcalc.layers import MoE
from kvcalc.spec import ModelSpec

__all__ = [
    "CONTEXT_BYTES", "COMM_BYTES_PER_RANK", "CUDA_GRAPH_BYTES_PER_GRAPH", "FWD_HIDDEN_COPIES",
    "FWD_MLP_COPIES", "NON_TORCH_INCREASE", "SAMPLER_BYTES_PER_LOGIT",
    "activation_peak_bytes", "cuda_graph_bytes", "cuda_graph_sizes", "forward_activation_bytes",
    "non_torch_bytes", "pipeline_layers", "sampler_bytes", "stage_weight_bytes",
]

# --- calibrated constants (see the module docstring for the logs behind each) -------
FWD_MLP_COPIES = 3  # gate_up output (2 x d_ff) + activation output (1 x d_ff)
FWD_HIDDEN_COPIES = 3  # residual, normed hidden, attention/MLP output
SAMPLER_BYTES_PER_LOGIT = 40  # 0.6.5+ and V1: fp32 logits, probs, sort values+int64 idx...
SAMPLER_BYTES_PER_LOGIT_OLD = 2  # < 0.6.5: the profile made only the model-dtype logits
NON_TORCH_INCREASE = GiB // 4  # cuBLAS/attention workspaces since the snapshot
CONTEXT_BYTES = GiB // 2  # CUDA context, when the whole process is counted
COMM_BYTES_PER_RANK = 480 * MiB  # NCCL + custom all-reduce buffers per TP peer (one log)
CUDA_GRAPH_BYTES_PER_GRAPH = 8 * MiB  # 0.73 GiB / 86 graphs ~ 8.7 MiB; 0.36 / 16 ~ 23


# --------------------------------------------------------------------------------
# Pipeline stages and weights
# --------------------------------------------------------------------------------
def pipeline_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per stage as vLLM's get_pp_indices splits them: layers // pp each, the
    remainder added one by one to the second-to-last stage, then the one before it..."""
    if pp > layers:
        raise KvcalcError(f"pp={pp} exceeds the model's {layers} layers")
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_weight_bytes(spec: ModelSpec, s: EngineSettings, stage: int = 0) -> int:
    """Weights one device of pipeline stage `stage` holds, in bytes (exact).

    Parameters per device come from formulas.weight_params_per_device (K/V projections
    replicated like the cache when tp > kv_heads); the input embedding sits on the
    first stage and the lm_head (a copy even when tied, if pp > 1) on the last.
    `weight_dtype` applies to every matrix but the embedding and lm_head. vLLM also
    keeps a RoPE cos/sin cache of max_position x head_dim in the model dtype, counted
    on every stage. `weights_bytes` (measured) replaces all of this.
    """
    if s.weights_bytes is not None:
        return s.weights_bytes
    return _language_model_bytes(spec, s, stage) + _tower_bytes(spec, s, stage)


def _tower_bytes(spec: ModelSpec, s: EngineSettings, stage: int) -> int:
    """A multimodal model's vision tower and projector: vLLM loads them with the language
    model, on the first pipeline stage, in the model dtype, sharded by tp (as the plain fit
    counts them, kvcalc.capacity.fit)."""
    towers = sum(spec.extra.get("towers", {}).values())
    if stage != 0 or not towers:
        return 0
    return dtype(s.model_dtype).nbytes(-(-towers // s.tp))


def _language_model_bytes(spec: ModelSpec, s: EngineSettings, stage: int) -> int:
    from kvcalc.quant.formats import adhoc, quantization_of
    from kvcalc.quant.weights import weight_bytes, weight_bytes_per_device

    q = adhoc(s.weight_dtype, s.group_size) if s.weight_dtype else quantization_of(spec)
    if q is not None:
        # Quantized as stored (kvcalc.quant): values, scales and zeros matrix by matrix.
        # The stage share splits the body by layers, with the embedding and lm_head (in
        # the model dtype) on the first and last stage, as below.
        wb = weight_bytes(spec, q, s.model_dtype)
        dev = weight_bytes_per_device(spec, q, s.tp, s.model_dtype)
        emb_dev = -(-(wb.breakdown.get("embedding", 0) + wb.breakdown.get("position_embedding", 0))
                    // s.tp)
        head_dev = -(-wb.breakdown.get("lm_head", 0) // s.tp)
        body_dev = dev - emb_dev - head_dev
        sizes = pipeline_layers(spec.layers, s.pp)
        total = body_dev * sizes[stage] // spec.layers if s.pp > 1 else body_dev
        if stage == 0:
            total += emb_dev
        if stage == s.pp - 1:
            # A tied lm_head is a copy of its own on the last stage when pp > 1.
            tied_copy = dtype(s.model_dtype).nbytes(-(-spec.vocab * spec.d_model // s.tp))
            total += head_dev if head_dev or s.pp == 1 else tied_copy
        if spec.max_context and spec.mla is None:
            total += dtype(s.model_dtype).nbytes(spec.max_context * spec.head_dim)
        return total
    counts = param_counts(spec)
    b = counts.breakdown
    tp, pp = s.tp, s.pp
    emb = b.get("embedding", 0) + b.get("position_embedding", 0)
    head = b.get("lm_head", 0)
    if spec.tied_embeddings and pp > 1:
        head = spec.vocab * spec.d_model
    body = counts.total - emb - b.get("lm_head", 0)
    body_dev = weight_params_per_device(spec, body + emb, tp, counts) - (-(-emb // tp))
    sizes = pipeline_layers(spec.layers, pp)
    body_stage = body_dev * sizes[stage] // spec.layers if pp > 1 else body_dev
    model_dt = dtype(s.model_dtype)
    weight_dt = _weight_dtype(s.weight_dtype) if s.weight_dtype else model_dt
    total = weight_dt.nbytes(body_stage)
    if stage == 0:
        total += model_dt.nbytes(-(-emb // tp))
    if stage == pp - 1:
        total += model_dt.nbytes(-(-head // tp))
    if spec.max_context and spec.mla is None:
        total += model_dt.nbytes(spec.max_context * spec.head_dim)
    return total


# --------------------------------------------------------------------------------
# Measured terms, modelled
# --------------------------------------------------------------------------------
def _mlp_width(spec: ModelSpec) -> int:
    """Intermediate width one token's MLP materialises, in the widest layer: a dense MLP's
    d_ff, a MoE layer's routed experts it visits plus its shared experts. A model whose
    layers have no MLP (Mamba) materialises its mixer's inner width, which d_ff holds."""
    widths = [m.active * m.expert_d_ff + m.shared_experts * m.shared.d_ff
              if isinstance(m, MoE) else m.d_ff
              for m in (layer.mlp for layer, _ in spec.groups()) if m is not None]
    return max(widths, default=spec.d_ff)


def forward_activation_bytes(spec: ModelSpec, tokens: int, s: EngineSettings) -> int:
    """Torch peak of a forward pass over `tokens` tokens on one TP rank (modelled):
    tokens x dtype x (FWD_MLP_COPIES x MLP width / tp + FWD_HIDDEN_COPIES x d_model)."""
    per = FWD_MLP_COPIES * -(-_mlp_width(spec) // s.tp) + FWD_HIDDEN_COPIES * spec.d_model
    return dtype(s.model_dtype).nbytes(tokens * per)


def sampler_bytes(spec: ModelSpec, num_reqs: int, s: EngineSettings) -> int:
    """The sampler's profile peak: num_reqs x vocab logits, SAMPLER_BYTES_PER_LOGIT each
    (0.6.5+ and V1; the model-dtype logits alone before)."""
    per = SAMPLER_BYTES_PER_LOGIT
    if s.engine == "v0" and s.version < (6, 5):
        per = dtype(s.model_dtype).nbytes(1) * SAMPLER_BYTES_PER_LOGIT_OLD // 2
    return num_reqs * spec.vocab * per


def activation_peak_bytes(spec: ModelSpec, s: EngineSettings, tokens: int, seqs: int,
                          samples: bool) -> tuple[int, int, int]:
    """(peak, forward, sampler) on one rank: the forward pass's peak, or the kept hidden
    states plus the sampler's, whichever is larger; `samples` for ranks that sample."""
    fwd = forward_activation_bytes(spec, tokens, s)
    if not samples:
        return fwd, fwd, 0
    reqs = min(tokens, seqs)
    samp = sampler_bytes(spec, reqs, s)
    kept = dtype(s.model_dtype).nbytes(tokens * spec.d_model)
    return max(fwd, kept + samp), fwd, samp


def non_torch_bytes(s: EngineSettings) -> int:
    """Non-torch memory vLLM subtracts (calibrated; see the module docstring).

    Counted since a snapshot after the CUDA context and NCCL (V0 0.6.4.post1+, V1
    0.10.1+): NON_TORCH_INCREASE. Whole process (V1 0.7-0.10.0, V0 before 0.6.4):
    CONTEXT_BYTES + COMM_BYTES_PER_RANK x tp when tp > 1.
    """
    v = s.version
    snapshot = (v >= (6, 4)) if s.engine == "v0" else (v >= (10, 1))
    if snapshot:
        return NON_TORCH_INCREASE
    comm = COMM_BYTES_PER_RANK * s.tp if s.tp > 1 else 0
    return CONTEXT_BYTES + NON_TORCH_INCREASE + comm


def cuda_graph_sizes(s: EngineSettings, max_num_seqs: int) -> tuple[int, ...]:
    """Batch sizes vLLM captures (0.11+): 1, 2, 4, then every 8 to 256, every 16 above,
    up to min(2 x max_num_seqs, 512)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    return tuple(x for x in sizes if x <= top)


def cuda_graph_bytes(spec: ModelSpec, s: EngineSettings, max_num_seqs: int) -> int:
    """CUDA-graph memory vLLM subtracts (0.20+, unless enforce_eager; V0 and earlier V1
    capture after sizing the cache, in the 1 - utilization headroom): piecewise and
    full graphs for every capture size x CUDA_GRAPH_BYTES_PER_GRAPH, plus the forward
    activation of the largest size (the graph pool keeps it)."""
    if s.enforce_eager or s.engine == "v0" or s.version < (20, 0):
        return 0
    sizes = cuda_graph_sizes(s, max_num_seqs)
    graphs = 2 * len(sizes)  # FULL_AND_PIECEWISE: a piecewise and a full graph per size
    return graphs * CUDA_GRAPH_BYTES_PER_GRAPH + forward_activation_bytes(spec, max(sizes), s)
