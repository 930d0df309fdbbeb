"""One decode step's FLOPs and bytes moved (weights, KV cache, activations), per device
under tensor parallelism, and the FLOPs of processing a prompt.

Sources, cited per function:
- Kaplan et al. 2020 (arXiv:2001.08361) Table 1 / Chinchilla: forward FLOPs about
  2 x parameters per token plus the attention term.
- DeepSeek-AI 2024, "DeepSeek-V2" (arXiv:2405.04434) section 2.1.3: MLA's absorbed
  (decode) and decompressed (prefill) attention.
"""

from __future__ import annotations

from dataclasses import field

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import DType
from kvcalc.formulas.cache import as_dtype, cache_groups, check_axes, kv_cache
from kvcalc.formulas.params import (param_counts, repeated_pass_params,
                                    weight_params_per_device)
from kvcalc.spec import ModelSpec


def token_matmuls(spec: ModelSpec) -> list[tuple[int, int, int]]:
    """(fan_in, fan_out, count) of every matmul one decoder token runs, lm_head aside.

    Each layer's mixer projections and its MLP; MoE layers run the router,
    `active` routed and every shared expert; encoder-decoder layers also run the
    cross-attention q and o (its K/V come from the encoder, computed once).
    Used for FLOPs (2 x fan_in x fan_out) and for activation traffic (each matmul
    reads its input and writes its output once). Norms, residual adds and the MLP
    activation are assumed fused into neighbouring kernels.
    """
    return _matmuls(spec.groups(), spec.d_model)


def _matmuls(groups, d: int) -> list[tuple[int, int, int]]:
    mm = []
    for layer, n in groups:
        for mixer in layer.mixers:
            mm += [(i, o, n) for i, o in mixer.matmuls(d)]
        if layer.mlp is not None:
            mm += [(i, o, n) for i, o in layer.mlp.matmuls(d)]
    return mm


@record
class StoredWeights:
    """Weights as a (quantized) checkpoint stores them: bytes in all, by param_counts key,
    and on one of `tp` devices (kvcalc.quant computes them).

    Counted from a checkpoint's safetensors headers, `source` says so and `towers` holds
    the vision towers' bytes (else None: the towers are in the workload's dtype)."""

    total: int
    breakdown: dict
    per_device: int
    tp: int = 1
    label: str = ""
    source: str = ""
    towers: int | None = None


