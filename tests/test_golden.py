"""kvcalc's answers are the golden files' byte for byte (tests/golden.py says what each
case runs and how to regenerate one on purpose). A failure here means an answer changed:
either a bug, or a change to make deliberately, in the same commit as the files."""

from __future__ import annotations

import difflib

import pytest

import golden

CASES = golden.cases()


def test_every_case_has_a_golden_file_and_no_file_is_stale():
    on_disk = {p.name for p in golden.GOLDEN.iterdir() if p.suffix in (".json", ".csv")}
    expected = {f"{name}.{suffix}" for name, (_, suffix, _) in CASES.items()}
    assert on_disk == expected, (sorted(expected - on_disk), sorted(on_disk - expected))
    assert len(CASES) >= 120


@pytest.mark.parametrize("name", sorted(CASES))
def test_answer_equals_the_golden_file(name):
    argv, suffix, where = CASES[name]
    want = (golden.GOLDEN / f"{name}.{suffix}").read_text()
    got = golden.run(argv, where)
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            "golden", "now", n=1))
        pytest.fail(f"kvcalc {' '.join(argv)} changed (python tests/golden.py {name} "
                    f"rewrites it, on purpose only):\n{diff[:4000]}")
