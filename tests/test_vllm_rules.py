"""kvcalc.serving.vllm.rules: the vLLM wing's one table of release rules, each era's edge
as its docstring dates it (the figures themselves are held against public logs in
tests/test_capacity.py and tests/test_check.py)."""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.serving.vllm.rules import default_engine, parse_release, rules_for, same_release

GiB = 1 << 30


def test_release_text():
    assert parse_release("0.6.4.post1") == (6, 4)
    assert parse_release("v0.21.0") == (21, 0)
    assert parse_release("0.33") == (33, 0)
    assert same_release("0.9.2", "v0.9.2") and not same_release("0.9.2", "0.9.1")
    for bad in ("1.0", "latest", "0"):
        with pytest.raises(KvcalcError, match="0.MINOR"):
            parse_release(bad)


def test_a_release_candidate_precedes_its_release():
    """PEP 440 orders 0.10.0rc1 after every 0.9 and before 0.10.0 (vLLM's wheels are
    versioned by it; `packaging.version.Version` sorts them so): it was read as 0.10.1
    (the digits of '0rc1'), and took the rules that start there."""
    order = ["0.9.2", "0.10.0.dev3", "0.10.0rc1", "0.10.0rc2", "0.10.0", "0.10.1.dev4+g1a2b3c",
             "0.10.1rc1", "0.10.1", "0.10.1.1"]
    assert sorted(order, key=parse_release) == order
    version = pytest.importorskip("packaging.version").Version  # PEP 440's own order
    assert sorted(order, key=version) == order
    assert parse_release("0.10.0rc1") == (10, -1, 3, 1)
    assert parse_release("0.9.2+cu126") == (9, 2)
    assert not same_release("0.10.0rc1", "0.10.0") and not same_release("0.10.0rc1", "0.10.1")
    # non-torch memory since the snapshot in V1 from 0.10.1 (gpu_worker.py::init_device,
    # init_snapshot): not in its release candidates, nor in 0.10.0rc1
    assert rules_for("0.10.1").non_torch_counted() == "snapshot"
    for rc in ("0.10.0rc1", "0.10.1rc1"):
        assert rules_for(rc).non_torch_counted() == "process"
    # the GB10 exclusion of 0.33 (EngineArgs.get_batch_defaults) is not 0.33.0rc1's
    spark = dict(total=128 * GiB, device="NVIDIA GB10", usage="server", chunked=True,
                 max_model_len=8192)
    assert rules_for("0.33.0rc1").batch_defaults(**spark) == (8192, 1024)
    assert rules_for("0.33.0").batch_defaults(**spark) == (2048, 256)


def test_v1_became_the_default_in_0_8():
    assert default_engine("0.7.3") == "v0" and default_engine("0.8.0") == "v1"


@pytest.mark.parametrize("rule, edge", [
    ("budget_rounds_up", "0.20"), ("uniform_type_groups", "0.11"),
    ("state_pool_refusal", "0.19"), ("graphs_subtracted", "0.20"),
    ("nvls_after_snapshot", "0.11"), ("hybrid_prefix_caching", "0.26"),
    ("prefix_caching_for_other_states", "0.15"), ("prefill_checkpoints", "0.33"),
    ("user_block_aligns", "0.21"),
])
def test_each_v1_rule_starts_at_its_release(rule, edge):
    minor = parse_release(edge)[0]
    assert getattr(rules_for(edge), rule)()
    assert not getattr(rules_for(f"0.{minor - 1}.9"), rule)()


def test_eras_that_end():
    assert rules_for("0.27.9").mamba_all_mode() and not rules_for("0.28").mamba_all_mode()
    assert rules_for("0.18").graph_profile_in_window()
    assert not rules_for("0.27.1").graph_profile_in_window()
    assert rules_for("0.7.3").blocks_of_all_layers()
    assert rules_for("0.10.0", "v0").blocks_of_all_layers()
    assert not rules_for("0.8").blocks_of_all_layers()


