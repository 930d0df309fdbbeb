"""vLLM's multimodal start-up (kvcalc.serving.vllm.encoder): the encoder cache budget and
the images profiled, as `compute_encoder_budget` / `MultiModalBudget.get_max_items` give
them (read in 0.10.1.1-0.33), and what the profile adds to the activation peak; the flag
in vLLM's spelling, refused for the engines without it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.hfconfig import spec_from_hf_config
from kvcalc.presets import load_hardware, load_model
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.serving.vllm.encoder import encoder_profile, parse_limit_mm_per_prompt
from kvcalc.serving.vllm.memory import activation_peak_bytes
from kvcalc.serving.vllm.settings import EngineSettings

HF = Path(__file__).parent / "data" / "hf"
QWEN = str(HF / "Qwen__Qwen2.5-VL-7B-Instruct.json")
LLAVA = str(HF / "llava-hf__llava-1.5-7b-hf.json")


def spec(path):
    return spec_from_hf_config(json.loads(Path(path).read_text()), Path(path).stem)


def profile(path, tokens=8192, seqs=1024, **kw):
    s = EngineSettings(max_model_len=kw.pop("max_model_len", 32768), **kw)
    return encoder_profile(spec(path), s, tokens, seqs)


def test_budget_and_items_as_vllm_computes_them():
    # Qwen2.5-VL: 12,845,056 max pixels / 28^2 = 16,384 tokens an image, over the 8,192
    # batched tokens: the budget is the image (the 16,384 of vllm#34209), one item
    p = profile(QWEN)
    assert (p.budget, p.items, p.tokens_per_item) == (16384, 1, 16384)
    assert p.log_line() == ("Encoder cache will be initialized with a budget of 16384 tokens, "
                            "and profiled with 1 image items of the maximum feature size.")
    # a larger step: the budget is max_num_batched_tokens, two images fit in it
    assert (profile(QWEN, tokens=40000).budget, profile(QWEN, tokens=40000).items) == (40000, 2)
    # LLaVA 1.5: 576 tokens an image, 8,192 // 576 = 14 images, 14 x 576 patch embeddings
    p = profile(LLAVA)
    assert (p.budget, p.items, p.patches) == (8192, 14, 14 * 577)
    assert p.outputs == 14 * 576 * 4096 * 2
    # the decoder's side: max_num_seqs x images a prompt (max_model_len // 576, the limit)
    assert profile(LLAVA, seqs=3, limit_mm_per_prompt='{"image": 2}').items == 6
    assert profile(LLAVA, seqs=3, max_model_len=1000).items == 3  # one image a prompt
    # chunked prefill off: max_num_seqs first cut to max_num_batched_tokens // 576
    assert profile(LLAVA, tokens=1200, seqs=100, chunked_prefill=False).items == 2
    # no images: no encoder profile ("Encoder cache will not be initialized")
    assert profile(QWEN, limit_mm_per_prompt="image=0") is None


def test_outputs_kept_at_budget_rows_in_0_11_and_0_12():
    """0.11.0-0.12: each dummy output is copied into zeros of (budget, width)."""
    assert profile(LLAVA, vllm_version="0.11.0").outputs == 14 * 8192 * 4096 * 2
    assert profile(LLAVA, vllm_version="0.12.0").outputs == 14 * 8192 * 4096 * 2
    for release in ("0.10.1.1", "0.13.0", "0.33.0"):
        assert profile(LLAVA, vllm_version=release).outputs == 14 * 576 * 4096 * 2
    # Qwen's single image fills the budget: nothing to expand
    assert profile(QWEN, vllm_version="0.11.0").outputs == 16384 * 3584 * 2


def test_the_profile_raises_the_peak_and_leaves_fewer_kv_tokens():
    vl, hw = spec(QWEN), load_hardware("h200")
    text = dataclasses.replace(vl, extra={k: v for k, v in vl.extra.items() if k != "image"})
    s = EngineSettings(max_model_len=32768)
    with_images, without = serving_capacity(vl, hw, s), serving_capacity(text, hw, s)
    p = with_images.encoder
    peak = activation_peak_bytes(vl, s, with_images.max_num_batched_tokens,
                                 with_images.max_num_seqs, True)[0]
    assert with_images.memory["activation_peak"] == max(peak + p.outputs, p.encoder_peak)
    assert with_images.memory["activation_peak"] > without.memory["activation_peak"]
    assert with_images.kv_cache_tokens < without.kv_cache_tokens
    assert any("Encoder cache will be initialized" in n for n in with_images.notes)
    # no images: the text model's peak again
    none = serving_capacity(vl, hw, EngineSettings(max_model_len=32768,
                                                   limit_mm_per_prompt='{"image": 0}'))
    assert none.memory == without.memory


def test_flag_spellings_and_refusals():
    assert parse_limit_mm_per_prompt('{"image": 2, "video": 0}') == {"image": 2, "video": 0}
    assert parse_limit_mm_per_prompt("image=2,video=0") == {"image": 2, "video": 0}
    assert parse_limit_mm_per_prompt('{"image": {"count": 3}}') == {"image": 3}
    for bad, why in [('{"image": {"count": 3}}', "0.11.2"), ("image", "JSON like"),
                     ('{"image": -1}', ">= 0"), ('{"pdf": 1}', "modality"),
                     ('{"image": {"count": 1, "width": 512}}', "width")]:
        with pytest.raises(KvcalcError, match=why):
            parse_limit_mm_per_prompt(bad, nested_ok=why != "0.11.2")
    with pytest.raises(KvcalcError, match="0.11.2"):
        profile(QWEN, vllm_version="0.10.1.1", limit_mm_per_prompt='{"image": {"count": 1}}')
    with pytest.raises(KvcalcError, match="text model"):
        encoder_profile(load_model("llama3.1-8b"),
                        EngineSettings(max_model_len=8192, limit_mm_per_prompt="image=1"),
                        8192, 256)
    with pytest.raises(KvcalcError, match="V1 engine"):
        profile(QWEN, vllm_version="0.6.4", engine="v0", limit_mm_per_prompt="image=1")


@pytest.mark.parametrize("engine, theirs", [("sglang", "--limit-mm-data-per-request"),
                                            ("tensorrt-llm", "no such flag")])
@pytest.mark.parametrize("command", ["estimate", "fit"])
def test_other_engines_refuse_the_flag_in_one_line(command, engine, theirs):
    r = CliRunner().invoke(app, [command, QWEN, "--gpu", "h200", "--engine", engine,
                                 "--limit-mm-per-prompt", '{"image": 2}'])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("kvcalc: error: --limit-mm-per-prompt is vLLM's flag")
    assert theirs in r.stderr


def test_fit_takes_the_flag_in_vllms_spelling():
    r = CliRunner().invoke(app, ["fit", QWEN, "--gpu", "h200", "--max-model-len", "32768",
                                 "--max-num-batched-tokens", "40000", "--limit-mm-per-prompt",
                                 '{"image": 3}', "--format", "json"])
    assert r.exit_code == 0, r.stderr
    assert "a budget of 40000 tokens, and profiled with 2 image items" in r.stdout


def test_plan_counts_the_flag_and_writes_it_in_the_serve_line():
    r = CliRunner().invoke(app, ["plan", QWEN, "--gpu", "h100-sxm", "--gpus", "1",
                                 "--max-model-len", "32768", "--limit-mm-per-prompt",
                                 '{"image": 2}'])
    assert r.exit_code == 0, r.stderr
    assert "--limit-mm-per-prompt '{\"image\": 2}'" in r.stdout
    r = CliRunner().invoke(app, ["plan", QWEN, "--gpu", "h100-sxm", "--gpus", "1",
                                 "--engine", "sglang", "--limit-mm-per-prompt", "image=2"])
    assert r.exit_code == 2 and "--limit-mm-data-per-request" in r.stderr


def test_mm_encoder_tp_mode_data_keeps_the_tower_whole_and_splits_the_images():
    vl, hw = spec(QWEN), load_hardware("h100-sxm")
    base = dict(max_model_len=32768, tp=2, max_num_batched_tokens=65536)
    split = serving_capacity(vl, hw, EngineSettings(**base))
    data = serving_capacity(vl, hw, EngineSettings(**base, mm_encoder_tp_mode="data"))
    towers = sum(vl.extra["towers"].values())
    assert data.memory["weights"] - split.memory["weights"] == 2 * towers - 2 * -(-towers // 2)
    # four images of 65,536 patches: all four a rank, MLP halved; or two a rank, MLP whole
    assert (split.encoder.items, split.encoder.patches) == (4, 4 * 65536)
    assert data.encoder.patches == 2 * 65536
    # one device: nothing to split; LLaVA's class has no data mode (vLLM falls back)
    one = dict(max_model_len=4096)
    assert (serving_capacity(vl, hw, EngineSettings(**one, mm_encoder_tp_mode="data")).memory
            == serving_capacity(vl, hw, EngineSettings(**one)).memory)
    llava = spec(LLAVA)
    assert (serving_capacity(llava, hw, EngineSettings(**one, tp=2, mm_encoder_tp_mode="data"))
            .memory == serving_capacity(llava, hw, EngineSettings(**one, tp=2)).memory)
    with pytest.raises(KvcalcError, match="0.10.2"):
        serving_capacity(vl, hw, EngineSettings(**base, mm_encoder_tp_mode="data",
                                                vllm_version="0.10.1.1"))
    r = CliRunner().invoke(app, ["fit", QWEN, "--gpu", "h100-sxm", "--engine", "sglang",
                                 "--mm-encoder-tp-mode", "data"])
    assert r.exit_code == 2 and "--mm-enable-dp-encoder" in r.stderr


# The multimodal lines of a V1 start-up log in the engine's own words (the format of
# vLLM 0.20's `gpu_model_runner.py::profile_run` and `api_utils` non-default args line),
# with the settings of the Qwen2.5-VL-7B count above; the memory figures are not from a
# run (the public log at the end of this file prints no activation peak): the test reads
# the lines and sets kvcalc's count beside them.
LOG = """\
(APIServer pid=1) INFO 05-01 21:11:07 [utils.py:233] non-default args: {'model': 'Qwen/Qwen2.5-VL-7B-Instruct', 'max_model_len': 32768, 'max_num_batched_tokens': 40000, 'limit_mm_per_prompt': {'image': 3}}
(EngineCore pid=187) INFO 05-01 21:11:40 [core.py:109] Initializing a V1 LLM engine (v0.20.0) with config: model='Qwen/Qwen2.5-VL-7B-Instruct'
(EngineCore pid=187) INFO 05-01 21:12:23 [gpu_model_runner.py:4879] Model loading took 15.48 GiB memory and 26.342570 seconds
(EngineCore pid=187) INFO 05-01 21:12:23 [gpu_model_runner.py:5820] Encoder cache will be initialized with a budget of 40000 tokens, and profiled with 2 image items of the maximum feature size.
"""


def test_check_reads_the_encoder_line_and_sets_kvcalcs_beside_it():
    from kvcalc.serving.vllm.check import check_log
    from kvcalc.serving.vllm.log import parse_vllm_log

    log = parse_vllm_log(LOG)
    assert (log.encoder_budget, log.encoder_items) == (40000, 2)
    assert log.flags["limit_mm_per_prompt"] == '{"image": 3}'
    got = check_log(log, spec(QWEN), load_hardware("h200"))
    assert got.settings.limit_mm_per_prompt == '{"image": 3}'
    counts = {t.name: (t.logged, t.kvcalc) for t in got.counts}
    assert counts["encoder_budget"] == (40000, 40000)
    assert counts["encoder_items"] == (2, 2)


def test_a_public_multimodal_start_up_log_budget_items_and_tokens():
    """QwenLM/Qwen3-VL#1057 (tests/data/vllm/qwen25-vl-7b-h100-0.8.2-qwenvl1057.yaml):
    Qwen2.5-VL-7B on one H100 SXM, vLLM 0.8.2, the README's LLM(...): the budget and the
    images profiled as logged, exactly; the KV cache tokens and the weights within the
    capacity tests' bands (5%, 0.5 GiB), and `kvcalc check` sets its own beside each."""
    import yamlload

    from kvcalc.serving.vllm.check import check_log
    from kvcalc.serving.vllm.log import GiB, parse_vllm_log

    case = yamlload.safe_load((Path(__file__).parent / "data" / "vllm"
                           / "qwen25-vl-7b-h100-0.8.2-qwenvl1057.yaml").read_text())
    want, log = case["logged"], parse_vllm_log(case["log"])
    assert (log.encoder_budget, log.encoder_items) == (want["encoder_cache_budget_tokens"],
                                                       want["encoder_profiled_items"])
    s = EngineSettings(vllm_version=case["vllm_version"], **case["settings"])
    cap = serving_capacity(spec(QWEN), load_hardware(case["gpu"]), s)
    assert any(f"a budget of {want['encoder_cache_budget_tokens']} tokens, and profiled with "
               f"{want['encoder_profiled_items']} image items" in n for n in cap.notes)
    assert cap.kv_cache_tokens == pytest.approx(want["kv_cache_tokens"], rel=0.05)
    assert abs(cap.deciding.weights - want["weights_gib"] * GiB) <= GiB // 2
    got = check_log(log, spec(QWEN), load_hardware(case["gpu"]),
                    vllm_version=case["vllm_version"])  # 0.8.2 prints no version line
    counts = {t.name: (t.logged, t.kvcalc) for t in got.counts}
    assert counts["encoder_budget"] == (16384, 16384)
    assert counts["encoder_items"] == (1, 1)
