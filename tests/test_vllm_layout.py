"""vLLM's count under its data-parallel and expert-parallel layouts (the seam's Layout),
against vLLM's own source rules, read in vllm-project/vllm:

* `vllm/config/parallel.py::ParallelConfig` (commit 00193b82b0e2d4faea5d3b4ea4f6c4c2bd9d057a):
  `data_parallel_size`: "Number of data parallel groups. MoE layers will be sharded
  according to the product of the tensor, prefill-context, and data parallel sizes";
  `world_size`: "world_size is TPxPP" (one engine's workers: each DP rank is an engine
  of tp x pp GPUs, with its own memory profile and KV pool); `enable_expert_parallel`:
  "Use expert parallelism instead of tensor parallelism for MoE layers".
* `vllm/model_executor/layers/fused_moe/config.py::FusedMoEParallelConfig.make`
  (commit 00c1c6a2054b7027369c2a460cc2181a9b86293d), whose docstring lays the devices
  out: "TP = 1, DP = 2, EP = False: device 0: TP = {2, 0} ... There are 2 engine
  instances and the tensors are sharded across 2 devices"; "TP = 2, DP = 2, EP = True:
  device 0: TP = {1, 0} DP = {2, 0} EP = {4, 0} ... the experts are split between the 4
  devices" (use_ep = dp x pcp x tp > 1 and enable_expert_parallel; ep_size = the
  flattened dp x pcp x tp, tp_size = 1).
* attention is not touched by either: K/V heads per rank follow tensor_parallel_size
  (`config/model.py::ModelConfig.get_num_kv_heads`), so a DP rank's pages are tp's.

No public vLLM log in tests/data/vllm runs with data_parallel_size > 1 (every one prints
1), so the figures are held against these rules, computed here from the model's layers.
"""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.layers import MoE
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving import count, engine_ref
from kvcalc.serving.flags import engine_flags
from kvcalc.serving.layout import Layout
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.serving.vllm.settings import EngineSettings

H100 = load_hardware("h100-sxm")


def _routed(spec) -> tuple[int, int]:
    """(routed expert parameters of the whole model, experts per MoE layer), from the
    layers themselves."""
    d = spec.d_model
    total, experts = 0, set()
    for layer, n in spec.groups():
        if isinstance(layer.mlp, MoE):
            total += n * layer.mlp.experts * layer.mlp.expert.params(d)
            experts.add(layer.mlp.experts)
    (e,) = experts
    return total, e


@pytest.mark.parametrize("tp", [1, 2])
def test_a_dense_models_data_parallel_ranks_are_replicas_counted_alike(tp):
    """Llama-3-8B at dp 4: every rank counts as the dp 1 engine does, term by term; the
    deployment holds 4 pools on 4 x tp GPUs."""
    spec = load_model("llama3-8b")
    one = serving_capacity(spec, H100, EngineSettings(max_model_len=8192, tp=tp))
    four = serving_capacity(spec, H100, EngineSettings(max_model_len=8192, tp=tp, dp=4))
    assert four.memory == one.memory
    assert (four.num_gpu_blocks, four.kv_cache_tokens, four.max_concurrency) == \
        (one.num_gpu_blocks, one.kv_cache_tokens, one.max_concurrency)
    flags = engine_flags(engine_ref("vllm"), EngineSettings(max_model_len=8192, tp=tp), dp=4)
    c = count(spec, H100, flags)
    assert c.layout == Layout(tp=tp, dp=4) and c.layout.gpus == 4 * tp
    assert c.layout.attention_tp == tp
    d = c.deployment
    assert d["gpus"] == 4 * tp and d["kv_pools"] == 4
    assert d["kv_cache_tokens"] == 4 * one.kv_cache_tokens
    assert d["max_concurrency"] == pytest.approx(4 * one.max_concurrency)
    assert d["max_running_requests"] == 4 * one.max_num_seqs
    assert dict(c.flags)["data_parallel_size"] == 4


