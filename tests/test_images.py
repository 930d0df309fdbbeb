"""kvcalc.formulas.images: the tokens an image becomes, against transformers' own processors
(their PIL variants, which need no torchvision) and the published counts."""

import json
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.formulas.images import (image_geometry, image_patches, image_tokens, max_image_patches,
                           max_image_tokens, parse_image_size)

HF = Path(__file__).parent / "data" / "hf"
SIZES = [(1024, 768), (1920, 1080), (640, 480), (37, 4000), (8000, 8000), (56, 56), (10, 10),
         (3000, 200), (1540, 1540), (1541, 20)]


def geometry(name, wrapper):
    return image_geometry(json.loads((HF / f"{name}.json").read_text()), wrapper)


def test_qwen25_vl_matches_smart_resize():
    pil = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    g = geometry("Qwen__Qwen2.5-VL-7B-Instruct", "qwen2_5_vl")
    for w, h in SIZES:
        rh, rw = pil.smart_resize(h, w, 28, 3136, 12845056)
        assert image_tokens(g, w, h) == (rh // 28) * (rw // 28), (w, h)
        assert image_patches(g, w, h) == (rh // 14) * (rw // 14)
    assert image_tokens(g, 1024, 768) == 999  # 27 x 37 merged patches
    # vLLM's budget for Qwen2.5-VL: 12,845,056 / 28^2 (the 16,384 of vllm#34209's title)
    assert max_image_tokens(g) == 16384 and max_image_patches(g) == 65536


def test_pixtral_matches_processor():
    pil = pytest.importorskip("transformers.models.pixtral.image_processing_pil_pixtral")
    np = pytest.importorskip("numpy")
    g = geometry("mistralai__Mistral-Small-3.1-24B-Instruct-2503", "mistral3")
    for w, h in SIZES:
        rh, rw = pil.get_resize_output_image_size(np.zeros((h, w, 3)), size=(1540, 1540),
                                                  patch_size=(28, 28))
        # processing_pixtral.py::_get_num_multimodal_tokens: (columns + 1) x rows
        assert image_tokens(g, w, h) == (rw // 28 + 1) * (rh // 28), (w, h)
    assert image_tokens(g, 1920, 1080) == 31 * 56
    assert max_image_tokens(g) == 55 * 56 and max_image_patches(g) == 110 * 110


def test_fixed_families():
    g = geometry("llava-hf__llava-1.5-7b-hf", "llava")
    assert image_tokens(g, 1920, 1080) == 576 == max_image_tokens(g)  # (336 / 14)^2
    assert image_patches(g, 5, 5) == 577  # the class token runs through the tower
    gemma = image_geometry({"vision_config": {"image_size": 896, "patch_size": 14}}, "gemma3")
    assert image_tokens(gemma, 4000, 3000) == 256 and gemma["patches"] == 4096


def test_unread_family_and_bad_sizes():
    assert image_geometry({"vision_config": {}}, "llama4") is None
    g = geometry("Qwen__Qwen2.5-VL-7B-Instruct", "qwen2_5_vl")
    with pytest.raises(KvcalcError, match="aspect ratio"):
        image_tokens(g, 10, 4000)
    with pytest.raises(KvcalcError, match="positive"):
        image_tokens(g, 0, 10)
    assert parse_image_size("1024x768") == (1024, 768)
    with pytest.raises(KvcalcError, match="WIDTHxHEIGHT"):
        parse_image_size("1024")


def test_geometry_kept_on_the_spec():
    from kvcalc.hfconfig import spec_from_hf_config

    spec = spec_from_hf_config(json.loads((HF / "Qwen__Qwen2.5-VL-7B-Instruct.json").read_text()), "qwen25vl")
    assert spec.extra["image"]["max_pixels"] == 12845056
