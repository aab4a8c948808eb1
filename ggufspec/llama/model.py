"""A loaded GGUF model: where its weights go, its vocabulary and tokenizer, its chat template."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Iterable

from ggufspec.errors import UserError
from ggufspec.llama import lib
from ggufspec.llama.lib import llama
from ggufspec.settings import ModelSettings


def text_bytes(text: str) -> bytes:
    """Text -> the bytes llama.cpp tokenizes: UTF-8, and bytes that were not UTF-8 given back as
    they came (a non-UTF-8 argv byte reaches Python as a lone surrogate, "surrogateescape").

    llama.cpp's own tools pass such an argv on as bytes too: a BPE tokenizer reads an invalid byte
    as U+FFFD, a SentencePiece one with byte tokens keeps it (<0xE9>). Any other lone surrogate
    (from JSON "\\ud800", say) is no text at all.

    Raises:
        UserError: a lone surrogate that is not an escaped byte.
    """
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError as e:
        raise UserError(
            f"the text holds a lone UTF-16 surrogate {text[e.start]!r} at character {e.start}, which is not "
            "Unicode text; send the character itself (a surrogate pair in JSON), not half of it"
        ) from None


class Model:
    """A loaded GGUF model: weights, vocabulary and tokenizer."""

    def __init__(self, path: Path | str, *, settings: ModelSettings = ModelSettings()) -> None:
        self.path = Path(path)
        self.settings = settings  # as loaded: n_gpu_layers (-1 = all), split
        if not self.path.is_file():
            raise UserError(f"model file not found: {self.path}; check the path or pull it first")
        params = llama.llama_model_default_params()
        params.n_gpu_layers = settings.n_gpu_layers
        params.main_gpu = settings.main_gpu
        if not settings.use_mmap:  # 0.3.36 has load_mode, not use_mmap
            params.load_mode = llama.LLAMA_LOAD_MODE_NONE
        self._split = None
        if settings.tensor_split:
            n = llama.llama_max_devices()
            arr = (ctypes.c_float * n)(*list(settings.tensor_split)[:n])
            self._split = arr  # keep alive for the duration of the load
            params.tensor_split = arr
        self._ptr = lib.load_model(self.path, params)
        if not self._ptr:
            raise UserError(
                f"llama.cpp could not load {self.path}: not a valid GGUF model, truncated, or an "
                "architecture this llama.cpp does not know; re-download it or run `ggufspec inspect` on it"
            )
        self._vocab = llama.llama_model_get_vocab(self._ptr)
        self.n_vocab: int = llama.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = llama.llama_model_n_ctx_train(self._ptr)
        self.n_layer: int = llama.llama_model_n_layer(self._ptr)
        self.bos: int = llama.llama_vocab_bos(self._vocab)
        self.eos: int = llama.llama_vocab_eos(self._vocab)
        self.add_bos: bool = bool(llama.llama_vocab_get_add_bos(self._vocab))
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}

    # tokenizer -----------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Text -> token ids (add_special adds BOS where the model wants it); see `text_bytes`."""
        data = text_bytes(text)
        cap = len(data) + 8
        buf = (llama.llama_token * cap)()
        n = llama.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama.llama_token * cap)()
            n = llama.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token renders to (control tokens render to nothing)."""
        piece = self._piece_cache.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = llama.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[:n]
            self._piece_cache[token] = piece
        return piece

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text of a token (as in the GGUF), for messages."""
        raw = llama.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def detokenize(self, tokens: Iterable[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, <|im_end|>, ...), as the model's vocabulary marks it."""
        hit = self._eog_cache.get(token)
        if hit is None:
            hit = bool(llama.llama_vocab_is_eog(self._vocab, token))
            self._eog_cache[token] = hit
        return hit

    def chat_template(self) -> str | None:
        raw = llama.llama_model_chat_template(self._ptr, None)
        return raw.decode("utf-8") if raw else None

    def special_text(self, token: int) -> str:
        """Text of a special token (BOS/EOS) as templates spell it."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(256)
        n = llama.llama_token_to_piece(self._vocab, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1024)
        n = llama.llama_model_meta_val_str(self._ptr, key.encode(), buf, 1024)
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def close(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            lib.free_model(ptr)

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass
