"""Bytes of one matrix as stored: the tensors a converted matrix holds in each format
(kvcalc.quant.formats lists them), and the bytes of each stored element type.
"""

from __future__ import annotations

from kvcalc.ground.num import cdiv
from kvcalc.quant.formats import Quantization

# Stored element types and their bytes (checkpoint tensor dtypes).
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int32": 4, "int64": 8,
                 "int8": 1, "uint8": 1}


def _qs_json_bytes(q: Quantization, rows: int, cols: int, model_dtype: str) -> int:
    """Length of bitsandbytes' packed quant state (json.dumps of its non-tensor fields)."""
    torch_name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(model_dtype, "bfloat16")
    text = (f'{{"quant_type": "{q.quant_type or "nf4"}", "blocksize": {q.group_size}, '
            f'"dtype": "{torch_name}", "shape": [{rows}, {cols}]')
    if q.double_quant:
        # nested_offset is a float32 mean as a Python float: 17 significant digits
        # ("0.0" and 17 digits is typical; the real length varies by a byte or two).
        text += ', "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.04016156122088432'
    return len(text + "}")


def matrix_tensors(q: Quantization, rows: int, cols: int, model_dtype: str) -> list[tuple[str, str, int]]:
    """(role, element dtype, elements) of the tensors one converted matrix stores."""
    n, k, g = rows, cols, q.group_size
    lay = q.layout
    if lay == "fp8_block":
        bn, bk = q.block
        t = [("values", "fp8", n * k), ("scales", "fp32", cdiv(n, bn) * cdiv(k, bk))]
    elif lay == "fp8_channel":
        t = [("values", "fp8", n * k), ("scales", "fp32", n)]
    elif lay == "fp8_tensor":
        t = [("values", "fp8", n * k), ("scales", "fp32", 1)]
    elif lay == "mxfp4":
        blocks = cdiv(k, 32)
        t = [("values", "uint8", n * blocks * 16), ("scales", "uint8", n * blocks)]
    elif lay == "nvfp4":
        t = [("values", "uint8", n * cdiv(k, 2)), ("scales", "fp8", n * cdiv(k, 16)),
             ("scales", "fp32", 1)]
    elif lay == "awq":
        groups = cdiv(k, g) if g else 1
        packed = cdiv(n * q.bits, 32)
        t = [("values", "int32", k * packed), ("scales", "fp16", groups * n)]
        if q.zero_points:
            t.append(("zeros", "int32", groups * packed))
    elif lay == "gptq":
        groups = cdiv(k, g) if g else 1
        t = [("values", "int32", cdiv(k * q.bits, 32) * n), ("scales", "fp16", groups * n),
             ("zeros", "int32", groups * cdiv(n * q.bits, 32)), ("g_idx", "int32", k)]
    elif lay == "ct_int":
        groups = cdiv(k, g) if g else 1
        scale = model_dtype if model_dtype in ("bf16", "fp16", "fp32") else "bf16"
        t = [("values", "int32", n * cdiv(k * q.bits, 32)), ("scales", scale, n * groups),
             ("other", "int64", 2)]
        if q.zero_points:
            t.append(("zeros", "int32", cdiv(n * q.bits, 32) * groups))
        if q.g_idx:
            t.append(("g_idx", "int32", k))
    elif lay == "bnb4":
        blocks = cdiv(n * k, g or 64)
        t = [("values", "uint8", cdiv(n * k, 2)), ("scales", "fp32", 16)]
        if q.double_quant:
            t += [("scales", "uint8", blocks), ("scales", "fp32", cdiv(blocks, 256) + 256)]
        else:
            t.append(("scales", "fp32", blocks))
        t.append(("other", "uint8", _qs_json_bytes(q, n, k, model_dtype)))
    elif lay == "bnb8":
        t = [("values", "int8", n * k), ("scales", "fp32", n)]
    else:  # int (ad hoc): packed values, fp16 scales per group, packed zeros
        groups = cdiv(k, g) if g else 1
        t = [("values", "uint8", cdiv(n * k * q.bits, 8)), ("scales", q.scale_dtype, n * groups)]
        if q.zero_points:
            t.append(("zeros", "uint8", cdiv(n * groups * q.bits, 8)))
    if q.static_input_scale and (lay.startswith("fp8") or lay == "nvfp4"):
        t.append(("scales", "fp32", 1))
    return t

