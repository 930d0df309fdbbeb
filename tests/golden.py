"""Golden files: kvcalc's answers, byte for byte, kept so a refactor can prove it changed
nothing (tests/test_golden.py compares). Every case is one kvcalc command line whose
stdout is stored in tests/data/golden/<case>.<format>:

- `estimate --format json` for every model preset and every published config.json in
  presets/hf/ and tests/data/hf/;
- `fit --max-model-len ... --format json` (vLLM's count) for layouts that exercise each
  rule: dense, GQA with tp, sliding and chunked windows, MLA, MoE with quantized weights,
  hybrid state models, a multimodal model, pipeline stages;
- two small `sweep` CSVs;
- `plan` and `bench --format json` (PLANS, BENCHES), which kvcalc.plan and kvcalc.bench
  answer too (tests/test_answers_plan_bench.py).

Regenerate on purpose only, in the commit that changes an answer, saying why:
    python tests/golden.py            # rewrite every file
    python tests/golden.py NAME...    # rewrite the named cases
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "data" / "golden"

FIT_LAYOUTS = {
    "llama3.1-8b-rtx3090-20000": ["--preset", "llama3.1-8b", "--gpu", "rtx3090",
                                  "--max-model-len", "20000"],
    "llama3.3-70b-h100-tp4-32768": ["--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--tp", "4",
                                    "--max-model-len", "32768"],
    "llama3-70b-h100-tp4-pp2-8192": ["--preset", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4",
                                     "--pp", "2", "--max-model-len", "8192"],
    "mistral-7b-l4-sliding-32768": ["--preset", "mistral-7b", "--gpu", "l4",
                                    "--max-model-len", "32768"],
    "gemma3-27b-h100-sliding-multimodal": ["--preset", "gemma3-27b", "--gpu", "h100-sxm",
                                           "--max-model-len", "16384"],
    "gemma2-9b-l40s-8192": ["--preset", "gemma2-9b", "--gpu", "l40s",
                               "--max-model-len", "8192"],
    "llama4-scout-h100-tp4-chunked": ["--preset", "llama4-scout", "--gpu", "h100-sxm", "--tp", "4",
                                      "--max-model-len", "65536"],
    "deepseek-r1-h200-tp8-mla-fp8": ["--preset", "deepseek-r1", "--gpu", "h200", "--tp", "8",
                                     "--max-model-len", "32768", "--kv-dtype", "fp8"],
    "qwen3-30b-a3b-h100-32768": ["--preset", "qwen3-30b-a3b", "--gpu", "h100-sxm",
                                 "--max-model-len", "32768"],
    "gpt-oss-20b-h100-mxfp4": ["--preset", "gpt-oss-20b", "--gpu", "h100-sxm",
                               "--max-model-len", "65536"],
    "qwen3-next-h100-tp4-hybrid": ["--preset", "qwen3-next-80b-a3b", "--gpu", "h100-sxm",
                                   "--tp", "4", "--max-model-len", "32768"],
    "jamba-mini-h100-tp2-hybrid": ["--preset", "jamba-1.5-mini", "--gpu", "h100-sxm", "--tp", "2",
                                   "--max-model-len", "16384"],
    "mamba-a10-state": ["--preset", "mamba-2.8b", "--gpu", "a10", "--max-model-len", "2048"],
    "llama3.1-8b-h100-v0-0.6": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                "--max-model-len", "16384", "--vllm-version", "0.6"],
    "llama3.1-8b-h100-int4-util95": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                     "--max-model-len", "131072", "--weight-dtype", "int4",
                                     "--gpu-memory-utilization", "0.95"],
    # the 2026 state kinds: KDA pages (fp32 recurrent state under auto) beside MLA, and
    # RG-LRU, which no vLLM release pages (one note, no cache counts)
    # Gemma 4: 20 layers reuse K/V (no pages), sliding pages of 256-wide heads take
    # blocks twice as long as the 512-wide full layers' (vLLM's page unification)
    "gemma4-e2b-l4-shared-kv": ["--config", "tests/data/hf/google__gemma-4-E2B-it-text.json",
                                "--gpu", "l4", "--max-model-len", "32768"],
    "kimi-linear-48b-h200-tp2-kda": ["--config",
                                     "tests/data/hf/moonshotai__Kimi-Linear-48B-A3B-Instruct.json",
                                     "--gpu", "h200", "--tp", "2", "--max-model-len", "131072"],
    "recurrentgemma-2b-l4-unpaged": ["--config", "tests/data/hf/google__recurrentgemma-2b.json",
                                     "--gpu", "l4", "--max-model-len", "8192"],
}

SWEEPS = {
    "sweep-llama3-8b": ["sweep", "--preset", "llama3-8b", "--seq-len", "1024:8192:*2",
                        "--batch", "1,8", "--kv-heads", "1,8,32", "--kv-dtype", "bf16,fp8"],
    "sweep-mistral-7b-tp": ["sweep", "--preset", "mistral-7b", "--seq-len", "2048,4096,8192",
                            "--batch", "1:4:+1", "--tp", "1,2", "--gpu", "a100-80gb"],
}

# `kvcalc plan` and `kvcalc bench` (kvcalc.plan and kvcalc.bench give the same:
# tests/test_answers_plan_bench.py): vLLM's search with a target, every engine side by
# side, disaggregated, speculation on and off; closed and open loops, ShareGPT's spread,
# another engine's flags, the host tier, speculation, a real run's file beside kvcalc's
_NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'
_EAGLE3 = ('{"method": "eagle3", "model": "tests/data/speculative/eagle3-llama3.1-8b.json", '
           '"num_speculative_tokens": 3}')
PLANS = {
    "plan-qwen3-0.6b-l4-2gpus-tpot": ["--preset", "qwen3-0.6b", "--gpu", "l4", "--gpus", "2",
                                      "--max-model-len", "4096", "--prompt-len", "1000",
                                      "--output-len", "200", "--tpot-ms", "40"],
    "plan-llama3.1-8b-h100-engines": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                      "--max-model-len", "8192", "--engine", "any"],
    "plan-llama3.1-8b-h100-disaggregated": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                            "--gpus", "2", "--max-model-len", "8192",
                                            "--disaggregated", "--ttft-ms", "500",
                                            "--tpot-ms", "30"],
    "plan-qwen3-0.6b-l4-ngram": ["--preset", "qwen3-0.6b", "--gpu", "l4", "--max-model-len",
                                 "4096", "--prompt-len", "1000", "--output-len", "200",
                                 "--speculative-config", _NGRAM, "--acceptance-rate", "0.8"],
}
BENCHES = {
    "bench-llama3.1-8b-h100-concurrency": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                           "--concurrency", "1,8", "--input-len", "1024",
                                           "--output-len", "128"],
    "bench-llama3.1-8b-h100-sharegpt-rate": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                             "--request-rate", "2", "--num-prompts", "100",
                                             "--dataset-name", "sharegpt"],
    "bench-llama3.1-8b-h100-sglang": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                      "--engine", "sglang", "--max-running-requests", "32",
                                      "--concurrency", "16"],
    "bench-llama3.1-8b-h100-host-tier": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                         "--concurrency", "4", "--num-prompts", "8",
                                         "--input-len", "4096", "--output-len", "16",
                                         "--prefix-hit", "0.25", "--host-hit", "0.5",
                                         "--kv-offloading-size", "16"],
    "bench-llama3.1-8b-h100-eagle3": ["--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                      "--max-model-len", "4096", "--input-len", "1024",
                                      "--output-len", "128", "--concurrency", "1,64",
                                      "--num-prompts", "64", "--speculative-config", _EAGLE3,
                                      "--acceptance-rate", "0.7"],
    "bench-llama3-8b-h100-against": [
        "--preset", "llama3-8b", "--gpu", "h100-sxm", "--against",
        "tests/data/bench_results/"
        "lambdalabs-vllm-1xH100-80GB-SXM-Meta-Llama-3-8B-Instruct_tp1_len2048-prompt10.json"],
}


def cases() -> dict[str, tuple[list[str], str, Path]]:
    """{case name: (kvcalc argv, file suffix, folder it runs in)}. Config paths are given
    relative to the folder they run in, so the answers name the same paths in a checkout
    and beside an installed wheel (presets/ then lives inside the package)."""
    from kvcalc.presets import model_names, presets_dir

    out: dict[str, tuple[list[str], str, Path]] = {}
    for name in model_names():
        out[f"estimate-{name}"] = (["estimate", "--preset", name, "--format", "json"], "json",
                                   ROOT)
    shipped = presets_dir().parent
    configs = [(p, shipped) for p in (presets_dir() / "hf").glob("*.json")]
    configs += [(p, ROOT) for p in (ROOT / "tests" / "data" / "hf").glob("*.json")]
    for path, where in sorted(configs):
        out[f"config-{path.stem}"] = (
            ["estimate", "--config", path.relative_to(where).as_posix(), "--format", "json"],
            "json", where)
    for name, args in FIT_LAYOUTS.items():
        out[f"fit-{name}"] = (["fit", *args, "--format", "json"], "json", ROOT)
    for name, args in SWEEPS.items():
        out[name] = (args, "csv", ROOT)
    for command, table in (("plan", PLANS), ("bench", BENCHES)):
        for name, args in table.items():
            out[name] = ([command, *args, "--format", "json"], "json", ROOT)
    return out


def run(argv: list[str], where: Path = ROOT) -> str:
    """stdout of `kvcalc ARGV`, run in the folder `where`."""
    import os

    from typer.testing import CliRunner

    from kvcalc.cli import app

    cwd = os.getcwd()
    os.chdir(where)
    try:
        r = CliRunner().invoke(app, argv)
    finally:
        os.chdir(cwd)
    if r.exit_code != 0:
        raise RuntimeError(f"kvcalc {' '.join(argv)}: exit {r.exit_code}: {r.stderr}")
    return r.stdout


def main(names: list[str]) -> None:
    all_cases = cases()
    unknown = set(names) - set(all_cases)
    if unknown:
        raise SystemExit(f"no such case: {', '.join(sorted(unknown))}")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in names or sorted(all_cases):
        argv, suffix, where = all_cases[name]
        (GOLDEN / f"{name}.{suffix}").write_text(run(argv, where))
    print(f"wrote {len(names or all_cases)} golden files to {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(sys.argv[1:])
