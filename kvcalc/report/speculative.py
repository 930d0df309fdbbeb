"""Speculative decoding's time at batch 1 (kvcalc.serving.speculative_time) as a table."""

from __future__ import annotations

from kvcalc.report.render import Tab


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


def speculative_table(t, timed_on: str) -> Tab:
    """One round and the TPOT it gives at batch 1, beside the target alone."""
    rows = [["method, draft tokens a round", f"{t.method}, {t.num_speculative_tokens}"],
            ["acceptance rate a token", f"{t.acceptance_rate:.3f} ({t.acceptance_source})"],
            ["tokens a round: (1 - a^(k+1)) / (1 - a)", f"{t.expected_tokens:.3f}"],
            ["  target's pass over k + 1 tokens", _ms(t.verify_s)],
            ["  one draft pass", _ms(t.draft_step_s)],
            ["  host time a step (once a round)", _ms(t.host_s)],
            ["round", _ms(t.round_s)],
            ["TPOT with speculative decoding", _ms(t.tpot_s)],
            ["TPOT of the target alone", _ms(t.baseline_tpot_s)],
            ["speedup", f"{t.speedup:.2f}x"]]
    return Tab(title=f"speculative decoding at batch 1 (timed on {timed_on})",
               columns=["", ""], rows=rows)
