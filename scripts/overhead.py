"""Our per-round overhead: the real loop (`ggufspec.loop.engine.generate`, what `SpeculativePair.generate`
and every command run) on fake models that cost nothing, timed with the wall clock.

Issue 40 asks for "our per-round overhead (Python, the controller, copies of logits; not
llama.cpp's decode) ... at most 0.15 ms a round". The models here are zero-cost `Target`s: a
decode appends its tokens and points each asked-for row at a precomputed logits array of the
real vocabulary's size (49,152, SmolLM2's), so the loop's argmax and copies cost what they do on
real logits; the next token is a function of the last two tokens and the position (text that
repeats in places, so prompt lookup finds matches), the draft's the target's with ~13% of
positions changed. Their own seconds (every call into them timed) are taken off.

The draft controller judges costs by `ggufspec.loop.clock`, which is pointed at a simulated clock the
fake models advance by modelled costs, so it decides as it would on a machine of those costs
(`--regime`): `pays` (the 2-core EPYC's: a 33.9 ms target step, 9 rows 57.7 ms, 9.8 ms a draft
step: it drafts most rounds) or `h200` (the default pair on an H200: a 4.21 ms step, 9 rows
11.7 ms, a 4.0 ms draft step: it runs the target alone most rounds). The wall clock measures
only our Python.

Modes, alternated within each repeat (one controller per mode, kept across its generations as a
pair keeps one; a generation of each mode first, untimed):
    alone     the target alone (drafters=())
    K4        the draft model at fixed K = 4 (--fixed --draft-max 4)
    default   the draft model (sharing the target's cache, as the default pair's) + lookup, the controller
    lookup    prompt lookup alone, the controller

    .venv/bin/python scripts/overhead.py                       # the table, both regimes
    .venv/bin/python scripts/overhead.py --profile default:h200  # + cProfile of one mode's rounds
    .venv/bin/python scripts/overhead.py --n-vocab 262144           # rows of gemma3's vocabulary

Writes a markdown table to stdout: ms a round (median over repeats, min-max), rounds, what the
rounds did; with --profile, the top functions of that mode by own time (ms a round, scaled to the
unprofiled median) and the main callees' cumulative time. The controller is compiled where the
install compiled it (ggufspec.loop.compiled): cProfile then sees each of its calls as one
function; `GGUFSPEC_PURE=1` profiles its source.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import statistics as st
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ggufspec.loop import clock  # noqa: E402
from ggufspec.loop.control import DraftController  # noqa: E402
from ggufspec.loop.model_drafter import ModelDrafter  # noqa: E402
from ggufspec.loop.lookup import LookupDrafter  # noqa: E402
from ggufspec.loop.drafters import SharedPrefix  # noqa: E402
from ggufspec.loop.engine import generate  # noqa: E402
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

N_VOCAB = 49152  # SmolLM2's: each row the loop reads is this long
ALPHABET = 300  # distinct tokens the fake text uses
REGIMES = {  # seconds: target step a, each extra verify row, a draft step
    "pays": (0.0339, (0.0577 - 0.0339) / 8, 0.0098),
    "h200": (0.00421, (0.0117 - 0.00421) / 8, 0.0040),
}
perf = time.perf_counter


class SimClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class Vocab:
    def is_eog(self, token: int) -> bool:
        return False

    def token_bytes(self, token: int) -> bytes:
        return b"ab"[token % 2:token % 2 + 1] * (1 + token % 3)


def _mix(*xs: int) -> int:
    h = 1469598103934665603
    for x in xs:
        h = ((h ^ x) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def next_token(a: int, b: int, pos: int, *, draft: bool) -> int:
    """The fake language model: a function of the last two tokens and which of three 40-token
    phases the position is in (so the text repeats for a while, then moves on)."""
    t = _mix(a, b, (pos // 40) % 3) % ALPHABET
    if draft and _mix(a, b, pos, 7) % 100 < 13:
        t = (t + 1) % ALPHABET
    return t


def _base_row(n_vocab: int) -> np.ndarray:
    """`n_vocab` standard-normal logits (seed 0): every token's row is this one with its own entry raised."""
    return np.random.default_rng(0).standard_normal(n_vocab).astype(np.float32)


