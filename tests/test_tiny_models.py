"""The tiny GGUF models load in llama.cpp, run, and have the properties other tests rely on."""

from __future__ import annotations

from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from ggufspec.llama.lib import high_level_repack
from tiny_models import (
    BYTES_LOGIT_SCALE,
    TOKEN_BYTE,
    read_gguf_kv,
    write_not_gguf,
    write_tiny_llama,
    write_truncated,
)


def _llama(path: Path, **kw: object) -> llama_cpp.Llama:
    # One thread: on a small, busy machine llama.cpp's spinning threads cost far more than they save.
    with high_level_repack():  # no AMX repacking where llama.cpp's AMX matmul crashes, as ggufspec loads
        return llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=64, n_threads=1,
                               n_threads_batch=1, logits_all=True, verbose=False, **kw)


def _logits(m: llama_cpp.Llama, tokens: list[int]) -> np.ndarray:
    """Logits at every position of ``tokens`` (fresh context)."""
    m.reset()
    m.eval(tokens)
    return np.array(m.scores[: len(tokens)], dtype=np.float64)


def _greedy(m: llama_cpp.Llama, prompt: list[int], n: int) -> list[int]:
    m.reset()
    m.eval(prompt)
    out: list[int] = []
    for _ in range(n):
        row = m.scores[m.n_tokens - 1]
        assert np.isfinite(row).all()
        out.append(int(np.argmax(row)))
        m.eval([out[-1]])
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _token_texts(path: Path) -> list[bytes]:
    return list(read_gguf_kv(path)["tokenizer.ggml.tokens"].value)


