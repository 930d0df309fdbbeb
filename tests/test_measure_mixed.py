"""`kvcalc measure --step mixed` (issue #39 point 4): a decode step with a chunk of a
prompt in the same forward pass, the step kvcalc's served-load model times.

Truth is counted off the forward torch actually runs, never taken from kvcalc: the
matmuls' FLOPs by torch.utils.flop_counter.FlopCounterMode, the attention's by the
(query, key) pairs each SDPA call's own mask lets through, bytes by the tensors the
step's ops touch (a TorchDispatchMode), and the outputs against a plain float64 forward
written here, whose chunk is the tail of a whole prompt's full causal attention."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")  # the `measure` extra

import torch.nn.functional as F  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.formulas.step import decode_step  # noqa: E402
from kvcalc.measure import MixedConfig, mixed_prediction  # noqa: E402
from kvcalc.measure.mixed_step import MixedModel  # noqa: E402
from kvcalc.measure.model_step import DecodeModel  # noqa: E402
from kvcalc.spec import ModelSpec  # noqa: E402

CPU = torch.device("cpu")
# GQA (4 query heads on 2 K/V heads), a gated MLP, untied embeddings: every term shows.
SPEC = ModelSpec.uniform(name="tiny", layers=2, d_model=32, heads=4, kv_heads=2, head_dim=8,
                         d_ff=48, vocab=50)
PLAIN = ModelSpec.uniform(name="tiny-mha", layers=1, d_model=24, heads=3, kv_heads=3,
                          head_dim=8, d_ff=40, vocab=30, mlp="plain", tied_embeddings=True)
SHAPES = [(3, 12, 5, 7), (2, 9, 4, 0), (1, 5, 1, 3)]  # (batch, context, chunk, its start)


def _model(spec, b, c, n, s, dtype=torch.float32, cls=MixedModel):
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        if cls is DecodeModel:
            return DecodeModel(spec, b, c, CPU, dtype, g)
        return MixedModel(spec, b, c, n, s, CPU, dtype, g)


# --------------------------------------------------------------------------------
# Counting what the forward does
# --------------------------------------------------------------------------------
class _Touches(TorchDispatchMode):
    """Bytes the step's ops touch: every matmul's input and output, the weights read (by
    storage, once each; the embedding table by the rows gathered) and the K/V written
    into a cache (copy_ into it)."""

    def __init__(self, weights, table, caches):
        super().__init__()
        self.weights = {w.untyped_storage().data_ptr(): w.nbytes for w in weights}
        self.table = table
        self.caches = {c.untyped_storage().data_ptr() for c in caches}
        self.read: set[int] = set()
        self.rows_gathered = 0
        self.mm_bytes = 0
        self.kv_written = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__
        if name.startswith("embedding"):
            self.rows_gathered += args[1].numel()
        elif name.startswith(("mm", "addmm")):
            self.mm_bytes += args[-2].nbytes + out.nbytes  # (x, weight): x in, out written
        elif name.startswith("copy_") and args[0].untyped_storage().data_ptr() in self.caches:
            self.kv_written += args[0].nbytes
        for a in list(args) + list((kwargs or {}).values()):
            if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in self.weights:
                self.read.add(a.untyped_storage().data_ptr())
        return out

    @property
    def weight_bytes(self) -> int:
        return (sum(self.weights[p] for p in self.read)
                + self.rows_gathered * self.table.shape[1] * self.table.element_size())


def _allowed_pairs(lq: int, lk: int, mask) -> int:
    """(query, key) pairs a call attends: all without a mask; a lower-right causal bias
    lets query i see keys 0 .. lk - lq + i (the definition, counted here on a matrix)."""
    if mask is None:
        return lq * lk
    assert type(mask).__name__ == "CausalBias" and mask.variant.name == "LOWER_RIGHT"
    assert (mask.seq_len_q, mask.seq_len_kv) == (lq, lk)
    return int(torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq).sum())


class _Attention(TorchFunctionMode):
    """Each SDPA call of the step: the pairs its own mask lets through, times 2 x (d_k +
    d_v) per query head, and the bytes of its q, K, V and output."""

    def __init__(self):
        super().__init__()
        self.seen = {"attention_flops": 0, "kv_read": 0, "qo_bytes": 0}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)  # the mode is off inside its own handler
        if func is F.scaled_dot_product_attention:
            q, k, v = args[:3]
            b, h, lq, dk = q.shape
            pairs = _allowed_pairs(lq, k.shape[2], kwargs.get("attn_mask"))
            self.seen["attention_flops"] += 2 * b * h * pairs * (dk + v.shape[-1])
            self.seen["kv_read"] += k.nbytes + v.nbytes
            self.seen["qo_bytes"] += q.nbytes + out.nbytes
        return out


def count(model, *, chunk=True):
    """FLOPs and bytes of one step as torch runs it: {'mm_flops', 'attention_flops',
    'kv_read', 'qo_bytes', 'mm_bytes', 'kv_written', 'weights'}."""
    attention = _Attention()
    layers = model.layers
    weights = [model.lm_head, model.final_norm] + [
        p[n] for p in layers for n in ("norm1", "norm2", "w_qkv", "w_o", "w_up", "w_down")]
    if model.lm_head is model.embed:
        weights = weights[1:]  # tied: the table is read whole by the lm_head
    caches = [p[n] for p in layers for n in ("k", "v", "ck", "cv") if n in p]
    touches = _Touches(weights, model.embed, caches)
    if model.lm_head is model.embed:
        touches.weights[model.embed.untyped_storage().data_ptr()] = model.embed.nbytes
    with torch.no_grad(), FlopCounterMode(display=False) as flops, touches, attention:
        model.step(chunk) if isinstance(model, MixedModel) else model.step()
    by_op = {str(op): n for op, n in flops.get_flop_counts()["Global"].items()}
    mm = sum(n for op, n in by_op.items() if op.split(".")[-1] in ("mm", "addmm", "bmm"))
    gathered = touches.rows_gathered
    if model.lm_head is model.embed:
        gathered = 0  # the rows are within the table the lm_head reads whole
        touches.rows_gathered = 0
    return {**attention.seen, "mm_flops": mm, "mm_bytes": touches.mm_bytes,
            "kv_written": touches.kv_written, "weights": touches.weight_bytes,
            "rows": gathered}


# --------------------------------------------------------------------------------
# FLOPs and bytes: torch's count against kvcalc's formulas
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [SPEC, PLAIN], ids=["gqa-gated", "mha-plain-tied"])
@pytest.mark.parametrize("b,c,n,s", SHAPES)
def test_flops_counted_by_torch_equal_the_formulas(spec, b, c, n, s):
    got = count(_model(spec, b, c, n, s))
    pred = mixed_prediction(spec, b, c, n, s, "fp32")
    assert got["mm_flops"] == (pred.decode_flops["projections_and_mlp"]
                               + pred.prefill_flops["projections_and_mlp"])
    assert got["attention_flops"] == (pred.decode_flops["attention"]
                                      + pred.prefill_flops["attention"])
    assert got["mm_flops"] + got["attention_flops"] == pred.flops
    # the chunk's causal attention: P x S pairs over the prefix plus P(P+1)/2 within it
    heads, hd, layers = spec.heads, spec.head_dim, spec.layers
    assert pred.prefill_flops["attention"] == layers * 4 * heads * hd * (n * s + n * (n + 1) // 2)


@pytest.mark.parametrize("spec", [SPEC, PLAIN], ids=["gqa-gated", "mha-plain-tied"])
@pytest.mark.parametrize("b,c,n,s", SHAPES)
def test_bytes_touched_equal_the_formulas(spec, b, c, n, s):
    got = count(_model(spec, b, c, n, s))
    pred = mixed_prediction(spec, b, c, n, s, "fp32")
    dec, pre = pred.decode_bytes, pred.prefill_bytes
    assert got["kv_read"] == dec["kv_read"] + pre["kv_read"]
    assert got["kv_written"] == dec["kv_write"] + pre["kv_write"]
    assert got["weights"] == dec["weights"] + pre["weights"]
    # kvcalc counts a token's activations with the lm_head's input and output; the chunk
    # samples nothing, so the step moves exactly that much less: an upper bound, named.
    lm_head_rows = 4 * n * (spec.d_model + spec.vocab)
    assert got["mm_bytes"] + got["qo_bytes"] == dec["activations"] + pre["activations"] - lm_head_rows


@pytest.mark.parametrize("spec", [SPEC, PLAIN], ids=["gqa-gated", "mha-plain-tied"])
def test_without_its_chunk_the_step_is_the_decode_step(spec):
    b, c = 3, 10
    decode_path = count(_model(spec, b, c, 0, 0, cls=DecodeModel))
    no_chunk = count(_model(spec, b, c, 0, 0))
    chunk_off = count(_model(spec, b, c, 4, 2), chunk=False)
    assert decode_path == no_chunk == chunk_off
    step = decode_step(spec, c, b, "fp32", "fp32", "fp32", prefill=False)
    assert decode_path["mm_flops"] + decode_path["attention_flops"] == step.flops
    assert decode_path["kv_read"] == step.bytes_breakdown["kv_read"]
    assert decode_path["kv_written"] == step.bytes_breakdown["kv_write"]
    assert decode_path["weights"] == step.bytes_breakdown["weights"]
    assert decode_path["mm_bytes"] + decode_path["qo_bytes"] == step.bytes_breakdown["activations"]
    pred = mixed_prediction(spec, b, c, 0, 0, "fp32")
    assert pred.flops == step.flops and pred.bytes == step.bytes
    assert pred.prefill_flops_total == pred.prefill_bytes_total == 0


# --------------------------------------------------------------------------------
# Outputs: the mixed forward against a plain float64 one
# --------------------------------------------------------------------------------
def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _causal(q, k, v):
    """Full causal attention of a whole sequence, (heads, L, d) each: softmax of the
    scaled scores with every later position masked out."""
    L = q.shape[1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


def reference(model: MixedModel, spec, before: list[dict]):
    """The step in float64, written from the architecture: per layer the decode rows'
    attention is the last row of full causal attention over their C positions, and the
    chunk's the last P rows of full causal attention over its whole prompt (S cached
    positions, whose queries are random: they do not change the last P rows, and the
    chunk). Returns (logits of the decode rows, the chunk's hidden states, each layer's
    attention output (decode rows, chunk rows))."""
    b = model.tokens.shape[0]
    n, s = model.prefill_tokens, model.prefill_start
    w = lambda t: t.double()  # noqa: E731
    x = torch.cat([w(model.embed)[model.tokens], w(model.embed)[model.chunk_tokens]])
    outs = []
    g = torch.Generator().manual_seed(7)
    for p, old in zip(model.layers, before):
        a = p["attn"]
        hq, kv, hd = a.heads, a.kv_heads, a.head_dim
        group = hq // kv
        qkv = _rms(x, w(p["norm1"]), model.eps) @ w(p["w_qkv"]).T
        q, k_new, v_new = qkv.split([hq * hd, kv * hd, kv * hd], dim=-1)
        o_rows = []
        for i in range(b):  # each decode sequence: its cache, the new token last
            k = w(old["k"][i]).clone()
            v = w(old["v"][i]).clone()
            k[:, -1], v[:, -1] = k_new[i].view(kv, hd), v_new[i].view(kv, hd)
            L = k.shape[1]
            qs = torch.randn(hq, L, hd, generator=g, dtype=torch.float64)
            qs[:, -1] = q[i].view(hq, hd)
            heads = [_causal(qs[h:h + 1], k[h // group:h // group + 1], v[h // group:h // group + 1])[0, -1]
                     for h in range(hq)]
            o_rows.append(torch.cat(heads))
        # the chunk's prompt: S cached positions, then the chunk's own
        k = torch.cat([w(old["ck"][0, :, :s]), k_new[b:].view(n, kv, hd).transpose(0, 1)], dim=1)
        v = torch.cat([w(old["cv"][0, :, :s]), v_new[b:].view(n, kv, hd).transpose(0, 1)], dim=1)
        qs = torch.cat([torch.randn(hq, s, hd, generator=g, dtype=torch.float64),
                        q[b:].view(n, hq, hd).transpose(0, 1)], dim=1)
        chunk = torch.stack([_causal(qs[h:h + 1], k[h // group:h // group + 1],
                                     v[h // group:h // group + 1])[0, s:] for h in range(hq)])
        chunk = chunk.transpose(0, 1).reshape(n, hq * hd)
        o = torch.cat([torch.stack(o_rows), chunk])
        outs.append((o[:b], o[b:]))
        x = x + o @ w(p["w_o"]).T
        up = _rms(x, w(p["norm2"]), model.eps) @ w(p["w_up"]).T
        if p["gated"]:
            gate, up = up.chunk(2, dim=-1)
            act = gate * torch.sigmoid(gate) * up
        else:
            act = 0.5 * up * (1 + torch.erf(up / math.sqrt(2)))
        x = x + act @ w(p["w_down"]).T
    logits = _rms(x[:b], w(model.final_norm), model.eps) @ w(model.lm_head).T
    return logits, x[b:], outs


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("spec", [SPEC, PLAIN], ids=["gqa-gated", "mha-plain-tied"])
@pytest.mark.parametrize("b,c,n,s", SHAPES)
def test_outputs_equal_full_causal_attention_in_float64(spec, b, c, n, s, dtype, tol):
    model = _model(spec, b, c, n, s, dtype)
    before = [{k: p[k].clone() for k in ("k", "v", "ck", "cv")} for p in model.layers]
    model.keep_attention = True
    with torch.no_grad():
        logits, hidden = model.forward()
    want_logits, want_hidden, want_attention = reference(model, spec, before)

    def close(got, want):
        scale = want.abs().max().item()
        assert (got.double() - want).abs().max().item() <= tol * max(scale, 1.0), (got, want)

    for seen, (dec, chunk) in zip(model.attention, want_attention):
        close(seen["o"], dec)
        close(seen["o_chunk"], chunk)
    close(logits, want_logits)
    close(hidden, want_hidden)
    # the chunk's K/V are in its prompt's cache after the prefix, the prefix untouched
    p = model.layers[-1]
    assert torch.equal(p["ck"][:, :, :s], before[-1]["ck"][:, :, :s])
    assert not torch.equal(p["ck"][:, :, s:], before[-1]["ck"][:, :, s:])


# --------------------------------------------------------------------------------
# Prediction and input
# --------------------------------------------------------------------------------
def test_prediction_splits_decode_and_prefill_at_the_ceilings():
    pred = mixed_prediction(SPEC, 3, 12, 5, 7, "fp32")
    t = pred.times(read_bytes_per_s=1e9, matmul_flops_per_s=1e10)
    assert t["predicted_memory_s"] == pytest.approx(pred.bytes / 1e9)
    assert t["predicted_compute_s"] == pytest.approx(pred.flops / 1e10)
    assert t["predicted_s"] == max(t["predicted_memory_s"], t["predicted_compute_s"])
    assert t["predicted_decode_memory_s"] + t["predicted_prefill_memory_s"] == pytest.approx(
        t["predicted_memory_s"])
    # a chunk 100x the decode batch makes the step compute-bound, the prefill dominant
    big = mixed_prediction(SPEC, 1, 12, 512, 0, "fp32").times(1e12, 1e9)
    assert big["bound"] == "compute" and big["dominant"] == "prefill"
    small = mixed_prediction(SPEC, 8, 4096, 1, 0, "fp32").times(1e9, 1e12)
    assert small["bound"] == "memory" and small["dominant"] == "decode"


@pytest.mark.parametrize("fields,words", [
    ({"prefill_tokens": -1}, "prefill_tokens must be >= 0"),
    ({"prefill_start": -2, "prefill_tokens": 3}, "prefill_start must be >= 0"),
    ({"batch": 0}, "batch must be >= 1"),
    ({"seq_len": 0}, "seq_len must be >= 1"),
    ({"prefill_start": 4}, "give prefill_tokens too"),
    ({"prefill_tokens": 2**40}, "absurdly large"),
])
def test_bad_input_refused(fields, words):
    with pytest.raises(KvcalcError, match=words):
        MixedConfig(**{"spec": SPEC, "batch": 1, "seq_len": 8, **fields})


def test_a_model_it_cannot_run_is_refused():
    from kvcalc.measure import run_mixed
    from kvcalc.presets import load_model

    with pytest.raises(KvcalcError, match="--step mixed runs dense"):
        run_mixed(MixedConfig(spec=load_model("mamba-2.8b"), batch=1, seq_len=8,
                              prefill_tokens=4, device="cpu"))


def test_a_shape_that_does_not_fit_is_refused_before_allocating(monkeypatch):
    from kvcalc.measure import ceilings, run_mixed

    monkeypatch.setattr(ceilings, "free_bytes", lambda device: 64 * 2**20)
    with pytest.raises(KvcalcError, match=r"--step mixed: tiny at batch 4 x 100,000 tokens with "
                       r"a chunk of 8,192 tokens at position 10 needs .* usable"):
        run_mixed(MixedConfig(spec=SPEC, batch=4, seq_len=100_000, prefill_tokens=8192,
                              prefill_start=10, device="cpu"))


def test_run_on_this_cpu(monkeypatch):
    """The library call end to end at a tiny shape (small ceiling buffers): a decode row
    and a mixed row, each predicted at the run's own ceilings, the chunk checked."""
    from kvcalc.measure import ceilings, run_mixed

    monkeypatch.setitem(ceilings.CEILING_BYTES, "cpu", 4 * 2**20)
    phases = []
    result = run_mixed(MixedConfig(spec=SPEC, batch=2, seq_len=16, prefill_tokens=4,
                                   prefill_start=3, device="cpu", warmup=1, iters=3),
                       progress=lambda text, done, total: phases.append((text, done, total)))
    decode, mixed = result.rows
    assert (decode.step, mixed.step) == ("decode", "mixed")
    c = result.ceilings
    for row in (decode, mixed):
        d = row.as_dict()
        assert d["median_s"] > 0 and d["iters"] == 3 and d["timer"] == "perf_counter"
        assert d["predicted_s"] == pytest.approx(max(d["bytes"] / c["read_bytes_per_s"],
                                                     d["flops"] / c["matmul_flops_per_s"]),
                                                 rel=1e-12)
    assert mixed.host["correct"] and mixed.host["rel_error"] < 1e-5
    assert decode.prediction.prefill_flops_total == 0 < mixed.prediction.prefill_flops_total
    out = result.as_dict()
    assert [r["step"] for r in out["rows"]] == ["decode", "mixed"]
    assert out["measured_prefill_added_s"] == mixed.median_s - decode.median_s
    assert out["config"]["prefill_tokens"] == 4 and out["config"]["seq_len"] == 16
    assert phases[0][0].startswith("measuring cpu ceilings") and phases[-1][1] < phases[-1][2]


