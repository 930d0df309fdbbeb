"""SGLang's own ServerArgs computes its defaults beside kvcalc's SGLang rules (opt-in tier,
marker `sglang`: skipped unless `sglang.srt.server_args` imports).

`ServerArgs.__post_init__` fills --mem-fraction-static, --chunked-prefill-size and
--cuda-graph-max-bs from the card's nvidia-smi total (`get_device_memory_capacity`,
patched here to each card's MiB), tp and the model's config (a local config.json: no
weights, no download, no GPU). kvcalc's rules for the installed release
(kvcalc.serving.sglang.rules) must give the same three values.

Not in CI (SGLang with no dependencies plus the few it imports at module level, about
2 GB with triton). The recipe (0.5.4 and 0.5.8 checked):

    python3 -m venv /tmp/sglang-venv && echo 'torch==2.13.0' > /tmp/c.txt
    /tmp/sglang-venv/bin/pip install -c /tmp/c.txt torch==2.13.0 pytest pyyaml numpy
    /tmp/sglang-venv/bin/pip install --no-deps sglang==0.5.4
    /tmp/sglang-venv/bin/pip install -c /tmp/c.txt orjson psutil pybase64 requests pyzmq \
        fastapi packaging pillow transformers==4.57.1 ipython aiohttp triton openai \
        xgrammar==0.1.25 partial_json_parser sentencepiece compressed-tensors loguru \
        dill gguf typer rich
    PYTHONPATH=. /tmp/sglang-venv/bin/python -m pytest -q -p no:cacheprovider -m sglang \
        tests/test_sglang_oracle.py tests/test_plan_engines.py
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import shutil
import sys
import types
from pathlib import Path

import pytest


def _stub(name: str) -> None:
    """A module sglang imports at module level but ServerArgs never calls (torchvision,
    sgl_kernel): attribute lookups give an inert object, dunders raise."""
    class Any:
        def __init__(self, *a, **k): pass
        def __call__(self, *a, **k): return Any()
        def __getattr__(self, n): return Any()
        def __mro_entries__(self, bases): return (object,)

    m = types.ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.__path__ = []

    def getattr_(n):
        if n.startswith("__"):
            raise AttributeError(n)
        return Any()

    m.__getattr__ = getattr_
    sys.modules.setdefault(name, m)


class _StubTree(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every module under these top-level names is a stub (imported, never called)."""

    roots = ("torchvision", "sgl_kernel")

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        _stub(spec.name)
        return sys.modules[spec.name]

    def exec_module(self, module):
        pass


try:  # only where sglang itself is installed (the tier's venv)
    import sglang  # noqa: F401
    sys.meta_path.insert(0, _StubTree())
    server_args = pytest.importorskip("sglang.srt.server_args")
except ImportError:
    pytest.skip("SGLang is not installed (README: the SGLang tier)", allow_module_level=True)

from kvcalc.serving.sglang.rules import rules_for  # noqa: E402

pytestmark = pytest.mark.sglang
HF = Path(__file__).parent / "data" / "hf"
# nvidia-smi totals (MiB) of the cards SGLang's thresholds tell apart
CARDS = {"h100": 81559, "h200": 143771, "a100-40gb": 40960, "l4": 23034, "b200": 183359,
         "rtx4090": 24564, "a10g": 23028, "l40s": 46068}
MODELS = ["meta-llama__Meta-Llama-3-8B.json", "Qwen__Qwen3-8B.json", "mistralai__Mistral-7B-v0.1.json"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    out = {}
    for name in MODELS:
        if not (HF / name).is_file():
            continue
        d = tmp_path_factory.mktemp(name.replace(".json", ""))
        shutil.copy(HF / name, d / "config.json")
        out[name] = d
    return out


@pytest.mark.parametrize("card", sorted(CARDS))
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_defaults_match_sglangs_own(card, tp, model_dirs, monkeypatch):
    mib = CARDS[card]
    monkeypatch.setattr(server_args, "get_device_memory_capacity", lambda *a, **k: float(mib))
    release = sglang.__version__
    rules = rules_for(release)
    for name, folder in model_dirs.items():
        a = server_args.ServerArgs(model_path=str(folder), tp_size=tp, device="cuda")
        chunked = rules.default_chunked_prefill_size(mib, tp)
        graphs = rules.default_cuda_graph_max_bs(mib, tp)
        assert a.chunked_prefill_size * (a.dp_size if a.enable_dp_attention else 1) == chunked
        if graphs is not None:
            assert a.cuda_graph_max_bs == graphs, (name, card, tp)
        mfs = rules.default_mem_fraction_static(
            gpu_mib=mib, tp=tp, pp=1, chunked_prefill_size=chunked, cuda_graph_max_bs=graphs,
            dp=1, dp_attention=False, multimodal=False, mla=False)
        assert a.mem_fraction_static == pytest.approx(mfs, abs=1e-9), (name, card, tp)
