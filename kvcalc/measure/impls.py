"""Decode-attention implementations, the float64 reference, and the layer step.

Shapes: q (batch, heads, 1, head_dim); K and V caches (batch, kv_heads, seq_len,
head_dim). Query head i uses K/V head i // (heads / kv_heads), the convention of
repeat_interleave and of SDPA's enable_gqa.

- grouped: q viewed as (batch, kv_heads, group, head_dim) against each K/V head,
  so every K/V head is read once; logits and softmax in fp32, then @ V.
- repeat: K/V materialised per query head with repeat_interleave (the naive
  tutorial form): group x the cache bytes written and read again.
- sdpa: torch.nn.functional.scaled_dot_product_attention(enable_gqa=True), the
  dispatcher choosing the backend; the backend that ran is read off the ops it
  dispatched (TorchDispatchMode), so a silent fall-back to math shows.
- sdpa-flash / -efficient / -cudnn / -math: SDPA pinned to one backend with
  torch.nn.attention.sdpa_kernel; refused inputs raise instead of falling back.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from kvcalc.ground.record import record

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]

SDPA_PINNED = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-math": "MATH",
}
# The backends probed one by one. (The dispatcher's own priority differs by torch
# version and GPU, e.g. cuDNN first on sm90 with a new cuDNN: the `backend` column
# reports what actually ran, read off the dispatched ops.)
PROBE_ORDER = (("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
               ("cudnn", "CUDNN_ATTENTION"), ("math", "MATH"))
# How SDPA's warnings name each backend before giving its reasons.
_REFUSAL_HEADERS = {"flash": "flash", "efficient": "efficient", "cudnn": "cudnn"}

TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-2}


# --------------------------------------------------------------------------------
# Implementations
# --------------------------------------------------------------------------------
def attention_grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Each K/V head read once: (b, kv, g, d) @ (b, kv, d, L) -> fp32 softmax -> @ (b, kv, L, d)."""
    b, h, _, d = q.shape
    kv = k.shape[1]
    g = h // kv
    scores = torch.matmul(q.reshape(b, kv, g, d), k.transpose(-1, -2))  # (b, kv, g, L)
    scores = scores.float().mul_(scale) if scores.dtype != torch.float32 else scores.mul_(scale)
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs.to(v.dtype), v)  # (b, kv, g, dv)
    return out.reshape(b, h, 1, v.shape[-1])


def attention_repeat(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """K/V copied once per query head (repeat_interleave), then plain MHA math."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2))  # (b, h, 1, L)
    scores = scores.float().mul_(scale) if scores.dtype != torch.float32 else scores.mul_(scale)
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs.to(v.dtype), v)


def attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)


def pinned_sdpa(backend_name: str) -> Attention:
    """SDPA restricted to one backend (raises RuntimeError when it refuses the inputs)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def attention(q, k, v, scale):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)

    return attention


def get_impl(name: str) -> Attention:
    if name == "grouped":
        return attention_grouped
    if name == "repeat":
        return attention_repeat
    if name == "sdpa":
        return attention_sdpa
    if name in SDPA_PINNED:
        return pinned_sdpa(SDPA_PINNED[name])
    raise ValueError(f"unknown impl {name!r}")


