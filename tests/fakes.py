"""Pure-Python stand-ins for llama.cpp: a fake `Target` (any model context) and a simulated clock.

A fake model is a deterministic next-token distribution of the whole prefix, `lm(prefix) -> logits`;
its "KV cache" is the list of tokens decoded so far, so a decode scores each row from the true
prefix and a missed rollback shows as wrong logits, not silently. Each decode advances a simulated
clock by a modelled cost (t_1 for one row, t_row per extra row), which is all the pacer sees.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from ggufspec.loop.drafters import common_prefix

LM = Callable[[Sequence[int]], np.ndarray]


class FakeClock:
    """Seconds that pass only when a fake model decodes."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class FakeVocab:
    """Token t renders as the letters of `pieces[t]`; `eog` tokens end a generation."""

    def __init__(self, pieces: Sequence[bytes], eog: Sequence[int] = ()) -> None:
        self.pieces = list(pieces)
        self.eog = set(eog)

    def is_eog(self, token: int) -> bool:
        return token in self.eog

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token]


def letters_vocab(n_vocab: int, *, eog: Sequence[int] = ()) -> FakeVocab:
    """Pieces 'a', 'b', ..., then two-letter ones; token n_vocab-1 is a 2-byte UTF-8 'é' split
    over two tokens would need byte pieces: token n_vocab-2 renders b'\\xc3', n_vocab-1 b'\\xa9'."""
    pieces = [bytes([97 + i % 26]) * (1 + i // 26) for i in range(n_vocab - 2)] + [b"\xc3", b"\xa9"]
    return FakeVocab(pieces, eog)


def ngram_lm(*, n_vocab: int, seed: int, order: int = 2, peak: float = 3.0, noise: float = 0.0,
             noise_seed: int = 1) -> LM:
    """Logits that depend on the last `order` tokens only (so text repeats and lookup finds
    matches), drawn from a hash of them; `noise` adds a second, independent hash: a draft that
    agrees with the target more or less."""

    # a row is a pure function of (seed, key): kept (about 32 MB at most), since a new generator a
    # call was a fifth of the distribution tests' time
    @functools.lru_cache(maxsize=max(64, 2**22 // n_vocab))
    def draw(key: tuple[int, ...], s: int) -> np.ndarray:
        h = hashlib.blake2b(repr((s, key)).encode(), digest_size=8).digest()
        row = np.random.default_rng(int.from_bytes(h, "little")).standard_normal(n_vocab)
        row.flags.writeable = False
        return row

    def lm(prefix: Sequence[int]) -> np.ndarray:
        key = tuple(prefix[-order:])
        z = peak * draw(key, seed)
        if noise:
            z = z + noise * peak * draw(key, seed + 1000 * noise_seed)
        return z.astype(np.float32)

    return lm


@dataclass
class CudaGraph:
    """A GPU context's captured graph as llama.cpp's CUDA backend runs it: a decode whose rows
    differ from the last one's runs without the graph, the next of those rows too, capturing it
    (+ `capture`); then it replays. Without the graph a decode costs max(`uncaptured`, its replay +
    `launch`): a small model is launch-bound whatever the rows (the 135M: 2.6 ms against 1.29), a
    big one pays its kernel launches over its replay (the 7B stand-in: ~3.2 ms over 7.3)."""

    uncaptured: float
    capture: float
    launch: float = 0.0
    shape: int = -1
    captured: bool = False

    def bare(self, replay: float) -> float:
        """Seconds of a decode without the graph that costs `replay` with it."""
        return max(self.uncaptured, replay + self.launch)

    def cost(self, rows: int, replay: float) -> float:
        """Seconds of a decode of `rows` rows that costs `replay` when its graph replays."""
        bare = self.bare(replay)
        if rows != self.shape:
            self.shape, self.captured = rows, False
            return bare
        if not self.captured:
            self.captured = True
            return bare + self.capture
        return replay


@dataclass
class FakeModel:
    """A fake context implementing ggufspec.loop.target.Target."""

    lm: LM
    vocab: FakeVocab
    n_ctx: int = 256
    n_batch: int = 64
    clock: FakeClock | None = None
    t_1: float = 0.010  # seconds for a one-row decode
    t_row: float = 0.001  # seconds for each extra row
    kv: list[int] = field(default_factory=list)
    decodes: list[tuple[int, str]] = field(default_factory=list)  # (rows, logits mode) per call
    loads: int = 0  # load_state calls that took a cache
    asynchronous: bool = False  # `Target.asynchronous`: decode(wait=False) leaves the result in flight ...
    in_flight: bool = False  # ... until the next logits read
    _rows: list[np.ndarray] = field(default_factory=list)

    @property
    def model(self) -> FakeVocab:
        return self.vocab

    @property
    def n_past(self) -> int:
        return len(self.kv)

    @property
    def tokens(self) -> list[int]:
        return self.kv

    def common_prefix(self, seq: Sequence[int]) -> int:
        return common_prefix(self.kv, seq)

    def decode(self, tokens: Sequence[int], *, logits: str = "last", wait: bool = True) -> None:
        n = len(tokens)
        if n == 0:
            return
        if self.n_past + n > self.n_ctx:
            raise AssertionError(f"decode past the context: {self.n_past} + {n} > {self.n_ctx}")
        if logits == "all" and n > self.n_batch:
            raise AssertionError(f"{n} rows do not fit a batch of {self.n_batch}")
        self.decodes.append((n, logits))
        self.in_flight = self.asynchronous and not wait
        start = len(self.kv)
        self.kv.extend(int(t) for t in tokens)
        if logits == "all":
            self._rows = [self.lm(self.kv[: start + i + 1]) for i in range(n)]
        elif logits == "last":
            self._rows = [self.lm(self.kv)]
        else:
            self._rows = []
        if self.clock is not None:
            self.clock.t += self.t_1 + (n - 1) * self.t_row

    def logits(self, i: int = -1) -> np.ndarray:
        self.in_flight = False
        return self._rows[i]

    def truncate(self, n: int) -> None:
        del self.kv[n:]

    def state(self) -> bytes:
        """The "KV cache" serialised: its tokens (a draft model that imports it decodes nothing)."""
        return np.asarray(self.kv, dtype=np.int64).tobytes()

    def load_state(self, data: bytes, tokens: Sequence[int]) -> bool:
        held = np.frombuffer(data, dtype=np.int64).tolist()
        if held != list(tokens) or len(held) > self.n_ctx:
            self.kv.clear()
            return False
        self.kv[:] = held
        self.loads += 1
        return True

    def clear(self) -> None:
        self.kv.clear()


def assert_follows(counts: Mapping[tuple, int], exact: Mapping[tuple, float], runs: int) -> None:
    """`runs` sampled sequences (`counts`) against their exact probabilities: every run counted,
    none of probability 0, and a chi-square test at p > 1e-3 with the rare sequences pooled into
    one cell (every other cell expects at least 5)."""
    from scipy import stats as sps

    keys = sorted(exact, key=lambda k: -exact[k])
    expected = np.array([exact[k] * runs for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    big = expected >= 5
    f_obs = np.append(observed[big], observed[~big].sum())
    f_exp = np.append(expected[big], expected[~big].sum())
    if f_exp[-1] == 0:  # no rare sequence: no pooled cell
        f_obs, f_exp = f_obs[:-1], f_exp[:-1]
    assert sum(counts.values()) == runs and set(counts) <= set(exact)
    assert sps.chisquare(f_obs, f_exp).pvalue > 1e-3


def greedy_reference(lm: LM, vocab: FakeVocab, prompt: Sequence[int], *, max_tokens: int, n_ctx: int) -> list[int]:
    """The target alone, written independently of ggufspec's loop: argmax of lm, token by token."""
    history, out = list(prompt), []
    while len(out) < max_tokens and len(history) < n_ctx:
        tok = int(np.argmax(lm(history)))
        out.append(tok)
        history.append(tok)
        if vocab.is_eog(tok):
            break
    return out
