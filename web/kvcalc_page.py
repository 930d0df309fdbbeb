"""The page's one way into kvcalc (web/index.html runs it in Pyodide; tests/test_page.py
runs it on CPython too): the inputs the page holds -> `kvcalc fit` and `kvcalc plan`
answers, each exactly their command's `--format json`, with the command line that
prints it, the engine's memory terms as a bar, and the library's own sentences.

No number is made here: every figure is the library's, every sentence
kvcalc.report's. What this module adds is bookkeeping: which flag each input is
(one table, FLAGS, for both the call and the command line), and which of an engine's
memory terms is weights, activations, non-torch memory, graphs or KV cache (KINDS).

The request (a dict, as the page's URL holds it):
    source      "preset" | "config" | "hub"
    model       the preset name or the Hub id (org/name)
    config      source "config": the text of a config.json
    config_name source "config": the model's name (default: its _name_or_path, else "pasted")
    gpu         a hardware preset
    engine      "vllm" | "sglang" | "tensorrt-llm"
    context     tokens, or "auto" (vLLM's longest that fits); "" for the model's context
    batch       requests at once (vLLM --max-num-seqs, SGLang --max-running-requests,
                TensorRT-LLM --max-batch-size); "" for the engine's default
    kv_dtype, weight_dtype   "" for the defaults (bf16 KV; weights as stored)
    gpus        devices: fit's --tp, plan's --gpus
Hub files (source "hub", fetched by the page): {"revision", "config": text, "headers":
[{"name", "header": text, "data_bytes": int or null}]}.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import kvcalc
from kvcalc.errors import KvcalcError

ENGINES = ("vllm", "sglang", "tensorrt-llm")
ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}
# Each input the count takes: (request key, engine or None for all, fit's keyword, the
# command line's flag). The call and the command line are made from this one table.
FLAGS = (
    ("context", "vllm", "max_model_len", "--max-model-len"),
    ("context", "sglang", "context_length", "--context-length"),
    ("context", "tensorrt-llm", "max_seq_len", "--max-seq-len"),
    ("batch", "vllm", "max_num_seqs", "--max-num-seqs"),
    ("batch", "sglang", "max_running_requests", "--max-running-requests"),
    ("batch", "tensorrt-llm", "max_batch_size", "--max-batch-size"),
    ("kv_dtype", None, "kv_dtype", "--kv-dtype"),
    ("weight_dtype", None, "weight_dtype", "--weight-dtype"),
)
# Where the page writes a pasted config.json (Pyodide's in-memory file system).
WORK = Path(os.environ.get("KVCALC_PAGE_WORK", "/tmp/kvcalc-page"))

# An engine's memory terms (its JSON's "memory" keys) by what they hold; the key that is
# the whole (vLLM: driver-visible memory x utilization; SGLang and TensorRT-LLM: the
# device's memory); terms not listed (free memory after a step) are not drawn.
KINDS = {
    "weights": "weights", "model_weights_inside_torch": "weights", "engine_size": "weights",
    "engine": "weights", "draft_weights": "weights",
    "activation_peak": "activations", "dynamic_inside_torch": "activations",
    "activations": "activations", "execution_context": "activations",
    "lora_buffers": "activations",
    "non_torch": "non-torch", "outside_torch": "non-torch",
    "cuda_graphs": "graphs",
    "headroom": "headroom",
    "kv_cache": "kv", "paged_kv_cache": "kv", "mamba_cache": "kv", "draft_kv_cache": "kv",
}
WHOLE = ("budget", "total", "device_total_memory")


def catalogue() -> str:
    """The choices, as JSON: model and GPU presets (with their memory), engines, dtypes."""
    from kvcalc import presets

    gpus = []
    for name in presets.hardware_names():
        hw = presets.load_hardware(name)
        gpus.append({"name": name, "memory_bytes": hw.memory_bytes})
    return json.dumps({"models": presets.model_names(), "gpus": gpus,
                       "engines": [{"name": e, "title": ENGINE_TITLES[e]} for e in ENGINES],
                       "dtypes": list(kvcalc.DTYPES), "version": kvcalc.__version__})


def answer(request: str | dict, hub: str | dict | None = None) -> str:
    """The answer to one request, as JSON: {"fit", "plan"} each its command's JSON, with
    "commands" (the argv of each), "headline", "fixes", "bar", "launch" (and "plan_error"
    when no layout serves); or {"error"}: kvcalc's one line."""
    r = json.loads(request) if isinstance(request, str) else request
    h = json.loads(hub) if isinstance(hub, str) else hub
    try:
        return json.dumps(_answer(r, h))
    except (KvcalcError, ValueError, TypeError) as e:  # ParameterError is a KvcalcError
        return json.dumps({"error": " ".join(str(e).split())})