# --------------------------------------------------------------------------------
# Which backend ran
# --------------------------------------------------------------------------------
class _OpRecorder(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo unless this says
        # False, and that wrapper imports torch._dynamo on the first call: 5-11 s on this
        # project's 2-core VM, the whole of a tiny run's "probing SDPA's backends". This
        # mode never runs under torch.compile, so there is nothing to disable.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def traced(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, list[str]]:
    """Run fn once, returning its result and the aten ops it dispatched."""
    with _OpRecorder() as rec:
        out = fn()
    return out, rec.ops


_FUSED = (
    ("_scaled_dot_product_flash_attention_for_cpu", "flash (cpu)"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_scaled_dot_product_efficient_attention", "efficient"),
    ("_scaled_dot_product_fused_attention_overrideable", "overrideable"),
    ("_efficient_attention_forward", "efficient"),
    ("_flash_attention_forward", "flash"),
)
# Ops that materialise K/V per query head (math's expand + clone, repeat_interleave).
_COPIES = ("aten.repeat_interleave", "aten.clone", "aten.repeat.", "aten.index_select")


@record
class BackendInfo:
    backend: str  # flash, flash (cpu), cudnn, efficient, math, matmul
    kv_copied: bool  # K/V materialised per query head before the kernel


def classify(ops: list[str]) -> BackendInfo:
    """The backend an SDPA call ran, from its dispatched ops."""
    backend = "math"
    for needle, name in _FUSED:
        if any(needle in op for op in ops):
            backend = name
            break
    copied = any(op.startswith(c) for op in ops for c in _COPIES)
    return BackendInfo(backend, copied)


def impl_backend(name: str, ops: list[str]) -> BackendInfo:
    if name == "grouped":
        return BackendInfo("matmul", False)
    if name == "repeat":
        return BackendInfo("matmul", True)
    return classify(ops)


def probe_sdpa(device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int,
               head_dim: int, seq_len: int = 64) -> dict[str, str]:
    """Pin each SDPA backend in turn on tiny inputs of this shape and dtype.

    Returns {backend: "ok" or the reason it refused}. Also {"dispatch": backend
    the unpinned call ran, "kv_copied": "yes"/"no"}.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(1, heads, 1, head_dim, device=device, dtype=dtype, generator=gen)
    k = torch.randn(1, kv_heads, seq_len, head_dim, device=device, dtype=dtype, generator=gen)
    v = torch.randn_like(k)
    result: dict[str, str] = {}
    for name, attr in PROBE_ORDER:
        backend = getattr(SDPBackend, attr, None)
        if backend is None:
            result[name] = "not in this torch"
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                result[name] = "ok"
            except RuntimeError as e:
                result[name] = _short(refusal_reason([str(w.message) for w in caught], name, str(e)))
    try:
        _, ops = traced(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except RuntimeError as e:
        # The dispatcher's first choice can fail inside its kernel (cuDNN has, on some
        # versions) with nothing to fall back to; the timed sdpa row will say so too.
        # Plan memory as if K/V were copied: the safe side.
        result["dispatch"] = f"failed: {_short(str(e))}"
        result["kv_copied"] = "yes"
        return result
    info = classify(ops)
    result["dispatch"] = info.backend
    result["kv_copied"] = "yes" if info.kv_copied else "no"
    return result


def refusal_reason(messages: list[str], backend: str, fallback: str) -> str:
    """Why SDPA refused `backend`, from the warnings it raised.

    A pinned call warns about every backend it considered, each under a header
    ("Flash attention kernel not used because:"), and says the unpinned ones are
    "runtime disabled"; the reason that matters is the one under this backend's
    own header.
    """
    lines = [ln.strip() for m in messages for ln in m.splitlines() if ln.strip()]
    key = _REFUSAL_HEADERS.get(backend)
    if key:
        for i, line in enumerate(lines):
            low = line.lower()
            if key in low and "not used because" in low:
                for reason in lines[i + 1:]:
                    if "not used because" in reason.lower():
                        break
                    if "runtime disabled" not in reason.lower():
                        return reason
    rest = [ln for ln in lines if "not used because" not in ln.lower()
            and "runtime disabled" not in ln.lower()]
    return rest[0] if rest else (fallback.splitlines() or [fallback])[0]


def out_of_memory(e: BaseException) -> bool:
    """Whether `e` is an allocation failure: CUDA's OutOfMemoryError, Python's MemoryError,
    or the CPU allocator's RuntimeError ("DefaultCPUAllocator: can't allocate memory"),
    which an implementation's refusal of its inputs must not be mistaken for."""
    if isinstance(e, MemoryError) or isinstance(e, getattr(torch, "OutOfMemoryError", ())):
        return True
    if not isinstance(e, RuntimeError):
        return False
    text = str(e).lower()
    return ("can't allocate memory" in text or "out of memory" in text
            or "cannot allocate memory" in text)


def allocation_failure(e: BaseException) -> str:
    """The allocator's own words, short ("you tried to allocate 268435456 bytes")."""
    import re

    from kvcalc.ground.units import human_bytes

    text = " ".join(str(e).split())
    m = re.search(r"tried to allocate (\d+) bytes", text)
    if m:
        return f"an allocation of {human_bytes(int(m.group(1)))} failed"
    m = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", text)  # CUDA's wording
    if m:
        return f"an allocation of {m.group(1)} failed"
    return _short(text.split("] ", 1)[-1]) if text else type(e).__name__


def _short(msg: str, limit: int = 120) -> str:
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


# --------------------------------------------------------------------------------
# Reference and error
# --------------------------------------------------------------------------------
def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        scale: float) -> torch.Tensor:
    """Float64 attention, one sequence and one K/V head at a time (bounded memory).

    Query head i attends with K/V head i // group, one K/V head at a time rather
    than through the batched grouped view the `grouped` impl uses (the tests check
    it against a loop over single query heads).
    """
    b, h, _, d = q.shape
    kv = k.shape[1]
    g = h // kv
    out = torch.empty((b, h, 1, v.shape[-1]), dtype=torch.float64, device=q.device)
    for i in range(b):
        for j in range(kv):
            kj = k[i, j].double()  # (L, d)
            vj = v[i, j].double()
            heads_of_j = slice(j * g, (j + 1) * g)  # the query heads hq with hq // g == j
            qj = q[i, heads_of_j, 0, :].double()  # (g, d)
            p = torch.softmax((qj @ kj.T) * scale, dim=-1)
            out[i, heads_of_j, 0, :] = p @ vj
    return out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when out has a NaN or inf (never passes)."""
    o = out.double()
    if o.shape != ref.shape:
        return math.inf
    if not bool(torch.isfinite(o).all()):
        return math.inf
    den = torch.linalg.vector_norm(ref).item()
    if den == 0 or not math.isfinite(den):
        return math.inf
    return torch.linalg.vector_norm(o - ref).item() / den


# --------------------------------------------------------------------------------
# Tensors for one timed slot
# --------------------------------------------------------------------------------
@record(frozen=False)
class Slot:
    """One distinct set of buffers: a K/V cache (and, for the layer step, weights)."""

    k: torch.Tensor  # (batch, kv_heads, seq_len, head_dim)
    v: torch.Tensor
    q: torch.Tensor | None = None  # attention step: (batch, heads, 1, head_dim)
    x: torch.Tensor | None = None  # layer step: (batch, d_model)
    # Weights as nn.Linear stores them, (out_features, in_features), applied with F.linear.
    w_qkv: torch.Tensor | None = None  # (heads*head_dim + 2*kv_heads*head_dim, d_model)
    w_o: torch.Tensor | None = None  # (d_model, heads*head_dim)

    def cache_bytes(self) -> int:
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def weight_bytes(self) -> int:
        return sum(w.numel() * w.element_size() for w in (self.w_qkv, self.w_o) if w is not None)


def make_slot(step: str, device: torch.device, dtype: torch.dtype, batch: int, seq_len: int,
              heads: int, kv_heads: int, head_dim: int, d_model: int,
              generator: torch.Generator) -> Slot:
    """Fresh random buffers (normal(0, 1); weights scaled by fan_in^-1/2)."""
    def randn(*shape, std=1.0):
        t = torch.empty(shape, device=device, dtype=dtype)
        return t.normal_(0.0, std, generator=generator)

    k = randn(batch, kv_heads, seq_len, head_dim)
    v = randn(batch, kv_heads, seq_len, head_dim)
    if step == "attention":
        return Slot(k=k, v=v, q=randn(batch, heads, 1, head_dim))
    qkv_out = (heads + 2 * kv_heads) * head_dim
    return Slot(k=k, v=v, x=randn(batch, d_model),
                w_qkv=randn(qkv_out, d_model, std=d_model ** -0.5),
                w_o=randn(d_model, heads * head_dim, std=(heads * head_dim) ** -0.5))


def attention_call(slot: Slot, attn: Attention, scale: float) -> Callable[[], torch.Tensor]:
    q, k, v = slot.q, slot.k, slot.v
    return lambda: attn(q, k, v, scale)


def layer_call(slot: Slot, attn: Attention, scale: float) -> Callable[[], torch.Tensor]:
    """x -> fused qkv projection -> write k, v at the last cache position -> attention -> o.

    The caches are preallocated at seq_len; the step writes one position (the
    newest token, index seq_len - 1) in place and attends over all seq_len
    positions, so repeated calls model a steady step at that length. No torch.cat.
    """
    k_cache, v_cache, x, w_qkv, w_o = slot.k, slot.v, slot.x, slot.w_qkv, slot.w_o
    b, kv, seq_len, d = k_cache.shape
    hd = w_o.shape[1]
    heads = hd // d
    pos = seq_len - 1

    def step() -> torch.Tensor:
        qkv = F.linear(x, w_qkv)
        q, k_new, v_new = qkv.split([hd, kv * d, kv * d], dim=-1)
        k_cache[:, :, pos, :].copy_(k_new.view(b, kv, d))
        v_cache[:, :, pos, :].copy_(v_new.view(b, kv, d))
        o = attn(q.reshape(b, heads, 1, d), k_cache, v_cache, scale)
        return F.linear(o.reshape(b, hd), w_o)

    return step


def reference_layer(slot: Slot, scale: float) -> torch.Tensor:
    """The layer step in float64 from the same inputs (cache position seq_len-1 replaced)."""
    b, kv, seq_len, d = slot.k.shape
    hd = slot.w_o.shape[1]
    heads = hd // d
    qkv = slot.x.double() @ slot.w_qkv.double().T
    q, k_new, v_new = qkv.split([hd, kv * d, kv * d], dim=-1)
    q = q.reshape(b, heads, 1, d)
    outs = []
    for i in range(b):
        k = slot.k[i : i + 1].to(torch.float64, copy=True)
        v = slot.v[i : i + 1].to(torch.float64, copy=True)
        k[0, :, seq_len - 1, :] = k_new[i].view(kv, d)
        v[0, :, seq_len - 1, :] = v_new[i].view(kv, d)
        outs.append(reference_attention(q[i : i + 1], k, v, scale))
    o = torch.cat(outs).reshape(b, hd)
    return o @ slot.w_o.double().T
