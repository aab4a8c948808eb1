"""Reading a GGUF's keys as llama.cpp does: `ModelInfo`, `VocabInfo` and the metadata listing.

The header reader (`header.py`) hands back raw key/values and tensor infos; this module applies
llama.cpp's rules to them: its per-architecture sliding-window patterns, its vocabulary defaults
when keys are missing, the tensor groups (layer, input, output) and bytes per layer from the
`gguf` package's quantization block sizes. A key of the wrong type is a one-line `UserError`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

from ggufspec.errors import UserError
from ggufspec.ggufinfo.header import Header, Skipped, is_int, open_headers
from ggufspec.ggufinfo.info import ModelInfo, TensorInfo, VocabInfo

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


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (bool, np.bool_)):
        return "a boolean"
    if isinstance(value, (float, np.floating)):
        return f"the number {value}"
    if isinstance(value, np.ndarray):
        return f"an array of {value.size} {value.dtype.name} values"
    if isinstance(value, (list, Skipped)):
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
        if not is_int(value):
            raise self._bad(key, "an integer")
        return int(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.kv.get(key)
        if value is None:
            return default
        if not isinstance(value, (bool, np.bool_)) and not is_int(value):
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


# a type id this far past the gguf package's last known one is damage, not a newer format (llama.cpp
# has added a few types a year)
_NEW_TYPES_AHEAD = 16


def _tensor_bytes(shape: tuple[int, ...], ttype: int, name: str, path: Path) -> tuple[str, int]:
    try:
        qt = GGMLQuantizationType(ttype)
    except ValueError:
        if ttype > max(GGMLQuantizationType) + _NEW_TYPES_AHEAD:  # no release adds this many types
            raise UserError(f"{path} is corrupt: tensor {name!r} has type {ttype}, which is no GGML type; "
                            "download the model again") from None
        raise UserError(
            f"{path} has tensor {name!r} of unknown type {ttype}: the file is corrupt, or it needs a newer gguf "
            "package (pip install -U gguf)"
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
    elif isinstance(tokens, (list, Skipped)):
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


def _tensors(headers: list[Header]) -> Iterator[TensorInfo]:
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
    headers = open_headers(path)
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
    header = open_headers(path, decode_arrays=_TOKEN_KEYS)[0]
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
    for k, v in open_headers(path)[0].kv.items():
        if isinstance(v, (Skipped, list, np.ndarray)) and len(v) > 16:
            out[k] = f"[{len(v)} items]"
        elif isinstance(v, np.ndarray):
            out[k] = v.tolist()
        else:
            out[k] = v
    return out
