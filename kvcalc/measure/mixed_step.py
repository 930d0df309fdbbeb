"""`kvcalc measure --step mixed`: one continuous-batching scheduler step run for real, a
decode batch with a chunk of a prompt in the same forward pass (kvcalc.measure.mixed
says what it predicts, and from which formulas).

The forward is measure's whole decode step (kvcalc.measure.model_step.DecodeModel: every
layer's norms, fused qkv, cache write, SDPA, output projection, MLP; random weights, no
RoPE or biases; every layer of the model, none left out) over `batch` + `prefill_tokens`
rows at once: each matmul reads its weights once for all of them. Attention is per
sequence, as a serving engine's varlen kernel splits it:

- the decode rows: one query each over their own cache of `seq_len` positions (the new
  token's K/V written at the last position), as `--step model` runs them;
- the chunk: `prefill_tokens` queries at positions prefill_start .. prefill_start +
  prefill_tokens - 1 of one prompt, their K/V written into that prompt's cache after its
  `prefill_start` cached positions, attending causally over the prefix and the chunk
  (SDPA with a lower-right causal bias, torch.nn.attention.bias.causal_lower_right: on
  CUDA flash attention runs it; on a CPU the mask is materialised).

The lm_head runs for the decode rows only: a chunk in the middle of its prompt samples
nothing (kvcalc's served-load model does not charge a chunk the lm_head either).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.measure import ceilings as ceil_mod
from kvcalc.measure import impls
from kvcalc.measure import terms as terms_mod
from kvcalc.measure.config import Progress
from kvcalc.measure.impl_row import row_stamp, sync
from kvcalc.measure.mixed import SEQ_LEN, MixedConfig, MixedResult, MixedRow, mixed_prediction
from kvcalc.measure.model_step import DecodeModel, check_dense, step_bytes
from kvcalc.measure.timing import time_calls
from kvcalc.ground.units import human_bytes

STEP_FLAG = "--step mixed"
# The model step's repetitions (kvcalc.cli.measure_model): a whole step is long enough.
WARMUP = {"cuda": 10, "cpu": 2}
ITERS = {"cuda": 50, "cpu": 9}


class MixedModel(DecodeModel):
    """DecodeModel's weights and decode caches, plus one prompt's cache of
    `prefill_start` + `prefill_tokens` positions (its first `prefill_start` random, as a
    prefix already prefilled) and the chunk's tokens. `step()` runs the mixed forward;
    `step(chunk=False)` the decode rows alone, the same ops as DecodeModel.step."""

    def __init__(self, spec, batch: int, seq_len: int, prefill_tokens: int,
                 prefill_start: int, device, dtype, generator: torch.Generator | None = None):
        check_dense(spec, STEP_FLAG)
        super().__init__(spec, batch, seq_len, device, dtype, generator)
        self.prefill_tokens, self.prefill_start = prefill_tokens, prefill_start
        self.chunk_tokens = torch.arange(prefill_tokens, device=device) % spec.vocab
        self.chunk_bias = None
        if prefill_tokens:
            from torch.nn.attention.bias import causal_lower_right

            # made here, not in the step: a tensor subclass cannot be made under a
            # TorchDispatchMode (FlopCounterMode), and it is the same bias every step
            self.chunk_bias = causal_lower_right(prefill_tokens, prefill_start + prefill_tokens)
            for p in self.layers:
                a = p["attn"]
                shape = (1, a.kv_heads, prefill_start + prefill_tokens, a.head_dim)
                p["ck"] = torch.empty(shape, device=device, dtype=dtype).normal_(generator=generator)
                p["cv"] = torch.empty(shape, device=device, dtype=dtype).normal_(generator=generator)
        self.keep_attention = False  # record each layer's attention inputs and outputs
        self.attention: list[dict] = []

    def forward(self, chunk: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the decode rows' logits, the chunk's hidden states after the last layer, or
        None without a chunk)."""
        chunk = chunk and self.prefill_tokens > 0
        b = self.tokens.shape[0]
        x = F.embedding(self.tokens, self.embed)  # (batch, d_model)
        if chunk:
            x = torch.cat([x, F.embedding(self.chunk_tokens, self.embed)])
        d = x.shape[1]
        n, s = self.prefill_tokens, self.prefill_start
        self.attention = []
        for p in self.layers:
            a = p["attn"]
            q, k_new, v_new = self.qkv(x, p)
            k_cache, v_cache = p["k"], p["v"]
            pos = k_cache.shape[2] - 1  # a steady step at seq_len: the newest position
            k_cache[:, :, pos, :].copy_(k_new[:b].view(b, a.kv_heads, a.head_dim))
            v_cache[:, :, pos, :].copy_(v_new[:b].view(b, a.kv_heads, a.head_dim))
            q_dec = q[:b].view(b, a.heads, 1, a.head_dim)
            o = F.scaled_dot_product_attention(q_dec, k_cache, v_cache,
                                               enable_gqa=a.kv_heads != a.heads)
            o = o.reshape(b, a.heads * a.head_dim)
            seen = {"q": q_dec, "k": k_cache, "v": v_cache, "o": o}
            if chunk:
                ck, cv = p["ck"], p["cv"]
                ck[0, :, s:s + n, :].copy_(k_new[b:].view(n, a.kv_heads, a.head_dim).transpose(0, 1))
                cv[0, :, s:s + n, :].copy_(v_new[b:].view(n, a.kv_heads, a.head_dim).transpose(0, 1))
                q_chunk = q[b:].view(n, a.heads, a.head_dim).transpose(0, 1).unsqueeze(0)
                oc = F.scaled_dot_product_attention(q_chunk, ck, cv, attn_mask=self.chunk_bias,
                                                    enable_gqa=a.kv_heads != a.heads)
                oc = oc[0].transpose(0, 1).reshape(n, a.heads * a.head_dim)  # (chunk, heads x head_dim)
                seen.update(q_chunk=q_chunk, k_chunk=ck, v_chunk=cv, o_chunk=oc)
                o = torch.cat([o, oc])
            if self.keep_attention:
                self.attention.append({k: t.detach().clone() for k, t in seen.items()})
            x = x + F.linear(o, p["w_o"])
            x = x + self.mlp(x, p)
        logits = F.linear(F.rms_norm(x[:b], (d,), self.final_norm, self.eps), self.lm_head)
        return logits, (x[b:] if chunk else None)

    def step(self, chunk: bool = True) -> torch.Tensor:
        """The next token of each decode row (the chunk's hidden states are computed and
        dropped, as an engine drops a chunk that samples nothing)."""
        return self.forward(chunk)[0].argmax(dim=-1)


