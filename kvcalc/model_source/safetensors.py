"""The bytes a checkpoint stores, from its safetensors headers alone (never the weights).

The format (huggingface/safetensors, "Format"): 8 bytes, a little-endian unsigned
length N; N bytes of UTF-8 JSON mapping each tensor's name to its `dtype`, `shape`
and `data_offsets` [begin, end) within the data that follows (and an optional
`__metadata__` of strings); then the data, every byte of it some tensor's. A tensor
holds prod(shape) elements of its dtype's bit width, so its bytes are known from the
header: exact ints, whatever the dtype (a quantized checkpoint's packed int32, uint8
blocks and fp8 scales alike).

Each header is checked as the safetensors library checks it before trusting it: N
under its 100 MB cap, JSON that is an object, known dtypes, offsets that agree with
dtype x shape and tile the data with no gap or overlap, and a file exactly as long
as they say. A file that lies gets one line naming it, never its contents.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import field
from pathlib import Path

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, os_problem
from kvcalc.ground.inputfile import read_text

# safetensors' own cap (MAX_HEADER_SIZE in its Rust crate): a header beyond it is refused
# before it is read.
MAX_HEADER_BYTES = 100_000_000
# An index file (weight_map of tensor name -> shard) is a few MB for the largest models.
MAX_INDEX_BYTES = 64 << 20
MAX_SHARDS = 100_000
MAX_ELEMENTS = 1 << 64  # 16 EiB of U8: no file is larger; bounds the numbers in messages

# Bits per element of each dtype the format defines (safetensors' Dtype::bitsize).
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
              "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
              "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64,
              "C64": 64}


@record
class CheckpointBytes:
    """What the headers of one checkpoint's safetensors files say, summed.

    `total_bytes`: every tensor's bytes (elements x bits / 8, each by its own dtype);
    `bytes_by_dtype` and `elements_by_dtype` split it by safetensors dtype name ("BF16",
    "F8_E4M3", ...); `files` and `tensors` count what was read; `where` names them for
    messages ("safetensors headers (4 files)")."""

    total_bytes: int
    bytes_by_dtype: dict[str, int] = field(hash=False)  # (a hashable record all the same)
    elements_by_dtype: dict[str, int] = field(hash=False)
    files: int = 1
    tensors: int = 0

    @property
    def where(self) -> str:
        return f"safetensors header{'s' if self.files > 1 else ''} ({self.files:,} " \
               f"file{'s' if self.files > 1 else ''})"


def tensor_bytes(header: object, where: str, data_bytes: int | None = None) -> dict[str, list]:
    """{dtype: [bytes, elements, tensors]} of one parsed header, checked (module docstring).
    Tensors are named in messages by their place in the header, never by what it says.

    `data_bytes`: the length of the data after the header, when the file is at hand
    (a remote header is checked for agreement between its own offsets only)."""
    if not isinstance(header, dict):
        raise KvcalcError(f"{where}: not a safetensors file: its header is not a JSON object")
    spans: list[tuple[int, int, str]] = []
    out: dict[str, list] = {}
    # One pass of plain type checks per tensor (a large checkpoint's headers name some
    # 100,000 tensors); the words of a message are made only when one is raised.
    for place, (name, info) in enumerate(header.items(), 1):
        if name == "__metadata__":
            if not isinstance(info, dict):
                raise KvcalcError(f"{where}: __metadata__ must be an object of strings")
            continue
        if type(info) is not dict:
            raise KvcalcError(f"{_label(where, place)}: expected an object with dtype, shape, "
                              "data_offsets")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        bits_each = DTYPE_BITS.get(dtype) if type(dtype) is str else None
        if bits_each is None:
            raise KvcalcError(f"{_label(where, place)}: unknown dtype (safetensors defines "
                              f"{', '.join(DTYPE_BITS)})")
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            raise KvcalcError(f"{_label(where, place)}: shape must be a list of non-negative "
                              "integers")
        if (type(offsets) is not list or len(offsets) != 2
                or not (type(offsets[0]) is int and type(offsets[1]) is int)
                or not 0 <= offsets[0] <= offsets[1] <= MAX_ELEMENTS * 8):
            raise KvcalcError(f"{_label(where, place)}: data_offsets must be [begin, end] with "
                              "0 <= begin <= end")
        elements = 1
        for n in shape:
            elements *= n
            if elements > MAX_ELEMENTS:  # before the product grows past what a file holds
                raise KvcalcError(f"{_label(where, place)}: its shape holds more elements "
                                  "than any file can")
        bits = elements * bits_each
        if bits % 8:
            raise KvcalcError(f"{_label(where, place)}: {elements:,} {dtype} elements are not "
                              "a whole number of bytes")
        nbytes = bits // 8
        if offsets[1] - offsets[0] != nbytes:
            raise KvcalcError(f"{_label(where, place)}: data_offsets span "
                              f"{offsets[1] - offsets[0]:,} bytes, but its {elements:,} {dtype} "
                              f"elements take {nbytes:,}")
        spans.append((offsets[0], offsets[1], place))
        entry = out.setdefault(dtype, [0, 0, 0])
        entry[0] += nbytes
        entry[1] += elements
        entry[2] += 1
    end = 0
    for begin, stop, place in sorted(spans):
        if begin != end:
            gap = ("overlaps another tensor's" if begin < end else
                   f"leaves {begin - end:,} bytes before it unused")
            raise KvcalcError(f"{where}: the data of entry {place:,} of the header {gap} "
                              "(data_offsets do not tile the data)")
        end = stop
    if data_bytes is not None and end != data_bytes:
        raise KvcalcError(f"{where}: the header's tensors end at byte {end:,} of the data, "
                          f"but the file holds {data_bytes:,} bytes after the header")
    return out


def read_header(path: Path, where: str | None = None) -> dict[str, list]:
    """{dtype: [bytes, elements, tensors]} of one local .safetensors file, reading only its
    header."""
    where = where or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        e.filename = None
        raise KvcalcError(f"{where}: cannot read: {os_problem(e)}") from None
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise KvcalcError(f"{where}: not a regular file")
            head = f.read(8)
            if len(head) < 8:
                raise KvcalcError(f"{where}: not a safetensors file: {st.st_size} bytes, "
                                  "shorter than the 8-byte header length")
            length = int.from_bytes(head, "little")
            if length > MAX_HEADER_BYTES:
                raise KvcalcError(f"{where}: header length {length:,} bytes is over "
                                  f"safetensors' {MAX_HEADER_BYTES:,}-byte limit")
            if 8 + length > st.st_size:
                raise KvcalcError(f"{where}: header length {length:,} bytes runs past the end "
                                  f"of the {st.st_size:,}-byte file")
            raw = f.read(length)
        except OSError as e:
            e.filename = None
            raise KvcalcError(f"{where}: cannot read: {os_problem(e)}") from None
    if len(raw) != length:
        raise KvcalcError(f"{where}: the file ended inside its header")
    return tensor_bytes(parse_header(raw, where), where, st.st_size - 8 - length)


def parse_header(raw: bytes, where: str) -> object:
    """The header's JSON (safetensors pads it with trailing spaces)."""
    if not raw.lstrip().startswith(b"{"):
        raise KvcalcError(f"{where}: not a safetensors file: its header is not a JSON object")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise KvcalcError(f"{where}: not a safetensors file: its header is not UTF-8") from None
    except RecursionError:
        raise KvcalcError(f"{where}: not a safetensors file: its header nests too deeply") from None
    except ValueError as e:  # JSONDecodeError, or an integer of too many digits
        problem = getattr(e, "msg", "not valid JSON")
        raise KvcalcError(f"{where}: not a safetensors file: its header is not valid JSON "
                          f"({problem})") from None


