"""Storage types and the size limits every input is checked against: the ground floor.

Nothing here imports another kvcalc module but errors, so every layer above may use
it (models, layers, formulas, capacity, the CLI) without an import circle.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, quoted

# Upper bounds that catch typos (an extra zero or three), not real models.
MAX_LAYERS = 10_000
MAX_WIDTH = 1 << 22  # d_model, d_ff, vocab, head_dim, heads
MAX_SEQ_LEN = 1 << 34  # 17 billion tokens
MAX_BATCH = 1 << 24
MAX_TP = 4096


@record
class DType:
    """A storage type. Size is in bits so that int4 (half a byte) stays exact."""

    name: str
    bits: int

    def nbytes(self, elements: int) -> int:
        """Bytes for `elements` values, rounded up to whole bytes (packed int4)."""
        return -(-elements * self.bits // 8)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp32", 32),
        DType("bf16", 16),
        DType("fp16", 16),
        DType("fp8", 8),
        DType("int8", 8),
        DType("int4", 4),
    )
}
DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}


def dtype(name: str) -> DType:
    """Look a dtype up by name or common alias; a KvcalcError names the choices."""
    key = DTYPE_ALIASES.get(name.lower(), name.lower())
    try:
        return DTYPES[key]
    except KeyError:
        raise KvcalcError(
            f"unknown dtype {quoted(name)}; choose one of: {', '.join(DTYPES)}"
        ) from None


# --weight-dtype also takes the checkpoint formats users name weights by (vLLM's
# --quantization awq|gptq): their values' dtype here, their layout in kvcalc.quant
# (AWQ and GPTQ int4, 128 weights per group unless --group-size says).
WEIGHT_FORMATS = {"awq": "int4", "gptq": "int4"}


def weight_dtype(name: str) -> DType:
    """The dtype of weight values a --weight-dtype names: a dtype (dtype()) or a
    checkpoint format of WEIGHT_FORMATS (awq -> int4); a KvcalcError names the choices."""
    key = name.strip().lower()
    if key in WEIGHT_FORMATS:
        return DTYPES[WEIGHT_FORMATS[key]]
    try:
        return dtype(name.strip())
    except KvcalcError:
        raise KvcalcError(f"unknown dtype {quoted(name)} for weights; choose one of: "
                          f"{', '.join([*DTYPES, *WEIGHT_FORMATS])}") from None


def check_size(name: str, value: int, upper: int) -> int:
    """A positive integer below a sanity limit, or a KvcalcError naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KvcalcError(f"{name} must be an integer, got {value!r}")
    if value <= 0:
        raise KvcalcError(f"{name} must be positive, got {value}")
    if value > upper:
        shown = value if value.bit_length() <= 64 else f"a {value.bit_length():,}-bit number"
        raise KvcalcError(f"{name}={shown} is absurdly large (limit {upper})")
    return value
