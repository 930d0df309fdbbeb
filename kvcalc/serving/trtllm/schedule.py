"""TensorRT-LLM's scheduler as kvcalc.served runs it, at a release (its rule in
kvcalc.serving.trtllm.rules)."""

from __future__ import annotations

from kvcalc.serving.record import Schedule
from kvcalc.serving.trtllm.rules import rules_for


def schedule(release: str, *, enable_chunked_prefill: bool = False, backend: str | None = None,
             max_batch_size: int = 2048, cuda_graphs: bool = True,
             cuda_graph_config: dict | None = None) -> Schedule:
    """The capacity scheduler's default policy, GUARANTEED_NO_EVICT
    (tensorrt_llm/_torch/pyexecutor/scheduler.py and the C++ batch manager's
    capacityScheduler): a request is scheduled only when the blocks for its whole
    prompt and max_tokens are free, so nothing is evicted; context and generation
    requests run in the same in-flight batch, up to max_num_tokens.
    Chunked prefill is off unless asked (llmapi/llm_args.py, BaseLlmArgs
    .enable_chunked_prefill, default False): the micro-batch scheduler
    (batch_manager/microBatchScheduler.cpp, MicroBatchScheduler::operator()) then takes
    a context whole and stops at the first one that the step's max_num_tokens cannot
    hold, and llmapi/llm.py's _check_arguments refuses a prompt over max_num_tokens.
    CUDA graphs (PyTorch backend): decode-only batches of exactly a captured size
    (Rules.cuda_graph_batch_sizes of `cuda_graph_config`, the LLM API options' mapping;
    no padding by default: with enable_padding, any batch up to the largest); a step
    with a context request runs eager (`TorchLlmArgs.cuda_graph_config`: graphs "are enabled for
    batches that consist of decoding requests *only*"). A built engine (backend
    tensorrt) launches no Python kernels."""
    rules = rules_for(release)
    backend = backend or rules.default_backend()
    graphs = None
    if backend == "pytorch":
        graphs = (rules.cuda_graph_batch_sizes(max_batch_size, cuda_graph_config)
                  if cuda_graphs else ())
    return Schedule(admission="reserve", mixed=True,
                    overlaps_host=rules.overlap_scheduler(),
                    chunks_prompts=enable_chunked_prefill,
                    graph_batches=graphs,
                    graph_pads=bool((cuda_graph_config or {}).get("enable_padding")),
                    source="CapacitySchedulerPolicy.GUARANTEED_NO_EVICT (default); overlap "
                           "scheduler default from 0.19; contexts whole unless "
                           "enable_chunked_prefill (MicroBatchScheduler::operator())")
