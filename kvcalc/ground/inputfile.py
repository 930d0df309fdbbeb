"""Reading a file the user names (--config): a regular file of bounded size, or an error.

A preset or a config.json is a few kB. Anything that is not a regular file (a
FIFO would block, /dev/zero never ends) or is larger than MAX_INPUT_BYTES is
refused before it is read, with one line naming the file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from kvcalc.errors import KvcalcError, os_problem

MAX_INPUT_BYTES = 4 << 20  # 4 MiB: a thousand times a real config


def read_text(path: Path, where: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of `path` (a leading byte-order mark dropped), checked before reading.

    FileNotFoundError and IsADirectoryError propagate, so each caller words them its
    own way; every other problem (permissions, a loop of links, a file that is not
    regular, over `limit` bytes, binary or not UTF-8) is a KvcalcError prefixed with
    `where`, in words, never quoting the file's contents.
    """
    try:
        return _read_text(path, where, limit)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except OSError as e:
        e.filename = None  # `where` names the file
        raise KvcalcError(f"{where}: cannot read: {os_problem(e)}") from None


def _read_text(path: Path, where: str, limit: int) -> str:
    # O_NONBLOCK: opening a FIFO returns at once (and is refused below) instead of
    # waiting for a writer; regular files ignore the flag.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise KvcalcError(f"{where}: not a regular file (a device, FIFO or socket); "
                              "give a file on disk")
        if st.st_size > limit:
            raise KvcalcError(f"{where}: {st.st_size:,} bytes is too large for a config "
                              f"(limit {limit:,} bytes)")
        with os.fdopen(fd, "rb") as f:
            fd = -1  # closed by the file object from here on
            data = f.read(limit + 1)  # a file that grew since fstat is still bounded
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise KvcalcError(f"{where}: too large for a config (limit {limit:,} bytes)")
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (Windows editors)
        data = data[3:]
    if b"\0" in data:
        raise KvcalcError(f"{where}: not a text file (it holds binary data); expected UTF-8 "
                          "YAML or JSON")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KvcalcError(f"{where}: not UTF-8 text (byte {e.start:,} cannot be read); "
                          "save the file as UTF-8") from None