def test_moe_experts_are_sliced_over_tp_times_dp_without_expert_parallel():
    """Mixtral-8x7B, TP 1 and DP 2 without EP ("the tensors are sharded across 2
    devices"): each GPU holds half of every routed expert and all of the rest, in bf16;
    its pages are tp 1's (K/V heads follow tp)."""
    spec = load_model("mixtral-8x7b")
    routed, _ = _routed(spec)
    one = serving_capacity(spec, H100, EngineSettings(max_model_len=4096))
    two = serving_capacity(spec, H100, EngineSettings(max_model_len=4096, dp=2))
    expected = one.deciding.weights - 2 * routed + 2 * -(-routed // 2)
    assert two.deciding.weights == expected
    assert [g.page_bytes for g in two.groups] == [g.page_bytes for g in one.groups]
    assert two.kv_cache_tokens > one.kv_cache_tokens  # the weights freed hold KV


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_expert_parallel_puts_whole_experts_on_tp_times_dp_gpus(name):
    """TP 2, DP 2, EP ("the experts are split between the 4 devices", tp_size 1 in the
    MoE layers): each GPU holds cdiv(experts, 4) whole experts of every MoE layer; the
    rest of the weights lie as at tp 2 (to one parameter's rounding: the rest is split
    apart from the experts)."""
    spec = load_model(name)
    routed, experts = _routed(spec)
    tp2 = serving_capacity(spec, H100, EngineSettings(max_model_len=4096, tp=2))
    ep4 = serving_capacity(spec, H100, EngineSettings(max_model_len=4096, tp=2, dp=2,
                                                      enable_expert_parallel=True))
    whole = routed * -(-experts // 4) // experts
    expected = tp2.deciding.weights - 2 * -(-routed // 2) + 2 * whole
    assert abs(ep4.deciding.weights - expected) <= 2
    flags = engine_flags(engine_ref("vllm"), EngineSettings(max_model_len=4096, tp=2), dp=2,
                         enable_expert_parallel=True)
    c = count(spec, H100, flags)
    assert c.layout == Layout(tp=2, dp=2, ep=4) and c.layout.gpus == 4
    assert c.deployment["kv_cache_tokens"] == 2 * c.kv_cache_tokens
    assert any("whole experts over 4 GPUs" in n for n in c.notes)


def test_whole_experts_round_up_where_the_slices_do_not():
    """Eight experts over three GPUs: expert parallelism gives the busiest GPU three
    whole experts (3/8 of them), slicing gives each a third."""
    spec = load_model("mixtral-8x7b")
    routed, experts = _routed(spec)
    sliced = serving_capacity(spec, H100, EngineSettings(max_model_len=4096, dp=3))
    whole = serving_capacity(spec, H100, EngineSettings(max_model_len=4096, dp=3,
                                                        enable_expert_parallel=True))
    assert whole.deciding.weights - sliced.deciding.weights == \
        2 * (routed * 3 // experts - -(-routed // 3))


def test_expert_parallel_alone_leaves_a_dense_model_as_it_was():
    spec = load_model("llama3-8b")
    plain = serving_capacity(spec, H100, EngineSettings(max_model_len=8192, tp=2))
    ep = serving_capacity(spec, H100, EngineSettings(max_model_len=8192, tp=2,
                                                     enable_expert_parallel=True))
    assert ep.memory == plain.memory and ep.notes == plain.notes


def test_vllms_data_parallel_flags_are_vllms():
    with pytest.raises(KvcalcError, match="dp"):
        engine_flags(engine_ref("sglang"), EngineSettings(max_model_len=4096), dp=2)
    with pytest.raises(KvcalcError):
        EngineSettings(max_model_len=4096, dp=0)


# -- the command line: vLLM's own spellings (vllm 0.33.0 `engine/arg_utils.py::
# EngineArgs.add_cli_args`, l. 1241 "--data-parallel-size", "-dp"; l. 1305
# "--enable-expert-parallel", a switch) on fit, estimate, plan and check --------------

def _cli(*args: str):
    import json

    from typer.testing import CliRunner

    from kvcalc.cli import app

    r = CliRunner().invoke(app, list(args))
    return r, (json.loads(r.stdout) if r.exit_code in (0, 1) and "--format" in args else None)


@pytest.mark.parametrize("spelling", ["--data-parallel-size", "-dp"])
def test_fit_counts_vllms_data_parallel_replicas_from_its_flags(spelling):
    """Mixtral-8x7B at tp 2, dp 2, expert parallel: each replica's pool is the count of
    EngineSettings(tp=2, dp=2, enable_expert_parallel=True) (held to vLLM's layout rules
    above), the deployment two of them on four GPUs, ep = tp x dp."""
    r, d = _cli("fit", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--tp", "2",
                spelling, "2", "--enable-expert-parallel", "--max-model-len", "8192",
                "--format", "json")
    assert r.exit_code == 0, r.output
    one = serving_capacity(load_model("mixtral-8x7b"), H100, EngineSettings(
        max_model_len=8192, tp=2, dp=2, enable_expert_parallel=True))
    assert d["kv_cache_tokens"] == one.kv_cache_tokens
    assert (d["data_parallel_size"], d["enable_expert_parallel"]) == (2, True)
    assert d["layout"] == {"tp": 2, "pp": 1, "dp": 2, "dp_attention": False, "ep": 4,
                           "attention_tp": 2, "gpus": 4}
    assert d["deployment"]["kv_cache_tokens"] == 2 * one.kv_cache_tokens
    assert d["deployment"]["max_running_requests"] == 2 * one.max_num_seqs
    r, e = _cli("estimate", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--tp", "2",
                spelling, "2", "--enable-expert-parallel", "--seq-len", "8192",
                "--format", "json")
    assert r.exit_code == 0, r.output
    assert e["fit"]["engine"]["layout"] == d["layout"]
    assert e["fit"]["engine"]["deployment"] == d["deployment"]


def test_one_replica_without_expert_parallel_writes_json_as_before():
    _, d = _cli("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
                "--format", "json")
    assert "layout" not in d and "deployment" not in d


@pytest.mark.parametrize("engine, flag, words", [
    # SGLang server_args.py: "--expert-parallel-size", "--ep-size" (0.4.6.post5-0.5.8)
    ("sglang", "--enable-expert-parallel", "SGLang spells it --ep-size"),
    # trtllm-serve (commands/serve.py 1.3.0rc3 l. 499-500): "--moe_expert_parallel_size",
    # "--ep_size"; no data-parallel replicas
    ("tensorrt-llm", "--enable-expert-parallel", "TensorRT-LLM spells it --ep_size"),
    ("tensorrt-llm", "--data-parallel-size=2", "TensorRT-LLM has no data-parallel replicas"),
])
def test_vllms_layout_flags_for_another_engine_are_one_line(engine, flag, words):
    for command in ("fit", "estimate"):
        r, _ = _cli(command, "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--tp", "2",
                    flag, "--engine", engine)
        assert r.exit_code == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kvcalc: error: ")
        assert words in lines[0] and "vLLM's flag" in lines[0]


def test_sglangs_dp_size_given_to_vllm_names_vllms_own():
    r, _ = _cli("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--dp-size", "2")
    assert r.exit_code == 2
    assert "vLLM's is --data-parallel-size" in r.stderr


def test_sglang_takes_data_parallel_size_as_its_own_alias_of_dp_size():
    """SGLang's server_args.py adds "--data-parallel-size", "--dp-size" as one option
    (0.4.0 l. 508-509 ... 0.5.8 l. 3386-3387; 0.5.23 `arg_groups/fields/parallel.py`
    dp_size, aliases ["--data-parallel-size"])."""
    args = ("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--engine", "sglang@0.5.4",
            "--context-length", "8192", "--format", "json")
    _, alias = _cli(*args, "--data-parallel-size", "2")
    _, own = _cli(*args, "--dp-size", "2")
    assert alias == own and own["dp"] == 2 and own["deployment"]["kv_pools"] == 2
    r, _ = _cli(*args, "--data-parallel-size", "2", "--dp-size", "4")
    assert r.exit_code == 2 and "one SGLang flag" in r.stderr


def test_plan_keeps_the_replicas_given_and_writes_expert_parallel_in_its_line():
    """plan -dp 2 --enable-expert-parallel: every layout two replicas of tp x pp GPUs,
    counted as vLLM's DP ranks (experts over tp x 2 GPUs), the switch in the line."""
    import shlex

    r, d = _cli("plan", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--gpus", "4", "-dp",
                "2", "--enable-expert-parallel", "--max-model-len", "8192", "--format", "json")
    assert r.exit_code == 0, r.output
    best = d["best"]
    assert all(x["replicas"] == 2 for x in d["layouts"])
    words = shlex.split(best["command"])
    assert words[words.index("--data-parallel-size") + 1] == "2"
    assert "--enable-expert-parallel" in words
    cap = serving_capacity(load_model("mixtral-8x7b"), H100, EngineSettings(
        max_model_len=8192, tp=best["tp"], pp=best["pp"], dp=2, enable_expert_parallel=True,
        kv_dtype=best["kv_cache_dtype"] if best["kv_cache_dtype"] != "auto" else "bf16",
        gpu_memory_utilization=str(best["gpu_memory_utilization"]),
        max_num_seqs=best["max_num_seqs"]))
    assert best["kv_cache_tokens"] == cap.kv_cache_tokens
    r, _ = _cli("plan", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--gpus", "2", "-dp",
                "4")
    assert r.exit_code == 2 and "--data-parallel-size 4" in r.stderr
    r, _ = _cli("plan", "--preset", "mixtral-8x7b", "--gpus", "4", "-dp", "2", "--engine", "any")
    assert r.exit_code == 2 and "vLLM's flag" in r.stderr


def test_check_reads_the_layout_a_vllm_log_gives():
    """The non-default args vLLM logs (`data_parallel_size`, `enable_expert_parallel`) and
    a `vllm serve -dp N --enable-expert-parallel` line set the count's layout."""
    from kvcalc.serving.vllm.check import settings_from_log
    from kvcalc.serving.vllm.log import parse_vllm_log

    spec = load_model("mixtral-8x7b")
    logged = parse_vllm_log(
        "INFO 08-20 10:00:00 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
        "INFO 08-20 10:00:00 [utils.py:326] non-default args: {'model': 'm', "
        "'max_model_len': 8192, 'tensor_parallel_size': 2, 'data_parallel_size': 2, "
        "'enable_expert_parallel': True}\n")
    typed = parse_vllm_log("$ vllm serve m -tp 2 -dp 2 --enable-expert-parallel "
                           "--max-model-len 8192\nINFO vLLM API server version 0.10.1.1\n")
    for log in (logged, typed):
        s, notes = settings_from_log(log, spec)
        assert s.layout == Layout(tp=2, dp=2, ep=4)
        assert not any("enable_expert_parallel" in n for n in notes)
