"""Which kind each layer is: the config's `layer_types` list first, then the family's
older switch.

transformers reads `layer_types` first and only infers the per-layer pattern from a
family's older fields when it is absent (`cache_utils.get_layer_types_and_kwargs`).
kvcalc does the same, in this module only: `read_layer_types` is the one reader of the
field, and the functions below it are the older switches (`sliding_window_pattern`,
Gemma 2's and gpt-oss's alternation, Qwen's `max_window_layers`, Llama 4's
`no_rope_layers`, LFM2's `full_attn_idxs`, Nemotron-H's `hybrid_override_pattern`).

Families read into flat fields get the pair ModelSpec.uniform takes, (sliding_window,
global_every); families described layer by layer get one kind per layer.
"""

from __future__ import annotations

from typing import Callable

from kvcalc.hfconfig.config import MISSING, Config, describe

# transformers' attention layer types, as kvcalc names the cache kinds.
ATTENTION_TYPES = {"full_attention": "full", "sliding_attention": "sliding",
                   "chunked_attention": "chunked"}


def declares_layer_types(c: Config) -> bool:
    """Whether the config lists `layer_types` (present and not null): then it decides."""
    return c.raw("layer_types") not in (MISSING, None)


def read_layer_types(c: Config, layers: int) -> list[str] | None:
    """The config's `layer_types`, checked to be `layers` strings; None when absent or null."""
    types = c.raw("layer_types")
    if types is MISSING or types is None:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise c.error(f"field 'layer_types' must be a list of {layers} entries")
    odd = next((t for t in types if not isinstance(t, str)), None)
    if odd is not None:
        raise c.error(f"field 'layer_types' must list strings, got {describe(odd)}")
    return types


def layer_kinds(c: Config, layers: int, allowed: dict[str, str],
                older: Callable[[], list[str]]) -> list[str]:
    """Each layer's kvcalc kind: `layer_types` mapped through `allowed` (config name ->
    kvcalc kind) when the config lists it, else `older()`, the family's older switch
    (read only then: a config with `layer_types` is not held to its older fields)."""
    types = read_layer_types(c, layers)
    if types is None:
        return older()
    unknown = sorted({t for t in types if t not in allowed})
    if unknown:
        raise c.error(f"layer_types has entries kvcalc does not know for model_type "
                      f"{c.model_type!r}: {unknown}")
    return [allowed[t] for t in types]


def every_nth_full(layers: int, n: int, other: str = "sliding") -> list[str]:
    """Layer i attends in full when (i + 1) % n == 0, the others are `other`: a
    `sliding_window_pattern` of n, or n = 2 for an even/odd alternation."""
    return ["full" if (i + 1) % n == 0 else other for i in range(layers)]


def sliding_window_pattern(c: Config, layers: int, default: int) -> list[str]:
    """Gemma 3 and Cohere2: n - 1 sliding layers, then one full (`sliding_window_pattern`)."""
    return every_nth_full(layers, c.opt_int("sliding_window_pattern", default) or default)


# ------------------------------------------------------------------------------------
# Flat families: the (sliding_window, global_every) pair ModelSpec.uniform takes
# ------------------------------------------------------------------------------------
def _flat_window(c: Config, types: list[str], window: int) -> tuple[int, int]:
    """(sliding_window, global_every) from a checked `layer_types` list."""
    sliding = [t == "sliding_attention" for t in types]
    unknown = {t for t in types if t not in ("sliding_attention", "full_attention")}
    if unknown:
        raise c.error(f"layer_types has unsupported entries: {sorted(unknown)}")
    if not any(sliding):
        return 0, 0
    if not window:
        raise c.error("layer_types has sliding layers but sliding_window is null")
    if all(sliding):
        return window, 0
    # Every n-th layer global (layers n-1, 2n-1, ...), as ModelSpec.uniform's global_every means.
    for n in range(2, len(types) + 1):
        if all(s == bool((i + 1) % n) for i, s in enumerate(sliding)):
            return window, n
    raise c.error(
        "layer_types mixes sliding and full layers in a pattern kvcalc cannot describe "
        "(it supports all-sliding, or every n-th layer global)"
    )


def qwen_window(c: Config, layers: int) -> tuple[int, int, str]:
    """Qwen2/Qwen3: layers with index >= max_window_layers slide, if use_sliding_window."""
    if declares_layer_types(c):
        use = c.opt_bool("use_sliding_window", False)
        window = c.opt_int("sliding_window", 0) if use else 0
        sw, every = _flat_window(c, read_layer_types(c, layers), window or 0)
        return sw, every, ""
    if not c.opt_bool("use_sliding_window", False):
        return 0, 0, "use_sliding_window is false: full attention in every layer"
    window = c.req_int("sliding_window", why=" (use_sliding_window is true)")
    first = c.req_int("max_window_layers", why=" (use_sliding_window is true)")
    if first <= 0:
        return window, 0, ""
    if first >= layers:
        return 0, 0, f"max_window_layers={first} >= layers: no layer slides"
    raise c.error(
        f"use_sliding_window with max_window_layers={first} of {layers} layers (the first "
        f"{first} full, the rest sliding) is a pattern kvcalc cannot describe"
    )


