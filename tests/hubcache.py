"""Model folders and Hugging Face caches built in a test's tmp_path, with SPARSE
safetensors files: each is its real header and then a hole as long as the data the
header promises (the file system stores no weights). Nothing here uses kvcalc.

The cache layout is huggingface_hub's (its docs, "Manage the cache"):
    <HF_HOME>/hub/models--<org>--<name>/
        refs/main                      the commit `main` points at
        blobs/<id>                     each file's content once
        snapshots/<commit>/<file>      a relative symbolic link to its blob
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

# Bits per element, from the safetensors format's own table (written out here, not read
# from kvcalc): the bytes a tensor takes are elements x bits / 8.
BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
        "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
        "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64}


def header_bytes(tensors: list[tuple[str, str, list[int]]]) -> tuple[bytes, int]:
    """(the JSON header, padded with spaces to a multiple of 8 as safetensors writes it,
    and the data's length) for tensors laid end to end in the order given."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return raw + b" " * (-len(raw) % 8), offset


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int]]]) -> int:
    """A sparse .safetensors file: length, header, then a hole as long as the data.
    Returns the data's length (the sum the header promises)."""
    raw, data = header_bytes(tensors)
    write_raw(path, len(raw).to_bytes(8, "little") + raw, 8 + len(raw) + data)
    return data


def write_raw(path: Path, head: bytes, size: int) -> None:
    """`head`, then a hole up to `size` bytes (for headers that lie on purpose)."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def write_index(path: Path, shards: dict[str, list[tuple[str, str, list[int]]]]) -> None:
    weight_map = {name: shard for shard, tensors in shards.items() for name, _, _ in tensors}
    path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))


def model_folder(folder: Path, config: dict,
                 shards: dict[str, list[tuple[str, str, list[int]]]]) -> Path:
    """A folder as save_pretrained leaves it: config.json, the shards, and an index when
    there is more than one shard."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name, tensors in shards.items():
        write_safetensors(folder / name, tensors)
    if len(shards) > 1:
        write_index(folder / "model.safetensors.index.json", shards)
    return folder


def hf_cache(hf_home: Path, repo_id: str, folder: Path,
             commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """Move the files of `folder` into a Hub cache under `hf_home` for `repo_id` at `main`
    (blobs named by content hash, snapshot entries linking to them). Returns the snapshot."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for path in sorted(folder.iterdir()):
        with open(path, "rb") as f:  # the header identifies a sparse file well enough
            blob = hashlib.sha256(f.read(1 << 16) + str(path.stat().st_size).encode()).hexdigest()
        os.replace(path, repo / "blobs" / blob)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / blob)
    return snapshot


# A small Llama (transformers' LlamaConfig / modeling_llama names and shapes): hidden 64,
# 2 layers, 4 heads and 2 K/V heads of 16, MLP 128, vocabulary 100, untied head.
TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "intermediate_size": 128, "vocab_size": 100,
              "max_position_embeddings": 2048, "tie_word_embeddings": False,
              "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
# Its parameters, by hand: per layer q 64x64, k 32x64, v 32x64, o 64x64, gate and up 128x64,
# down 64x128, two norms of 64; then the embedding 100x64, the final norm 64, lm_head 100x64.
TINY_LLAMA_PARAMS = 2 * (4096 + 2048 + 2048 + 4096 + 3 * 8192 + 2 * 64) + 6400 + 64 + 6400


def tiny_llama_tensors(dtype: str = "BF16") -> list[tuple[str, str, list[int]]]:
    out = [("model.embed_tokens.weight", dtype, [100, 64])]
    for i in range(2):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", dtype, [64, 64]),
                (p + "self_attn.k_proj.weight", dtype, [32, 64]),
                (p + "self_attn.v_proj.weight", dtype, [32, 64]),
                (p + "self_attn.o_proj.weight", dtype, [64, 64]),
                (p + "mlp.gate_proj.weight", dtype, [128, 64]),
                (p + "mlp.up_proj.weight", dtype, [128, 64]),
                (p + "mlp.down_proj.weight", dtype, [64, 128]),
                (p + "input_layernorm.weight", dtype, [64]),
                (p + "post_attention_layernorm.weight", dtype, [64])]
    return out + [("model.norm.weight", dtype, [64]), ("lm_head.weight", dtype, [100, 64])]


def qwen3_tensors(cfg: dict, dtype: str = "BF16") -> list[tuple[str, str, list[int]]]:
    """The tensors a Qwen3 checkpoint stores (transformers' modeling_qwen3 names): a Llama
    with per-head q_norm and k_norm, no biases, and lm_head stored even when tied (the
    Hub's totals count it: Qwen3-0.6B's 751,632,384)."""
    d, heads, kv, hd = (cfg["hidden_size"], cfg["num_attention_heads"],
                        cfg["num_key_value_heads"], cfg["head_dim"])
    ff, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    out = [("model.embed_tokens.weight", dtype, [vocab, d])]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", dtype, [heads * hd, d]),
                (p + "self_attn.k_proj.weight", dtype, [kv * hd, d]),
                (p + "self_attn.v_proj.weight", dtype, [kv * hd, d]),
                (p + "self_attn.o_proj.weight", dtype, [d, heads * hd]),
                (p + "self_attn.q_norm.weight", dtype, [hd]),
                (p + "self_attn.k_norm.weight", dtype, [hd]),
                (p + "mlp.gate_proj.weight", dtype, [ff, d]),
                (p + "mlp.up_proj.weight", dtype, [ff, d]),
                (p + "mlp.down_proj.weight", dtype, [d, ff]),
                (p + "input_layernorm.weight", dtype, [d]),
                (p + "post_attention_layernorm.weight", dtype, [d])]
    return out + [("model.norm.weight", dtype, [d]), ("lm_head.weight", dtype, [vocab, d])]
