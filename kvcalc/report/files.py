"""Report files: written whole or not at all, never over a file without --force.

`AtomicOutput` writes to a temporary file beside the target and publishes it (a hard
link, or a rename with force) after one fsync, so a reader never sees half a report
and a crash leaves the old file; symbolic links are written through to the regular
file they name, and anything else (devices, /proc, /dev/stdout, loops) is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.report.consoles import error_console


class AtomicOutput:
    """A binary file that appears at `path` whole or not at all (streamed reports).

    Data goes to a temporary file in the same folder; on success it is linked into
    place (failing if the name exists: no race between check and write) or, with
    force, renamed over the old file. On an exception the temporary file is removed.
    A symbolic link to a regular file is written through: the file it names is
    replaced and the link stays (see `write_target`).
    """

    def __init__(self, path: str | os.PathLike, force: bool = False):
        self.path = Path(path)
        self.force = force
        check_writable(self.path, force)
        self.target = write_target(self.path)
        folder = self.target.parent if str(self.target.parent) else Path(".")
        import tempfile  # only when a file is written, not for output to stdout

        try:
            fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.target.name}.",
                                            suffix=".tmp")
        except OSError as e:
            raise KvcalcError(f"cannot write {self.path}: {e.strerror}") from None
        self.file = os.fdopen(fd, "wb", buffering=1 << 20)

    def __enter__(self) -> IO[bytes]:
        return self.file

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if exc_type is None:
                os.chmod(self.tmp, 0o644)
                try:
                    _publish(self.tmp, self.target, self.force, shown=self.path)
                except OSError as e:
                    raise KvcalcError(f"cannot write {self.path}: {e.strerror}") from None
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


_SPECIAL_TREES = ("/dev", "/proc", "/sys")  # device nodes and kernel views, not files


def _in_special_tree(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in _SPECIAL_TREES)


def write_target(path: str | os.PathLike) -> Path:
    """The file a report at `path` replaces: `path` itself, or, for a symbolic link,
    the regular file it resolves to (so the link survives --force).

    A link whose chain goes through /dev, /proc or /sys (/dev/stdout,
    /proc/self/fd/1), that dangles, or that names anything but a regular file is
    refused: renaming over it would replace the link, not write where it points.
    """
    path = Path(path)
    if not path.is_symlink():
        return path
    hop, seen = str(path), set()
    while os.path.islink(hop):  # each link in the chain, as the kernel follows them
        if hop in seen or len(seen) > 40:
            raise KvcalcError(f"cannot write {path}: a loop of symbolic links")
        seen.add(hop)
        hop = os.path.join(os.path.dirname(os.path.abspath(hop)), os.readlink(hop))
        if _in_special_tree(os.path.normpath(hop)):
            raise KvcalcError(f"cannot write {path}: it is a symbolic link into "
                              f"{os.path.normpath(hop)}, not to a regular file "
                              "(use stdout and a pipe)")
    real = Path(os.path.realpath(path))
    if _in_special_tree(str(real)) or not real.is_file():
        what = "a missing file" if not real.exists() else "something other than a regular file"
        raise KvcalcError(f"cannot write {path}: it is a symbolic link to {what} ({real})")
    return real


def check_writable(path: str | os.PathLike, force: bool) -> None:
    """Fail early (before any work) if `path` is a folder, exists without force, or its
    folder is missing or not writable; a symbolic link is judged by what it names."""
    path = Path(path)
    if path.is_dir():
        raise KvcalcError(f"cannot write {path}: it is a folder")
    if path.exists() and not path.is_file():
        # A device or FIFO would be replaced by a regular file on rename: refuse.
        raise KvcalcError(f"cannot write {path}: not a regular file (use stdout and a pipe)")
    target = write_target(path)
    if path.exists() and not force:
        raise ParameterError(literal(path) + " exists; pass {force} to overwrite it", "force")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise KvcalcError(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise KvcalcError(f"cannot write {path}: folder {folder} is not writable")


def _publish(tmp: str, path: Path, force: bool, shown: Path | None = None) -> None:
    shown = path if shown is None else shown
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise ParameterError(literal(shown) + " exists; pass {force} to overwrite it",
                             "force") from None
    except OSError:  # file systems without hard links
        if path.exists():
            raise ParameterError(literal(shown) + " exists; pass {force} to overwrite it",
                                 "force") from None
        os.replace(tmp, path)


def atomic_write(path: str | os.PathLike, text: str | bytes, force: bool = False) -> Path:
    """Write a file whole or not at all; never replace an existing file unless `force`."""
    with AtomicOutput(path, force) as f:
        f.write(text.encode() if isinstance(text, str) else text)
    return Path(path)


def emit(text: str, output: str | os.PathLike | None = None, force: bool = False) -> None:
    """Data to stdout, or atomically to a file (then a one-line note on stderr)."""
    if output is None or str(output) == "-":
        import sys

        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        path = atomic_write(output, text, force)
        # markup=False: a file named '[red]x.json' or '[/]x.json' is printed as named.
        error_console().print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)