def index_files(path: Path, where: str | None = None) -> list[str]:
    """The shard files a `*.safetensors.index.json` names (its weight_map's values), once
    each, in order of first mention."""
    where = where or str(path)
    try:
        text = read_text(path, where, MAX_INDEX_BYTES)
    except (FileNotFoundError, IsADirectoryError) as e:
        raise KvcalcError(f"{where}: cannot read: {os_problem(e)}") from None
    try:
        index = json.loads(text)
    except (ValueError, RecursionError):
        raise KvcalcError(f"{where}: not valid JSON") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise KvcalcError(f"{where}: expected an object whose weight_map maps tensor names to "
                          "file names")
    files = list(dict.fromkeys(weight_map.values()))
    if len(files) > MAX_SHARDS:
        raise KvcalcError(f"{where}: names {len(files):,} files (more than {MAX_SHARDS:,})")
    for name in files:
        # A shard beside the index: a name that climbs out of the folder is refused.
        if not name or name != os.path.basename(name) or name in (".", ".."):
            raise KvcalcError(f"{where}: weight_map names a file that is not beside the index "
                              "(a path, or empty)")
    return files


def checkpoint_bytes(headers: list[dict[str, list]]) -> CheckpointBytes:
    """The sum over files of what read_header / tensor_bytes returned."""
    by_bytes: dict[str, int] = {}
    by_elements: dict[str, int] = {}
    tensors = 0
    for header in headers:
        for dtype, (nbytes, elements, count) in header.items():
            by_bytes[dtype] = by_bytes.get(dtype, 0) + nbytes
            by_elements[dtype] = by_elements.get(dtype, 0) + elements
            tensors += count
    return CheckpointBytes(total_bytes=sum(by_bytes.values()), bytes_by_dtype=by_bytes,
                           elements_by_dtype=by_elements, files=len(headers), tensors=tensors)


def _label(where: str, place: int) -> str:
    return f"{where}: entry {place:,} of the header"
