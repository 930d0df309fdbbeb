"""What a serving process holds outside torch whatever the engine: the CUDA context, the
NCCL and custom all-reduce buffers per tensor-parallel peer, one CUDA graph's nodes and
private outputs per layer. Measured on public vLLM logs (kvcalc.serving.vllm.memory's
docstring says which), not derivable from any engine's source; every wing that counts
these terms uses these figures (vLLM's where the whole process is counted, TensorRT-LLM's
always)."""

__all__ = ["COMM_BYTES_PER_RANK", "CONTEXT_BYTES", "CUDA_GRAPH_BYTES_PER_LAYER"]

MiB = 1 << 20
GiB = 1 << 30

CONTEXT_BYTES = GiB // 2  # CUDA context, when the whole process is counted
COMM_BYTES_PER_RANK = 480 * MiB  # NCCL + custom all-reduce buffers per TP peer (vllm#21348)
CUDA_GRAPH_BYTES_PER_LAYER = 164 * 1024  # 5.8 MiB a graph of 36-layer Qwen3-8B (LMCache#3430)
