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