# --------------------------------------------------------------------------------
# The command at its real ceiling sizes (slow: ceilings of 256 MiB, torch imported)
# --------------------------------------------------------------------------------
TINY_WALL_S = 60  # the bound for a tiny shape on this project's 2-core CPU, fp32


@pytest.mark.slow
def test_tiny_mixed_step_within_a_minute_with_the_bar_at_once(tmp_path):
    """On a terminal the bar shows within a second of the command's own start-up
    (`kvcalc measure --help`, the same interpreter, typer and rich, timed here now), and
    the whole run, real ceilings included, ends within the minute with its two rows."""
    import json
    import os

    from ptyrun import TINY_MODEL, run_on_a_terminal, start_up_s

    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_MODEL)
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    start_up = start_up_s(env)
    keys = (b"loading torch", b"measuring cpu ceilings", b"mixed step")
    args = ["measure", "--config", str(config), "--device", "cpu", "--batch", "2", "--seq-len",
            "64", "--prefill-tokens", "16", "--prefill-start", "32", "--format", "json"]
    seen, stdout = run_on_a_terminal(args, keys, env, TINY_WALL_S)
    result = json.loads(stdout)
    assert b"loading torch" in seen and seen[b"loading torch"] < start_up + 1.0, (seen, start_up)
    assert b"measuring cpu ceilings" in seen and b"mixed step" in seen
    assert [r["step"] for r in result["rows"]] == ["decode", "mixed"]
    assert result["rows"][1]["correct"]
