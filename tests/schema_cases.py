"""Invocations beyond the golden cases whose JSON the schemas must declare (tests/test_schema.py):
each engine, failing start-ups, speculative decoding, LoRA, offloading, images, MLA, hybrid
and MoE models, a plain fit, the time targets. {command: {case name: kvcalc argv}}; check's
cases are those tests/test_answers_check_sweep.py reads (every public log kind)."""

from __future__ import annotations

import json

SPEC = "tests/data/speculative/eagle3-llama3.1-8b.json"
V3 = "tests/data/hf/deepseek-ai__DeepSeek-V3.json"
QWEN_VL = "tests/data/hf/Qwen__Qwen2.5-VL-7B-Instruct.json"
_L8 = ["--preset", "llama3.1-8b", "--gpu", "h100-sxm"]

ESTIMATE = {
    "no-gpu": ["--preset", "llama3-8b", "--gpu", "none"],
    "tp8-mla": ["--preset", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--kv-dtype", "fp8"],
    "moe-int4-batch": ["--preset", "qwen3-30b-a3b", "--weight-dtype", "int4", "--group-size",
                       "128", "--batch", "16", "--seq-len", "4K"],
    "hybrid": ["--preset", "qwen3-next-80b-a3b", "--tp", "4"],
    "doesnt-fit": ["--preset", "llama3-70b", "--gpu", "l4", "--seq-len", "128k"],
    "roofline-engine": [*_L8, "--engine", "roofline", "--mfu", "0.4"],
    "sglang": [*_L8, "--engine", "sglang"],
    "llama.cpp": ["--preset", "llama3.1-8b", "--gpu", "rtx4090", "--engine", "llama.cpp"],
    "encoder": ["--config", "tests/data/hf/meta-llama__Llama-3.2-90B-Vision-Instruct.json",
                "--encoder-seq-len", "6404", "--kv-scale-bytes", "2"],
    "images": ["--config", QWEN_VL, "--limit-mm-per-prompt", "image=2"],
    "dp-ep": ["--preset", "qwen3-30b-a3b", "--tp", "2", "-dp", "2", "--enable-expert-parallel"],
    "prompt-len": [*_L8, "--prompt-len", "512", "--batch", "8"],
    "adhoc": ["--layers", "24", "--d-model", "2048", "--heads", "16", "--kv-heads", "4"],
    "mamba": ["--preset", "mamba-2.8b", "--gpu", "a10"],
    "compare": ["--preset", "llama3-8b", "--compare"],
    "compare-no-gpu": ["--preset", "mistral-7b", "--compare", "--gpu", "none"],
}

FIT = {
    "plain": ["--preset", "llama3-8b", "--gpu", "rtx4090", "--seq-len", "8192", "--batch", "4"],
    "refused-long": ["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--max-model-len", "131072"],
    "refused-weights": ["--preset", "llama3-70b", "--gpu", "l4"],
    "auto-len": [*_L8, "--max-model-len", "auto"],
    "kv-memory": [*_L8, "--kv-cache-memory", "8GiB", "--enforce-eager"],
    "targets": [*_L8, "--ttft-ms", "500", "--tpot-ms", "20"],
    "targets-counted": [*_L8, "--max-model-len", "16384", "--ttft-ms", "800", "--tpot-ms", "25",
                        "--speculative-config", json.dumps({"method": "eagle3", "model": SPEC,
                                                            "num_speculative_tokens": 3})],
    "offload-counted": [*_L8, "--max-model-len", "32768", "--kv-offloading-size", "64.5"],
    "targets-roofline": [*_L8, "--tpot-ms", "15", "--engine", "roofline"],
    "spec-eagle3": [*_L8, "--max-model-len", "8192", "--speculative-config",
                    json.dumps({"method": "eagle3", "model": SPEC, "num_speculative_tokens": 3})],
    "spec-ngram": [*_L8, "--speculative-config",
                   json.dumps({"method": "ngram", "num_speculative_tokens": 3})],
    "lora": [*_L8, "--enable-lora", "--max-loras", "8", "--max-lora-rank", "64"],
    "offload": [*_L8, "--kv-offloading-size", "64"],
    "images": ["--config", QWEN_VL, "--gpu", "h100-sxm", "--max-model-len", "32768",
               "--limit-mm-per-prompt", '{"image": 2}', "--tp", "2", "--mm-encoder-tp-mode",
               "data"],
    "dp-ep": ["--preset", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tp", "2", "-dp", "2",
              "--enable-expert-parallel", "--max-model-len", "32768"],
    "old-vllm": [*_L8, "--vllm-version", "0.8", "--max-model-len", "8192"],
    "sglang": [*_L8, "--engine", "sglang"],
    "sglang-refused": ["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--engine", "sglang"],
    "sglang-spec-nextn": ["--config", V3, "--gpu", "h200", "--tp", "8", "--engine", "sglang",
                          "--speculative-algorithm", "NEXTN", "--context-length", "32768"],
    "sglang-mla-dp": ["--config", V3, "--gpu", "h200", "--tp", "8", "--engine", "sglang",
                      "--dp-size", "8", "--enable-dp-attention", "--context-length", "32768"],
    "sglang-hybrid": ["--preset", "qwen3-next-80b-a3b", "--gpu", "h100-sxm", "--tp", "4",
                      "--engine", "sglang", "--context-length", "32768"],
    "sglang-lora-hicache": [*_L8, "--engine", "sglang", "--enable-lora", "--max-lora-rank", "16",
                            "--lora-target-modules", "all", "--enable-hierarchical-cache"],
    "sglang-sliding": ["--preset", "gemma3-27b", "--gpu", "h100-sxm", "--engine", "sglang"],
    "sglang-targets": [*_L8, "--engine", "sglang", "--tpot-ms", "20"],
    "trtllm": [*_L8, "--engine", "tensorrt-llm"],
    "trtllm-backend": [*_L8, "--engine", "tensorrt-llm", "--backend", "tensorrt",
                       "--max-seq-len", "8192", "--host-cache-size", "40000000000"],
    "trtllm-refused": ["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--engine",
                       "tensorrt-llm"],
    "trtllm-windows": ["--preset", "gemma3-27b", "--gpu", "h100-sxm", "--engine", "tensorrt-llm",
                       "--max-attention-window", "1024,1024,1024,1024,1024,32768"],
    "trtllm-mla": ["--config", V3, "--gpu", "h200", "--tp", "8", "--weight-dtype", "fp8",
                   "--engine", "tensorrt-llm", "--max-seq-len", "8192"],
    "mamba": ["--preset", "mamba-2.8b", "--gpu", "a10", "--engine", "sglang"],
}

SWEEP = {
    "gpu": ["--preset", "llama3-8b", "--seq-len", "1024,8192", "--gpu", "h100-sxm"],
    "engine": ["--preset", "llama3-8b", "--seq-len", "1024,8192", "--gpu", "h100-sxm",
               "--engine", "vllm", "--batch", "1,64"],
    "no-gpu": ["--preset", "deepseek-v3", "--seq-len", "4096", "--gpu", "none"],
}


PLAN = {
    "sglang": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
               "--engine", "sglang", "--tpot-ms", "30"],
    "trtllm": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
               "--engine", "tensorrt-llm"],
    "moe-dp-lora": ["--preset", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "4",
                    "--max-model-len", "16384", "--enable-lora", "--ttft-ms", "800"],
    "images": ["--config", QWEN_VL, "--gpu", "h100-sxm", "--gpus", "2", "--max-model-len",
               "16384", "--limit-mm-per-prompt", "image=1"],
}