def _answer(r: dict, hub: dict | None) -> dict:
    engine = r.get("engine") or "vllm"
    if engine not in ENGINES:
        raise KvcalcError(f"engine {engine!r}: the page counts {', '.join(ENGINES)}")
    gpus = _whole(r.get("gpus") or 1, "--tp")
    spec, model_args, served = _model(r, hub)
    kwargs, flags = _engine_inputs(r, engine)
    gpu = r.get("gpu") or "h100-sxm"
    fit = kvcalc.fit(model=spec, gpu=gpu, tp=gpus,
                     engine=None if engine == "vllm" else engine, **kwargs)
    data = fit.as_dict()
    fit_argv = ["fit", *model_args, "--gpu", gpu, *(["--tp", str(gpus)] if gpus > 1 else []),
                *(["--engine", engine] if engine != "vllm" else []), *flags, "--format", "json"]
    out = {"fit": data, "headline": _headline(fit), "fixes": _fixes(fit),
           "bar": bar(data), "commands": {"fit": fit_argv}}
    plan_argv, planned = _plan(spec, gpu, gpus, engine, r, data, model_args, served)
    out["commands"]["plan"] = plan_argv
    out.update(planned)
    return out


def _model(r: dict, hub: dict | None):
    """(the ModelSpec, the command line's model arguments, the name a launch line serves
    or None for the spec's own)."""
    source = r.get("source") or "preset"
    if source == "preset":
        name = (r.get("model") or "").strip()
        return kvcalc.load_model(name), ["--preset", name], None
    if source == "config":
        text = r.get("config") or ""
        if not text.strip():
            raise KvcalcError("paste a config.json first")
        # Written where kvcalc reads a config file from: `kvcalc fit --config FILE` exactly
        # (its name: the file's, org__name.json -> org/name).
        name = (r.get("config_name") or "").strip() or _name_or_path(text) or "pasted"
        WORK.mkdir(parents=True, exist_ok=True)
        path = WORK / (name.replace("/", "__") + ".json")
        path.write_text(text)
        from kvcalc.hfconfig import spec_from_hf_config_file

        return spec_from_hf_config_file(path), ["--config", str(path)], None
    if source == "hub":
        repo = (r.get("model") or "").strip()
        if hub is None:
            raise KvcalcError(f"{repo}: its files were not fetched")
        return hub_spec(repo, hub), [repo], repo
    raise KvcalcError(f"source {source!r}: a preset, a config or a Hub id")


def _name_or_path(text: str) -> str | None:
    try:
        cfg = json.loads(text)
    except ValueError:
        return None
    name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def hub_spec(repo: str, hub: dict):
    """The Hub id's model as `kvcalc fit ORG/NAME` reads it (kvcalc.model_source): its
    config.json in a folder, weighed by the safetensors headers the page fetched with
    range requests (a file's data length from its Content-Range, when the Hub gave one)."""
    from kvcalc.model_source.folder import folder_model
    from kvcalc.model_source.hub import parse_hub_id
    from kvcalc.model_source.safetensors import checkpoint_bytes, parse_header, tensor_bytes

    parsed = parse_hub_id(repo)
    if parsed is None:
        raise KvcalcError(f"{repo!r} is not a Hub id (org/name)")
    revision = hub.get("revision") or parsed[1]
    shown = parsed[0] + (f"@{revision}" if revision and revision != "main" else "")
    folder = WORK / "hub" / parsed[0]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(hub["config"])
    headers = []
    for f in hub.get("headers") or []:
        where = f"{shown}/{f['name']}"
        raw = f["header"].encode("utf-8")
        headers.append(tensor_bytes(parse_header(raw, where), where, f.get("data_bytes")))
    checkpoint = checkpoint_bytes(headers) if headers else None
    return folder_model(folder, name=parsed[0], label=f"Hugging Face Hub {shown}",
                        checkpoint=checkpoint)


def _engine_inputs(r: dict, engine: str) -> tuple[dict, list[str]]:
    """fit's keywords and the command line's flags for the inputs given (FLAGS)."""
    kwargs, flags = {}, []
    for key, owner, name, flag in FLAGS:
        if owner not in (None, engine):
            continue
        value = str(r.get(key) if r.get(key) is not None else "").strip()
        if key == "context" and engine == "vllm" and not value:
            value = "auto"  # vLLM's count needs a length: its longest that fits
        if not value:
            continue
        if key == "context" and value.lower() == "auto":
            if engine != "vllm":
                raise KvcalcError(f"{flag} auto: the longest that fits is vLLM's "
                                  "--max-model-len auto; give tokens, or none for the "
                                  "model's context")
            kwargs[name] = "auto"
        elif key in ("context", "batch"):
            kwargs[name] = _whole(value, flag)
        else:
            kwargs[name] = value
        flags += [flag, str(kwargs[name])]
    return kwargs, flags


