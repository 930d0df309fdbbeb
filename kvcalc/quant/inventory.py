"""The model's tensors as a checkpoint holds them: every matrix of every decoder layer
under its module name ("layers.3.self_attn.q_proj"), and the rest as plain counts.

Each layer kind lists its own weights (`tensors(d_model)` in kvcalc.layers); this
module names them as checkpoints do, adds the MoE routers, experts and shared experts,
DeepSeek-V3's multi-token-prediction module, and whatever kvcalc.formulas.param_counts
counts beyond the decoder layers (embedding, lm_head, final norm, encoder stacks,
position tables).
"""

from __future__ import annotations

from kvcalc.ground.num import Linear
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.layers.hyper_connections import HYPER_CONNECTION_DTYPE
from kvcalc.spec import ModelSpec

# param_counts keys whose tensors a checkpoint and the engine keep in a dtype of their own
_KEY_DTYPES = {"hyper_connections": HYPER_CONNECTION_DTYPE}


@record
class Matrix:
    """One weight matrix (or `count` identical ones), stored as the format says."""

    key: str  # param_counts breakdown key
    name: str  # module name under the decoder ("layers.3.self_attn.q_proj")
    rows: int  # fan_out
    cols: int  # fan_in
    count: int = 1  # identical matrices (experts)
    bias: bool = False
    role: str = "linear"  # linear, expert, router, head
    kv: bool = False  # a K/V projection (follows its heads under TP)


@record
class Plain:
    """Elements kept in the model dtype (or `dtype`): norms, convolutions, biases apart."""

    key: str
    elements: int
    dtype: str = ""  # "": the model dtype


def _named(tensors: dict, key: str, base: str, count: int = 1, role: str = "linear") -> list:
    """A layer kind's `tensors()`, in their order, under module `base` and breakdown
    `key` ("{}" in it: the tensor's own name, as the mixers' keys in param_counts)."""
    return [Matrix(key.format(name), f"{base}.{t.module or name}", t.fan_out, t.fan_in, count,
                   t.bias, role, t.kv) if isinstance(t, Linear) else Plain(key.format(name), t)
            for name, t in tensors.items()]


def _mixer_items(mx, d: int, prefix: str) -> list:
    """The mixer's tensors: its projections as matrices, the rest as plain params."""
    return _named(mx.tensors(d), mx.param_key + "/{}", f"{prefix}.{mx.module}")


_SCORE_BIAS_BUFFER = ("deepseek_v3", "hy_v4")


def _mlp_items(mlp, d: int, prefix: str, model_type: str) -> list:
    if mlp is None:
        return []
    if not mlp.experts:  # a dense MLP
        return _named(mlp.tensors(d), "mlp", f"{prefix}.mlp")
    router = "router" if model_type == "gpt_oss" else "gate"
    routes = mlp.router_logits  # LongCat-Flash: its identity experts too; Doge: 2 x sqrt(E)
    out: list = [Matrix("moe/router", f"{prefix}.mlp.{router}", routes, d,
                        bias=mlp.router_bias, role="router")]
    if mlp.router_scales:  # Gemma 4's router scales, kept as plain weights
        out.append(Plain("moe/router", d + mlp.experts))
    if model_type in _SCORE_BIAS_BUFFER:
        # DeepSeek-V3's (HY V4's) e_score_correction_bias: fp32 in the checkpoint, a buffer
        # (not a parameter) in transformers, so param_counts leaves it out.
        out.append(Plain("buffers", mlp.experts, "fp32"))
    out += _named(mlp.expert.tensors(mlp.expert_width(d)), "moe/experts",
                  f"{prefix}.mlp.experts.0", mlp.experts, "expert")
    out += _named(mlp.latent_tensors(d), "moe/latent_proj", f"{prefix}.mlp")
    if mlp.shared_experts:
        shared = "shared_expert" if mlp.shared_gate else "shared_experts"
        out += _named(mlp.shared.tensors(d), "moe/shared_experts", f"{prefix}.mlp.{shared}",
                      mlp.shared_experts)
        if mlp.shared_gate:
            out.append(Matrix("moe/shared_gate", f"{prefix}.mlp.shared_expert_gate", 1, d,
                              role="router"))
    return out


def _layer_items(layer, d: int, index: int, model_type: str, norm: int) -> list:
    prefix = f"layers.{index}"
    items = [it for mx in layer.mixers if mx is not layer.cross
             for it in _mixer_items(mx, d, prefix)]
    items += _mlp_items(layer.mlp, d, prefix, model_type)
    if layer.norms:
        items.append(Plain("norms", layer.norms * norm))
    return items


def model_tensors(spec: ModelSpec, mtp_layers: int = 0, *, per_layer: bool = True
                  ) -> list[tuple[list, int, object]]:
    """(items, times, layer) for every decoder layer (each index once: patterns may name
    layers), then (layer None) the multi-token-prediction layers, and the embedding,
    lm_head, final norm and whatever param_counts counts beyond the decoder layers
    (encoder stacks, position tables) as plain params. `per_layer` False: one entry per
    run of identical layers, `times` its count, named as its first layer (for a format
    whose choices do not follow module names: 96 layers of GPT-3 listed once, not 96
    times)."""
    from kvcalc.formulas.params import norm_params, param_counts

    d = spec.d_model
    model_type = spec.extra.get("hf_model_type", "")
    norm = norm_params(spec)
    out: list[tuple[list, int, object]] = []
    i = 0
    for run in spec.runs:
        if not run.layer.owns_weights:
            continue  # a pass over an earlier layer's weights: listed with that layer
        if not per_layer:
            out.append((_layer_items(run.layer, d, i, model_type, norm), run.count, run.layer))
            i += run.count
            continue
        for _ in range(run.count):
            out.append((_layer_items(run.layer, d, i, model_type, norm), 1, run.layer))
            i += 1
    decoder = len(out)
    if mtp_layers:
        # DeepSeek-V3's multi-token-prediction module (num_nextn_predict_layers), as its
        # checkpoint stores it: a copy of the last decoder layer, enorm, hnorm, eh_proj
        # (2d -> d, kept in the model dtype), and its own embedding, norm and head.
        last = spec.runs[-1].layer
        for j in range(mtp_layers):
            items = _layer_items(last, d, spec.layers + j, model_type, norm)
            items += [Plain("mtp", 2 * d * d + 3 * norm + 2 * spec.vocab * d)]
            out.append((items, 1, None))
    counts = param_counts(spec).breakdown
    covered: dict[str, int] = {}
    for items, times, _ in out[:decoder]:
        for it in items:
            if it.key == "buffers":
                continue
            n = it.elements if isinstance(it, Plain) else it.count * (
                it.rows * it.cols + (it.rows if it.bias else 0))
            covered[it.key] = covered.get(it.key, 0) + n * times
    tail: list = []
    head = counts.get("lm_head", 0)
    if head:
        tail.append(Matrix("lm_head", "lm_head", spec.vocab, d, role="head"))
    for key, n in counts.items():
        rest = n - covered.get(key, 0) - (head if key == "lm_head" else 0)
        if rest < 0:
            raise KvcalcError(f"{spec.name}: the tensors listed for {key!r} exceed its parameter "
                              f"count by {-rest:,} (a layer kind kvcalc.quant does not know)")
        if rest:
            tail.append(Plain(key, rest, _KEY_DTYPES.get(key, "")))
    out.append((tail, 1, None))
    return out

