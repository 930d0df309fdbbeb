"""LoRA adapters' slots on the GPU, written once for every engine; each engine's wing
says where they land and which release allocates what (its rules table).

Both engines allocate, for every layer and every targeted linear module, a slot's A
(rank x the module's input) and B (the module's output x rank) for each of `slots`
adapters at once, in the adapter dtype, sharded as the base layer is (read in vLLM 0.33
`lora/layers/base_linear.py::BaseLinearLayerWithLoRA.create_lora_weights` and
`column_parallel_linear.py`, 0.10.1.1 `lora/layers.py`; SGLang 0.5.23
`lora/mem_pool.py::LoRAMemoryPool.get_lora_A_shape` / `get_lora_B_shape`, 0.4.10.post2
the same totals through its split q/kv B buffers):

- column-parallel modules (q, k, v, gate, up: vLLM packs q/k/v and gate/up into one
  module of 3 and 2 slices, SGLang stacks their A x 3 and x 2: the same elements) keep A
  whole (rank x input) and B's output split over tp (K/V's heads replicated where fewer
  than tp, as the base layer does);
- row-parallel ones (o, down) split A's input over tp and keep B whole (output x rank);
- replicated ones (MLA's q_a and kv_a) keep both whole.

vLLM also gives the input embedding and lm_head slots when the model declares them
(`embedding_modules`, Llama-family models do): the embedding's A of vocab (+ the extra
vocabulary up to 0.11) x rank and B of hidden x rank, the lm_head's A of rank x hidden
and B of vocab (padded to 256 up to 0.11) x rank, whole on every rank, and up to 0.11 an
extra-vocabulary table of extra x hidden in the model dtype on each
(`VocabParallelEmbeddingWithLoRA`, `LogitsProcessorWithLoRA`). Routed experts' slots
(vLLM's FusedMoEWithLoRA, SGLang's 4-D buffers) are not counted: a note says so.
"""

from __future__ import annotations

from kvcalc.ground.num import Linear
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError

__all__ = ["LoraSlots", "adapted", "lora_bytes", "lora_modules", "packed_elements",
           "slot_elements", "wrapped_modules"]

ROW = frozenset({"o_proj", "down_proj"})
REPLICATED = frozenset({"q_a_proj", "kv_a_proj_with_mqa"})
PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
          "kv_proj": ("k_proj", "v_proj")}
RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's MaxLoRARanks (0.33)