def test_the_engine_decides_with_the_release():
    assert rules_for("0.6.4.post1", "v0").non_torch_counted() == "snapshot"
    assert rules_for("0.6.3", "v0").non_torch_counted() == "process"
    assert rules_for("0.10.0").non_torch_counted() == "process"
    assert rules_for("0.10.1").non_torch_counted() == "snapshot"
    assert not rules_for("0.33", "v0").graphs_subtracted()


def test_sampler_paths():
    assert rules_for("0.16").sampler_path(None, 256) == "sort"
    assert rules_for("0.17").sampler_path(None, 256) == "triton"
    assert rules_for("0.17").sampler_path(None, 4) == "sort"  # under 8 requests
    assert rules_for("0.21").sampler_path(None, 256) == "flashinfer"
    assert rules_for("0.6.5", "v0").sampler_path(None, 256) == "v0"
    assert rules_for("0.6.4", "v0").sampler_path(None, 256) == "logits"
    assert rules_for("0.16").native_sampler() == "sort"
    assert rules_for("0.17").native_sampler() == "triton"


def test_batch_defaults_by_device_and_release():
    h100 = dict(total=80 * GiB, device="h100-sxm", usage="server", chunked=True,
                max_model_len=4096)
    assert rules_for("0.33").batch_defaults(**h100) == (8192, 1024)
    assert rules_for("0.7.3").batch_defaults(**h100) == (2048, 256)
    a100 = dict(h100, device="a100-80gb")
    assert rules_for("0.8.5").batch_defaults(**a100) == (8192, 1024)
    assert rules_for("0.9.2").batch_defaults(**a100) == (2048, 256)
    b200 = dict(h100, total=180 * GiB, device="b200")
    assert rules_for("0.28").batch_defaults(**b200) == (16384, 1024)
    assert rules_for("0.27").batch_defaults(**b200) == (8192, 1024)
    assert rules_for("0.6.4", "v0").batch_defaults(**h100) == (512, 256)
    assert rules_for("0.9.2", "v0").batch_defaults(**dict(h100, chunked=False)) == (4096, 256)


def test_in_flight_tokens():
    assert rules_for("0.26").in_flight(2048, True) == 2048
    assert rules_for("0.27").in_flight(2048, True) == 4096
    assert rules_for("0.27").async_scheduling(1) and not rules_for("0.27").async_scheduling(2)


def test_before_0_6_the_api_server_shares_the_engine_process_and_its_host_terms_are_its_own():
    """vLLM's v0.6.0 performance update (blog.vllm.ai/2024/09/05/perf-update.html): 0.5.3
    ran its HTTP API server in the engine's process ("The HTTP API server takes 33% of the
    total execution time" of Llama 3 8B on one H100) and 0.6.0 separated them, so a step's
    host work per running request differs across that release: those releases' runs are
    timed on host terms fitted on their own runs (presets/served/terms.yaml `paths`),
    the later ones' on vLLM's."""
    import yaml

    from kvcalc.presets import presets_dir
    from kvcalc.served import served_terms
    from kvcalc.serving import engine_ref, schedule_for

    path = schedule_for(engine_ref("vllm@0.5.4")).host_path
    assert path and schedule_for(engine_ref("vllm@0.4.1")).host_path == path
    assert schedule_for(engine_ref("vllm@0.6.0")).host_path == ""
    assert schedule_for(engine_ref("vllm")).host_path == ""
    written = yaml.safe_load((presets_dir() / "served" / "terms.yaml").read_text())
    own = written["engines"]["vllm"]["paths"][path]
    terms = served_terms("vllm", path)
    assert (terms.running_s, terms.request_s, terms.publishers) == (
        own["running_s"], own["request_s"], own["publishers"])
    assert terms.extrapolated  # fitted on fewer than three publishers (Lambda, zhjunqin)
    assert served_terms("vllm").running_s == written["engines"]["vllm"]["running_s"]
