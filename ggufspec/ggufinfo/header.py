"""The GGUF header reader: key/value metadata and the tensor infos of one file, from a memory map.

The GGUF header (format v2/v3) is read directly from a memory map: key/value metadata, then the
tensor infos. Tensor data is never touched, so a 500 MB file reads in milliseconds. We parse the
header ourselves rather than through `gguf.GGUFReader` because the reader builds a numpy view per
array element: on Gemma 3's 262,144-token vocabulary it takes about 30 s, this takes well under
one. The `gguf` package still supplies the format constants (value types, magic).

Every length and count is bounded by the file size before it is used: a corrupt header is a
one-line `UserError` naming the field and offset, never a huge allocation. Split models
(`name-00001-of-00003.gguf`) are opened shard by shard (`open_headers`); what the keys mean is
`ggufspec.ggufinfo.read`'s business.
"""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUF_MAGIC, GGUFValueType

from ggufspec.errors import UserError
from ggufspec.models.shards import local_shards

_SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_NUMPY: dict[int, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}


class Skipped:
    """A string array we walked over without decoding (we only needed its length)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class _Corrupt(Exception):
    """The header contradicts the file: the message says what, and where."""


# Fewest bytes one header entry can take, to bound counts by the file size before looping:
_MIN_KV = 8 + 4 + 1  # key length, value type, a one-byte value
_MIN_TENSOR = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
_MIN_ARRAY = 4 + 8  # a nested array's item type and count
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 8  # arrays of arrays: real files nest one level at most


class Header:
    """GGUF key/values and tensor infos of one file, parsed from a memory map.

    Every length and count is checked against the bytes left in the file before it is used, so a
    corrupt header is a `_Corrupt` naming the field, never a huge allocation or an overflow.
    """

    def __init__(self, path: Path, *, decode_arrays: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.file_bytes = path.stat().st_size
        if self.file_bytes < 24:
            raise _Corrupt(f"it has {self.file_bytes} bytes, fewer than a GGUF header's 24")
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            self._buf = mm
            self._decode = decode_arrays
            try:
                self._parse()
            finally:
                del self._buf

    def _end(self, off: int, n: int, what: str) -> int:
        """off + n, where `what` (n bytes from off) must lie inside the file."""
        if n > self.file_bytes - off:
            raise _Corrupt(f"{what} at offset {off} runs past the end of the file ({self.file_bytes} bytes)")
        return off + n

    def _u32(self, off: int) -> tuple[int, int]:
        end = self._end(off, 4, "a 4-byte field")
        return struct.unpack_from("<I", self._buf, off)[0], end

    def _u64(self, off: int) -> tuple[int, int]:
        end = self._end(off, 8, "an 8-byte field")
        return struct.unpack_from("<Q", self._buf, off)[0], end

    def _str(self, off: int) -> tuple[str, int]:
        n, start = self._u64(off)
        if n > self.file_bytes - start:
            raise _Corrupt(f"a string length of {n} bytes at offset {off} runs past the end of the file "
                           f"({self.file_bytes} bytes)")
        return bytes(self._buf[start:start + n]).decode("utf-8", errors="surrogateescape"), start + n

    def _skip_strings(self, off: int, count: int) -> int:
        buf, size = self._buf, self.file_bytes
        unpack = struct.unpack_from
        for _ in range(count):  # hot loop (262,144 tokens for Gemma 3): one bounds check per string
            if off > size - 8:
                self._u64(off)  # raises, naming the offset
            n = unpack("<Q", buf, off)[0]
            if n > size - off - 8:
                raise _Corrupt(f"a string length of {n} bytes at offset {off} runs past the end of the file "
                               f"({size} bytes)")
            off += 8 + n
        return off

    def _count(self, off: int, count: int, item_bytes: int, what: str) -> None:
        """A count of items of at least `item_bytes` each must fit in the rest of the file."""
        if count * item_bytes > self.file_bytes - off:
            raise _Corrupt(f"an array of {count} {what} at offset {off} runs past the end of the file "
                           f"({self.file_bytes} bytes)")

    def _value(self, off: int, vtype: int, key: str, depth: int = 0) -> tuple[Any, int]:
        if vtype in _SCALARS:
            fmt = _SCALARS[vtype]
            end = self._end(off, struct.calcsize(fmt), f"the value of {key!r}")
            return struct.unpack_from(fmt, self._buf, off)[0], end
        if vtype == GGUFValueType.STRING:
            return self._str(off)
        if vtype == GGUFValueType.ARRAY:
            if depth >= _MAX_NESTING:
                raise _Corrupt(f"{key!r} nests arrays more than {_MAX_NESTING} deep")
            itype, off = self._u32(off)
            count, off = self._u64(off)
            if itype in _NUMPY:
                dt = np.dtype(_NUMPY[itype])
                self._count(off, count, dt.itemsize, f"{dt.name} values of {key!r}")
                arr = np.frombuffer(self._buf, dtype=dt, count=count, offset=off).copy()
                return arr, off + dt.itemsize * count
            if itype == GGUFValueType.STRING:
                self._count(off, count, 8, f"strings of {key!r}")
                if key not in self._decode:
                    return Skipped(count), self._skip_strings(off, count)
                out = []
                for _ in range(count):
                    s, off = self._str(off)
                    out.append(s)
                return out, off
            if itype == GGUFValueType.ARRAY:
                self._count(off, count, _MIN_ARRAY, f"arrays of {key!r}")
                out = []
                for _ in range(count):
                    v, off = self._value(off, GGUFValueType.ARRAY, key, depth + 1)
                    out.append(v)
                return out, off
            raise _Corrupt(f"{key!r} is an array of unknown value type {itype}")
        raise _Corrupt(f"{key!r} has unknown value type {vtype}")

    def _parse(self) -> None:
        magic, off = self._u32(0)
        if magic != GGUF_MAGIC:
            raise _not_gguf(self.path)
        version, off = self._u32(off)
        if version not in (2, 3):
            raise UserError(f"{self.path} is GGUF version {version}; only versions 2 and 3 are supported")
        n_tensors, off = self._u64(off)
        n_kv, off = self._u64(off)
        room = self.file_bytes - off
        if n_kv * _MIN_KV > room:
            raise _Corrupt(f"the header announces {n_kv} keys, more than its {self.file_bytes} bytes can hold")
        if n_tensors * _MIN_TENSOR > room:
            raise _Corrupt(f"the header announces {n_tensors} tensors, more than its {self.file_bytes} bytes can hold")
        self.kv: dict[str, Any] = {}
        for _ in range(n_kv):
            key, off = self._str(off)
            vtype, off = self._u32(off)
            self.kv[key], off = self._value(off, vtype, key)
        self.raw_tensors: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name, off = self._str(off)
            n_dims, off = self._u32(off)
            if n_dims > _MAX_DIMS:
                raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions (GGML allows {_MAX_DIMS})")
            end = self._end(off, 8 * n_dims, f"the shape of tensor {name!r}")
            dims = tuple(int(d) for d in struct.unpack_from(f"<{n_dims}Q", self._buf, off))
            if any(d >= 1 << 63 for d in dims) or math.prod(dims) >= 1 << 63:
                raise _Corrupt(f"tensor {name!r} has shape {list(dims)}, more elements than GGML can count")
            ttype, off = self._u32(end)
            toff, off = self._u64(off)
            self.raw_tensors.append((name, dims, ttype, toff))
        align = self.kv.get("general.alignment", 32)
        if not is_int(align) or align <= 0 or align & (align - 1):
            raise _Corrupt(f"general.alignment is {align!r}, not a power of two")
        self.data_start = (off + align - 1) // align * align


def _not_gguf(path: Path) -> UserError:
    return UserError(f"{path} is not a GGUF file (it does not start with the GGUF magic); name a .gguf model file")


def _unreadable(path: Path, exc: OSError) -> UserError:
    if isinstance(exc, PermissionError):
        return UserError(f"cannot read {path}: permission denied; check the file's permissions")
    return UserError(f"cannot read {path}: {exc.strerror or exc}; check the file")


def check_gguf_magic(path: Path) -> None:
    """Refuse a file that does not start with the GGUF magic (reads its first 4 bytes only).

    Raises:
        UserError: the file is not GGUF, or cannot be read.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if len(head) < 4 or struct.unpack("<I", head)[0] != GGUF_MAGIC:
        raise _not_gguf(path)


def open_headers(path: Path | str, *, decode_arrays: frozenset[str] = frozenset()) -> list[Header]:
    path = Path(path)
    if not path.exists():
        raise UserError(f"model file not found: {path}; check the path")
    if not path.is_file():
        raise UserError(f"{path} is not a file; give the path of a .gguf model file")
    headers = []
    for i, p in enumerate(local_shards(path)):
        try:
            headers.append(Header(p, decode_arrays=decode_arrays if i == 0 else frozenset()))
        except _Corrupt as exc:
            raise UserError(f"{p} is truncated or corrupt: {exc}; download it again") from None
        except OSError as exc:
            raise _unreadable(p, exc) from None
    return headers


def is_int(value: Any) -> bool:
    """An integer scalar as the header stores it (a bool is not one)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))

