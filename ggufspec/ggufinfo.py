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
        return sum(int(np.prod(t.shape, dtype=np.int64)) for t in self.tensors)


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


class _Truncated(Exception):
    pass


class _Header:
    """GGUF key/values and tensor infos of one file, parsed from a memory map."""

    def __init__(self, path: Path, *, decode_arrays: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.file_bytes = path.stat().st_size
        if self.file_bytes < 24:
            raise _Truncated()
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            self._buf = mm
            self._decode = decode_arrays
            try:
                self._parse()
            except (struct.error, IndexError, ValueError) as exc:
                raise _Truncated() from exc
            finally:
                del self._buf

    def _u32(self, off: int) -> tuple[int, int]:
        return struct.unpack_from("<I", self._buf, off)[0], off + 4

    def _u64(self, off: int) -> tuple[int, int]:
        return struct.unpack_from("<Q", self._buf, off)[0], off + 8

    def _str(self, off: int) -> tuple[str, int]:
        n, off = self._u64(off)
        end = off + n
        if end > len(self._buf):
            raise _Truncated()
        return bytes(self._buf[off:end]).decode("utf-8", errors="surrogateescape"), end

    def _skip_strings(self, off: int, count: int) -> int:
        buf = self._buf
        unpack = struct.unpack_from
        for _ in range(count):
            off += 8 + unpack("<Q", buf, off)[0]
        if off > len(buf):
            raise _Truncated()
        return off

    def _value(self, off: int, vtype: int, key: str) -> tuple[Any, int]:
        if vtype in _SCALARS:
            fmt = _SCALARS[vtype]
            return struct.unpack_from(fmt, self._buf, off)[0], off + struct.calcsize(fmt)
        if vtype == GGUFValueType.STRING:
            return self._str(off)
        if vtype == GGUFValueType.ARRAY:
            itype, off = self._u32(off)
            count, off = self._u64(off)
            if itype in _NUMPY:
                dt = np.dtype(_NUMPY[itype])
                end = off + dt.itemsize * count
                if end > len(self._buf):
                    raise _Truncated()
                arr = np.frombuffer(self._buf, dtype=dt, count=count, offset=off).copy()
                return arr, end
            if itype == GGUFValueType.STRING:
                if key not in self._decode:
                    return _Skipped(count), self._skip_strings(off, count)
                out = []
                for _ in range(count):
                    s, off = self._str(off)
                    out.append(s)
                return out, off
            if itype == GGUFValueType.ARRAY:
                out = []
                for _ in range(count):
                    v, off = self._value(off, GGUFValueType.ARRAY, key)
                    out.append(v)
                return out, off
        raise ValueError(f"unknown GGUF value type {vtype}")

    def _parse(self) -> None:
        magic, off = self._u32(0)
        if magic != GGUF_MAGIC:
            raise UserError(f"{self.path} is not a GGUF file (no GGUF magic); give a .gguf model file")
        version, off = self._u32(off)
        if version not in (2, 3):
            raise UserError(f"{self.path} is GGUF version {version}; only versions 2 and 3 are supported")
        n_tensors, off = self._u64(off)
        n_kv, off = self._u64(off)
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise _Truncated()
        self.kv: dict[str, Any] = {}
        for _ in range(n_kv):
            key, off = self._str(off)
            vtype, off = self._u32(off)
            self.kv[key], off = self._value(off, vtype, key)
        self.raw_tensors: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name, off = self._str(off)
            n_dims, off = self._u32(off)
            if n_dims > 8:
                raise _Truncated()
            dims = struct.unpack_from(f"<{n_dims}Q", self._buf, off)
            off += 8 * n_dims
            ttype, off = self._u32(off)
            toff, off = self._u64(off)
            self.raw_tensors.append((name, tuple(int(d) for d in dims), ttype, toff))
        align = int(self.kv.get("general.alignment", 32)) or 32
        self.data_start = (off + align - 1) // align * align


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
        except _Truncated:
            raise UserError(f"{p} is a truncated or corrupt GGUF file (its header is cut short); download it again") from None
        except PermissionError:
            raise UserError(f"cannot read {p}: permission denied; check the file's permissions") from None
        except OSError as exc:
            raise UserError(f"cannot read {p}: {exc.strerror or exc}; check the file") from None
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


def _per_layer(value: Any, n_layer: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * n_layer
    if isinstance(value, np.ndarray):
        vals = [int(v) for v in value.tolist()]
        if len(vals) == n_layer:
            return tuple(vals)
        return (vals[0] if vals else default,) * n_layer
    return (int(value),) * n_layer


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
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return qt.name, n // block * size


def _vocab_from_kv(kv: dict[str, Any]) -> tuple[str, str, str | None, int | None, int | None, bool, bool, int]:
    model = str(kv.get("tokenizer.ggml.model", "none"))
    vtype = _VOCAB_TYPES.get(model, model)
    pre = kv.get("tokenizer.ggml.pre")
    bos, eos, add_bos, add_eos = _VOCAB_DEFAULTS.get(vtype, (None, None, False, False))
    if vtype == "bpe" and pre in _BPE_PRE_ADD_BOS:
        add_bos = True
    if "tokenizer.ggml.bos_token_id" in kv:
        bos = int(kv["tokenizer.ggml.bos_token_id"])
    if "tokenizer.ggml.eos_token_id" in kv:
        eos = int(kv["tokenizer.ggml.eos_token_id"])
    if "tokenizer.ggml.add_bos_token" in kv:
        add_bos = bool(kv["tokenizer.ggml.add_bos_token"])
    if "tokenizer.ggml.add_eos_token" in kv:
        add_eos = bool(kv["tokenizer.ggml.add_eos_token"])
    tokens = kv.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens) if tokens is not None else int(kv.get(f"{kv.get('general.architecture')}.vocab_size", 0))
    return model, vtype, (str(pre) if pre is not None else None), bos, eos, add_bos, add_eos, n_vocab


def _file_type_name(kv: dict[str, Any]) -> str:
    ft = kv.get("general.file_type")
    if ft is None:
        return "unknown"
    try:
        return LlamaFileType(int(ft)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type {int(ft)}"


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
    arch = kv.get("general.architecture")
    if not isinstance(arch, str):
        raise UserError(f"{path} has no general.architecture key; it is not a model GGUF (an adapter or a vocab file?)")

    def key(name: str, default: Any = None) -> Any:
        return kv.get(f"{arch}.{name}", default)

    n_layer = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    if n_layer <= 0 or n_embd <= 0:
        raise UserError(f"{path} lacks {arch}.block_count or {arch}.embedding_length; it is not a usable model GGUF")
    head_raw = key("attention.head_count", 0)
    n_head_l = _per_layer(head_raw, n_layer, 0)
    n_head = max(n_head_l) if n_head_l else 0
    n_head_kv = _per_layer(key("attention.head_count_kv"), n_layer, 0) if key("attention.head_count_kv") is not None else n_head_l
    n_ff_raw = key("feed_forward_length", 0)
    n_ff = int(max(n_ff_raw)) if isinstance(n_ff_raw, np.ndarray) and n_ff_raw.size else int(n_ff_raw or 0)
    default_hd = n_embd // n_head if n_head else 0
    hd_k = int(key("attention.key_length", default_hd))
    hd_v = int(key("attention.value_length", default_hd))

    # sliding window
    n_swa = int(key("attention.sliding_window", 0) or 0)
    pattern = key("attention.sliding_window_pattern")
    if arch == "llama4" and n_swa == 0 and "llama4.attention.sliding_window" not in kv:
        n_swa = 8192  # llama.cpp: chunked attention, chunk 8192, unless the GGUF sets the window to 0
    if n_swa <= 0:
        swa = (False,) * n_layer
    elif isinstance(pattern, np.ndarray) and pattern.size == n_layer:
        swa = tuple(bool(v) for v in pattern.tolist())
    else:
        period = int(pattern) if pattern is not None and not isinstance(pattern, np.ndarray) else _SWA_PERIOD.get(arch, 0)
        swa = tuple(period == 0 or (il % period < period - 1) for il in range(n_layer))
    hd_k_swa = int(key("attention.key_length_swa", hd_k))
    hd_v_swa = int(key("attention.value_length_swa", hd_v))
    head_dim_k = tuple(hd_k_swa if s else hd_k for s in swa)
    head_dim_v = tuple(hd_v_swa if s else hd_v for s in swa)

    tensors = tuple(_tensors(headers))
    layer_bytes = [0] * n_layer
    input_b = output_b = other_b = 0
    for t in tensors:
        if t.group == "layer" and t.layer is not None and t.layer < n_layer:
            layer_bytes[t.layer] += t.n_bytes
        elif t.group == "input":
            input_b += t.n_bytes
        elif t.group == "output":
            output_b += t.n_bytes
        else:
            other_b += t.n_bytes
    names = {t.name for t in tensors}
    _, vtype, _, bos, eos, add_bos, _, n_vocab = _vocab_from_kv(kv)
    paths = tuple(h.path for h in headers)
    return ModelInfo(
        path=paths[0],
        paths=paths,
        file_bytes=sum(h.file_bytes for h in headers),
        name=kv.get("general.name"),
        architecture=arch,
        file_type=_file_type_name(kv),
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_swa=n_swa if any(swa) else 0,
        swa_layers=swa,
        context_length=int(key("context_length", 0) or 0),
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
    kv = _open(path, decode_arrays=_TOKEN_KEYS)[0].kv
    tokens = kv.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise UserError(f"{path} has no tokenizer.ggml.tokens; it carries no vocabulary to compare")
    model, vtype, pre, bos, eos, add_bos, add_eos, _ = _vocab_from_kv(kv)
    types = kv.get("tokenizer.ggml.token_type")
    token_types = tuple(int(t) for t in types.tolist()) if isinstance(types, np.ndarray) else (1,) * len(tokens)
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
