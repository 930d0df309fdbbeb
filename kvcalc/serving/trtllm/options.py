"""trtllm-serve's --extra_llm_api_options file: the LLM API's own option names in YAML
(`llmapi/llm_args.py` TorchLlmArgs), read once; each consumer takes its keys."""

from __future__ import annotations

from pathlib import Path

from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["cuda_graph_flags", "read_llm_api_options"]


def read_llm_api_options(path) -> dict:
    """The options file as a mapping."""
    from kvcalc.ground.inputfile import read_text
    from kvcalc.ground.yamlread import parse

    where = str(path)
    try:
        text = read_text(Path(path), where)
    except (FileNotFoundError, IsADirectoryError):
        raise ParameterError("{extra_llm_api_options} " + literal(where) + ": no such file",
                             "extra_llm_api_options") from None
    data = parse(text, where)
    if not isinstance(data, dict):
        raise KvcalcError(f"{where}: the LLM API options must be a mapping (key: value)")
    return data


def cuda_graph_flags(options: dict, where: str) -> dict:
    """TrtllmFlags' CUDA-graph fields from the options' `cuda_graph_config`: a mapping
    (batch_sizes, max_batch_size, enable_padding) is kept as given; null turns the
    graphs off (`TorchLlmArgs.cuda_graph_config` is Optional); absent, the default."""
    if "cuda_graph_config" not in options:
        return {}
    cfg = options["cuda_graph_config"]
    if cfg is None:
        return {"cuda_graphs": False}
    if not isinstance(cfg, dict):
        raise KvcalcError(f"{where}: cuda_graph_config must be a mapping (max_batch_size, "
                          f"enable_padding, batch_sizes) or null")
    unknown = sorted(set(cfg) - {"batch_sizes", "max_batch_size", "enable_padding"})
    if unknown:
        raise KvcalcError(f"{where}: cuda_graph_config has no {', '.join(unknown)} "
                          f"(it takes batch_sizes, max_batch_size, enable_padding)")
    return {"cuda_graph_config": dict(cfg)}