BENCH = {
    "trtllm": [*_L8, "--engine", "tensorrt-llm", "--concurrency", "8", "--num-prompts", "16",
               "--input-len", "512", "--output-len", "64"],
    "sglang-hicache": [*_L8, "--engine", "sglang", "--concurrency", "4", "--num-prompts", "8",
                       "--input-len", "2048", "--output-len", "16", "--prefix-hit", "0.5",
                       "--host-hit", "0.25", "--enable-hierarchical-cache"],
    "rate-random": [*_L8, "--request-rate", "4", "--num-prompts", "32", "--dataset-name",
                    "random", "--random-range-ratio", "0.5", "--seed", "1"],
    "images": ["--config", QWEN_VL, "--gpu", "h100-sxm", "--concurrency", "2",
               "--num-prompts", "4", "--images-per-request", "1", "--image-size", "1280x720",
               "--output-len", "16"],
    "lora": [*_L8, "--concurrency", "4", "--num-prompts", "8", "--input-len", "256",
             "--output-len", "16", "--enable-lora", "--max-loras", "2"],
    "saturated": ["--preset", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4", "--concurrency",
                  "256", "--num-prompts", "256", "--input-len", "4096", "--output-len", "32", "--max-model-len", "8192"],
}


def argvs() -> dict[str, list[str]]:
    """{"COMMAND-CASE": full kvcalc argv with --format json} for each command but check."""
    out = {}
    for command, cases in (("estimate", ESTIMATE), ("fit", FIT), ("sweep", SWEEP),
                           ("plan", PLAN), ("bench", BENCH)):
        for name, args in cases.items():
            out[f"{command}-{name}"] = [command, *args, "--format", "json"]
    return out
