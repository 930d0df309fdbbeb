"""kvcalc.plan and `kvcalc plan`: the search by hand arithmetic, and every printed
`vllm serve` line counted again by kvcalc's own engine count (vLLM's own parser reads
them in tests/test_plan_vllm.py, the opt-in vLLM tier).

Truth by hand, from the published configs (presets/hf): Llama-3.1-8B has 8,030,261,248
parameters (16.06 GB in bf16), 32 layers of 8 K/V heads of 128: a token's K and V are
32 x 8 x 128 x 2 = 65,536 elements, 128 KiB in bf16 and 64 KiB in fp8, so one request of
32,768 tokens needs 4 GiB (bf16) or 2 GiB (fp8). Llama-3.1-405B's 405,853,388,800
parameters are 811.7 GB in bf16, 34 times an RTX 4090's 24 GB.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.vllm.capacity import serving_capacity
from kvcalc.cli import app
from kvcalc.engines import load_engine
from kvcalc.errors import flag_of
from kvcalc.plan import NothingFits, plan, pp_sizes, tp_sizes
from kvcalc.presets import load_hardware, load_model

ROOT = Path(__file__).resolve().parent.parent
GB = 10**9
GiB = 1 << 30
VLLM = load_engine("vllm")[0]

# The issue's questions (issue 22), and a few more kinds: MoE, MLA, sliding windows,
# attention-free, a hybrid on a small card, --max-model-len auto.
PLANS = [
    ("llama3.1-8b", "h100-sxm", 1, "32768"),
    ("llama3.3-70b", "h100-sxm", 8, "32768"),
    ("qwen3-next-80b-a3b", "h200", 4, "131072"),
    ("gpt-oss-120b", "h100-sxm", 2, "131072"),
    ("deepseek-r1", "h200", 8, "32768"),
    ("gemma3-27b", "l40s", 2, "32768"),
    ("mamba-2.8b", "l4", 1, "32768"),
    ("jamba-1.5-mini", "h100-sxm", 2, "auto"),
    ("llama3.1-8b", "rtx4090", 1, "auto"),
]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def _plan(preset, gpu, gpus, length, **kw):
    return plan(load_model(preset), load_hardware(gpu), gpus=gpus,
                max_model_len=length if length == "auto" else int(length), engine=VLLM, **kw)


def _flags(command: str) -> tuple[str, dict[str, str]]:
    """MODEL and the flags of a `vllm serve MODEL --flag value ...` line."""
    words = shlex.split(command)
    assert words[:2] == ["vllm", "serve"], command
    pairs = words[3:]
    assert len(pairs) % 2 == 0 and all(f.startswith("--") for f in pairs[::2]), command
    flags = dict(zip(pairs[::2], pairs[1::2]))
    assert len(flags) == len(pairs) // 2, f"a flag twice: {command}"
    return words[2], flags


ALLOWED = {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
           "--max-model-len", "--gpu-memory-utilization", "--max-num-seqs",
           "--max-num-batched-tokens", "--kv-cache-dtype"}


# --------------------------------------------------------------------------------
# By hand
# --------------------------------------------------------------------------------
def test_a_layout_that_fits_is_kept_with_the_batch_memory_allows():
    """8B on one H100 at 32K: the 79.22 GiB the driver shows (the preset's, from vLLM's
    logs) x 0.9-0.95, less 16.06 GB = 14.96 GiB of weights, leaves 56.3-60.3 GiB; after
    activations, graphs and the CUDA context (under 6 GiB) the fp8 cache holds from
    (56.3 - 6) / 2 = 25 to 60.3 / 2 = 30 requests of 2 GiB."""
    p = _plan("llama3.1-8b", "h100-sxm", 1, "32768")
    b = p.best
    assert (b.tp, b.pp, b.replicas, b.kv_dtype) == (1, 1, 1, "fp8")
    assert 25 <= b.max_num_seqs <= 30
    model, flags = _flags(p.command)
    assert model == "meta-llama/Llama-3.1-8B"  # the preset's Hub id
    assert flags["--max-model-len"] == "32768" and flags["--kv-cache-dtype"] == "fp8"
    assert flags["--max-num-seqs"] == str(b.max_num_seqs)


def test_a_layout_that_does_not_fit_is_dropped_and_nothing_fitting_is_exit_1():
    """405B's 811.7 GB of weights on one 24 GB card: no layout, and the line says how far."""
    with pytest.raises(NothingFits) as e:
        _plan("llama3.1-405b", "rtx4090", 1, "8192")
    assert "closest" in str(e.value) and "over its" in str(e.value)
    r = run("plan", "--preset", "llama3.1-405b", "--gpu", "rtx4090", "--gpus", "1",
            "--max-model-len", "8192")
    assert r.exit_code == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: no layout of up to 1 x rtx4090")
    assert r.stdout == ""


