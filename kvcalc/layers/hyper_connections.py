"""Hyper-connections: the residual stream kept as `streams` copies (config `hc_mult`)
instead of one. Before each attention block and each MLP block a small projection of
all the streams (flattened, unweighted-RMS-normed) gives the weights that collapse them
into that block's input ("pre") and spread its output back over them ("post"); after
the last layer a head collapses them once more, before the final norm.

Two forms, as transformers 5.24 builds them (its HyperConnection and HyperHead
modules), each projection `fn` of `outputs` rows by streams x d_model columns plus a
bias `base` of `outputs` and one `scale` per output kind:

* HY V4's independent form (HYV4HyperConnection, iHC): pre and post, 2 N outputs, 2
  scales.
* DeepSeek V4's manifold-constrained form (DeepseekV4HyperConnection, mHC): pre, post
  and an N x N stream-mixing matrix "comb" (Sinkhorn-normalised), (2 + N) N outputs,
  3 scales.
* the head (both): N outputs, 1 scale.

All of it is kept in fp32 whatever the model's dtype: transformers lists the tensors in
`_keep_in_fp32_modules_strict` (fn, base, scale, hc_fn, hc_base, hc_scale), and vLLM
0.32 builds them with params_dtype=torch.float32 (models/hy_v4/nvidia/hc.py). Between
blocks the hidden state is N times as wide (not modelled in the activation estimate).
"""

from __future__ import annotations

from kvcalc.ground.record import record

HYPER_CONNECTION_DTYPE = "fp32"


@record
class HyperConnections:
    """A decoder's hyper-connections: `per_layer` of them in every decoder layer (one
    before attention, one before the MLP) and one head after the last layer."""

    streams: int  # hc_mult: copies of the residual stream
    comb: bool = False  # DeepSeek V4: an N x N stream-mixing matrix beside pre and post
    per_layer: int = 2

    def block_tensors(self, d_model: int) -> dict[str, int]:
        """One block's hyper-connection: its projection, bias and scales."""
        n = self.streams
        outputs = 2 * n + (n * n if self.comb else 0)
        return {"fn": outputs * n * d_model, "base": outputs, "scale": 3 if self.comb else 2}

    def head_tensors(self, d_model: int) -> dict[str, int]:
        """The head that collapses the streams after the last layer."""
        n = self.streams
        return {"hc_fn": n * n * d_model, "hc_base": n, "hc_scale": 1}

    def params(self, d_model: int, layers: int) -> int:
        """Every hyper-connection weight of a `layers`-deep decoder, its head included."""
        return (layers * self.per_layer * sum(self.block_tensors(d_model).values())
                + sum(self.head_tensors(d_model).values()))
