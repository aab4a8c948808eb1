"""GGUF metadata and the tensor table: what a model is and how many bytes each layer takes.

The GGUF header (format v2/v3) is read directly from a memory map: key/value metadata, then the
tensor infos. Tensor data is never touched, so a 500 MB file reads in milliseconds. We parse the
header ourselves rather than through `gguf.GGUFReader` because the reader builds a numpy view per
array element: on Gemma 3's 262,144-token vocabulary it takes about 30 s, this takes well under
one. The `gguf` package still supplies the format constants (value types, quantization block
sizes, file type names).

Split models (`name-00001-of-00003.gguf`) are read shard by shard; metadata comes from the first.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType, LlamaFileType

from ggufspec.errors import UserError
from ggufspec.shards import local_shards

# ---- results -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TensorInfo:
    """One tensor of the table: where it sits and how big it is."""

    name: str
    ggml_type: str  # "Q4_K", "F16", ...
    shape: tuple[int, ...]  # GGUF order: ne0 (row length) first
    n_bytes: int
    layer: int | None  # block index for `blk.N.*`, else None
    group: str  # "layer", "input", "output" or "other"
    shard: int  # index into ModelInfo.paths


@dataclass(frozen=True, kw_only=True)
class VocabInfo:
    """A model's vocabulary as llama.cpp sees it (its defaults applied where keys are missing)."""

    model: str  # tokenizer.ggml.model: "llama", "gpt2", "bert", "t5", ...
    vocab_type: str  # llama.cpp's name: "spm", "bpe", "wpm", "ugm", "rwkv", "plamo2", "none"
    pre: str | None  # tokenizer.ggml.pre
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool

    @property
    def size(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What a GGUF model is and how its bytes are spread over layers."""

    path: Path  # first (or only) file
    paths: tuple[Path, ...]  # all shards, in order
    file_bytes: int  # size on disk, all shards
    name: str | None
    architecture: str
    file_type: str  # "Q4_K_M", "F16", ... or "unknown"
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: tuple[int, ...]  # per layer (0 = no attention in that layer)
    head_dim_k: tuple[int, ...]  # per layer
    head_dim_v: tuple[int, ...]
    n_swa: int  # sliding-window size in tokens (0 = none)
    swa_layers: tuple[bool, ...]  # per layer: True = sliding-window attention
    context_length: int  # trained context
    vocab_size: int
    vocab_type: str
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    has_chat_template: bool
    tensors: tuple[TensorInfo, ...]
    layer_bytes: tuple[int, ...]  # weights of each block
    input_bytes: int  # token embeddings: llama.cpp keeps them in RAM
    output_bytes: int  # output norm + output matrix (the "output layer")
    other_bytes: int  # tensors in no block (rope factors, ...)
    tied_embeddings: bool  # no output.weight: llama.cpp reuses token_embd for the output layer

    @property
    def weights_bytes(self) -> int:
        """All tensor bytes in the file(s)."""
        return sum(t.n_bytes for t in self.tensors)

    @property
    def output_layer_bytes(self) -> int:
        """Bytes of the output layer where it is placed (a tied embedding is copied there)."""
        tok = sum(t.n_bytes for t in self.tensors if t.name == "token_embd.weight")
        return self.output_bytes + self.other_bytes + (tok if self.tied_embeddings else 0)

    @property
    def n_params(self) -> int:
        return sum(math.prod(t.shape) for t in self.tensors)


# ---- the GGUF header reader ----------------------------------------------------------------

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


class _Skipped:
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


class _Header:
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
                    return _Skipped(count), self._skip_strings(off, count)
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
        if not _is_int(align) or align <= 0 or align & (align - 1):
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


def _open(path: Path | str, *, decode_arrays: frozenset[str] = frozenset()) -> list[_Header]:
    path = Path(path)
    if not path.exists():
        raise UserError(f"model file not found: {path}; check the path")
    if not path.is_file():
        raise UserError(f"{path} is not a file; give the path of a .gguf model file")
    headers = []
    for i, p in enumerate(local_shards(path)):
        try:
            headers.append(_Header(p, decode_arrays=decode_arrays if i == 0 else frozenset()))
        except _Corrupt as exc:
            raise UserError(f"{p} is truncated or corrupt: {exc}; download it again") from None
        except OSError as exc:
            raise _unreadable(p, exc) from None
    return headers


# ---- interpretation ------------------------------------------------------------------------

# Sliding-window layer patterns that llama.cpp hard-codes per architecture (set_swa_pattern(n):
# layer il is windowed when il % n < n - 1). A GGUF `attention.sliding_window_pattern` overrides.
_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma-embedding": 6, "cohere2": 4, "gpt-oss": 2, "exaone4": 4, "llama4": 4}

_VOCAB_TYPES = {"llama": "spm", "gpt2": "bpe", "bert": "wpm", "t5": "ugm", "rwkv": "rwkv", "plamo2": "plamo2",
                "no_vocab": "none", "none": "none"}
# llama.cpp's defaults when the GGUF has no key: (bos, eos, add_bos, add_eos)
_VOCAB_DEFAULTS: dict[str, tuple[int | None, int | None, bool, bool]] = {
    "spm": (1, 2, True, False),
    "bpe": (11, 11, False, False),
    "wpm": (101, None, True, False),
    "ugm": (None, 1, False, True),
    "rwkv": (None, None, False, False),
    "plamo2": (1, 2, False, False),
    "none": (None, None, False, False),
}
_BPE_PRE_ADD_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                    "tekken", "chameleon"}

_TOKEN_KEYS = frozenset({"tokenizer.ggml.tokens"})


# llama.cpp's LLAMA_MAX_LAYERS: a block_count above it is no model llama.cpp loads.
_MAX_LAYERS = 512


def _is_int(value: Any) -> bool:
    """An integer scalar as the header stores it (a bool is not one)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (bool, np.bool_)):
        return "a boolean"
    if isinstance(value, (float, np.floating)):
        return f"the number {value}"
    if isinstance(value, np.ndarray):
        return f"an array of {value.size} {value.dtype.name} values"
    if isinstance(value, (list, _Skipped)):
        return f"an array of {len(value)} items"
    return f"the value {value!r}"