@pytest.mark.parametrize("fixture", ["tiny_target", "tiny_draft", "tiny_bytes_target", "tiny_bytes_draft"])
def test_loads_and_greedy_generates(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    m = _llama(path)
    n_vocab = m.n_vocab()
    assert n_vocab < 400 if "bytes" in fixture else n_vocab == 49152
    out = _greedy(m, m.tokenize(b"hello world", add_bos=True), 16)
    assert len(out) == 16 and all(0 <= t < n_vocab for t in out)


def test_noise_zero_gives_identical_model(tiny_target: Path, tmp_path: Path) -> None:
    same = write_tiny_llama(tmp_path / "same.gguf", vocab="smollm2", seed=0, noise=0.0)
    assert same.read_bytes() == tiny_target.read_bytes()
    a, b = _llama(tiny_target), _llama(same)
    toks = a.tokenize(b"The quick brown fox jumps over the lazy dog", add_bos=True)
    assert np.array_equal(_logits(a, toks), _logits(b, toks))


def test_noise_keeps_base_weights(tmp_path: Path) -> None:
    base = write_tiny_llama(tmp_path / "b.gguf", vocab="bytes", seed=3)
    noisy = write_tiny_llama(tmp_path / "n.gguf", vocab="bytes", seed=3, noise=0.1)
    other = write_tiny_llama(tmp_path / "o.gguf", vocab="bytes", seed=4)
    rb, rn, ro = (gguf.GGUFReader(p) for p in (base, noisy, other))
    for tb, tn, to in zip(rb.tensors, rn.tensors, ro.tensors):
        assert tb.name == tn.name == to.name
        wb, wn, wo = (np.asarray(t.data, dtype=np.float64) for t in (tb, tn, to))
        if wb.std() == 0:  # norms (all ones) stay untouched
            assert np.array_equal(wb, wn)
            continue
        rel = np.abs(wn - wb).std() / wb.std()
        assert 0.05 < rel < 0.15, tb.name
        assert not np.allclose(wb, wo)


def test_tiny_draft_agreement(tiny_target: Path, tiny_draft: Path) -> None:
    t, d = _llama(tiny_target), _llama(tiny_draft)
    prompt = t.tokenize(b"hello world", add_bos=True)
    cont = _greedy(t, prompt, 32)
    seq = prompt + cont
    draft_pred = np.argmax(_logits(d, seq), axis=1)[len(prompt) - 1 : len(seq) - 1]
    agreement = float(np.mean(draft_pred == np.array(cont)))
    assert 0.3 <= agreement <= 0.95, agreement


def test_bytes_pair_is_peaked_and_partially_agrees(tiny_bytes_target: Path, tiny_bytes_draft: Path) -> None:
    t, d = _llama(tiny_bytes_target), _llama(tiny_bytes_draft)
    prompt = t.tokenize(b"hello world", add_bos=True)
    seq = prompt + _greedy(t, prompt, 32)
    p, q = _softmax(_logits(t, seq)), _softmax(_logits(d, seq))
    top5 = np.sort(p, axis=1)[:, -5:].sum(axis=1)
    assert top5.mean() > 0.6, top5.mean()
    acceptance = np.minimum(p, q).sum(axis=1).mean()
    assert 0.3 < acceptance < 0.9, acceptance


@pytest.mark.parametrize("text", ["hello world", "Hello, World! 123", "the theater\nnew  line",
                                  "h\u00e9llo \u2713 \u65e5\u672c", "  leading spaces", "~{}|`"])
def test_bytes_vocab_round_trips(tiny_bytes_target: Path, text: str) -> None:
    m = _llama(tiny_bytes_target, vocab_only=True)
    toks = m.tokenize(text.encode(), add_bos=True)
    assert toks[0] == m.token_bos() == 1
    assert m.detokenize(toks) == text.encode()


def test_bytes_vocab_layout(tiny_bytes_target: Path) -> None:
    kv = read_gguf_kv(tiny_bytes_target)
    tokens = kv["tokenizer.ggml.tokens"].value
    types = kv["tokenizer.ggml.token_type"].value
    assert kv["tokenizer.ggml.model"].value == b"llama"
    assert tokens[:3] == [b"<unk>", b"<s>", b"</s>"]
    assert [t for t, ty in zip(tokens, types) if ty == TOKEN_BYTE] == [f"<0x{b:02X}>".encode() for b in range(256)]
    m = _llama(tiny_bytes_target, vocab_only=True)
    assert len(m.tokenize(b"hello world", add_bos=False)) == 4  # merges are used, not one per char
    im = m.tokenize(b"<|im_start|>user\nhi<|im_end|>", add_bos=False, special=True)
    assert im[0] == 3 and im[-1] == 4
    assert "<|im_start|>" in m.metadata["tokenizer.chat_template"]


def test_smollm2_vocab_matches_real_model(tiny_target: Path, smollm2_q4_1: Path) -> None:
    real, tiny = _llama(smollm2_q4_1, vocab_only=True), _llama(tiny_target, vocab_only=True)
    for text in [b"Hello world, this is a test.", b"<|im_start|>user\nWhat's 2+2?<|im_end|>\n",
                 "h\u00e9llo \u2713 \u65e5\u672c \n\n  x".encode()]:
        assert tiny.tokenize(text, add_bos=True, special=True) == real.tokenize(text, add_bos=True, special=True)
    assert tiny.metadata["tokenizer.chat_template"] == real.metadata["tokenizer.chat_template"]
    assert (tiny.token_bos(), tiny.token_eos()) == (real.token_bos(), real.token_eos())
    real_kv, tiny_kv = read_gguf_kv(smollm2_q4_1), read_gguf_kv(tiny_target)
    for key, val in real_kv.items():
        if key.startswith("tokenizer."):
            assert tiny_kv[key] == val, key


def test_rename_last_tokens_bytes(tiny_bytes_target: Path, tmp_path: Path) -> None:
    n = 7
    renamed = write_tiny_llama(tmp_path / "r.gguf", vocab="bytes", seed=0,
                               logit_scale=BYTES_LOGIT_SCALE, rename_last_tokens=n)

    def texts(p: Path) -> list[bytes]:
        f = gguf.GGUFReader(p).fields["tokenizer.ggml.tokens"]
        return [bytes(f.parts[i]) for i in f.data]

    a, b = texts(tiny_bytes_target), texts(renamed)
    assert len(a) == len(b)
    changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert changed == list(range(len(a) - n, len(a)))
    assert a == _token_texts(tiny_bytes_target)  # the fast metadata reader agrees with GGUFReader
    m = _llama(renamed)
    assert m.detokenize(m.tokenize(b"hello world")) == b"hello world"


def test_rename_last_tokens_smollm2(tiny_target: Path, tmp_path: Path) -> None:
    n = 5
    renamed = write_tiny_llama(tmp_path / "r.gguf", vocab="smollm2", seed=0, rename_last_tokens=n)
    a, b = _token_texts(tiny_target), _token_texts(renamed)
    assert [i for i, (x, y) in enumerate(zip(a, b)) if x != y] == list(range(len(a) - n, len(a)))
    m = _llama(renamed)
    assert _greedy(m, m.tokenize(b"hello Mama"), 4)


def test_f16_and_shape_options(tmp_path: Path) -> None:
    p = write_tiny_llama(tmp_path / "f16.gguf", vocab="bytes", dtype="F16", n_layer=3, n_embd=96,
                         n_head=6, n_head_kv=3, n_ff=160, n_ctx_train=256)
    m = _llama(p)
    assert m.metadata["llama.context_length"] == "256" and m.n_embd() == 96
    assert len(_greedy(m, m.tokenize(b"hi"), 8)) == 8


def test_writes_atomically(tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "a.gguf", vocab="bytes")
    write_tiny_llama(tmp_path / "a.gguf", vocab="bytes", seed=1)  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf"]


def test_bad_inputs_fail_to_load(tiny_bytes_target: Path, tmp_path: Path) -> None:
    bad = write_not_gguf(tmp_path / "not.gguf")
    cut = write_truncated(tiny_bytes_target, tmp_path / "cut.gguf", fraction=0.5)
    assert cut.stat().st_size == tiny_bytes_target.stat().st_size // 2
    with pytest.raises(ValueError):
        read_gguf_kv(bad)
    for p in (bad, cut):
        with pytest.raises(ValueError):
            _llama(p)
