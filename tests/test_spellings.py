"""What users type: 32k and 128K tokens, 2G bytes, GPU names in any case, awq/gptq
weights, and attention-free models shown as what they are (issue 24, point 9).

The suffix rule is vLLM's `human_readable_int` (vllm/engine/arg_utils.py, later
vllm/utils/argparse_utils.py), which vLLM applies to --max-model-len,
--max-num-batched-tokens and --kv-cache-memory-bytes: lowercase k/m/g/t are 10^3,
10^6, 10^9, 10^12 and take decimals ('25.6k' -> 25,600 is its own docstring's
example); uppercase K/M/G/T are 2^10, 2^20, 2^30, 2^40 and take whole numbers only
('1K' -> 1,024). Every expected integer below is that rule worked by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc import presets
from kvcalc.cli.options import parse_size
from kvcalc.errors import KvcalcError
from kvcalc.presets import load_hardware, load_model
from kvcalc.quant.formats import Quantization, adhoc
from kvcalc.quant.weights import weight_bytes
from kvcalc.ground.dtypes import weight_dtype
from kvcalc.spec import ModelSpec
from kvcalc.sweep.grammar import parse_spec
from kvcalc.ground.units import count

ROOT = Path(__file__).resolve().parent.parent


def kvcalc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


# --- token counts --------------------------------------------------------------------
@pytest.mark.parametrize("text, tokens", [
    ("32k", 32_000), ("32K", 32_768), ("128k", 128_000), ("128K", 131_072),
    ("1m", 1_000_000), ("1M", 1_048_576), ("25.6k", 25_600), ("0.5k", 500),
    ("1.5m", 1_500_000), ("2g", 2_000_000_000), ("1G", 1_073_741_824),
    ("1t", 1_000_000_000_000), ("1T", 1_099_511_627_776),
    ("4096", 4096), (" 8_192 ", 8192), ("+16", 16),
])
def test_token_counts_read_as_vllm_reads_them(text, tokens):
    assert count(text, "--seq-len") == tokens


def test_vllm_float_reading_is_what_the_refusal_says():
    # vLLM's int(float('32.3') * 1000): the reason kvcalc refuses 32.3k below.
    assert int(float("32.3") * 1000) == 32_299


@pytest.mark.parametrize("text, message", [
    ("1.5K", "an uppercase K (x 1,024) takes a whole number, as in vLLM; write 1.5k"),
    ("1.0005k", "is 1,000.5 tokens: not a whole number of tokens"),
    ("32.3k", "vLLM's floating-point arithmetic reads this as 32,299, not 32,300"),
    ("32 k", "expects a whole number of tokens, e.g. 32768, 32k (= 32,000) or 32K"),
    ("32kb", "expects a whole number of tokens"),
    ("k", "expects a whole number of tokens"),
    ("1e3k", "expects a whole number of tokens"),
    ("-1k", "expects a whole number of tokens"),
    ("9" * 31 + "k", "is absurdly large"),
])
def test_token_count_refusals(text, message):
    with pytest.raises(KvcalcError, match="^--seq-len") as e:
        count(text, "--seq-len")
    assert message in str(e.value)


def test_sweep_specs_take_suffixes_for_tokens_and_sequences_only():
    assert parse_spec("1k:8k:*2", "--seq-len").values() == [1000, 2000, 4000, 8000]
    assert parse_spec("1K:8K:*2", "--seq-len").values() == [1024, 2048, 4096, 8192]
    assert parse_spec("1k,2K", "--seq-len").values() == [1000, 2048]
    lin = parse_spec("4k:16k:+4k", "--seq-len")
    assert (lin.start, lin.step, lin.count) == (4000, 4000, 4)
    assert parse_spec("1,1K", "--batch").values() == [1, 1024]
    with pytest.raises(KvcalcError, match="'2k' is not a whole number"):
        parse_spec("1k:4k:*2k", "--seq-len")  # a factor is a plain number
    with pytest.raises(KvcalcError, match="'8K' is not a whole number"):
        parse_spec("8K", "--kv-heads")  # heads are not token counts
    with pytest.raises(KvcalcError, match="1.5K: an uppercase K"):
        parse_spec("1k:1.5K:+1", "--seq-len")
    with pytest.raises(KvcalcError, match="the value must be positive, got 0"):
        parse_spec("0k", "--seq-len")


# --- sizes in bytes ----------------------------------------------------------------
@pytest.mark.parametrize("text, nbytes", [
    ("2G", 2 * 2**30), ("2g", 2_000_000_000), ("2GB", 2_000_000_000), ("2gb", 2_000_000_000),
    ("2GiB", 2_147_483_648), ("512M", 536_870_912), ("512m", 512_000_000),
    ("512MiB", 536_870_912), ("1.5g", 1_500_000_000), ("3K", 3072), ("3k", 3000),
    ("1T", 2**40), ("1t", 10**12), ("1.5GiB", 1_610_612_736), ("1e9", 10**9),
])
def test_sizes_single_letters_as_vllm_kv_cache_memory_bytes(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text, message", [
    ("1.5G", "an uppercase G (x 1,073,741,824) takes a whole number, as in vLLM; write 1.5g "
             "for x 1,000,000,000 or 1.5GiB"),
    ("2 G", "a one-letter unit follows the digits directly"),
    ("1e3K", "a one-letter unit follows the digits directly"),
    ("1.0005k", "is 1,000.5 bytes: not a whole number of bytes"),
    ("2Q", "cannot read size '2Q'"),
    ("2000000000T", "absurdly large (limit 1 EiB)"),
])
def test_size_refusals(text, message):
    with pytest.raises(KvcalcError, match="^--reserve") as e:
        parse_size(text)
    assert message in str(e.value)


# --- the command line ----------------------------------------------------------------
def test_cli_reads_suffixed_counts():
    r = kvcalc("estimate", "--preset", "llama3-8b", "--seq-len", "32k", "--batch", "2",
               "--gpu", "none", "--format", "json")
    out = json.loads(r.stdout)
    assert (out["inputs"]["seq_len"], out["inputs"]["batch"]) == (32_000, 2)
    assert out["kv_cache_bytes"] == 131_072 * 32_000 * 2  # 2 x 32 layers x 8 x 128 x 2 B
    r = kvcalc("estimate", "--preset", "llama3-8b", "--seq-len", "8K", "--prompt-len", "2k",
               "--format", "json")
    out = json.loads(r.stdout)
    assert (out["inputs"]["seq_len"], out["latency"]["prompt_len"]) == (8192, 2000)
    r = kvcalc("fit", "--preset", "llama3.1-8b", "--max-model-len", "128K",
               "--max-num-batched-tokens", "8K", "--format", "json")
    out = json.loads(r.stdout)
    assert (out["max_model_len"], out["max_num_batched_tokens"]) == (131_072, 8192)
    r = kvcalc("sweep", "--preset", "llama3-8b", "--seq-len", "1k:4k:*2", "--gpu", "none")
    assert [line.split(",")[6] for line in r.stdout.splitlines()[1:]] == ["1000", "2000", "4000"]


def test_cli_reserve_2G_is_2GiB_and_2g_is_2GB():
    def free(reserve: str) -> int:
        r = kvcalc("estimate", "--preset", "llama3-8b", "--gpu", "rtx4090", "--reserve", reserve,
                   "--format", "json")
        return json.loads(r.stdout)["fit"]["free_for_kv_bytes_per_device"]

    # RTX 4090: 24 GiB = 25,769,803,776 B; llama3-8b's bf16 weights 16,060,522,496 B.
    assert free("2G") == free("2GiB") == 25_769_803_776 - 16_060_522_496 - 2_147_483_648
    assert free("2g") == 25_769_803_776 - 16_060_522_496 - 2_000_000_000


@pytest.mark.parametrize("args, message", [
    (["estimate", "--preset", "gpt3", "--seq-len", "1.5K"], "--seq-len '1.5K': an uppercase K"),
    (["estimate", "--preset", "gpt3", "--seq-len", "32.3k"], "reads this as 32,299, not 32,300"),
    (["estimate", "--preset", "gpt3", "--seq-len", "9" * 5000 + "k"], "absurdly large"),
    (["estimate", "--preset", "gpt3", "--batch", "2x"], "--batch expects a whole number of "
                                                        "sequences"),
    (["fit", "--preset", "gpt3", "--max-model-len", "12x"], "--max-model-len expects a whole "
                                                            "number of tokens"),
    (["fit", "--preset", "gpt3", "--reserve", "1.5G"], "--reserve '1.5G': an uppercase G"),
    (["fit", "--preset", "gpt3", "--reserve", "2 G"], "a one-letter unit follows the digits"),
    (["estimate", "--preset", "gpt3", "--weight-dtype", "awqq"],
     "unknown dtype 'awqq' for weights; choose one of: fp32, bf16, fp16, fp8, int8, int4, awq, "
     "gptq"),
    (["estimate", "--preset", "gpt3", "--gpu", "H100"],
     "unknown hardware preset 'H100'; did you mean: h100-pcie, h100-sxm?"),
    (["estimate", "--preset", "gpt3", "--gpu", "h10O-sxm"], "did you mean: h100-sxm"),
    (["estimate", "--preset", "mamba-2.8b", "--compare"],
     "mamba-2.8b has no attention (Mamba layers only); --compare needs"),
    (["estimate", "--preset", "mamba-2.8b", "--kv-heads", "1"],
     "--heads, --kv-heads and --head-dim do not apply"),
    (["sweep", "--preset", "falcon-mamba-7b", "--kv-heads", "1,2"], "no K/V heads to sweep"),
], ids=lambda a: " ".join(a)[:60] if isinstance(a, list) else None)
def test_refusals_are_one_line_in_kvcalcs_words(args, message):
    r = kvcalc(*args)
    assert (r.returncode, r.stdout) == (2, "")
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), r.stderr
    assert message in lines[0] and len(lines[0]) < 300  # long input is not echoed


# --- hardware and model names ----------------------------------------------------------
@pytest.mark.parametrize("text, stem", [
    ("H100-SXM", "h100-sxm"), ("h100-SXM", "h100-sxm"), ("H100 SXM", "h100-sxm"),
    ("h100_sxm", "h100-sxm"), ("RTX 4090", "rtx4090"), ("rtx6000 ADA", "rtx6000-ada"),
    ("MI300X", "mi300x"), (" H200 ", "h200"),
])
def test_gpu_names_match_without_case_or_separators(text, stem):
    assert load_hardware(text).name == stem


def test_model_names_match_without_case_or_separators():
    assert load_model("Llama3-8B").name == load_model("llama3 8b").name == "llama3-8b"
    assert load_model("MAMBA_2.8B").name == "mamba-2.8b"


def test_a_family_name_is_not_guessed():
    with pytest.raises(KvcalcError, match=r"did you mean: a100-40gb, a100-80gb\? \(2 presets"):
        load_hardware("A100")
    with pytest.raises(KvcalcError, match=r"did you mean: .*llama3-8b"):
        load_model("llama3")


def test_loose_names_are_unique_among_presets():
    for names in (presets.model_names(), presets.hardware_names()):
        loose = [presets._loose(n) for n in names]
        assert len(set(loose)) == len(loose)


# --- weights ---------------------------------------------------------------------------
def test_awq_and_gptq_are_int4_group_128_in_their_layouts():
    assert weight_dtype("awq").name == weight_dtype("GPTQ").name == "int4"
    assert adhoc("awq") == Quantization("awq", "awq", 4, group_size=128, scale_dtype="fp16",
                                        zero_points=True)
    q = adhoc("GPTQ")
    assert (q.layout, q.bits, q.group_size, q.zero_points, q.g_idx) == ("gptq", 4, 128, True, True)
    assert adhoc("awq", 64).group_size == 64
    assert weight_dtype("fp8").name == "fp8" and adhoc("FP8").layout == "fp8_channel"


def test_awq_and_gptq_bytes_by_hand():
    # One layer, d_model 256, d_ff 512: q, k, v, o are 256 x 256 (N x K), gate and up
    # 512 x 256, down 256 x 512. int4 values are N*K/2 bytes; fp16 scales 2 B per
    # (K/128 groups x N); int32 zero points pack 8 per word: K/128 x N/8 x 4 B.
    spec = ModelSpec.uniform(name="t", layers=1, d_model=256, heads=2, kv_heads=2, head_dim=128,
                             d_ff=512, vocab=1000)
    awq = weight_bytes(spec, adhoc("awq")).parts
    values = 4 * 256 * 256 // 2 + 3 * 512 * 256 // 2  # 327,680
    scales = 4 * (2 * 256 * 2) + 2 * (2 * 512 * 2) + 4 * 256 * 2  # 10,240
    zeros = 4 * (2 * 32 * 4) + 2 * (2 * 64 * 4) + 4 * 32 * 4  # 2,560
    assert (awq["values"], awq["scales"], awq["zeros"]) == (values, scales, zeros)
    gptq = weight_bytes(spec, adhoc("gptq")).parts
    # GPTQ also stores g_idx, one int32 per input column of each matrix.
    assert gptq["g_idx"] == 4 * (6 * 256 + 512) == 8192
    assert (gptq["values"], gptq["scales"], gptq["zeros"]) == (values, scales, zeros)


def test_cli_weight_dtype_awq_gptq_fp8():
    def weights(*flags: str) -> tuple[int, str]:
        r = kvcalc("estimate", "--preset", "llama3.1-8b", "--gpu", "none", *flags,
                   "--format", "json")
        out = json.loads(r.stdout)
        return out["weight_bytes"], out["weight_quantization"]

    int4_g128 = weights("--weight-dtype", "int4", "--group-size", "128")[0]
    assert weights("--weight-dtype", "AWQ") == (int4_g128, "awq int4 g128") \
        == (5_727_854_592, "awq int4 g128")
    # GPTQ adds an int32 g_idx per input column: 32 layers x (6 x 4096 + 14,336) x 4 B.
    assert weights("--weight-dtype", "gptq") == (int4_g128 + 32 * (6 * 4096 + 14_336) * 4,
                                                 "gptq int4 g128")
    assert weights("--weight-dtype", "fp8")[1] == "adhoc fp8, channel scales"


# --- models without attention ------------------------------------------------------------
def test_mamba_is_shown_as_mamba():
    for name in ("mamba-2.8b", "falcon-mamba-7b"):
        s = load_model(name)
        assert s.attention_free and s.attention_kind == "none"
        assert s.mixing == "Mamba, no attention, constant state"
    jamba = load_model("jamba-1.5-mini")
    assert not jamba.attention_free and jamba.mixing == "GQA, 8 K/V heads"
    assert load_model("deepseek-v3").mixing == "MLA"
    r = kvcalc("presets", "show", "mamba-2.8b", "--format", "json")
    row = json.loads(r.stdout)
    assert (row["attention"], row["mixing"], row["heads"], row["kv_heads"], row["head_dim"]) == (
        "none", "Mamba, no attention, constant state", None, None, None)
    r = kvcalc("presets", "--format", "md")
    line = next(x for x in r.stdout.splitlines() if x.startswith("| mamba-2.8b "))
    assert [c.strip() for c in line.strip("|").split("|")] == [
        "mamba-2.8b", "none", "64", "2560", "-", "-", "-", "-"]
    assert ("attn none = Mamba, no attention, constant state (falcon-mamba-7b, mamba-2.8b)"
            in r.stdout)
    r = kvcalc("estimate", "--preset", "mamba-2.8b")
    # The headline says "state", not "KV cache" (two lines: issue #42); the table and
    # its note say why.
    assert ": state 23.6 MB / 22.5 MiB;" in r.stdout and "slides" not in r.stdout
    assert "note: no attention, only a constant state" in r.stdout
    assert "(Mamba, no attention, constant state, 64 layers)" in r.stdout