@dataclass
class Rows:
    """One logits array per token, made once: a row whose argmax is that token."""

    rows: dict[int, np.ndarray] = field(default_factory=dict)
    base: np.ndarray = field(default_factory=lambda: _base_row(N_VOCAB))

    def resize(self, n_vocab: int) -> None:
        """Rows of `n_vocab` entries from now on (`--n-vocab`: another model's vocabulary)."""
        self.rows.clear()
        self.base = _base_row(n_vocab)

    def __call__(self, token: int) -> np.ndarray:
        row = self.rows.get(token)
        if row is None:
            row = self.rows[token] = self.base.copy()
            row[token] = 50.0
        return row


ROWS = Rows()


class ZeroCostModel:
    """A `Target` whose calls cost (almost) nothing; `own_s` sums the wall seconds spent in them.

    With `device` > 0 its decodes take that many wall seconds a modelled second on a simulated
    device (`--device-ms`): busy-waited inside the decode, or, `asynchronous`, left running until
    the next logits read (`device_s` sums them, `spin_s` the wall seconds spent waiting)."""

    def __init__(self, sim: SimClock, *, draft: bool, t_1: float, t_row: float, n_ctx: int = 4096,
                 device: float = 0.0, asynchronous: bool = False) -> None:
        self.sim, self.draft, self.t_1, self.t_row = sim, draft, t_1, t_row
        self.n_ctx, self.n_batch = n_ctx, 512
        self.model = Vocab()
        self.kv: list[int] = []
        self._shared = SharedPrefix()
        self._rows: list[np.ndarray] = []
        self.own_s = 0.0
        self.calls = 0
        self.device, self.asynchronous = device, asynchronous
        self.device_s = self.spin_s = 0.0
        self._ready = 0.0  # when the device is done

    def _spin(self) -> None:
        t = perf()
        while perf() < self._ready:
            pass
        self.spin_s += perf() - t

    @property
    def n_past(self) -> int:
        return len(self.kv)

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self.kv)  # as llama.Context's, a copy of its token list: counted as ours

    def common_prefix(self, seq: Sequence[int]) -> int:
        return self._shared.ask(self.kv, seq)  # as llama.Context's

    def decode(self, tokens: Sequence[int], *, logits: str = "last", wait: bool = True) -> None:
        t = perf()
        n = len(tokens)
        if n:
            kv = self.kv
            start = len(kv)
            kv.extend(tokens)
            if logits == "all":
                self._rows = [ROWS(next_token(kv[i - 1] if i else 0, kv[i], i + 1, draft=self.draft))
                              for i in range(start, start + n)]
            elif logits == "last":
                i = len(kv) - 1
                self._rows = [ROWS(next_token(kv[i - 1] if i else 0, kv[i], i + 1, draft=self.draft))]
            else:
                self._rows = []
            self.sim.t += self.t_1 + (n - 1) * self.t_row
            if self.device:
                dev = (self.t_1 + (n - 1) * self.t_row) * self.device
                self.device_s += dev
                self._ready = max(perf(), self._ready) + dev
                if wait or not self.asynchronous:
                    self._spin()
        self.calls += 1
        self.own_s += perf() - t

    def logits(self, i: int = -1) -> np.ndarray:
        t = perf()
        if self.device:
            self._spin()
        row = self._rows[i]
        self.own_s += perf() - t
        return row

    def truncate(self, n: int) -> None:
        del self.kv[n:]
        self._shared.cut(n)

    def clear(self) -> None:
        self.kv.clear()
        self._shared.reset()

    def state(self) -> tuple[int, ...]:
        return tuple(self.kv)

    def load_state(self, data: tuple[int, ...], tokens: Sequence[int]) -> bool:
        self.kv = list(data)
        self._shared.reset()
        return True


@dataclass
class Mode:
    name: str
    regime: str  # the simulated clock's costs ("-" where no controller reads them)
    drafters: str  # "", "model", "model+lookup", "lookup"
    fixed: int = 0


MODES = {
    "alone": Mode("alone", "-", ""),
    "K4": Mode("K4", "-", "model", fixed=4),
    "default:pays": Mode("default", "pays", "model+lookup"),
    "default:h200": Mode("default", "h200", "model+lookup"),
    "lookup:pays": Mode("lookup", "pays", "lookup"),
}