def test_bf16_cache_is_dropped_where_only_fp8_holds_one_request():
    """8B on a 24 GB RTX 4090 at 128K: 16.06 GB of weights leave under 6 GB, less than
    the 16 GiB one bf16 request of 131,072 tokens needs, and less than fp8's 8 GiB too;
    at 64K fp8 needs 4 GiB, bf16 8 GiB: only fp8 layouts may be kept."""
    with pytest.raises(NothingFits):
        _plan("llama3.1-8b", "rtx4090", 1, "131072")
    p = _plan("llama3.1-8b", "rtx4090", 1, "65536")
    assert {x.kv_dtype for x in p.front} == {"fp8"}


def test_ranking_by_hand_one_gpu_at_a_larger_batch_beats_tensor_parallel():
    """8B, 2 H100s, 2 requests at 32K in fp8. Decode is memory-bound: a step reads the
    weights once and each request's cache. tp 1 with both requests: 16.06 + 2 x 2.15 =
    20.4 GB per step for 2 tokens on 1 GPU; two replicas of 1 request: 18.2 GB for 1
    token per GPU; tp 2: 10.2 GB per GPU per step for 2 tokens on 2 GPUs plus two
    all-reduces per layer. Tokens per GB read per GPU: 2/20.4 = 0.098 > 1/18.2 = 0.055,
    and tp 2's 1/10.2 = 0.098 less its all-reduce time. So tp 1 at batch 2 is best per
    GPU; tp 2 is fastest per user (half the bytes per GPU per step)."""
    p = _plan("llama3.1-8b", "h100-sxm", 2, "32768", concurrency=2)
    assert (p.best.tp, p.best.replicas, p.best.max_num_seqs) == (1, 1, 2)
    fastest = p.front[0]
    assert fastest.tp == 2
    assert fastest.tpot_s < p.best.tpot_s
    # The front: faster per user, slower per GPU, row after row.
    for a, b in zip(p.front, p.front[1:]):
        assert a.tokens_per_s_per_user > b.tokens_per_s_per_user
        assert a.tokens_per_s_per_gpu < b.tokens_per_s_per_gpu


def test_latency_targets_drop_the_layouts_that_miss_them():
    """At 32K a prompt's prefill on one H100 takes seconds (32,640 tokens x 2 x 8e9
    FLOPs = 5.2e14 FLOPs at under 1e15 FLOP/s): a 100 ms TTFT target keeps nothing."""
    with pytest.raises(NothingFits) as e:
        _plan("llama3.1-8b", "h100-sxm", 1, "32768", ttft_s=0.1)
    assert "no layout meets ttft_ms even" in str(e.value)  # the parameter; the command:
    assert "no layout meets --ttft-ms even" in e.value.worded(flag_of)  # its flag
    loose = _plan("llama3.1-8b", "h100-sxm", 1, "32768")
    tight = _plan("llama3.1-8b", "h100-sxm", 1, "32768", tpot_s=loose.best.tpot_s / 2)
    # The loose best misses the tighter target: another layout (a smaller batch, or a
    # smaller step that interleaves less prefill with each decode) takes its place, and
    # none is faster per GPU than the one the loose plan found among all of them.
    assert tight.best.tpot_s <= loose.best.tpot_s / 2 < loose.best.tpot_s
    assert tight.best.tokens_per_s_per_gpu <= loose.best.tokens_per_s_per_gpu
    assert all(x.tpot_s <= loose.best.tpot_s / 2 for x in tight.front)


def test_tensor_parallel_sizes_are_the_ones_vllm_accepts():
    """Heads divisible by tp; K/V heads divisible by tp or tp by them (vLLM's QKV split)."""
    llama = load_model("llama3.1-8b")  # 32 heads, 8 K/V heads
    assert tp_sizes(llama, 8) == [1, 2, 4, 8]
    assert tp_sizes(llama, 64) == [1, 2, 4, 8, 16, 32]
    assert tp_sizes(load_model("qwen2-7b"), 8) == [1, 2, 4]  # 28 heads, 4 K/V heads
    assert pp_sizes(llama, 8) == [1, 2, 4, 8]


