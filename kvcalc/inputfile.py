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

from kvcalc.errors import KvcalcError

MAX_INPUT_BYTES = 4 << 20  # 4 MiB: a thousand times a real config


def read_text(path: Path, where: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of `path`, checked before reading.

    FileNotFoundError, IsADirectoryError, other OSErrors and UnicodeDecodeError
    propagate, so each caller words them its own way; a file that is not regular
    or is over `limit` bytes is a KvcalcError prefixed with `where`.
    """
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
    return data.decode("utf-8")
