"""kvcalc: exact KV-cache, parameter and decode-step math, and measurements that check it.

The public Python API, re-exported. No torch, pandas or rich is imported here.
"""

__version__ = "0.1.0"

from kvcalc.errors import KvcalcError
from kvcalc.estimate import Estimate, attention_variants, estimate
from kvcalc.formulas import (
    attention_step,
    decode_step,
    kv_bytes_per_token_per_layer,
    kv_cache,
    kv_heads_per_device,
    param_counts,
    shazeer_ratio,
)
from kvcalc.roofline import decode_roofline, fit
from kvcalc.spec import DTYPES, MLA, DType, Hardware, ModelSpec, MoE, dtype

__all__ = [
    "DTYPES", "MLA", "DType", "Estimate", "Hardware", "KvcalcError", "ModelSpec", "MoE",
    "attention_step", "attention_variants", "decode_roofline", "decode_step", "dtype",
    "estimate", "fit", "kv_bytes_per_token_per_layer", "kv_cache", "kv_heads_per_device",
    "param_counts", "shazeer_ratio", "__version__",
]