def chunk_attention_error(model: MixedModel) -> float | None:
    """The largest relative error of the first layer's chunk attention against the same
    attention in float64 over an explicit mask of each query's absolute position (None
    without a chunk). Run after a forward with keep_attention on."""
    if not model.prefill_tokens or not model.attention:
        return None
    seen = model.attention[0]
    q, k, v, got = (seen[n].double() for n in ("q_chunk", "k_chunk", "v_chunk", "o_chunk"))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    n, s = model.prefill_tokens, model.prefill_start
    logits = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    rows = torch.arange(n, device=q.device).unsqueeze(1) + s
    allowed = torch.arange(s + n, device=q.device).unsqueeze(0) <= rows
    want = torch.einsum("bhqk,bhkd->bhqd", logits.masked_fill(~allowed, float("-inf")).softmax(-1), v)
    want = want[0].transpose(0, 1).reshape(got.shape)
    scale = want.abs().max().clamp_min(1e-30)
    return float(((got - want).abs().max() / scale).item())


def need_bytes(spec, batch: int, seq_len: int, prefill_tokens: int, prefill_start: int,
               element_bytes: int, kind: str = "cpu") -> int:
    """What the step holds at its peak, for the memory guard: measure's model-step buffers
    (weights, decode caches, logits), the prompt's cache, the rows' activations within a
    layer, and, per attention call, the chunk's mask and scores and, on a CPU, K/V expanded
    per query head (a CPU's SDPA materialises them; CUDA's fused kernels do not)."""
    n, total = prefill_tokens, prefill_start + prefill_tokens
    rows = batch + n
    held = step_bytes(spec, batch, seq_len, element_bytes)
    widest, transient = 0, 0
    for layer, count in spec.groups():
        a, mlp = layer.mixer, layer.mlp
        held += element_bytes * count * 2 * a.kv_heads * total * a.head_dim
        width = (a.heads + 2 * a.kv_heads) * a.head_dim + sum(o for _, o in mlp.matmuls(spec.d_model))
        widest = max(widest, width + 4 * spec.d_model)
        expanded = 2 * a.heads * a.head_dim * (batch * seq_len + total) if kind == "cpu" else 0
        scores = a.heads * (batch * seq_len + n * total)
        transient = max(transient, element_bytes * expanded + 4 * scores + (1 + element_bytes) * n * total)
    return held + element_bytes * rows * widest + transient