class Runner:
    """One mode's models, drafters and controller, kept across its generations."""

    def __init__(self, key: str, prompt_len: int, *, device_ms: float = 0.0, asynchronous: bool = False) -> None:
        self.mode = MODES[key]
        self.sim = SimClock()
        a, row, b = REGIMES.get(self.mode.regime, REGIMES["pays"])
        dev = device_ms / 1e3 / a  # wall seconds a modelled second: the target's step lasts device_ms
        self.target = ZeroCostModel(self.sim, draft=False, t_1=a, t_row=row, device=dev, asynchronous=asynchronous)
        self.draft = ZeroCostModel(self.sim, draft=True, t_1=b, t_row=b / 4, device=dev, asynchronous=asynchronous)
        self.drafters: list[Any] = []
        if "model" in self.mode.drafters:
            self.drafters.append(ModelDrafter(self.draft, name="model", kv_source=self.target))
        if "lookup" in self.mode.drafters:
            self.drafters.append(LookupDrafter())
        self.controller = DraftController()
        self.spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=self.mode.fixed or 8,
                                                                   fixed=bool(self.mode.fixed)))
        self.prompt_len = prompt_len
        self.n = 0

    def generation(self, max_tokens: int) -> tuple[float, int, Any]:
        """(our wall seconds after the first token, rounds, stats) of one generation of a new prompt."""
        self.n += 1
        rng = np.random.default_rng(self.n)
        prompt = [int(x) for x in rng.integers(0, ALPHABET, self.prompt_len)]
        clock.now = self.sim.now  # the controller's clock: this mode's simulated machine
        gen = generate(target=self.target, prompt=prompt, drafters=self.drafters, max_tokens=max_tokens,
                       speculative=self.spec, controller=self.controller, cache_prompt=False)
        it = iter(gen)
        next(it)  # the prefill and the first token
        models = (self.target, self.draft)
        own0 = sum(m.own_s for m in models)
        t0 = perf()
        for _ in it:
            pass
        wall = perf() - t0
        own = sum(m.own_s for m in models) - own0
        return wall - own, gen.stats.rounds, gen.stats


def measure(keys: Sequence[str], *, repeats: int, rounds: int, max_tokens: int, prompt_len: int) -> dict[str, dict]:
    runners = {k: Runner(k, prompt_len) for k in keys}
    for r in runners.values():
        r.generation(max_tokens)  # untimed: the controller calibrates, numpy warms
    per_round: dict[str, list[float]] = {k: [] for k in keys}
    stats: dict[str, list[Any]] = {k: [] for k in keys}
    for _ in range(repeats):
        for k in keys:  # alternated: each repeat runs every mode once
            seconds, n = 0.0, 0
            while n < rounds:
                s, rr, stat = runners[k].generation(max_tokens)
                seconds += s
                n += rr
                stats[k].append(stat)
            per_round[k].append(seconds / n)
    out = {}
    for k in keys:
        ss = stats[k]
        total = sum(s.rounds for s in ss)
        drafted_rounds = total - sum(s.drafter_rounds.get("none", 0) for s in ss)
        out[k] = {"ms": [x * 1e3 for x in per_round[k]], "rounds": total,
                  "tokens_per_round": sum(s.generated_tokens - 1 for s in ss) / total,
                  "drafted_share": drafted_rounds / total,
                  "by_drafter": {d: sum(s.drafter_rounds.get(d, 0) for s in ss) / total
                                 for d in sorted({d for s in ss for d in s.drafter_rounds})},
                  "drafts_per_round": sum(s.drafted for s in ss) / total,
                  "accept": (sum(s.accepted for s in ss) / max(1, sum(s.drafted for s in ss)))}
    return out