def gemma2_window(c: Config, layers: int) -> tuple[int, int, str]:
    """Gemma 2: `sliding_window` required (null: no layer slides); even layers slide."""
    value = c.raw("sliding_window")
    if value is MISSING:
        raise c.missing("sliding_window")
    window = 0 if value is None else c.check_int("sliding_window", value)
    if declares_layer_types(c):
        return *_flat_window(c, read_layer_types(c, layers), window), ""
    if window:
        # Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2).
        return window, 2, "Gemma 2: even layers slide, odd layers attend globally"
    return 0, 0, ""


# ------------------------------------------------------------------------------------
# Older switches of families described layer by layer
# ------------------------------------------------------------------------------------
def llama4_no_rope(c: Config, layers: int) -> list[str]:
    """Llama 4: chunked attention on RoPE layers, full on NoPE ones (`no_rope_layers`:
    1 = RoPE; default: every `no_rope_layer_interval`-th layer NoPE)."""
    rope = c.raw("no_rope_layers")
    if rope is MISSING or not rope:
        every = c.opt_int("no_rope_layer_interval", 4) or 4
        rope = [int((i + 1) % every != 0) for i in range(layers)]
    if not isinstance(rope, list) or len(rope) != layers:
        raise c.error(f"field 'no_rope_layers' must be a list of {layers} entries")
    return ["chunked" if r else "full" for r in rope]


def lfm2_full_attn_idxs(c: Config, layers: int) -> list[str]:
    """LFM2: attention on the layers `full_attn_idxs` lists (absent: every layer),
    short convolutions elsewhere."""
    idxs = c.raw("full_attn_idxs")
    if idxs is MISSING or idxs is None:
        return ["full"] * layers
    if not isinstance(idxs, list):
        raise c.error(f"field 'full_attn_idxs' must be a list of layer indices, "
                      f"got {describe(idxs)}")
    odd = next((i for i in idxs if isinstance(i, bool) or not isinstance(i, int)
                or not 0 <= i < layers), None)
    if odd is not None:
        raise c.error(f"field 'full_attn_idxs' must list layer indices 0 to {layers - 1}, "
                      f"got {describe(odd)}")
    held = set(idxs)
    return ["full" if i in held else "conv" for i in range(layers)]


_LEGACY_BLOCK_NAMES = {"mamba": "linear_attention", "attention": "full_attention"}


def nemotron_h_blocks(c: Config) -> list[str]:
    """Nemotron-H: each block's type from `layers_block_type` (or `layer_types`), else
    the older `hybrid_override_pattern` string, one character a block (M/*/-/E). The
    list also sets the number of layers. Entries "mamba" and "attention" (Nemotron 3's
    spelling) read as "linear_attention" and "full_attention", as transformers does."""
    types = c.raw("layers_block_type", "layer_types")
    if types is MISSING or types is None:
        pattern = c.raw("hybrid_override_pattern")
        if pattern is MISSING or pattern is None:
            # NemotronHConfig's default when neither field is given (it ignores
            # num_hidden_layers, which is still checked to be a layer count)
            c.opt_int("num_hidden_layers", 0)
            return ["linear_attention", "moe", "full_attention", "mlp"]
        if not isinstance(pattern, str) or not pattern:
            raise c.missing("layers_block_type", " (or hybrid_override_pattern)")
        table = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
        bad = sorted(set(pattern) - set(table))
        if bad:
            raise c.error(f"hybrid_override_pattern has characters kvcalc does not know: {bad}")
        types = [table[ch] for ch in pattern]
    if not isinstance(types, list) or not types:
        raise c.error("field 'layers_block_type' must be a non-empty list")
    # Nemotron 3's released configs (Nano/Super re-saves, Ultra, 3.5 Lightning) name the
    # mixers "mamba" and "attention": transformers' remap_legacy_layer_types
    # (configuration_utils._LEGACY_LAYER_TYPE_REMAP) reads them as these two.
    types = [_LEGACY_BLOCK_NAMES.get(t, t) if isinstance(t, str) else t for t in types]
    allowed = {"linear_attention", "moe", "full_attention", "mlp"}
    unknown = sorted({t for t in types if t not in allowed} if all(isinstance(t, str) for t in types)
                     else {"(not a string)"})
    if unknown:
        raise c.error(f"layers_block_type has entries kvcalc does not know: {unknown}")
    return types