# --------------------------------------------------------------------------------
# Every printed line, counted again
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("preset,gpu,gpus,length", PLANS)
def test_printed_settings_start_with_the_promised_concurrency(preset, gpu, gpus, length):
    """Each front row's `vllm serve` flags, read back from the line and counted by
    kvcalc.serving.vllm.capacity (the engine count): it starts, and holds --max-num-seqs
    requests of --max-model-len at once; a state model's pool has a block for each
    (vLLM refuses max_num_seqs above it)."""
    from kvcalc.plan import serve_command

    p = _plan(preset, gpu, gpus, length)
    spec, hw = load_model(preset), load_hardware(gpu)
    for x in p.front:
        command = p.command if x == p.best else serve_command("m", x)
        _, flags = _flags(command)
        assert set(flags) <= ALLOWED, command
        tp, pp = int(flags["--tensor-parallel-size"]), int(flags["--pipeline-parallel-size"])
        replicas = int(flags.get("--data-parallel-size", "1"))
        assert tp * pp * replicas <= gpus
        tokens = flags.get("--max-num-batched-tokens")
        cap = serving_capacity(spec, hw, EngineSettings(
            max_model_len=int(flags["--max-model-len"]), tp=tp, pp=pp,
            gpu_memory_utilization=flags["--gpu-memory-utilization"],
            max_num_seqs=int(flags["--max-num-seqs"]),
            max_num_batched_tokens=None if tokens is None else int(tokens),
            kv_dtype=flags.get("--kv-cache-dtype", "auto")))
        seqs = int(flags["--max-num-seqs"])
        assert cap.fits, (command, cap.refusal)
        assert cap.max_concurrency >= seqs, command
        assert cap.max_num_batched_tokens >= seqs  # vLLM's SchedulerConfig check
        if any(g.group.state_bytes for g in cap.groups):
            assert cap.num_gpu_blocks >= seqs, command


def test_the_issue_questions_answer_in_seconds():
    """Each pp = 1 layout is timed by kvcalc bench's served run (tests/test_plan_served.py):
    about 1.2 s of CPU here (0.2 s with one decode step per layout), CPU time so
    that a busy host does not fail it."""
    import time

    start = time.process_time()
    p = _plan("llama3.3-70b", "h100-sxm", 8, "32768")
    assert time.process_time() - start < 6
    assert p.searched >= 300
    wide = _plan("llama3.3-70b", "h100-sxm", 64, "32768", concurrency=500)
    assert wide.searched >= 1000


def test_preset_without_a_hub_id_says_so():
    p = _plan("gpt3", "h100-sxm", 8, "2048")
    model, _ = _flags(p.command)
    assert model == "gpt3"
    assert any("no Hugging Face id" in n for n in p.notes)