def measure_device(keys: Sequence[str], *, device_ms: float, repeats: int, rounds: int, max_tokens: int,
                   prompt_len: int) -> dict[str, dict[bool, list[float]]]:
    """Each mode on the simulated device (`--device-ms`), its decodes waited for (False) and
    asynchronous (True: the loop launches a round of the target alone ahead and does its
    bookkeeping while the device computes), alternated: ms a round of wall time over the device's
    (our Python the device did not hide; the fakes' own Python off)."""
    runners = {(k, a): Runner(k, prompt_len, device_ms=device_ms, asynchronous=a) for k in keys for a in (False, True)}
    for r in runners.values():
        r.generation(max_tokens)
    out: dict[str, dict[bool, list[float]]] = {k: {False: [], True: []} for k in keys}
    for _ in range(repeats):
        for (k, a), r in runners.items():
            models = (r.target, r.draft)
            wall = 0.0
            n = 0
            dev0, spin0, own0 = (sum(getattr(m, f) for m in models) for f in ("device_s", "spin_s", "own_s"))
            while n < rounds:
                t = perf()
                rr = r.generation(max_tokens)[1]
                wall += perf() - t
                n += rr
            dev, spin, own = (sum(getattr(m, f) for m in models) - x
                              for f, x in (("device_s", dev0), ("spin_s", spin0), ("own_s", own0)))
            # wall = device + our Python not under it + the fakes' own Python (own - spin); the
            # generation's first token (its prefill) included: each mode alike
            out[k][a].append((wall - dev - (own - spin)) / n * 1e3)
    return out


def profile(key: str, *, rounds: int, max_tokens: int, prompt_len: int, top: int) -> dict[str, Any]:
    """cProfile over `rounds` rounds of one mode: our functions' own time (the fake models' and
    what they call taken off), the top `top`, and the cumulative time of the loop's main parts;
    profiled seconds (the profiler's own slowdown included: read shares)."""
    r = Runner(key, prompt_len)
    r.generation(max_tokens)
    prof = cProfile.Profile()
    n = 0
    prof.enable()
    while n < rounds:
        n += r.generation(max_tokens)[1]
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    here = str(Path(__file__).resolve())
    ours = []
    for (file, line, func), (cc, nc, tt, ct, callers) in stats.items():
        if file == here:
            continue  # the fake models, the runner
        fake = sum(c[2] for k, c in callers.items() if k[0] == here)  # a builtin's time called from the fakes
        share = 1.0 - (sum(c[1] for k, c in callers.items() if k[0] == here) / nc if nc else 0.0)
        ours.append((tt - fake, ct, nc * share, f"{Path(file).name}:{line}({func})" if line else func, file))
    total = sum(x[0] for x in ours)
    wanted = {("choose", "control.py"), ("observe", "control.py"), ("extend", "extension.py"), ("begin", "control.py"),
              ("propose", "model_drafter.py"), ("propose", "lookup.py"), ("continue_after", "lookup.py"),
              ("play", "round_runner.py"), ("_extension", "round_runner.py"), ("accept_greedy", "acceptance.py"),
              ("pick", "round_runner.py"), ("push", "text.py"), ("add", "stats.py"), ("stats", "stats.py"),
              ("_sync", "model_drafter.py"), ("_reach", "model_drafter.py"), ("best_len", "throughput.py"),
              ("prior_rate", "costmodel.py"), ("_throughputs", "throughput.py"), ("prefix_accept", "throughput.py"),
              ("round_costs", "costmodel.py"), ("draft_cost_s", "costmodel.py"), ("_check", "checks.py"),
              ("_wait", "exploration.py")}
    cum: dict[str, float] = {}
    for tt, ct, nc, label, file in ours:
        func = label.rsplit("(", 1)[-1].rstrip(")")
        if (func, Path(file).name) in wanted:
            cum[label] = cum.get(label, 0.0) + ct
    return {"top": sorted(ours, reverse=True)[:top], "cum": cum, "total": total, "rounds": n}


