"""Attention that reuses another layer's K/V (Gemma 4's `num_kv_shared_layers`).

The last `num_kv_shared_layers` layers of a Gemma 4 model project only queries: each
attends over the keys and values the last earlier layer of its own kind (sliding or
full) cached, and keeps no cache of its own. transformers gives such a layer a
`DummyLayer` in its cache (no tensors: cache_utils.get_layer_types_and_kwargs turns the
"reuse" layers of `kv_sharing_modes` into "dummy"); vLLM 0.32 gives it no KV cache spec
at all (`kv_sharing_target_layer_name`: gpu_model_runner.get_kv_cache_spec skips it, "so
that KV cache management logic will act as this layer does not exist").

What it reads per decode step is what its kind reads (the producer's window or every
token), so its attention FLOPs are an ordinary layer's; what it adds to the cache is none.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc._num import Linear
from kvcalc._record import record
from kvcalc.dtypes import DType
from kvcalc.layers import Attention


@record
class SharedKV(Attention):
    """Queries over the K/V an earlier layer of the same kind cached: q and o projections
    (and the q norm) only, nothing cached."""

    tokens_written = 0  # the producer layer wrote this step's K/V

    @property
    def label(self) -> str:
        return f"{self._keeps.label(self.window)} (shared K/V)"

    @property
    def cache_kind(self) -> str:
        return "shared"

    def token_bytes(self, dt: DType, tp: int = 1, scale_bytes: int = 0) -> int:
        self.kv_heads_per_device(tp)  # the split is still checked
        return 0

    def tokens_held(self, seq_len, encoder_len=None):
        return 0 * seq_len  # an int, or zeros shaped like a sweep's lengths

    def kv_cache_spec(self, specs):
        return 0  # no spec: vLLM skips the layer (it is never asked: it holds no bytes)

    def tensors(self, d_model: int) -> dict[str, Linear | int]:
        out = dict(super().tensors(d_model))
        del out["k"]
        out.pop("v", None)
        return out

    def kv_projection_params(self, d_model: int) -> int:
        return 0

    def matmuls(self, d_model: int) -> list[tuple[int, int]]:
        q_out = self.heads * self.head_dim
        return [(d_model, q_out), (self.heads * self.v_head_dim, d_model)]

    def with_kv_heads(self, kv_heads: int) -> "SharedKV":
        return replace(self, kv_heads=kv_heads)