class _Keys:
    """Typed access to one header's metadata: a value of the wrong type is a one-line UserError.

    llama.cpp refuses a key of the wrong type too; here a flipped type byte reads as corruption.
    """

    def __init__(self, kv: dict[str, Any], path: Path) -> None:
        self.kv = kv
        self.path = path

    def _bad(self, key: str, expected: str) -> UserError:
        return UserError(f"{self.path} is corrupt: {key} holds {_kind(self.kv[key])} where {expected} is expected; "
                         "download it again")

    def int(self, key: str, default: int) -> int:
        value = self.kv.get(key)
        if value is None:
            return default
        if not _is_int(value):
            raise self._bad(key, "an integer")
        return int(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.kv.get(key)
        if value is None:
            return default
        if not isinstance(value, (bool, np.bool_)) and not _is_int(value):
            raise self._bad(key, "a boolean")
        return bool(value)

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.kv.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def ints(self, key: str) -> np.ndarray | None:
        """An integer array, or None when the key is a scalar or missing."""
        value = self.kv.get(key)
        if not isinstance(value, np.ndarray):
            return None
        if value.dtype.kind not in "iu":
            raise self._bad(key, "an integer or an array of integers")
        return value

    def per_layer(self, key: str, n_layer: int, default: int) -> tuple[int, ...]:
        """A per-layer value: one integer for all layers, or an array of one per layer."""
        arr = self.ints(key)
        if arr is None:
            return (self.int(key, default),) * n_layer
        vals = [int(v) for v in arr.tolist()]
        if len(vals) == n_layer:
            return tuple(vals)
        return (vals[0] if vals else default,) * n_layer


def _group(name: str) -> tuple[str, int | None]:
    if name.startswith("blk."):
        try:
            return "layer", int(name.split(".", 2)[1])
        except ValueError:
            return "other", None
    if name.startswith(("token_embd", "pos_embd", "token_types", "per_layer_token_embd")):
        return "input", None
    if name.startswith(("output", "cls")):
        return "output", None
    return "other", None


def _tensor_bytes(shape: tuple[int, ...], ttype: int, name: str, path: Path) -> tuple[str, int]:
    try:
        qt = GGMLQuantizationType(ttype)
    except ValueError:
        raise UserError(
            f"{path} has tensor {name!r} of unknown type {ttype}; this model needs a newer gguf package"
        ) from None
    block, size = GGML_QUANT_SIZES[qt]
    n = math.prod(shape)  # Python ints: no int64 wrap-around
    return qt.name, n // block * size


def _vocab_from_kv(keys: _Keys) -> tuple[str, str, str | None, int | None, int | None, bool, bool, int]:
    model = keys.text("tokenizer.ggml.model", "none")
    assert model is not None
    vtype = _VOCAB_TYPES.get(model, model)
    pre = keys.text("tokenizer.ggml.pre")
    bos, eos, add_bos, add_eos = _VOCAB_DEFAULTS.get(vtype, (None, None, False, False))
    if vtype == "bpe" and pre in _BPE_PRE_ADD_BOS:
        add_bos = True
    if "tokenizer.ggml.bos_token_id" in keys.kv:
        bos = keys.int("tokenizer.ggml.bos_token_id", 0)
    if "tokenizer.ggml.eos_token_id" in keys.kv:
        eos = keys.int("tokenizer.ggml.eos_token_id", 0)
    add_bos = keys.flag("tokenizer.ggml.add_bos_token", add_bos)
    add_eos = keys.flag("tokenizer.ggml.add_eos_token", add_eos)
    tokens = keys.kv.get("tokenizer.ggml.tokens")
    if tokens is None:
        n_vocab = keys.int(f"{keys.kv.get('general.architecture')}.vocab_size", 0)
    elif isinstance(tokens, (list, _Skipped)):
        n_vocab = len(tokens)
    else:
        raise keys._bad("tokenizer.ggml.tokens", "an array of strings")
    return model, vtype, pre, bos, eos, add_bos, add_eos, n_vocab


def _file_type_name(keys: _Keys) -> str:
    if "general.file_type" not in keys.kv:
        return "unknown"
    ft = keys.int("general.file_type", 0)
    try:
        return LlamaFileType(ft).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type {ft}"


def _tensors(headers: list[_Header]) -> Iterator[TensorInfo]:
    for shard, h in enumerate(headers):
        end = 0
        for name, shape, ttype, toff in h.raw_tensors:
            type_name, n_bytes = _tensor_bytes(shape, ttype, name, h.path)
            end = max(end, h.data_start + toff + n_bytes)
            group, layer = _group(name)
            yield TensorInfo(name=name, ggml_type=type_name, shape=shape, n_bytes=n_bytes, layer=layer,
                             group=group, shard=shard)
        if end > h.file_bytes:
            raise UserError(
                f"{h.path} is a truncated GGUF file: its tensors need {end} bytes but the file has "
                f"{h.file_bytes}; download it again"
            )


def read_model_info(path: Path | str) -> ModelInfo:
    """Read a GGUF model's metadata and tensor table (all shards of a split model).

    Args:
        path: the .gguf file, or the first shard (`-00001-of-0000N.gguf`) of a split model.

    Returns:
        The model's architecture, shapes, vocabulary summary and bytes per layer.

    Raises:
        UserError: the file is missing, unreadable, not GGUF, truncated, or lacks required keys.
    """
    headers = _open(path)
    kv = headers[0].kv
    keys = _Keys(kv, headers[0].path)
    arch = keys.text("general.architecture")
    if arch is None:
        raise UserError(f"{path} has no general.architecture key; it is not a model GGUF (an adapter or a vocab file?)")

    def key(name: str, default: int) -> int:
        return keys.int(f"{arch}.{name}", default)

    n_layer = key("block_count", 0)
    n_embd = key("embedding_length", 0)
    if n_layer <= 0 or n_embd <= 0:
        raise UserError(f"{path} lacks {arch}.block_count or {arch}.embedding_length; it is not a usable model GGUF")
    if n_layer > _MAX_LAYERS:
        raise UserError(f"{path} is corrupt: {arch}.block_count is {n_layer}, more than the {_MAX_LAYERS} layers "
                        "llama.cpp allows; download it again")
    n_head_l = keys.per_layer(f"{arch}.attention.head_count", n_layer, 0)
    n_head = max(n_head_l)
    n_head_kv = (keys.per_layer(f"{arch}.attention.head_count_kv", n_layer, 0)
                 if f"{arch}.attention.head_count_kv" in kv else n_head_l)
    n_ff_arr = keys.ints(f"{arch}.feed_forward_length")
    n_ff = (int(n_ff_arr.max()) if n_ff_arr.size else 0) if n_ff_arr is not None else key("feed_forward_length", 0)
    default_hd = n_embd // n_head if n_head else 0
    hd_k = key("attention.key_length", default_hd)
    hd_v = key("attention.value_length", default_hd)

    # sliding window
    n_swa = key("attention.sliding_window", 0)
    pattern_key = f"{arch}.attention.sliding_window_pattern"
    pattern = kv.get(pattern_key)
    if arch == "llama4" and n_swa == 0 and "llama4.attention.sliding_window" not in kv:
        n_swa = 8192  # llama.cpp: chunked attention, chunk 8192, unless the GGUF sets the window to 0
    if n_swa <= 0:
        swa = (False,) * n_layer
    elif isinstance(pattern, np.ndarray) and pattern.size == n_layer and pattern.dtype.kind in "biu":
        swa = tuple(bool(v) for v in pattern.tolist())
    else:
        period = _SWA_PERIOD.get(arch, 0)
        if not isinstance(pattern, np.ndarray):  # a period, or none: llama.cpp's per-architecture one
            period = keys.int(pattern_key, period)
        swa = tuple(period == 0 or (il % period < period - 1) for il in range(n_layer))
    hd_k_swa = key("attention.key_length_swa", hd_k)
    hd_v_swa = key("attention.value_length_swa", hd_v)
    head_dim_k = tuple(hd_k_swa if s else hd_k for s in swa)
    head_dim_v = tuple(hd_v_swa if s else hd_v for s in swa)

    tensors = tuple(_tensors(headers))
    layer_bytes = [0] * n_layer
    input_b = output_b = other_b = 0
    for t in tensors:
        if t.group == "layer" and t.layer is not None and 0 <= t.layer < n_layer:
            layer_bytes[t.layer] += t.n_bytes
        elif t.group == "input":
            input_b += t.n_bytes
        elif t.group == "output":
            output_b += t.n_bytes
        else:
            other_b += t.n_bytes
    names = {t.name for t in tensors}
    _, vtype, _, bos, eos, add_bos, _, n_vocab = _vocab_from_kv(keys)
    paths = tuple(h.path for h in headers)
    return ModelInfo(
        path=paths[0],
        paths=paths,
        file_bytes=sum(h.file_bytes for h in headers),
        name=keys.text("general.name"),
        architecture=arch,
        file_type=_file_type_name(keys),
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_swa=n_swa if any(swa) else 0,
        swa_layers=swa,
        context_length=key("context_length", 0),
        vocab_size=n_vocab,
        vocab_type=vtype,
        bos_id=bos,
        eos_id=eos,
        add_bos=add_bos,
        has_chat_template="tokenizer.chat_template" in kv,
        tensors=tensors,
        layer_bytes=tuple(layer_bytes),
        input_bytes=input_b,
        output_bytes=output_b,
        other_bytes=other_b,
        tied_embeddings="output.weight" not in names and "token_embd.weight" in names,
    )


def read_vocab(path: Path | str) -> VocabInfo:
    """Read only a model's vocabulary: token texts and types, special ids, add-BOS/EOS.

    Args:
        path: the .gguf file (or first shard).

    Returns:
        The vocabulary, with llama.cpp's defaults applied for missing keys.

    Raises:
        UserError: the file is missing, unreadable, not GGUF, truncated, or has no token list.
    """
    header = _open(path, decode_arrays=_TOKEN_KEYS)[0]
    keys = _Keys(header.kv, header.path)
    tokens = keys.kv.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise UserError(f"{path} has no tokenizer.ggml.tokens; it carries no vocabulary to compare")
    if not isinstance(tokens, list) or (tokens and not isinstance(tokens[0], str)):  # decoded: all or none str
        raise keys._bad("tokenizer.ggml.tokens", "an array of strings")
    model, vtype, pre, bos, eos, add_bos, add_eos, _ = _vocab_from_kv(keys)
    types = keys.ints("tokenizer.ggml.token_type")
    if types is None and "tokenizer.ggml.token_type" in keys.kv:
        raise keys._bad("tokenizer.ggml.token_type", "an array of integers")
    token_types = tuple(int(t) for t in types.tolist()) if types is not None else (1,) * len(tokens)
    return VocabInfo(
        model=model,
        vocab_type=vtype,
        pre=pre,
        tokens=tuple(tokens),
        token_types=token_types,
        bos_id=bos,
        eos_id=eos,
        add_bos=add_bos,
        add_eos=add_eos,
    )


def metadata(path: Path | str) -> dict[str, Any]:
    """All scalar and short metadata of a GGUF (first shard), long arrays summarised by length.

    Args:
        path: the .gguf file.

    Returns:
        key -> value; arrays longer than 16 items become the string "[N items]".

    Raises:
        UserError: as `read_model_info`.
    """
    out: dict[str, Any] = {}
    for k, v in _open(path)[0].kv.items():
        if isinstance(v, (_Skipped, list, np.ndarray)) and len(v) > 16:
            out[k] = f"[{len(v)} items]"
        elif isinstance(v, np.ndarray):
            out[k] = v.tolist()
        else:
            out[k] = v
    return out