def real_context(path: str, *, n_prompt: int = 300, calls: int = 300) -> list[tuple[str, float]]:
    """The real llama.cpp context's Python a call (ggufspec.llama.Context on CPU, one thread,
    `path`'s model): decode of 1 row and of 9 rows with every row's logits, the time inside
    llama_decode taken off (llama_decode wrapped and timed), and the same with llama_decode
    stubbed (the Python alone, its caches warm: a real decode streams the weights through the
    CPU's caches and the Python around it runs cold); `logits(i)` (a numpy view of llama.cpp's
    buffer through ctypes); `tokens` (a copy of the token list) at `n_prompt` tokens. Median us."""
    import llama_cpp

    from ggufspec.llama.context import Context
    from ggufspec.llama.model import Model
    from ggufspec.settings import ContextSettings

    inner = llama_cpp.llama_decode
    spent = [0.0]

    def timed(ctx: Any, batch: Any) -> int:
        t = perf()
        rc = inner(ctx, batch)
        spent[0] += perf() - t
        return rc

    model = Model(path)
    ctx = Context(model, settings=ContextSettings(n_ctx=1024, n_threads=1).with_cache_type("f16"))
    out: list[tuple[str, float]] = []
    try:
        llama_cpp.llama_decode = timed
        prompt = [int(x) for x in np.random.default_rng(0).integers(100, 20000, n_prompt)]
        ctx.decode(prompt, logits="last")
        for rows, mode in ((1, "last"), (9, "all")):
            ours = []
            for _ in range(calls // 10):
                spent[0] = 0.0
                t = perf()
                ctx.decode(prompt[:rows], logits=mode)  # type: ignore[arg-type]
                ours.append(perf() - t - spent[0])
                ctx.truncate(n_prompt)
            out.append((f"Context.decode, {rows} row(s), logits {mode!r}: our Python around a real llama_decode",
                        st.median(ours) * 1e6))
        llama_cpp.llama_decode = lambda ctx_, batch: 0  # no compute: the same Python, its caches warm
        for rows, mode in ((1, "last"), (9, "all")):
            ours = []
            for _ in range(calls):
                t = perf()
                ctx.decode(prompt[:rows], logits=mode)  # type: ignore[arg-type]
                ours.append(perf() - t)
                del ctx._tokens[n_prompt:]  # (nothing reached llama.cpp's cache)
            out.append((f"Context.decode, {rows} row(s), logits {mode!r}: the same Python, llama_decode stubbed (warm)",
                        st.median(ours) * 1e6))
        llama_cpp.llama_decode = timed
        ctx.decode(prompt[:9], logits="all")
        ts = []
        for i in range(calls):
            t = perf()
            ctx.logits(i % 9)
            ts.append(perf() - t)
        out.append(("Context.logits(i): a numpy view of the row", st.median(ts) * 1e6))
        ts = []
        for _ in range(calls):
            t = perf()
            ctx.tokens
            ts.append(perf() - t)
        out.append((f"Context.tokens at {ctx.n_past} tokens (a tuple copy)", st.median(ts) * 1e6))
        row = ctx.logits(0)
        ts = []
        for _ in range(calls):
            t = perf()
            int(np.argmax(row))
            ts.append(perf() - t)
        out.append((f"np.argmax of a fresh logits row ({row.size:,} floats)", st.median(ts) * 1e6))
    finally:
        llama_cpp.llama_decode = inner
        ctx.close()
    return out


def host() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}"