def run_mixed(config: MixedConfig, progress: Progress | None = None,
              notice: Callable[[str], None] | None = None) -> MixedResult:
    """Measure the mixed step (and the decode step alone) beside their predictions.

    `progress(description, done, total)` is told of each phase; `notice(text)` at once of
    a dtype the device emulates. Too big for free memory is a KvcalcError before anything
    is allocated; an allocation that fails anyway is one too, never a torch traceback."""
    state = {"kind": "cpu", "phase": "preparing"}
    try:
        return _run(config, progress, notice, state)
    except (RuntimeError, MemoryError) as e:
        if not impls.out_of_memory(e):
            raise
        raise ParameterError(literal(f"out of {state['kind']} memory while {state['phase']} "
                                     f"({impls.allocation_failure(e)}); ")
                             + "try a smaller {batch}, {seq_len} or {prefill_tokens}, or free "
                             "some memory", "batch", "seq_len", "prefill_tokens") from None


def _run(config: MixedConfig, progress: Progress | None, notice, state: dict) -> MixedResult:
    spec = config.spec
    check_dense(spec, STEP_FLAG)
    device = ceil_mod.resolve_device(config.device)
    kind = device.type
    state["kind"] = kind
    if config.cuda_graphs and kind != "cuda":
        raise ParameterError("{cuda_graphs} needs a CUDA device (this run is on the cpu)",
                             "cuda_graphs")
    meta = ceil_mod.device_info(device)
    from kvcalc.measure.config import DEFAULTS

    dtype = config.dtype or DEFAULTS[kind].dtype
    tdtype = ceil_mod.torch_dtype(dtype)
    warmup = WARMUP[kind] if config.warmup is None else config.warmup
    iters = config.iters or ITERS[kind]
    b, n, s = config.batch, config.prefill_tokens, config.prefill_start
    c = config.seq_len or SEQ_LEN[kind]
    mixed = mixed_prediction(spec, b, c, n, s, dtype)
    alone = mixed_prediction(spec, b, c, 0, 0, dtype) if n else mixed

    # --- the memory guard, before anything is allocated ---
    element = torch.empty((), dtype=tdtype).element_size()
    need = need_bytes(spec, b, c, n, s, element, kind)
    ceiling_ws = (2 * config.ceiling_buffer_bytes if config.ceiling_buffer_bytes
                  else ceil_mod.ceiling_workspace_bytes(kind, dtype))
    free = ceil_mod.free_bytes(device)
    usable = int(free * config.memory_fraction)
    if max(need, ceiling_ws) > usable:
        chunk = f" with a chunk of {n:,} tokens at position {s:,}" if n else ""
        raise ParameterError(literal(
            f"{STEP_FLAG}: {spec.name} at batch {b:,} x {c:,} tokens{chunk} needs "
            f"{human_bytes(need)} (weights, caches, activations) but {human_bytes(usable)} of "
            f"{kind} memory is usable ({config.memory_fraction:.0%} of {human_bytes(free)} "
            "free); try a smaller ") + "{batch}, {seq_len} or {prefill_tokens}", "batch",
            "seq_len", "prefill_tokens")

    steps = 3 + (2 if n else 0)  # ceilings, allocation, [check], decode timing, [mixed timing]
    done = 0

    def say(text: str, tick: bool = False) -> None:
        nonlocal done
        done += tick
        if progress is not None:
            progress(text, done, steps)

    notes: list[str] = []
    check = None
    if dtype != "fp32":  # a dtype the device emulates is said before anything slow
        say(f"checking {dtype} arithmetic on this {kind}")
        check = ceil_mod.dtype_check(device, dtype)
        if check["notice"]:
            notes.append(check["notice"])
            if notice is not None:
                notice(check["notice"])
    state["phase"] = "measuring the ceilings"
    say(f"measuring {kind} ceilings: copy, read and a {dtype} matmul")
    ceilings = ceil_mod.get_ceilings(device, meta, dtype, config.ceilings_cache,
                                     config.ceiling_buffer_bytes,
                                     time_budget=bool(check and check["slow"]))
    read, matmul = ceilings["read_bytes_per_s"], ceilings["matmul_flops_per_s"]

    state["phase"] = f"allocating {spec.name}'s weights and caches"
    say(f"{spec.name}: allocating {human_bytes(need)} of weights and caches", tick=True)
    g = torch.Generator(device=device)
    g.manual_seed(0)
    with torch.no_grad():
        model = MixedModel(spec, b, c, n, s, device, tdtype, g)
        rel_error = None
        if n:
            state["phase"] = "checking the chunk's attention against float64"
            say("checking the chunk's causal attention against float64", tick=True)
            model.keep_attention = True
            model.step()
            model.keep_attention = False
            rel_error = chunk_attention_error(model)
            model.attention = []
            sync(device)

    def call(chunk: bool):
        def run() -> torch.Tensor:
            with torch.no_grad():
                return model.step(chunk)
        return run

    rows = []
    for step, chunk, prediction in (("decode", False, alone), ("mixed", True, mixed)):
        if step == "mixed" and not n:
            continue
        state["phase"] = f"timing the {step} step"
        say(f"timing {spec.name}'s {step} step ({iters} repetitions)", tick=True)
        before = terms_mod.host_sample()
        t = time_calls([call(chunk)], device=device, warmup=warmup, iters=iters,
                       cuda_graphs=config.cuda_graphs)
        others, steal = terms_mod.other_cores(before, terms_mod.host_sample())
        loaded = None if others is None else (others > terms_mod.LOADED_CORES
                                              or (steal or 0) > terms_mod.LOADED_CORES)
        row_notes = []
        if prediction.bytes < meta["cache_bytes"]:
            row_notes.append(f"the step's {human_bytes(prediction.bytes)} fit in the "
                             f"{meta['cache_name']} ({human_bytes(meta['cache_bytes'])}): timed "
                             "warm, below what the read ceiling streams")
        if loaded:
            row_notes.append("LOADED: other processes kept > 0.25 cores busy while it was timed")
        if step == "mixed" and rel_error is not None and rel_error > impls.TOLERANCE[dtype]:
            row_notes.append(f"the chunk's attention is off float64 by {rel_error:.2g} "
                             f"(tolerance {impls.TOLERANCE[dtype]:g})")
        host = {"load_avg_1m": terms_mod.load_average(), "other_cpu_cores": others,
                "steal_cpu_cores": steal, "loaded": loaded}
        if step == "mixed":
            host.update(rel_error=rel_error, correct=rel_error is not None
                        and rel_error <= impls.TOLERANCE[dtype])
        rows.append(MixedRow(
            step=step, model=spec.name, layers=spec.layers, dtype=dtype, batch=b, seq_len=c,
            prefill_tokens=n if chunk else 0, prefill_start=s if chunk else 0,
            prediction=prediction, predicted=prediction.times(read, matmul),
            median_s=t.median_s, p10_s=t.p10_s, p90_s=t.p90_s, min_s=t.min_s, iters=t.samples,
            timer=t.timer, cuda_graphs=t.cuda_graphs, host=host, note="; ".join(row_notes)))
    model = None  # the buffers go before the result is rendered
    if kind == "cuda":
        torch.cuda.empty_cache()
    stamp = row_stamp(meta)
    resolved = {
        "step": "mixed", "model": spec.name, "layers": spec.layers, "d_model": spec.d_model,
        "batch": b, "seq_len": c, "prefill_tokens": n, "prefill_start": s, "dtype": dtype,
        "device_resolved": kind, "warmup": warmup, "iters": iters,
        "cuda_graphs": config.cuda_graphs, "measured_at": stamp["measured_at"],
        "ceilings_cache": str(config.ceilings_cache) if config.ceilings_cache else None,
        "free_memory_bytes": free, "peak_planned_bytes": need, "notes": notes,
        "dtype_check": check,
        "predicted_as": "max(bytes / read ceiling, FLOPs / matmul ceiling), ceilings measured "
                        "in this run; bytes and FLOPs from formulas.decode_step (decode part) "
                        "and latency.step_figures (the chunk's FLOPs)",
    }
    device_info = {**meta, "cuda_version": stamp["cuda_version"] or None}
    return MixedResult(device=device_info, ceilings=ceilings, config=resolved, rows=tuple(rows))

