"""MODEL as users name it (kvcalc.model_source): Hub ids from a Hugging Face cache, model
folders, config files and presets; weights counted from safetensors headers; bad input
refused in one line.

Every cache and folder is built here (tests/hubcache.py) with sparse safetensors files:
the headers are real, the data is a hole. The truth for a header total is the
arithmetic of the shapes written, by hand; nothing is asked of the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hubcache as H
from kvcalc import KvcalcError
from kvcalc.model_source import hfcache, resolve_model
from kvcalc.model_source.safetensors import MAX_HEADER_BYTES, read_header

ROOT = Path(__file__).resolve().parent.parent
needs_hub = pytest.mark.skipif(
    __import__("importlib").util.find_spec("huggingface_hub") is None,
    reason="Hub ids need huggingface_hub (kvcalc[hub])")

SHARDS = {"model-00001-of-00002.safetensors": H.tiny_llama_tensors()[:10],
          "model-00002-of-00002.safetensors": H.tiny_llama_tensors()[10:]}
# bf16: 2 bytes for each of the 86,848 parameters (tests/hubcache.py counts them by hand).
TINY_BF16_BYTES = 2 * 86_848


def kvcalc(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **(env or {})}
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=full)


def offline(hf_home: Path) -> dict:
    return {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "HF_TOKEN": "",
            "HF_HUB_CACHE": str(hf_home / "hub")}


def refused(r: subprocess.CompletedProcess, *words: str) -> str:
    """One line on stderr, `kvcalc: error: ...`, exit 2, no traceback; returns the line."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), r.stderr
    assert r.stdout == ""
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def cached(tmp_path: Path) -> Path:
    """HF_HOME holding one model, org/tiny-llama: config.json (it says float32) and two
    bf16 shards with their index, and nothing else."""
    src = H.model_folder(tmp_path / "download", dict(H.TINY_LLAMA, torch_dtype="float32"),
                         SHARDS)
    H.hf_cache(tmp_path / "hf", "org/tiny-llama", src)
    return tmp_path / "hf"


def test_the_hand_count_is_the_tensors_written():
    """The fixture's own arithmetic: the shapes in tests/hubcache.py, multiplied out."""
    elements = 0
    for _, _, shape in H.tiny_llama_tensors():
        n = 1
        for d in shape:
            n *= d
        elements += n
    assert elements == H.TINY_LLAMA_PARAMS == 86_848


