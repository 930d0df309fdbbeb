"""The host (CPU) KV tier beside an engine's count, and its prefix caching, as a table
(kvcalc.serving.offload HostTier, kvcalc.serving.prefix PrefixCache)."""

from __future__ import annotations

from kvcalc.report.render import Tab
from kvcalc.ground.units import exact_bytes

__all__ = ["host_tier_table", "host_tier_tables"]


def host_tier_table(tier) -> Tab:
    """The tier's tokens, blocks and host memory, under the engine's own names."""
    unit = "page" if tier.engine == "sglang" else "block"
    covers = ("every rank's copy" if tier.per == "all ranks" else "one rank")
    rows = [["host tier tokens", f"{tier.tokens:,}"],
            [f"host {unit}s of {tier.block_tokens:,} tokens", f"{tier.blocks:,}"],
            [f"bytes per host {unit} ({covers})", exact_bytes(tier.bytes_per_block)],
            ["host memory per rank", exact_bytes(tier.host_bytes_per_rank)],
            [f"host memory, {tier.ranks} rank{'s' if tier.ranks > 1 else ''}",
             exact_bytes(tier.host_bytes)]]
    for name, value in tier.engine_says:
        rows.append([f"engine: {name}", f"{value:,}" if isinstance(value, int)
                     else f"{value:.2f}" if isinstance(value, float) else str(value)])
    flags = ", ".join(f"{k}={v}" for k, v in tier.flags)
    notes = [*(f"refused: {tier.refusal}",) * bool(tier.refusal),
             *(f"note: {n}" for n in tier.notes), f"rule: {tier.source}"]
    return Tab(f"KV offload to CPU memory ({flags})", ["", ""], rows,
               caption="\n".join(notes), header=False)


def host_tier_tables(tier) -> list:
    """The host tier's table, or none where no tier was asked (`tier` None)."""
    return [] if tier is None else [host_tier_table(tier)]