# --------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------
def test_cli_json_has_layouts_and_best_with_its_command():
    r = run("plan", "--preset", "llama3.3-70b", "--gpu", "h100-sxm", "--gpus", "8",
            "--max-model-len", "32k", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["layouts"] and out["best"]["command"].startswith(
        "vllm serve meta-llama/Llama-3.3-70B-Instruct ")
    assert "--max-model-len 32000" in out["best"]["command"]  # 32k = 32,000, as vLLM reads it
    assert out["best"]["tokens_per_s_per_gpu"] == max(
        x["tokens_per_s_per_gpu"] for x in out["layouts"])


def test_cli_table_prints_the_command_whole_on_one_line():
    r = run("plan", "--preset", "llama3.1-8b", "--max-model-len", "32768")
    assert r.exit_code == 0, r.output
    line = [x for x in r.stdout.splitlines() if x.startswith("vllm serve ")]
    assert len(line) == 1 and line[0].endswith("--kv-cache-dtype fp8")
    md = run("plan", "--preset", "llama3.1-8b", "--max-model-len", "32768", "--format", "md")
    assert "```\nvllm serve meta-llama/Llama-3.1-8B " in md.stdout


@pytest.mark.parametrize("args,message", [
    (["--gpus", "0"], "gpus must be positive"),
    (["--max-model-len", "x"], "--max-model-len expects a whole number of tokens"),
    (["--engine", "llama.cpp"], "--engine llama.cpp: plan counts vllm, sglang, tensorrt-llm"),
    (["--prompt-len", "40000", "--output-len", "100", "--max-model-len", "32768"],
     "is over --max-model-len 32,768"),
    (["--tpot-ms", "-1"], "--tpot-ms must be a positive number"),
    (["--gpu", "none"], "plan needs a device"),
    (["--vllm-version", "0.6.4"], "plan follows vLLM's V1 engine"),
    (["--vllm-version", "1.2"], "vllm_version must look like 0.MINOR"),
    (["--plot", "x.gif"], "--plot x.gif: use a .png, .svg or .pdf file name"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message):
    r = run("plan", "--preset", "llama3.1-8b", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("kvcalc: error: ") and message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_cli_plot_draws_the_front(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plan.png"
    r = run("plan", "--preset", "llama3.1-8b", "--max-model-len", "32768", "--plot", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_starts_without_the_heavy_libraries():
    """`python -X importtime -m kvcalc plan ...`: no numpy, pandas, torch or matplotlib."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvcalc", "plan",
                        "--preset", "llama3.1-8b", "--max-model-len", "32768", "--format",
                        "json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert json.loads(r.stdout)["best"]["command"]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"numpy", "pandas", "torch", "matplotlib"}


def test_concurrency_caps_the_requests_in_flight():
    """10 users on up to 8 H100s: the 8B's best is one GPU running all 10 (the weights
    read once per step serve 10 tokens; more replicas would each run emptier)."""
    p = _plan("llama3.1-8b", "h100-sxm", 8, "32768", concurrency=10)
    assert (p.best.tp, p.best.pp, p.best.replicas, p.best.max_num_seqs) == (1, 1, 1, 10)
    assert all(x.requests <= 10 for x in p.front)
    assert "--data-parallel-size" not in p.command


def test_the_served_name_is_what_the_user_typed_for_a_hub_id_or_folder(tmp_path):
    from kvcalc.cli.options import ModelRequest
    from kvcalc.cli.plan import _served_name

    def name(model):
        return _served_name(ModelRequest(None, None, None, None, None, None, None, None,
                                         None, None, model=model))

    assert name("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert name(str(tmp_path)) == str(tmp_path)  # a folder: vllm serve takes its path
    assert name("llama3.1-8b") is None  # a preset: its own Hub id
    config = ROOT / "tests" / "data" / "hf" / "meta-llama__Llama-2-7b-hf.json"
    assert name(str(config)) is None
    r = run("plan", str(config), "--max-model-len", "4096", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert any("no Hugging Face id" in n for n in out["notes"])


def test_a_model_folder_is_planned_and_served_by_its_path(tmp_path):
    """A folder's weights are read as stored (its safetensors headers); the line serves
    the folder. (--engine on such weights once failed on the stored-weights record.)"""
    import hubcache
    from kvcalc.presets import presets_dir

    cfg = json.loads((presets_dir() / "hf" / "Qwen__Qwen3-0.6B.json").read_text())
    folder = hubcache.model_folder(tmp_path / "Qwen3-0.6B", cfg,
                                   {"model.safetensors": hubcache.qwen3_tensors(cfg)})
    r = run("plan", str(folder), "--gpu", "l4", "--max-model-len", "8192", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["best"]["command"].startswith(f"vllm serve {folder} ")
    est = run("estimate", str(folder), "--gpu", "l4", "--engine", "vllm", "--format", "json")
    assert est.exit_code == 0, est.output


def test_a_model_no_vllm_release_serves_is_one_line(tmp_path):
    """RWKV's state has no vLLM page rule (no release serves it): no layout to count."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "rwkv", "hidden_size": 2048,
                               "num_hidden_layers": 24, "vocab_size": 50277}))
    r = CliRunner().invoke(app, ["plan", str(cfg), "--gpu", "l4", "--max-model-len", "4096"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "kvcalc: error: vLLM pages no rwkv state (no release read serves such a model): plan "
        "has no layout to count"]


# --------------------------------------------------------------------------------
# --calibration: the measured terms for the layouts of the log's tp and pp only
# --------------------------------------------------------------------------------
def _tp2_calibration(tmp_path: Path) -> Path:
    """`kvcalc check` of a public log of Qwen2-7B-Instruct served with `-tp 2` on two
    A100 80GB (vLLM 0.10.1.1, tests/data/vllm): its weights per device, 7.1217 GiB."""
    import yamlload

    case = yamlload.safe_load((ROOT / "tests" / "data" / "vllm" /
                           "qwen2-7b-2xa100-tp2-0.5-dl.yaml").read_text())
    log = tmp_path / "tp2.log"
    log.write_text(case["log"])
    out = tmp_path / "tp2.yaml"
    r = run("check", str(log), "qwen2-7b", "--gpu", "a100-80gb", "-o", str(out))
    assert r.exit_code == 0, r.output
    return out


def test_calibration_prices_only_the_layouts_of_its_tp_and_pp(tmp_path):
    cal = _tp2_calibration(tmp_path)
    where = ["--preset", "qwen2-7b", "--gpu", "a100-80gb", "--max-model-len", "16384"]
    r = run("plan", *where, "--gpus", "2", "--calibration", str(cal), "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    rows = out["layouts"] + [out["best"]]
    assert {(x["tp"], x["pp"]) for x in rows} >= {(2, 1)}
    for x in rows:  # the log ran -tp 2 (and no pipeline): those layouts and no others
        assert x["calibrated"] is ((x["tp"], x["pp"]) == (2, 1)), x
    c = out["calibration"]
    assert (c["tp"], c["pp"], c["gpu"], c["vllm_version"]) == (2, 1, "a100-80gb", "0.10.1.1")
    assert c["calibrated_layouts"] >= 1 and c["other_layouts"] >= 1
    assert out["vllm_version"] == "0.10.1.1"  # the file's release, none given
    note = [line for line in r.stderr.splitlines() if line.startswith("kvcalc: note:")]
    assert len(note) == 1 and f"priced the {c['calibrated_layouts']:,} layouts of tp=2 pp=1" \
        in note[0] and f"the other {c['other_layouts']:,} by kvcalc's models" in note[0]
    # A calibrated layout is fit --calibration's count of the same command; the log's
    # weights stand in for kvcalc's (fit's JSON shows them: tests/test_check.py).
    for x in rows:
        if not x["calibrated"] or x["replicas"] != 1:
            continue
        fit = run("fit", *where, "--tp", "2", "--calibration", str(cal),
                  "--gpu-memory-utilization", str(x["gpu_memory_utilization"]),
                  "--max-num-seqs", str(x["max_num_seqs"]), "--format", "json",
                  "--max-num-batched-tokens", str(x["max_num_batched_tokens"]),
                  *(["--kv-dtype", "fp8"] if x["kv_cache_dtype"] == "fp8" else []))
        assert fit.exit_code == 0, fit.output
        assert json.loads(fit.stdout)["num_gpu_blocks"] == x["num_gpu_blocks"], x
        break
    else:
        pytest.fail("no single-replica calibrated layout in the front")


def test_calibration_for_a_layout_not_searched_changes_nothing_but_the_notes(tmp_path):
    """On one GPU no layout is tp 2: every layout is priced as without the file (its
    release given instead), and the note says none was calibrated."""
    cal = _tp2_calibration(tmp_path)
    where = ["--preset", "qwen2-7b", "--gpu", "a100-80gb", "--gpus", "1", "--max-model-len",
             "16384", "--format", "json"]
    with_file = run("plan", *where, "--calibration", str(cal))
    plain = run("plan", *where, "--vllm-version", "0.10.1.1")
    assert with_file.exit_code == plain.exit_code == 0, with_file.output
    a, b = json.loads(with_file.stdout), json.loads(plain.stdout)
    assert a["calibration"]["calibrated_layouts"] == 0
    assert "no layout kept is tp=2 pp=1" in with_file.stderr
    assert a["layouts"] == b["layouts"] and a["best"] == b["best"]
    assert a["notes"] == b["notes"] + [a["calibration"]["note"]]


def test_calibration_for_another_gpu_or_model_is_one_line(tmp_path):
    cal = _tp2_calibration(tmp_path)
    for args, words in [(["--preset", "qwen2-7b", "--gpu", "h100-sxm"], "learnt on a100-80gb"),
                        (["--preset", "llama3.1-8b", "--gpu", "a100-80gb"], "not llama3.1-8b")]:
        r = run("plan", *args, "--gpus", "2", "--calibration", str(cal))
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith("kvcalc: error: --calibration") and words in r.stderr