def decisions(key: str, *, generations: int, max_tokens: int, prompt_len: int) -> tuple[str, int]:
    """(a hash of every choice and every round's outcome, choices) of `generations` generations of mode `key`: the simulated clock
    makes them deterministic, so a change that only speeds our Python must leave the hash as it was."""
    import hashlib

    r = Runner(key, prompt_len)
    h, seen = hashlib.sha256(), 0

    class Recorded(DraftController):  # (a compiled controller's methods cannot be replaced on an instance)
        def choose(self, **kwargs: Any) -> Any:
            nonlocal seen
            ch = super().choose(**kwargs)
            h.update(repr(ch).encode())
            seen += 1
            return ch

        def observe(self, rnd: Any) -> None:  # every round, held ones too: what ran and what it kept
            h.update(repr((rnd.choice, rnd.drafted, rnd.accepted, rnd.emitted)).encode())
            super().observe(rnd)

    r.controller = Recorded()
    for _ in range(generations):
        r.generation(max_tokens)
    return h.hexdigest()[:12], seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=1000, help="rounds a mode runs in each repeat (whole generations)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--profile", nargs="*", default=[], choices=list(MODES), help="modes to run under cProfile")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--n-vocab", type=int, default=N_VOCAB,
                    help="entries of each logits row (SmolLM2's 49,152; gemma3's 262,144)")
    ap.add_argument("--real", metavar="GGUF", help="also time the real llama.cpp context's Python a call on this model")
    ap.add_argument("--device-ms", type=float, default=0.0, metavar="MS",
                    help="also on a simulated device whose target step lasts MS ms (the H200's default pair: 1.35), "
                         "waited for and asynchronous")
    ap.add_argument("--decisions", type=int, default=0, metavar="N",
                    help="only print a hash of every choice of N generations a mode (a speed-up must not change it)")
    args = ap.parse_args()
    if args.n_vocab != N_VOCAB:
        ROWS.resize(args.n_vocab)
    real_now = clock.now
    if args.decisions:
        try:
            for k in args.modes:
                digest, n = decisions(k, generations=args.decisions, max_tokens=args.max_tokens,
                                      prompt_len=args.prompt_len)
                print(f"{k}: {digest} ({n} choices)")
        finally:
            clock.now = real_now
        return
    device = None
    try:
        res = measure(args.modes, repeats=args.repeats, rounds=args.rounds, max_tokens=args.max_tokens,
                      prompt_len=args.prompt_len)
        if args.device_ms > 0:
            device = measure_device(args.modes, device_ms=args.device_ms, repeats=args.repeats, rounds=args.rounds,
                                    max_tokens=args.max_tokens, prompt_len=args.prompt_len)
        profiles = {k: profile(k, rounds=args.rounds, max_tokens=args.max_tokens, prompt_len=args.prompt_len,
                               top=args.top) for k in args.profile}
    finally:
        clock.now = real_now
    print(f"Host: {host()}. Command: `{' '.join(['scripts/overhead.py', *sys.argv[1:]])}`; {args.repeats} repeats "
          f"of >= {args.rounds} rounds a mode, alternated; generations of {args.max_tokens} tokens from "
          f"{args.prompt_len}-token prompts; logits rows of {args.n_vocab:,} entries.\n")
    print("| mode | controller's clock | ms a round, median [min-max] | rounds | tokens a round | rounds drafted "
          "| drafts a round | accepted |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for k, r in res.items():
        m = MODES[k]
        by = ", ".join(f"{d} {v:.0%}" for d, v in r["by_drafter"].items())
        print(f"| {m.name} | {m.regime} | {st.median(r['ms']):.3f} [{min(r['ms']):.3f}-{max(r['ms']):.3f}] | {r['rounds']} | "
              f"{r['tokens_per_round']:.2f} | {by} | {r['drafts_per_round']:.2f} | {r['accept']:.0%} |")
    if device is not None:
        print(f"\nOn a simulated device (its target step {args.device_ms} ms, the rest scaled alike; the "
              "controller's clock as above): ms a round of wall time over the device's, median [min-max], "
              "each decode waited for against an asynchronous device (rounds of the target alone launched "
              "ahead, the bookkeeping under the decode):\n")
        print("| mode | controller's clock | waited for | asynchronous |\n|---|---|---:|---:|")
        for k, by in device.items():
            m = MODES[k]
            print(f"| {m.name} | {m.regime} | " + " | ".join(
                f"{st.median(by[a]):.3f} [{min(by[a]):.3f}-{max(by[a]):.3f}]" for a in (False, True)) + " |")
    if args.real:
        print(f"\nThe real context's Python a call ({Path(args.real).name}, CPU; median microseconds):\n")
        print("| call | us |\n|---|---:|")
        for label, us in real_context(args.real):
            print(f"| {label} | {us:.1f} |")
    for k, prof in profiles.items():
        n, total = prof["rounds"], prof["total"]
        # profiled seconds -> the unprofiled ms a round: the profiler slows each call by about the same
        scale = st.median(res[k]["ms"]) / (total / n * 1e3) if k in res else 1.0
        print(f"\ncProfile, {k}: {n} rounds, our own time {total / n * 1e3:.3f} profiled ms a round"
              + (f" (unprofiled {st.median(res[k]['ms']):.3f}: each figure below scaled by {scale:.2f})" if k in res else "")
              + ". Top functions by own time (the fake models' excluded):\n")
        print("| function | calls a round | own ms a round | share | cumulative ms a round |")
        print("|---|---:|---:|---:|---:|")
        for tt, ct, nc, label, _ in prof["top"]:
            print(f"| `{label}` | {nc / n:.2f} | {tt / n * 1e3 * scale:.4f} | {tt / total:.0%} | {ct / n * 1e3 * scale:.4f} |")
        print("\nCumulative time of the loop's parts (ms a round, scaled alike; nested: a part includes those it calls):\n")
        print("| function | cumulative ms a round | share |")
        print("|---|---:|---:|")
        for label, ct in sorted(prof["cum"].items(), key=lambda x: -x[1]):
            print(f"| `{label}` | {ct / n * 1e3 * scale:.4f} | {ct / total:.0%} |")


if __name__ == "__main__":
    main()