@record
class DecodeCost:
    """One decode step: one new token for each of `batch` sequences at `seq_len`.

    The step attends over seq_len positions (the new token's K/V included),
    reads the cache at its current length and writes one token's K/V. Bytes are
    what must cross the memory bus at least once: weights read once per step,
    KV cache read, new K/V written, activations in and out of each matmul.
    """

    seq_len: int
    batch: int
    flops: int
    bytes: int
    flops_breakdown: dict[str, int]
    bytes_breakdown: dict[str, int]
    attention_flops: int  # score and value products over the context only
    attention_bytes: int  # K/V read + new K/V written + q in + attention output out
    prefill_flops: int  # processing a seq_len-token prompt for each sequence
    experts_read_per_layer: int = 0  # MoE: distinct routed experts a step touches (bound)
    per_device_bytes: int = 0  # with TP: one device's share
    per_device_flops: int = 0
    tp: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    # One device's bytes by part (weights, kv, activations): K/V as that device stores
    # them, so a cache every rank keeps whole (an MLA latent, K/V heads fewer than tp)
    # is read whole on each, where the weights split
    per_device_breakdown: dict = field(default_factory=dict)

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved for the whole step."""
        return self.flops / self.bytes

    @property
    def attention_intensity(self) -> float:
        return self.attention_flops / self.attention_bytes


def decode_step(
    spec: ModelSpec,
    seq_len: int,
    batch: int = 1,
    weight_dtype: DType | str = "bf16",
    kv_dtype: DType | str = "bf16",
    act_dtype: DType | str = "bf16",
    tp: int = 1,
    scale_bytes: int = 0,
    encoder_seq_len: int | None = None,
    prefill: bool = True,
    stored=None,
) -> DecodeCost:
    """FLOPs and minimum bytes moved by one decode step of the whole model.

    FLOPs: 2 x fan_in x fan_out for every matmul the token runs (projections,
    MLP or its active experts, lm_head) plus the attention over the context
    (Kaplan et al. 2020 Table 1: 2N + 2 n_layer n_ctx d_attn per token).
    Bytes: weights once per step (the embedding table only for the batch's rows
    unless tied to the lm_head; MoE: at most min(experts, batch x active) routed
    experts per layer), the KV cache at its current length (window-aware), one
    new token's K/V, and activations (each matmul reads its input, writes its output).

    seq_len and batch may be ints (exact) or equal-shape numpy arrays (a sweep: int64,
    object or float64); `prefill=False` skips the prompt FLOPs a sweep row does not show.
    `stored`: the weights as a quantized checkpoint stores them (quant.weights.weight_bytes and
    its per-device figure, `.total`, `.breakdown`, `.per_device`); the step then reads
    those bytes less the rows and experts it does not touch, instead of `weight_dtype`.
    """
    check_axes(seq_len, batch)
    wdt, kdt, adt = as_dtype(weight_dtype), as_dtype(kv_dtype), as_dtype(act_dtype)
    d = spec.d_model
    params = param_counts(spec)
    cache = kv_cache(spec, seq_len, batch, kdt, tp, scale_bytes, encoder_seq_len)
    notes: list[str] = []

    # --- matmuls one token runs ---
    mm = token_matmuls(spec)
    experts_touched = 0
    unread_expert_params = 0
    unread_expert_slots = 0  # routed experts x layers the step does not read
    expert_slots = 0
    for layer, n in spec.groups():
        m = layer.mlp
        if m is not None and m.experts:
            touched = _num.minimum(batch * m.active, m.experts)
            experts_touched = _num.maximum(experts_touched, touched)
            unread_expert_params += (m.experts - touched) * m.expert_params(d) * n
            unread_expert_slots += (m.experts - touched) * n
            expert_slots += m.experts * n
            if isinstance(touched, int):
                note = (f"MoE weights: up to {touched} of {m.experts} routed experts read per "
                        f"layer (min(experts, batch x active), an upper bound)")
                if note not in notes:
                    notes.append(note)
    mm.append((d, spec.vocab, 1))  # lm_head

    proj_flops_per_token = sum(2 * i * o * c for i, o, c in mm)
    attn_flops_per_token = 0
    for layer, n in spec.groups():
        for mx in layer.mixers:
            attn_flops_per_token += n * mx.step_flops(seq_len, encoder_seq_len)

    flops_breakdown = {
        "projections_and_mlp": proj_flops_per_token * batch,
        "attention": attn_flops_per_token * batch,
    }
    flops = sum(flops_breakdown.values())

    # --- weights read once per step ---
    read_params = params.total
    if not spec.tied_embeddings:
        # Untied input table: only the rows of this step's tokens are read.
        read_params = read_params - spec.vocab * d + _num.minimum(batch, spec.vocab) * d
    if spec.learned_pos:
        read_params = (read_params - spec.learned_pos * d
                       + _num.minimum(batch, spec.learned_pos) * d)
    if spec.per_layer_rows:  # Gemma 4's per-layer table: its rows for this step's tokens
        read_params = read_params - (spec.per_layer_rows - _num.minimum(
            batch, spec.per_layer_rows)) * spec.per_layer_width
    if spec.encoder_runs:
        # The encoder ran at prefill; cross-attention K/V projections ran then too.
        read_params -= sum(n for k, n in params.breakdown.items() if k.startswith("encoder/"))
        read_params -= params.breakdown.get("cross_attention/k", 0)
        read_params -= params.breakdown.get("cross_attention/v", 0)
    read_params -= unread_expert_params
    # A looped model's passes over shared weights read them again (the MoE loop above
    # already left their unread experts out).
    again, again_dev = repeated_pass_params(spec), repeated_pass_params(spec, tp)
    if again:
        notes.append("layers run again with the same weights read them once per pass")
    if stored is None:
        weight_bytes = wdt.nbytes(read_params + again)
        weight_bytes_dev = wdt.nbytes(weight_params_per_device(spec, read_params, tp, params)
                                      + again_dev)
    else:
        # The same rows and experts left unread, in the bytes the checkpoint stores them.
        by_key = stored.breakdown
        unread_bytes = 0
        if not spec.tied_embeddings:
            unread_bytes += (spec.vocab - _num.minimum(batch, spec.vocab)) * (
                by_key.get("embedding", 0) // spec.vocab)
        if spec.learned_pos:
            unread_bytes += (spec.learned_pos - _num.minimum(batch, spec.learned_pos)) * (
                by_key.get("position_embedding", 0) // spec.learned_pos)
        if spec.per_layer_rows:
            unread_bytes += (spec.per_layer_rows - _num.minimum(batch, spec.per_layer_rows)) * (
                by_key.get("per_layer_embedding", 0) // spec.per_layer_rows)
        if spec.encoder_runs:
            unread_bytes += sum(n for k, n in by_key.items() if k.startswith("encoder/"))
            unread_bytes += by_key.get("cross_attention/k", 0) + by_key.get("cross_attention/v", 0)
        if expert_slots:
            unread_bytes += unread_expert_slots * (by_key.get("moe/experts", 0) // expert_slots)
        # passes again: at the checkpoint's average bytes per parameter
        again_bytes = stored.total * again // params.total
        weight_bytes = stored.total - unread_bytes + again_bytes
        weight_bytes_dev = stored.per_device - -(-unread_bytes // tp) + -(-again_bytes // tp)

    # Caches are read at their current length (state layers: the whole state), one
    # token's K/V is written per attention layer and each state is written back.
    kv_read = cache.bytes
    state_batch = cache.state_bytes_per_sequence * batch
    kv_write = cache.bytes_per_token * batch + state_batch
    act_elems = sum((i + o) * c for i, o, c in mm) * batch
    # Attention reads q and writes its output for every layer (K/V counted above).
    qo_elems = sum(n * mx.decode_act_elements() for layer, n in spec.groups()
                   for mx in layer.mixers)
    attn_act_bytes = adt.nbytes(qo_elems * batch)
    act_bytes = adt.nbytes(act_elems) + attn_act_bytes

    bytes_breakdown = {
        "weights": weight_bytes,
        "kv_read": kv_read,
        "kv_write": kv_write,
        "activations": act_bytes,
    }
    total_bytes = sum(bytes_breakdown.values())

    # Per device under TP: weights and activations split evenly, K/V as stored per device.
    kv_write_dev = batch * sum(
        g.layers * (g.token_bytes * g.mixer.tokens_written + g.state_bytes)
        for g in cache_groups(spec, kdt, tp, scale_bytes, cache.state_dtype))
    kv_dev = cache.bytes_per_device + kv_write_dev
    act_dev = -(-act_bytes // tp)
    per_device_bytes = weight_bytes_dev + kv_dev + act_dev

    prefill_total = prefill_flops(spec, seq_len, encoder_seq_len) * batch if prefill else 0

    return DecodeCost(
        seq_len=seq_len,
        batch=batch,
        flops=flops,
        bytes=total_bytes,
        flops_breakdown=flops_breakdown,
        bytes_breakdown=bytes_breakdown,
        attention_flops=attn_flops_per_token * batch,
        attention_bytes=kv_read + kv_write + attn_act_bytes,
        prefill_flops=prefill_total,
        experts_read_per_layer=experts_touched,
        per_device_bytes=per_device_bytes,
        per_device_flops=-(-flops // tp),
        tp=tp,
        notes=tuple(notes),
        per_device_breakdown={"weights": weight_bytes_dev, "kv": kv_dev, "activations": act_dev},
    )


def prefill_flops(spec: ModelSpec, seq_len: int, encoder_seq_len: int | None = None) -> int:
    """FLOPs to process one `seq_len`-token prompt (one sequence).

    Every matmul a token runs, for every prompt token, except the lm_head, which
    runs for the last position only (logits for the next token); plus causal
    attention, sum_i min(i, window) positions per layer (MLA in its decompressed
    form). Encoder-decoder: also the encoder over `encoder_seq_len` tokens
    (bidirectional attention). Any cross-attending model: the cross-attention K/V
    projections of the encoder's output in every such layer, and each prompt token's
    cross-attention over it.
    """
    d = spec.d_model
    mm = token_matmuls(spec)
    per_token = sum(2 * i * o * c for i, o, c in mm)
    lm_head = 2 * d * spec.vocab

    attn = sum(n * mx.prefill_flops(seq_len, encoder_seq_len)
               for layer, n in spec.groups() for mx in layer.mixers)
    total = per_token * seq_len + lm_head + attn

    if spec.encoder_runs:
        # The encoder's layers over its tokens, each token attending to all of them
        # (bidirectional), and every decoder layer's cross-attention K/V of its output.
        enc_len = seq_len if encoder_seq_len is None else encoder_seq_len
        encoder = [(run.layer, run.count) for run in spec.encoder_runs]
        total += enc_len * sum(2 * i * o * c for i, o, c in _matmuls(encoder, d))
        total += enc_len * sum(n * layer.mixer.decode_flops(enc_len) for layer, n in encoder)
    if spec.cross_attends:
        # Every cross-attending layer projects K and V of the encoder's output once: T5's
        # own encoder, or one outside the decoder (Mllama's vision model, MusicGen's T5).
        enc_len = seq_len if encoder_seq_len is None else encoder_seq_len
        total += enc_len * sum(n * 2 * i * o for layer, n in spec.groups() if layer.cross
                               for i, o in layer.cross.encoder_matmuls(d))
    return total
