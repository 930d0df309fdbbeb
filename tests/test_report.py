"""Report files: written whole, never over something that is not a regular file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvcalc.report.files import atomic_write, check_writable, emit
from kvcalc.errors import KvcalcError


def test_force_through_a_symlink_replaces_the_file_and_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "data" / "real.csv"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(Path("data") / "real.csv")  # relative, as `ln -s` is usually used
    with pytest.raises(KvcalcError, match="link.csv exists; pass force to"):
        atomic_write(link, "new\n")
    atomic_write(link, "new\n", force=True)
    assert link.is_symlink() and os.readlink(link) == os.path.join("data", "real.csv")
    assert real.read_text() == "new\n"
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.csv"]  # no temp file left


@pytest.mark.parametrize("points_to, message", [
    ("/proc/self/fd/1", "it is a symbolic link into /proc/self/fd/1, not to a regular file"),
    ("/dev/stdout", "it is a symbolic link into /dev/stdout, not to a regular file"),
    ("missing.csv", "it is a symbolic link to a missing file"),
])
def test_symlinks_to_anything_but_a_regular_file_are_refused(tmp_path: Path, points_to: str,
                                                             message: str) -> None:
    link = tmp_path / "out.csv"
    link.symlink_to(points_to)
    with pytest.raises(KvcalcError, match=message):
        atomic_write(link, "data\n", force=True)
    assert link.is_symlink() and os.readlink(link) == points_to


def test_a_loop_of_links_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(KvcalcError, match="a loop of symbolic links"):
        check_writable(tmp_path / "a", force=True)


def test_the_wrote_line_shows_the_path_not_markup(tmp_path: Path, capsys) -> None:
    (tmp_path / "[").mkdir()
    for name in ("[/]v.json", "[red]a.json"):
        emit("{}\n", tmp_path / name)
        assert capsys.readouterr().err == f"wrote {tmp_path / name}\n"
        assert (tmp_path / name).read_text() == "{}\n"



def test_a_value_wider_than_the_terminal_is_wrapped_under_its_label_without_rich():
    """The compact table's "weights from" sentence (a Hub id's headers against its
    config) is longer than 80 columns: it wraps under its label, in plain text, so the
    default view still needs no rich (issue #42)."""
    from kvcalc.report.render import Tab, _plain_text

    long = ("safetensors headers (2 files), 1,503,264,768 B; the config in bf16 gives "
            "1,192,099,840 B, 311,164,928 B less")
    tab = Tab("title", ["", ""], [["weights (bf16)", "1,503,264,768 B"],
                                  ["  weights from", long]], header=False)
    text = _plain_text([tab], 80)
    assert text is not None
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[2] == "  weights from"
    assert all(line.startswith("    ") for line in lines[3:])
    assert " ".join(line.strip() for line in lines[3:]) == long