def _whole(value, flag: str) -> int:
    """A count as the command line reads it (32768, 32k, 32K; kvcalc.ground.units), at
    least 1."""
    from kvcalc.ground.units import count

    n = count(str(value).replace(",", ""), flag)
    if n < 1:
        raise KvcalcError(f"{flag} is at least 1, got {n:,}")
    return n


def _headline(fit) -> str:
    """The library's one clause for the count: 'vLLM 0.33 starts: 3.37 requests of ...'."""
    if fit.count is not None:
        from kvcalc.report.serving import serving_words

        return serving_words(fit.count)
    from kvcalc.report.tables import verdict_words

    return verdict_words(fit.estimate.verdict)


def _fixes(fit) -> list[str]:
    """Each setting that would make the engine start, as the flag and what it then holds."""
    if fit.count is not None:
        return []
    from kvcalc.report.tables import fixes_words

    return fixes_words(fit.estimate.verdict)


def bar(data: dict) -> dict:
    """The engine's memory terms as one bar: {"whole": bytes, "whole_label", "parts":
    [{"key", "kind", "label", "bytes", "text"}]} in the engine's own order (text: the
    library's "16.1 GB / 15 GiB"); SGLang's non-torch
    memory is what it finds used at start (total - avail_mem_at_start)."""
    from kvcalc.ground.units import human_bytes
    from kvcalc.report.serving import TERM_WORDS

    memory = data.get("memory") or {}
    whole_key = next((k for k in WHOLE if k in memory), None)
    parts = []
    if "avail_mem_at_start" in memory and "total" in memory:
        parts.append({"key": "total-avail_mem_at_start", "kind": "non-torch",
                      "label": "non-torch (CUDA context, NCCL)",
                      "bytes": memory["total"] - memory["avail_mem_at_start"]})
    for key, value in memory.items():
        if key in KINDS and isinstance(value, int):
            parts.append({"key": key, "kind": KINDS[key],
                          "label": TERM_WORDS.get(key, key.replace("_", " ")), "bytes": value})
    whole = memory.get(whole_key)
    over = sum(p["bytes"] for p in parts) - (whole or 0)
    for p in parts:
        p["text"] = human_bytes(p["bytes"])
    return {"whole": whole, "whole_key": whole_key,
            "whole_label": TERM_WORDS.get(whole_key, whole_key or ""),
            "whole_text": human_bytes(whole or 0), "over_text": human_bytes(max(over, 0)),
            "parts": parts}


def _plan(spec, gpu: str, gpus: int, engine: str, r: dict, fit: dict, model_args: list,
          served: str | None) -> tuple[list[str], dict]:
    """(the argv of `kvcalc plan` on the same model, GPU, device count and length, {its
    JSON (kvcalc.plan's: vLLM's front; another engine's best layout) and the best
    layout's launch line}; "plan_error" when nothing serves). The requests' prompt and
    output lengths are the page's when given, else the command's defaults (the prompt
    fills the context)."""
    from kvcalc.plan import NothingFits

    context = str(r.get("context") or "").strip().lower()
    lengths = {name: _whole(r[key], flag) for key, name, flag in (
        ("prompt", "prompt_len", "--prompt-len"), ("output", "output_len", "--output-len"))
        if str(r.get(key) or "").strip()}
    if engine == "vllm":
        length = "auto" if context in ("", "auto") else _whole(context, "--max-model-len")
    else:  # another engine plans at a length: the one asked, else the one its count took
        length = _whole(context, "--max-model-len") if context else fit["context_len"]
    argv = ["plan", *model_args, "--gpu", gpu, "--gpus", str(gpus),
            "--max-model-len", str(length),
            *(["--engine", engine] if engine != "vllm" else []),
            *(f for name, v in lengths.items() for f in (f"--{name.replace('_', '-')}", str(v))),
            "--format", "json"]
    try:
        answer = kvcalc.plan(model=spec, gpu=gpu, gpus=gpus, max_model_len=length,
                             engine=None if engine == "vllm" else engine,
                             launch_model=served, **lengths)
    except NothingFits as e:
        return argv, {"plan": None, "plan_error": " ".join(str(e).split()), "launch": None}
    launch = (answer.plan.command if answer.plan is not None
              else answer.engines[0].command)
    return argv, {"plan": answer.as_dict(), "launch": launch}
