"""The formulas against independent truth: hand arithmetic, torch.nn modules on the
meta device, published figures, and invariants (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import DType, dtype
from kvcalc.formulas.attention import attention_step, shazeer_ratio
from kvcalc.formulas.cache import kv_bytes_per_token_per_layer, kv_cache
from kvcalc.formulas.params import param_counts
from kvcalc.formulas.step import decode_step, prefill_flops
from kvcalc.layers import Latent, MoE
from kvcalc.spec import ModelSpec

torch = pytest.importorskip("torch")
import torch_reference as ref  # noqa: E402  (tests/ is on sys.path via conftest)

GPT3 = ModelSpec.uniform(  # GPT-3 paper, Table 2.1
    name="gpt3", layers=96, d_model=12288, heads=96, kv_heads=96, head_dim=128, d_ff=4 * 12288,
    vocab=50257, mlp="plain", qkv_bias=True, out_bias=True, mlp_bias=True, norm="layernorm",
    norm_bias=True, tied_embeddings=True, learned_pos=2048)
LLAMA2_7B = ModelSpec.uniform(  # meta-llama/Llama-2-7b-hf config.json
    name="llama2-7b", layers=32, d_model=4096, heads=32, kv_heads=32, head_dim=128, d_ff=11008,
    vocab=32000)
MISTRAL = ModelSpec.uniform(  # mistralai/Mistral-7B-v0.1 config.json
    name="mistral-7b", layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=14336,
    vocab=32000, sliding_window=4096)
GEMMA2_9B = ModelSpec.uniform(  # google/gemma-2-9b config.json
    name="gemma2-9b", layers=42, d_model=3584, heads=16, kv_heads=8, head_dim=256, d_ff=14336,
    vocab=256000, norms_per_layer=4, tied_embeddings=True, sliding_window=4096, global_every=2)
DEEPSEEK_V2 = ModelSpec.uniform(  # deepseek-ai/DeepSeek-V2 config.json
    name="deepseek-v2", layers=60, d_model=5120, heads=128, kv_heads=128, head_dim=192,
    d_ff=12288, vocab=102400,
    mla=Latent(heads=128, kv_lora_rank=512, rope_dim=64, nope_dim=128, v_dim=128,
               q_lora_rank=1536),
    moe=MoE(experts=160, active=6, expert_d_ff=1536, shared_experts=2), dense_layers=1)
MIXTRAL = ModelSpec.uniform(  # mistralai/Mixtral-8x7B-v0.1 config.json
    name="mixtral", layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=14336,
    vocab=32000, moe=MoE(experts=8, active=2, expert_d_ff=14336))
T5_11B = ModelSpec.uniform(  # google-t5/t5-11b config.json (d_kv 128 x 128 heads != d_model 1024)
    name="t5-11b", layers=24, encoder_layers=24, d_model=1024, heads=128, kv_heads=128,
    head_dim=128, d_ff=65536, vocab=32128, mlp="plain", norm="rmsnorm",
    tied_embeddings=True, relative_attention_buckets=32)


# --- KV cache: hand arithmetic ----------------------------------------------------
def test_gpt3_cache_at_2048_fp16_is_9_GiB_not_19_GB():
    cache = kv_cache(GPT3, seq_len=2048, batch=1, kv_dtype="fp16")
    assert cache.bytes == 2 * 96 * 96 * 128 * 2048 * 2 == 9_663_676_416
    assert cache.bytes == 9 * 2**30  # exactly 9 GiB
    mqa = kv_cache(GPT3.with_kv_heads(1), 2048, 1, "fp16")
    assert mqa.bytes == 2 * 96 * 1 * 128 * 2048 * 2 == 100_663_296


def test_llama2_7b_is_mha_and_its_cache_per_token():
    # 2 (K,V) x 32 layers x 32 heads x 128 x 2 bytes = 512 KiB per token.
    c = kv_cache(LLAMA2_7B, 4096, 1, "fp16")
    assert c.bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    assert c.bytes == 524_288 * 4096


@pytest.mark.parametrize("name, bits", [("fp32", 32), ("bf16", 16), ("fp16", 16), ("fp8", 8),
                                        ("int8", 8), ("int4", 4)])
def test_kv_dtypes(name, bits):
    per_layer = kv_bytes_per_token_per_layer(MISTRAL, name)
    assert per_layer == 2 * 8 * 128 * bits // 8


def test_int4_scale_overhead_per_token_per_head():
    # int4: 2 x 8 heads x 128 x 0.5 bytes, plus an fp16 scale per token per head for K and V.
    assert kv_bytes_per_token_per_layer(MISTRAL, "int4", scale_bytes=2) == 1024 + 2 * 8 * 2


def test_sliding_window_keeps_window_tokens_and_reports_full():
    c = kv_cache(MISTRAL, 32768, 1, "bf16")
    per_layer = 2 * 8 * 128 * 2
    assert c.bytes == 32 * per_layer * 4096
    assert c.bytes_full == 32 * per_layer * 32768
    short = kv_cache(MISTRAL, 1000, 1, "bf16")
    assert short.bytes == short.bytes_full == 32 * per_layer * 1000


def test_gemma2_alternating_local_global_layers():
    c = kv_cache(GEMMA2_9B, 8192, 1, "bf16")
    per_layer = 2 * 8 * 256 * 2
    # HF Gemma2: even layers slide (window 4096), odd layers are global: 21 + 21.
    assert c.bytes == per_layer * (21 * 4096 + 21 * 8192)


def test_mla_caches_latent_plus_rope_key_per_layer():
    c = kv_cache(DEEPSEEK_V2, 1024, 2, "bf16")
    assert c.bytes_per_token_per_layer == (512 + 64) * 2
    assert c.bytes == 60 * (512 + 64) * 2 * 1024 * 2
    # Replicated on every TP device.
    tp8 = kv_cache(DEEPSEEK_V2, 1024, 2, "bf16", tp=8)
    assert tp8.bytes_per_device == c.bytes and tp8.bytes_all_devices == 8 * c.bytes


def test_tp_replicates_kv_heads_when_tp_exceeds_them():
    # Llama-3-70B: 64 query heads, 8 K/V heads.
    spec = ModelSpec.uniform(name="l3-70b", layers=80, d_model=8192, heads=64, kv_heads=8,
                             head_dim=128, d_ff=28672, vocab=128256)
    single = kv_cache(spec, 8192, 4, "bf16")
    # K and V x 80 layers x 8 K/V heads x 128 x 8192 tokens x 4 sequences x 2 bytes (bf16).
    assert single.bytes == 2 * 80 * 8 * 128 * 8192 * 4 * 2 == 10_737_418_240
    tp4 = kv_cache(spec, 8192, 4, "bf16", tp=4)
    assert tp4.kv_heads_per_device == 2 and tp4.bytes_per_device * 4 == single.bytes
    assert tp4.bytes_per_device == 2 * 80 * 2 * 128 * 8192 * 4 * 2 == 2_684_354_560
    tp16 = kv_cache(spec, 8192, 4, "bf16", tp=16)
    assert tp16.kv_heads_per_device == 1
    assert tp16.bytes_per_device == single.bytes // 8  # one of 8 heads per device
    assert tp16.bytes_per_device == 2 * 80 * 1 * 128 * 8192 * 4 * 2 == 1_342_177_280
    assert tp16.bytes_all_devices == 2 * single.bytes  # each head stored twice
    assert tp16.bytes_all_devices == 16 * 1_342_177_280 == 21_474_836_480
    with pytest.raises(KvcalcError, match="tp=3"):
        kv_cache(spec, 8192, 4, "bf16", tp=3)


def test_t5_cross_attention_cache_is_added():
    c = kv_cache(T5_11B, 512, 1, "bf16", encoder_seq_len=1024)
    per_layer = 2 * 128 * 128 * 2
    assert c.cross_attention_bytes_per_sequence == 24 * per_layer * 1024
    assert c.bytes == 24 * per_layer * (512 + 1024)


def test_t5_decode_step_reads_the_encoder_cache_and_writes_only_its_own():
    # 24 decoder layers, 128 heads of 128, bf16, decoder at 512, encoder at 1024 tokens.
    d = decode_step(T5_11B, 512, 1, "bf16", "bf16", "bf16", encoder_seq_len=1024)
    per_token_layer = 2 * 128 * 128 * 2  # K and V bytes of one token in one layer
    # Self-attention over 512 positions and cross-attention over 1,024, q.K and p.V each.
    assert d.attention_flops == 24 * 2 * 128 * (512 + 1024) * (128 + 128)
    assert d.bytes_breakdown["kv_read"] == 24 * per_token_layer * (512 + 1024)
    assert d.bytes_breakdown["kv_write"] == 24 * per_token_layer  # the new token, self only
    # The decoder token runs q, k, v, o of self-attention, q and o of cross-attention and
    # the MLP (1024 -> 65536 -> 1024) in each layer, and the lm_head.
    proj = 24 * (4 * 1024 * 16384 + 2 * 1024 * 16384 + 2 * 1024 * 65536) + 1024 * 32128
    assert d.flops_breakdown["projections_and_mlp"] == 2 * proj


# --- real cache tensors ---------------------------------------------------------
@pytest.mark.parametrize("kv_heads", [32, 8, 1])
def test_cache_bytes_equal_real_tensor_sizes(kv_heads):
    spec = LLAMA2_7B.with_kv_heads(kv_heads)
    batch, seq_len = 3, 257
    total = 0
    for _ in range(spec.layers):
        k = torch.empty(batch, kv_heads, seq_len, spec.head_dim, dtype=torch.bfloat16, device="meta")
        v = torch.empty(batch, kv_heads, seq_len, spec.v_head_dim, dtype=torch.bfloat16, device="meta")
        total += k.numel() * k.element_size() + v.numel() * v.element_size()
    assert kv_cache(spec, seq_len, batch, "bf16").bytes == total


# --- parameters: torch.nn on the meta device ---------------------------------------
SPECS = [GPT3, LLAMA2_7B, MISTRAL, GEMMA2_9B, MIXTRAL, T5_11B,
         LLAMA2_7B.with_kv_heads(8), LLAMA2_7B.with_kv_heads(1),
         ModelSpec.uniform(name="qwen3-like", layers=4, d_model=1024, heads=16, kv_heads=8,
                           head_dim=128, d_ff=3072, vocab=1000, qk_norm=True, qkv_bias=True)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_param_count_equals_torch_module(spec):
    assert param_counts(spec).total == ref.count(ref.build(spec))


@pytest.mark.parametrize("spec", [DEEPSEEK_V2], ids=lambda s: s.name)
def test_mla_moe_param_count_per_layer_equals_torch(spec):
    # Whole DeepSeek-V2 on meta takes ~10^4 modules; check a dense layer, an MoE layer
    # and the attention exactly, and the total against the paper's 236B.
    dense = param_counts(spec).per_layer
    assert dense == ref.count(ref.build_one_layer(spec))
    assert sum(spec.runs[0].layer.mixer.params(spec.d_model).values()) == ref.attention_params(spec)
    with torch.device("meta"):
        moe_layer = ref.Block(spec, ref.dense_layers(spec))
    p = param_counts(spec)
    per_moe_layer = (sum(spec.runs[0].layer.mixer.params(spec.d_model).values()) + 2 * spec.d_model
                     + p.breakdown["moe/router"] // spec.moe_layers
                     + p.breakdown["moe/experts"] // spec.moe_layers
                     + p.breakdown["moe/shared_experts"] // spec.moe_layers)
    assert per_moe_layer == ref.count(moe_layer)
    assert abs(p.total - 236e9) / 236e9 < 0.01  # DeepSeek-V2 paper: 236B total
    assert abs(p.active - 21e9) / 21e9 < 0.05  # and 21B activated per token


def test_published_counts():
    # Llama-2-7B: 6,738,415,616 parameters (sum of the HF checkpoint's tensors).
    assert param_counts(LLAMA2_7B).total == 6_738_415_616
    # Mistral-7B-v0.1: 7,241,732,096.
    assert param_counts(MISTRAL).total == 7_241_732_096
    # Mixtral-8x7B: 46,702,792,704 total, about 12.9B active (Mixtral paper: 47B / 13B).
    mix = param_counts(MIXTRAL)
    assert mix.total == 46_702_792_704
    assert abs(mix.active - 12.9e9) / 12.9e9 < 0.01
    # GPT-3: "175.0B" in Table 2.1.
    assert abs(param_counts(GPT3).total - 175.0e9) / 175.0e9 < 0.005


def test_gqa_shrinks_only_k_and_v():
    mha, gqa = param_counts(LLAMA2_7B), param_counts(LLAMA2_7B.with_kv_heads(8))
    # k and v each lose 4096 x (32 - 8) x 128 weights per layer.
    assert mha.total - gqa.total == 32 * 2 * 4096 * 24 * 128
    assert mha.breakdown["attention/q"] == gqa.breakdown["attention/q"]


# --- decode step ----------------------------------------------------------------
def test_decode_step_llama2_7b_by_hand():
    b, n = 4, 1000
    cost = decode_step(LLAMA2_7B, n, b, "bf16", "bf16", "bf16")
    d, ff, v, L = 4096, 11008, 32000, 32
    matmul_params = L * (4 * d * d + 3 * d * ff) + v * d  # per token; lm_head included
    attn = L * 2 * 32 * n * (128 + 128)
    assert cost.flops == b * (2 * matmul_params + attn)
    # Weights: all but the input table, whose 4 rows are read; bf16.
    total = 6_738_415_616
    assert cost.bytes_breakdown["weights"] == 2 * (total - v * d + b * d)
    assert cost.bytes_breakdown["kv_read"] == b * n * 524_288
    assert cost.bytes_breakdown["kv_write"] == b * 524_288
    assert cost.attention_flops == b * attn


def test_attention_step_intensity_is_about_group_size():
    for kv in (32, 8, 1):
        c = attention_step(8, 4096, 32, kv, 128, "bf16")
        assert c.kv_bytes == 8 * 4096 * kv * 2 * 128 * 2
        assert c.flops == 2 * 8 * 32 * 4096 * 256
        # 2 x g FLOPs per 2-byte element: about g FLOP/byte.
        assert c.arithmetic_intensity == pytest.approx(32 / kv, rel=0.01)


def test_prefill_attention_positions_causal_and_windowed():
    from kvcalc.layers import Attention

    full = Attention(4, 4, 8)
    assert full.prefill_positions(4) == 1 + 2 + 3 + 4
    assert Attention(4, 4, 8, kind="sliding", window=3).prefill_positions(6) == 1 + 2 + 3 + 3 + 3 + 3
    # Chunks of 3 restart: positions 1 2 3 | 1 2 3 | 1
    assert Attention(4, 4, 8, kind="chunked", window=3).prefill_positions(7) == 6 + 6 + 1


def test_moe_reads_only_touched_experts():
    one = decode_step(MIXTRAL, 128, 1)
    many = decode_step(MIXTRAL, 128, 64)
    expert = 3 * 4096 * 14336 * 2  # bytes of one expert in bf16
    assert one.experts_read_per_layer == 2 and many.experts_read_per_layer == 8
    diff = many.bytes_breakdown["weights"] - one.bytes_breakdown["weights"]
    assert diff == 32 * 6 * expert + 63 * 4096 * 2  # 6 more experts per layer, 63 more rows


# --- Shazeer's ratio ------------------------------------------------------------
def test_shazeer_incremental_terms_and_mqa_cut():
    b, n, d, h, k = 1, 2048, 4096, 32, 128
    mha = shazeer_ratio("incremental", b, n, d, h, h, k)
    mqa = shazeer_ratio("incremental", b, n, d, h, 1, k)
    assert mha.terms == {"1/d": 1 / d, "n*g/(d*h)": n / d, "1/b": 1.0}
    assert mqa.terms["n*g/(d*h)"] == n / (d * h)
    assert mqa.ratio < mha.ratio
    # Long context, big batch: the K/V reload term dominates MHA but not MQA.
    big = shazeer_ratio("incremental", 256, 32768, d, h, h, k)
    assert big.dominant_term == "n*g/(d*h)"
    big_mqa = shazeer_ratio("incremental", 256, 32768, d, h, 1, k)
    assert big.terms["n*g/(d*h)"] == h * big_mqa.terms["n*g/(d*h)"] == 8.0
    # Short context, batch 1: reloading the weights (1/b) dominates either way.
    assert shazeer_ratio("incremental", 1, 512, d, h, 1, k).dominant_term == "1/b"


def test_shazeer_batched_counts_small_case_by_hand():
    # b=1, n=2, d=4, h=2, g=2, k=v=2: write each tensor out.
    r = shazeer_ratio("batched", 1, 2, 4, 2, 2, 2)
    memory = (3 * 1 * 2 * 4            # X, M, Y
              + 4 * 2 * 4 + 4 * 2 * 4  # P_q, P_o (d h k) and P_k, P_v (d g k)
              + 2 * 1 * 2 * 2 * 2      # Q, O
              + 2 * 1 * 2 * 2 * 2      # K, V
              + 2 * 1 * 2 * 2 * 2)     # logits, weights (b h n n)
    arith = (1 * 2 * 4 * 2 * 2 + 2 * 1 * 2 * 4 * 2 * 2 + 2 * 1 * 2 * 2 * 2 * 2 + 1 * 2 * 2 * 2 * 4)
    assert (r.memory_elements, r.arithmetic_ops) == (memory, arith)


# --- invariants -----------------------------------------------------------------
@st.composite
def specs(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8, 12, 16, 32, 64]))
    kv = draw(st.sampled_from([g for g in range(1, heads + 1) if heads % g == 0]))
    window = draw(st.sampled_from([0, 0, 128, 4096]))
    return ModelSpec.uniform(
        name="h", layers=draw(st.integers(1, 96)), d_model=draw(st.integers(1, 64)) * 64,
        heads=heads, kv_heads=kv, head_dim=draw(st.sampled_from([32, 64, 80, 128, 256])),
        d_ff=draw(st.integers(1, 400)) * 64, vocab=draw(st.integers(100, 300_000)),
        mlp=draw(st.sampled_from(["gated", "plain"])), sliding_window=window,
        global_every=draw(st.sampled_from([0, 2, 6])) if window else 0,
        qkv_bias=draw(st.booleans()), norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        norm_bias=draw(st.booleans()), tied_embeddings=draw(st.booleans()))


kv_dtypes = st.sampled_from(["fp32", "bf16", "fp8", "int4"])


@given(specs(), st.integers(1, 1 << 20), st.integers(1, 512), kv_dtypes)
def test_gqa_cache_is_mha_cache_times_kv_over_heads(spec, n, b, kdt):
    mha = kv_cache(spec.with_kv_heads(spec.heads), n, b, kdt).bytes
    gqa = kv_cache(spec, n, b, kdt).bytes
    assert gqa * spec.heads == mha * spec.kv_heads


@given(specs(), st.integers(1, 1 << 20), st.integers(1, 512), kv_dtypes,
       st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
def test_tp_totals_at_least_single_device(spec, n, b, kdt, tp):
    if spec.heads % tp or (spec.kv_heads % tp and tp % spec.kv_heads):
        return
    single = kv_cache(spec, n, b, kdt)
    split = kv_cache(spec, n, b, kdt, tp=tp)
    assert split.bytes_all_devices >= single.bytes
    assert split.bytes_per_device * tp == split.bytes_all_devices
    assert split.bytes_per_device <= single.bytes


@given(specs(), st.integers(1, 1 << 18), st.integers(1, 256), kv_dtypes)
def test_monotone_in_seq_len_and_batch(spec, n, b, kdt):
    base = decode_step(spec, n, b, kv_dtype=kdt)
    longer = decode_step(spec, n + 1, b, kv_dtype=kdt)
    wider = decode_step(spec, n, b + 1, kv_dtype=kdt)
    assert longer.bytes >= base.bytes and longer.flops >= base.flops
    assert wider.bytes > base.bytes and wider.flops > base.flops
    c0, c1 = kv_cache(spec, n, b, kdt), kv_cache(spec, n + 1, b, kdt)
    assert c0.bytes <= c1.bytes and c0.bytes <= c0.bytes_full


@settings(max_examples=40, deadline=None)
@given(specs())
def test_params_match_torch_for_random_specs(spec):
    if spec.layers * spec.d_model * spec.d_ff > 3e10:  # keep module construction quick
        spec = spec.replace(layers=2)
    assert param_counts(spec).total == ref.count(ref.build(spec))


def test_bad_sizes_are_named():
    with pytest.raises(KvcalcError, match="seq_len"):
        kv_cache(LLAMA2_7B, 0)
    with pytest.raises(KvcalcError, match="absurdly large"):
        kv_cache(LLAMA2_7B, 10**15)
    with pytest.raises(KvcalcError, match="divisible"):
        LLAMA2_7B.with_kv_heads(3)
    with pytest.raises(KvcalcError, match="unknown dtype"):
        dtype("fp12")
    assert DType("int4", 4).nbytes(3) == 2  # packed, rounded up


def test_fit_counts_the_encoder_cache_it_is_given():
    from kvcalc.floor import fit
    from kvcalc.workload import Memory, Workload
    from kvcalc.spec import Hardware

    hw = Hardware(name="toy", memory_bytes=10**12, memory_bandwidth_bytes_per_s=10**12,
                  flops_per_s={"bf16": 10**15})
    f = fit(T5_11B, Workload(seq_len=512, batch=2, encoder_seq_len=4096),
            memory=Memory(hardware=hw))
    per_layer = 2 * 128 * 128 * 2
    assert f.kv_bytes_requested == 2 * 24 * per_layer * (512 + 4096)
    weights = 2 * 11_307_321_344  # t5-11b's published parameter count, bf16
    assert f.max_batch == (10**12 - weights) // (24 * per_layer * (512 + 4096))


# --- roofline, fit and TP by hand (Llama-3-70B, published 70,553,706,496 parameters) --------
LLAMA3_70B = ModelSpec.uniform(  # meta-llama/Meta-Llama-3-70B config.json
    name="llama3-70b", layers=80, d_model=8192, heads=64, kv_heads=8, head_dim=128, d_ff=28672,
    vocab=128256, max_context=8192)
def _h100():
    from kvcalc.presets import load_hardware

    return load_hardware("h100-sxm")


def test_llama3_70b_total_is_published():
    assert param_counts(LLAMA3_70B).total == 70_553_706_496


def test_decode_roofline_llama3_70b_tp4_by_hand():
    from kvcalc.speed.roofline import decode_roofline

    P, b, n, tp = 70_553_706_496, 16, 8192, 4
    cost = decode_step(LLAMA3_70B, n, b, tp=tp)
    read = P - 128256 * 8192 + b * 8192  # the untied input table: only the batch's rows
    weights_dev = 2 * read // tp  # every part divides by 4 here
    kv_dev = b * n * 80 * 2 * (8 // tp) * 128 * 2
    kv_write_dev = b * 80 * 2 * (8 // tp) * 128 * 2
    # Activation elements per token: each matmul's input + output, and attention's q and o.
    per_layer = (8192 + 80 * 128) + (8192 + 8192) + (8192 + 2 * 28672) + (28672 + 8192)
    act = 2 * b * (80 * per_layer + (8192 + 128256) + 80 * 2 * 64 * 128)
    assert cost.per_device_bytes == weights_dev + kv_dev + kv_write_dev + act // tp
    r = decode_roofline(cost, _h100())
    assert r.memory_s == (weights_dev + kv_dev + kv_write_dev + act // tp) / 3.35e12
    assert r.bound == "memory" and r.tokens_per_s == b / r.memory_s


def test_fit_llama3_70b_tp4_by_hand():
    from kvcalc.floor import fit
    from kvcalc.workload import Memory, Workload

    f = fit(LLAMA3_70B, Workload(seq_len=8192, tp=4), memory=Memory(hardware=_h100()))
    weights_dev = 2 * 70_553_706_496 // 4
    free = 80 * 2**30 - weights_dev
    per_seq = 80 * 2 * 2 * 128 * 2 * 8192  # 2 of 8 K/V heads per device, bf16
    assert (f.weight_bytes, f.free_for_kv_bytes) == (weights_dev, free)
    assert f.max_batch == free // per_seq == 75
    assert f.max_seq_len == free // (80 * 2 * 2 * 128 * 2)


def test_kv_projection_weights_replicate_with_their_heads():
    from kvcalc.floor import fit
    from kvcalc.workload import Memory, Workload

    kv_proj = 80 * 2 * 8192 * 8 * 128  # k and v weights, all layers
    other = 70_553_706_496 - kv_proj
    f = fit(LLAMA3_70B, Workload(seq_len=8192, tp=16), memory=Memory(hardware=_h100()))
    # 16 devices, 8 K/V heads: each device holds one head's k/v weights (1/8 of them).
    assert f.weight_bytes == 2 * (-(-other // 16) + kv_proj // 8)


def test_fit_with_alternating_windows_closed_form():
    from kvcalc.floor import fit
    from kvcalc.workload import Memory, Workload
    from kvcalc.spec import Hardware

    hw = Hardware(name="toy", memory_bytes=40 * 10**9, memory_bandwidth_bytes_per_s=10**12,
                  flops_per_s={"bf16": 10**15})
    f = fit(GEMMA2_9B, Workload(seq_len=8192, batch=4), memory=Memory(hardware=hw))
    per_layer = 2 * 8 * 256 * 2
    # google/gemma-2-9b: 9,241,705,984 parameters (HF safetensors total), bf16 weights.
    free = 40 * 10**9 - 2 * 9_241_705_984
    assert free == 21_516_588_032
    # Past the window: 21 global layers hold L tokens, 21 local ones 4096, for 4 sequences.
    expected = (free // (4 * per_layer) - 21 * 4096) // 21
    assert f.max_seq_len == expected
    assert kv_cache(GEMMA2_9B, expected, 4).bytes <= free
    assert kv_cache(GEMMA2_9B, expected + 1, 4).bytes > free


def test_prefill_attention_terms_by_second_difference():
    # prefill(L) = a*L + c + q*L*(L+1)/2 for full attention: the second difference is q.
    v3 = ModelSpec.uniform(name="v3", layers=61, d_model=7168, heads=128, kv_heads=128,
                           head_dim=192, d_ff=18432, vocab=129280,
                           mla=Latent(heads=128, kv_lora_rank=512, rope_dim=64, nope_dim=128,
                                      v_dim=128, q_lora_rank=1536),
                           moe=MoE(experts=256, active=8, expert_d_ff=2048, shared_experts=1,
                                   router_bias=True), dense_layers=3)
    f = prefill_flops
    # MLA prefill decompresses K and V: 2 x heads x (nope + rope + v) per attended position.
    assert f(v3, 3) - 2 * f(v3, 2) + f(v3, 1) == 61 * 2 * 128 * (128 + 64 + 128)
    assert f(LLAMA2_7B, 3) - 2 * f(LLAMA2_7B, 2) + f(LLAMA2_7B, 1) == 32 * 2 * 32 * 256


def test_t5_prefill_counts_encoder_and_cross_attention():
    f = prefill_flops
    d, h, k, ff, L = 1024, 128, 128, 65536, 24
    # One more encoder token: the encoder's matmuls for it, its bidirectional attention
    # (linear part), and the cross K/V projections in every decoder layer.
    dec = 4
    step = f(T5_11B, dec, encoder_seq_len=11) - f(T5_11B, dec, encoder_seq_len=10)
    enc_matmuls = 2 * (4 * d * h * k + 2 * d * ff)
    enc_attn = 2 * h * 2 * k * (11 * 11 - 10 * 10)  # E^2 positions per encoder layer
    cross_kv = 2 * d * 2 * h * k
    cross_scores = dec * 2 * h * 2 * k
    assert step == L * enc_matmuls + L * enc_attn + L * cross_kv + L * cross_scores


def test_min_tp_that_fits_is_none_when_nothing_fits():
    from kvcalc import figures
    from kvcalc.presets import load_hardware

    h100 = load_hardware("h100-sxm")
    # Llama-2-7B: 32 layers x 2 x 32 heads x 128 x 2 B = 512 KiB per token; 10M tokens
    # are 5.2 TB, beyond 80 GiB even with the cache split 32 ways.
    too_long = figures(LLAMA2_7B, 10_000_000, hardware=h100)
    assert too_long.min_tp_that_fits is None
    assert too_long.as_dict()["fit"]["min_tp_that_fits"] is None
    assert figures(LLAMA2_7B, 4096, hardware=h100).min_tp_that_fits == 1
    assert figures(LLAMA2_7B, 4096).min_tp_that_fits is None  # no hardware: no fit at all