def test_an_offline_hub_id_answers_from_the_cache_with_the_headers_bytes(cached: Path):
    r = kvcalc("estimate", "org/tiny-llama", "--format", "json", env=offline(cached))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # config.json says float32; the headers say bf16, and the headers are what is stored.
    assert out["weight_bytes"] == TINY_BF16_BYTES == 173_696
    assert out["weight_quantization"] is None
    assert out["weights_source"].startswith("safetensors headers (2 files), 173,696 B")
    assert "agrees" in out["weights_source"]
    assert out["model"]["name"] == "org/tiny-llama"
    assert "Hugging Face Hub org/tiny-llama" in out["model"]["source"]
    # K and V x 2 layers x 2 heads x 16 x 2 bytes per token, at the config's 2,048 tokens.
    assert out["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 2 * 2048
    # The plain fit reads the same bytes: one device holds them all.
    assert out["fit"]["weight_bytes_per_device"] == 173_696


def test_the_models_folder_gives_the_same_answer(cached: Path, tmp_path: Path):
    folder = H.model_folder(tmp_path / "tiny", dict(H.TINY_LLAMA, torch_dtype="float32"), SHARDS)
    by_id = kvcalc("estimate", "org/tiny-llama", "--format", "json", env=offline(cached))
    by_folder = kvcalc("estimate", str(folder), "--format", "json")
    assert by_id.returncode == by_folder.returncode == 0, (by_id.stderr, by_folder.stderr)
    a, b = json.loads(by_id.stdout), json.loads(by_folder.stdout)
    for d in (a, b):
        del d["model"]["name"], d["model"]["source"]
    assert a == b


def test_an_uncached_id_offline_is_one_line_naming_it(cached: Path):
    r = kvcalc("estimate", "org/not-downloaded", env=offline(cached))
    line = refused(r, "org/not-downloaded", "HF_HUB_OFFLINE")
    assert "Traceback" not in line
    r = kvcalc("estimate", "org/tiny-llama@v2.0", env=offline(cached))
    refused(r, "org/tiny-llama@v2.0")


def test_a_revision_that_is_cached_answers(cached: Path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    r = kvcalc("estimate", f"org/tiny-llama@{commit}", "--format", "json", env=offline(cached))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["weight_bytes"] == TINY_BF16_BYTES


def test_headers_in_another_dtype_than_the_config_names(tmp_path: Path):
    """fp32 tensors under a config that says bfloat16: 4 bytes each; mixed dtypes count
    each tensor by its own."""
    f32 = H.model_folder(tmp_path / "f32", H.TINY_LLAMA,
                         {"model.safetensors": H.tiny_llama_tensors("F32")})
    assert resolve_model(str(f32)).extra["checkpoint"].total_bytes == 4 * 86_848
    mixed = [(n, "F32" if "norm" in n else "BF16", s) for n, _, s in H.tiny_llama_tensors()]
    folder = H.model_folder(tmp_path / "mixed", H.TINY_LLAMA, {"model.safetensors": mixed})
    r = kvcalc("estimate", str(folder), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # Norms: 2 layers x 2 x 64 + the final 64 = 320 elements at 4 bytes, the rest at 2.
    assert out["weight_bytes"] == 320 * 4 + (86_848 - 320) * 2 == 174_336
    # The config's count in the headers' main dtype (bf16) is 640 bytes short of them.
    assert "gives 173,696 B, 640 B less" in out["weights_source"]


def test_a_quantized_checkpoint_without_quantization_config(tmp_path: Path):
    """Whatever the layout, the headers' bytes: packed int32 values and fp16 scales for the
    MLP, say, under a config that says nothing of it (the cross-check says it differs)."""
    tensors = []
    for name, dtype, shape in H.tiny_llama_tensors():
        if ".mlp." in name:  # 4-bit: 8 values per int32, one fp16 scale per 32 inputs
            out_f, in_f = shape
            tensors += [(name.replace("weight", "qweight"), "I32", [out_f, in_f // 8]),
                        (name.replace("weight", "scales"), "F16", [out_f, in_f // 32])]
        else:
            tensors.append((name, dtype, shape))
    folder = H.model_folder(tmp_path / "q", H.TINY_LLAMA, {"model.safetensors": tensors})
    r = kvcalc("estimate", str(folder), "--format", "json", "--gpu", "none")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # MLP, per layer: gate and up 128x64, down 64x128: 3 x 8,192 weights -> 3 x 8,192 / 2
    # bytes of values, and 3 x 8,192 / 32 scales x 2 bytes; the rest in bf16.
    mlp_elements = 2 * 3 * 8192
    expected = 2 * (86_848 - mlp_elements) + mlp_elements // 2 + mlp_elements // 32 * 2
    assert out["weight_bytes"] == expected == 75_392 + 24_576 + 3_072
    assert "B more" in out["weights_source"]
    # The decode step reads those bytes (nothing left unread: untied 100-row table, batch 1
    # leaves 99 embedding rows of 64 x 2 bytes unread).
    assert out["decode"]["bytes_breakdown"]["weights"] == expected - 99 * 64 * 2


def test_a_variant_of_the_checkpoint_is_counted_from_the_config(tmp_path: Path):
    folder = H.model_folder(tmp_path / "tiny", H.TINY_LLAMA,
                            {"model.safetensors": H.tiny_llama_tensors("F32")})
    r = kvcalc("estimate", str(folder), "--kv-heads", "1", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # MQA: k and v shrink to 16 x 64 each per layer, 2 x 2 x (2,048 - 1,024) = 4,096 fewer.
    assert out["params"]["total"] == 86_848 - 4096
    assert out["weight_bytes"] == 2 * (86_848 - 4096)  # bf16, from the config
    assert "another shape" in out["weights_source"]


def test_a_folder_without_safetensors_falls_back_to_the_config(tmp_path: Path):
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(H.TINY_LLAMA))
    r = kvcalc("estimate", str(folder), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["weight_bytes"] == 2 * 86_848
    assert out["weights_source"] == "config.json (bf16): no safetensors files to read headers from"


def test_fit_and_sweep_take_model_too(tmp_path: Path):
    folder = H.model_folder(tmp_path / "tiny", H.TINY_LLAMA,
                            {"model.safetensors": H.tiny_llama_tensors("F32")})
    r = kvcalc("fit", str(folder), "--gpu", "l4", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["weight_bytes_per_device"] == 4 * 86_848
    assert out["weights_source"].startswith("safetensors header (1 file)")
    r = kvcalc("sweep", str(folder), "--seq-len", "16,32", "--format", "csv", "--gpu", "none")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    col = rows[0].split(",").index("weight_bytes")
    # The sweep's weights are the checkpoint's as estimate and fit count them (its F32
    # headers), unless --weight-dtype says otherwise (issue #22 point 2).
    assert [int(row.split(",")[col]) for row in rows[1:]] == [4 * 86_848] * 2
    r = kvcalc("sweep", str(folder), "--seq-len", "16", "--gpu", "none", "--weight-dtype", "bf16")
    assert int(r.stdout.splitlines()[1].split(",")[col]) == 2 * 86_848


def test_the_python_api_takes_model_too(tmp_path: Path):
    import kvcalc as api

    folder = H.model_folder(tmp_path / "tiny", H.TINY_LLAMA,
                            {"model.safetensors": H.tiny_llama_tensors("F32")})
    est = api.estimate(model=str(folder), seq_len=1024, gpu="none")
    assert est.weight_bytes == 4 * 86_848
    assert api.estimate(model=folder, seq_len=1024).weight_bytes == 4 * 86_848  # a Path too
    assert api.figures(folder, 1024).weight_bytes == 4 * 86_848
    assert api.param_counts(str(folder)).total == 86_848
    assert api.kv_cache("llama3-8b", 1024).bytes == 2 * 32 * 8 * 128 * 2 * 1024


def test_model_and_preset_together_is_one_clear_error():
    refused(kvcalc("estimate", "llama3-8b", "--preset", "gpt3"), "give MODEL or --preset")
    refused(kvcalc("fit", "gpt3", "--config", "tests/data/hf/gpt2.json"), "give MODEL or --config")


def test_resolution_order(tmp_path: Path, monkeypatch):
    """A preset name wins over a same-named folder; ./name is the folder; a config file
    is read as --config reads it; an unknown word suggests presets."""
    H.model_folder(tmp_path / "gpt3", H.TINY_LLAMA, {"model.safetensors": H.tiny_llama_tensors()})
    monkeypatch.chdir(tmp_path)
    assert resolve_model("gpt3").name == "gpt3"
    assert resolve_model("./gpt3").extra["checkpoint"].total_bytes == 2 * 86_848
    assert resolve_model(str(tmp_path / "gpt3")).name == "gpt3"  # the folder, named for it
    assert "checkpoint" in resolve_model(str(tmp_path / "gpt3")).extra
    config = ROOT / "tests" / "data" / "hf" / "gpt2.json"
    assert resolve_model(str(config)).layers == 12
    assert resolve_model("LLAMA3-8B").name == "llama3-8b"
    with pytest.raises(KvcalcError, match="unknown model 'llama9'.*did you mean"):
        resolve_model("llama9")
    with pytest.raises(KvcalcError, match="no such folder or file"):
        resolve_model("./gpt4")


# --- bad input: one line, exit 2, nothing of the file's contents ---------------------------
def _folder_with(tmp_path: Path, head: bytes, size: int) -> Path:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(H.TINY_LLAMA))
    H.write_raw(folder / "model.safetensors", head, size)
    return folder


def _header(obj) -> bytes:
    raw = json.dumps(obj).encode()
    return len(raw).to_bytes(8, "little") + raw


@pytest.mark.parametrize("case, make, words", [
    ("length past the end", lambda: (b"\x00\x10\x00\x00\x00\x00\x00\x00{}", 10),
     ["runs past the end"]),
    ("huge header", lambda: ((MAX_HEADER_BYTES + 1).to_bytes(8, "little") + b"{", 1 << 30),
     ["100,000,000-byte limit"]),
    ("not JSON", lambda: (len(b"{SECRET nonsense").to_bytes(8, "little") + b"{SECRET nonsense",
                          24), ["not valid JSON"]),
    ("not an object", lambda: (_header([1, 2]), 100), ["not a JSON object"]),
    ("offsets disagree with shape", lambda: (_header(
        {"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 30]}}), 2000),
     ["span 30 bytes", "16 BF16 elements take 32"]),
    ("a shape past any file", lambda: (_header(
        {"w": {"dtype": "U8", "shape": [10 ** 99] * 60, "data_offsets": [0, 3]}}), 9000),
     ["more elements than any file"]),
    ("a gap between tensors", lambda: (_header(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}), 2000),
     ["unused", "do not tile"]),
    ("file longer than the data", lambda: (_header(
        {"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}), 4096),
     ["end at byte 3"]),
    ("unknown dtype", lambda: (_header(
        {"a": {"dtype": "Q7", "shape": [3], "data_offsets": [0, 3]}}), 4096),
     ["unknown dtype"]),
    ("shorter than 8 bytes", lambda: (b"\x01\x02", 2), ["8-byte header length"]),
])
def test_a_safetensors_file_that_lies_is_one_line(tmp_path: Path, case, make, words):
    head, size = make()
    folder = _folder_with(tmp_path, head, size)
    line = refused(kvcalc("estimate", str(folder)), "model.safetensors", *words)
    assert "SECRET" not in line


def test_a_folder_without_config_json(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    refused(kvcalc("estimate", str(tmp_path / "empty")), "no config.json")


def test_an_index_naming_missing_files(tmp_path: Path):
    folder = H.model_folder(tmp_path / "tiny", H.TINY_LLAMA, SHARDS)
    os.remove(folder / "model-00002-of-00002.safetensors")
    refused(kvcalc("estimate", str(folder)), "model.safetensors.index.json", "1 file",
            "model-00002-of-00002.safetensors")


def test_an_index_that_is_not_an_index(tmp_path: Path):
    folder = H.model_folder(tmp_path / "tiny", H.TINY_LLAMA, SHARDS)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": ["SECRET"]}')
    line = refused(kvcalc("estimate", str(folder)), "weight_map")
    assert "SECRET" not in line
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../../etc/passwd"}}))
    refused(kvcalc("estimate", str(folder)), "not beside the index")


def test_a_symlink_loop_in_the_cache(cached: Path):
    snapshot = next((cached / "hub" / "models--org--tiny-llama" / "snapshots").iterdir())
    shard = snapshot / "model-00002-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to(snapshot / "loop")
    (snapshot / "loop").symlink_to(shard)
    refused(kvcalc("estimate", "org/tiny-llama", env=offline(cached)),
            "a loop of symbolic links")


def test_a_partly_cached_checkpoint_offline(cached: Path):
    snapshot = next((cached / "hub" / "models--org--tiny-llama" / "snapshots").iterdir())
    (snapshot / "model-00001-of-00002.safetensors").unlink()
    refused(kvcalc("estimate", "org/tiny-llama", env=offline(cached)),
            "does not hold", "HF_HUB_OFFLINE")


def test_read_header_counts_sub_byte_dtypes(tmp_path: Path):
    """F4 packs two elements a byte, F6 four in three bytes: 10 x F4 = 5 B, 4 x F6 = 3 B."""
    path = tmp_path / "x.safetensors"
    data = H.write_safetensors(path, [("a", "F4", [10]), ("b", "F6_E2M3", [4]),
                                      ("c", "C64", [2])])
    assert data == 5 + 3 + 16
    assert read_header(path) == {"F4": [5, 10, 1], "F6_E2M3": [3, 4, 1], "C64": [16, 2, 1]}


@needs_hub
def test_remote_headers_are_checked_as_local_ones(cached: Path, monkeypatch):
    """Online, a snapshot without the safetensors files asks the Hub for their headers
    (huggingface_hub's get_safetensors_metadata, HTTP range requests): stood in for here."""
    import huggingface_hub
    from huggingface_hub.utils import SafetensorsFileMetadata, SafetensorsRepoMetadata, TensorInfo

    snapshot = next((cached / "hub" / "models--org--tiny-llama" / "snapshots").iterdir())
    for f in snapshot.glob("*safetensors*"):
        f.unlink()

    def metadata(self, repo_id, revision=None, **kw):
        assert repo_id == "org/tiny-llama"
        files = {}
        for shard, tensors in SHARDS.items():
            raw, _ = H.header_bytes(tensors)
            header = json.loads(raw)
            files[shard] = SafetensorsFileMetadata(
                metadata=header.pop("__metadata__"),
                tensors={n: TensorInfo(dtype=t["dtype"], shape=t["shape"],
                                       data_offsets=tuple(t["data_offsets"]))
                         for n, t in header.items()})
        return SafetensorsRepoMetadata(metadata=None, sharded=True, weight_map={},
                                       files_metadata=files)

    monkeypatch.setattr(huggingface_hub.HfApi, "get_safetensors_metadata", metadata)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cached / "hub"))  # config.json from the cache
    monkeypatch.setattr(hfcache, "unreachable", lambda: None)  # the Hub "answers"
    spec = resolve_model("org/tiny-llama")
    assert spec.extra["checkpoint"].total_bytes == TINY_BF16_BYTES
    assert spec.extra["checkpoint"].files == 2


def test_analytic_commands_do_not_import_huggingface_hub(tmp_path: Path):
    folder = H.model_folder(tmp_path / "tiny", H.TINY_LLAMA, SHARDS)
    code = ("import sys; from typer.testing import CliRunner; from kvcalc.cli import app;"
            f"r = CliRunner().invoke(app, ['estimate', {str(folder)!r}, '--format', 'json']);"
            "assert r.exit_code == 0, r.output;"
            "print('huggingface_hub' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_a_published_checkpoint_total_from_its_headers(tmp_path: Path):
    """Qwen/Qwen3-0.6B as the Hub holds it (the published config.json, its tensors as
    modeling_qwen3 names them, bf16): the headers' elements are the Hub's safetensors
    total, 751,632,384 (it stores the tied lm_head too), at 2 bytes each; the config's
    count, which holds the tied matrix once, is 151,936 x 1,024 x 2 bytes fewer."""
    from kvcalc.presets import presets_dir

    cfg = json.loads((presets_dir() / "hf" / "Qwen__Qwen3-0.6B.json").read_text())
    folder = H.model_folder(tmp_path / "Qwen3-0.6B", cfg,
                            {"model.safetensors": H.qwen3_tensors(cfg)})
    r = kvcalc("estimate", str(folder), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["weight_bytes"] == 751_632_384 * 2
    assert out["params"]["total"] == 751_632_384 - 151_936 * 1_024
    assert f"{151_936 * 1_024 * 2:,} B less" in out["weights_source"]


def test_model_safetensors_is_read_alone_beside_other_files(tmp_path: Path):
    """Mistral's repos hold consolidated.safetensors beside the transformers files: without an
    index, model.safetensors is the checkpoint; alone, consolidated.safetensors is."""
    folder = H.model_folder(tmp_path / "m", H.TINY_LLAMA,
                            {"model.safetensors": H.tiny_llama_tensors()})
    H.write_safetensors(folder / "consolidated.safetensors", H.tiny_llama_tensors("F32"))
    assert resolve_model(str(folder)).extra["checkpoint"].total_bytes == 2 * 86_848
    os.remove(folder / "model.safetensors")
    assert resolve_model(str(folder)).extra["checkpoint"].total_bytes == 4 * 86_848


def test_a_cached_config_without_safetensors_offline(tmp_path: Path):
    src = tmp_path / "download"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(H.TINY_LLAMA))
    H.hf_cache(tmp_path / "hf", "org/config-only", src)
    r = kvcalc("estimate", "org/config-only", "--format", "json", env=offline(tmp_path / "hf"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["weight_bytes"] == 2 * 86_848
    assert out["weights_source"].startswith("config.json (bf16): no safetensors files")


def test_an_unknown_home_is_a_path_that_is_not_there():
    """`~nope` (no such user): a path, not found; Path.expanduser would raise instead."""
    refused(kvcalc("estimate", "~no-such-user-here/model"), "no such folder or file")


def test_a_symlink_loop_at_the_cached_config(cached: Path):
    snapshot = next((cached / "hub" / "models--org--tiny-llama" / "snapshots").iterdir())
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(snapshot / "again")
    (snapshot / "again").symlink_to(snapshot / "config.json")
    refused(kvcalc("estimate", "org/tiny-llama", env=offline(cached)),
            "org/tiny-llama", "config.json", "loop of symbolic links")