@record
class LoraSlots:
    """The adapters an engine keeps on the GPU at once.

    `slots`: vLLM's --max-loras (1), SGLang's --max-loras-per-batch (8); `rank`: the
    largest rank (--max-lora-rank); `target_modules`: the modules adapted (None: every
    linear one the model has); `dtype`: the adapters' dtype ("auto": the model's);
    `embeddings`: the embedding and lm_head get slots too (vLLM); `extra_vocab`,
    `vocab_padding`: vLLM up to 0.11 (256 extra rows, lm_head rows padded to 256)."""

    slots: int
    rank: int
    target_modules: tuple[str, ...] | None = None
    dtype: str = "auto"
    embeddings: bool = False
    extra_vocab: int = 0
    vocab_padding: int = 1

    def __post_init__(self) -> None:
        for name in ("slots", "rank"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 1 << 16:
                raise KvcalcError(f"LoRA {name} must be a positive whole number, got {v!r}")

    def as_dict(self) -> dict:
        return {"lora_slots": self.slots, "max_lora_rank": self.rank,
                "lora_target_modules": list(self.target_modules) if self.target_modules
                else "all linear", "lora_dtype": self.dtype}


def lora_modules(text: str | None) -> tuple[str, ...] | None:
    """--lora-target-modules (names, comma- or space-separated; `all`: every linear one)
    as module names, packed names (qkv_proj, gate_up_proj) opened into their parts."""
    if text is None:
        return None
    names = [n for n in text.replace(",", " ").split() if n]
    if not names:
        raise ParameterError("{lora_target_modules} is empty: give module names or all",
                             "lora_target_modules")
    if "all" in names:
        if len(names) > 1:
            raise ParameterError("{lora_target_modules} all stands alone", "lora_target_modules")
        return None
    out: list[str] = []
    for n in names:
        out.extend(PACKED.get(n, (n,)))
    return tuple(dict.fromkeys(out))


def _module_elements(t: Linear, name: str, rank: int, tp: int, kv_heads: int) -> int:
    """A and B of one slot of one module on one rank."""
    return sum(_module_ab(t, name, rank, tp, kv_heads))


def _module_ab(t: Linear, name: str, rank: int, tp: int, kv_heads: int) -> tuple[int, int]:
    """A (rank x input) and B (output x rank) elements of one slot of one module on one
    rank of `tp`."""
    if name in REPLICATED:
        return rank * t.fan_in, t.fan_out * rank
    if name in ROW:
        return rank * -(-t.fan_in // tp), t.fan_out * rank
    out = -(-t.fan_out // tp)
    if t.kv and kv_heads:  # K/V heads replicated where fewer than tp
        out = t.fan_out // kv_heads * max(1, kv_heads // tp)
    return rank * t.fan_in, out * rank


def packed_elements(spec, rank: int, target_modules, tp: int) -> list[tuple[str, int, int, int]]:
    """One slot's A and B elements a layer for each packed module the engine wraps (q, k
    and v in qkv_proj, gate and up in gate_up_proj: the packed buffer holds its parts'
    A rows and B rows stacked): (packed name, its layers, A elements, B elements), in the
    order the model lists them."""
    part_of = {part: packed for packed, parts in PACKED.items() if packed != "kv_proj"
               for part in parts}
    out: dict = {}
    for n, name, t, kv_heads, g in adapted(spec, target_modules):
        a, b = _module_ab(t, name, rank, tp, kv_heads)
        key = (g, part_of.get(name, name))
        _, layers, sa, sb = out.get(key, (None, n, 0, 0))
        out[key] = (key[1], layers, sa + a, sb + b)
    return list(out.values())


def adapted(spec, target_modules: tuple[str, ...] | None, notes: list[str] | None = None):
    """Each adapted linear module of `spec`'s layers: (its layers, name, Linear, its mixer's
    K/V heads, the layer group's index), routed experts left out (a note in `notes` says
    so)."""
    from kvcalc.layers import MoE

    wanted = None if target_modules is None else set(target_modules)
    d = spec.d_model
    for g, (layer, n) in enumerate(spec.groups()):
        tensors = {}
        for mx in layer.mixers:
            tensors.update({(k, id(mx)): (t, getattr(mx, "kv_heads", 0))
                            for k, t in mx.tensors(d).items() if isinstance(t, Linear)})
        mlp = layer.mlp
        if mlp is not None:
            if isinstance(mlp, MoE):
                note = "LoRA slots of the routed experts are not counted"
                if notes is not None and note not in notes:
                    notes.append(note)
            else:
                tensors.update({(k, id(mlp)): (t, 0) for k, t in mlp.tensors(d).items()
                                if isinstance(t, Linear)})
        for (key, _), (t, kv_heads) in tensors.items():
            name = t.module or key
            if wanted is None or name in wanted:
                yield n, name, t, kv_heads, g


def slot_elements(spec, rank: int, target_modules, tp: int) -> int:
    """A and B elements of one slot's linear modules on one rank of `tp`."""
    return sum(n * _module_elements(t, name, rank, tp, kv_heads)
               for n, name, t, kv_heads, _ in adapted(spec, target_modules))


def wrapped_modules(spec, target_modules) -> int:
    """The engine's LoRA-wrapped linear layers over every layer: q, k and v one packed
    module (qkv_proj), gate and up another (gate_up_proj), as both engines pack them."""
    part_of = {part: packed for packed, parts in PACKED.items() if packed != "kv_proj"
               for part in parts}
    per_group: dict = {}
    for n, name, _, _, g in adapted(spec, target_modules):
        per_group.setdefault((g, n), set()).add(part_of.get(name, name))
    return sum(n * len(names) for (_, n), names in per_group.items())


def lora_bytes(spec, lora: LoraSlots, *, tp: int, model_dtype: str) -> tuple[int, list[str]]:
    """Bytes of `lora`'s slots on one rank of `tp`, and notes on what is not counted."""
    from kvcalc.ground.dtypes import dtype

    dt = dtype(model_dtype if lora.dtype == "auto" else lora.dtype)
    wanted = None if lora.target_modules is None else set(lora.target_modules)
    d = spec.d_model
    notes: list[str] = []
    per_slot = sum(n * _module_elements(t, name, lora.rank, tp, kv_heads)
                   for n, name, t, kv_heads, _ in adapted(spec, lora.target_modules, notes))
    total = dt.nbytes(lora.slots * per_slot)
    if lora.embeddings:
        vocab, r, pad = spec.vocab, lora.rank, lora.vocab_padding
        for name, elements in (("embed_tokens", (vocab + lora.extra_vocab) * r + d * r),
                               ("lm_head", r * d + -(-vocab // pad) * pad * r)):
            if wanted is not None and name not in wanted:
                continue
            total += dt.nbytes(lora.slots * elements)
            if lora.extra_vocab:  # the extra vocabulary's rows, in the model dtype
                total += dtype(model_dtype).nbytes(lora.slots * lora.extra_vocab * d)
    return total, notes
