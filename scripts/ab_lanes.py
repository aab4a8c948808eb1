"""The lockstep lanes of the A/B scripts (control_ab.py, pipeline_ab.py): one fork of the pair per
arm, and each (pass, prompt) block run step by step together (ggufspec.bench.lockstep), arm i on
lane (i + block) mod arms.

Why rotate: a context keeps a few percent of its own speed for the whole process
(ggufspec.bench.ours.Ours.start); rotated over blocks, no arm carries one lane's. Each lane is
warmed by one untimed generation before the first block. Rates are tokens over the seconds inside
the generation's own steps less its prompt's (what interleave charges it; a launched round of the
target alone included, via the generation's `wait`).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Sequence

MAX_TOKENS = 128


def ab_parser(doc: str, report: Callable[[str], None], *, ngl: str, ngl_help: str) -> argparse.ArgumentParser | None:
    """The command line both A/Bs share: `--report OUT.json` prints that run's report (None back);
    else a parser with PASSES OUT.json, --set, --regime, --limit and --ngl (default `ngl`), to
    which the script adds its own."""
    if sys.argv[1:2] == ["--report"]:
        report(sys.argv[2])
        return None
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("passes", type=int)
    ap.add_argument("out")
    ap.add_argument("--set", default="tuned", choices=("tuned", "heldout"))
    ap.add_argument("--regime", default="default", help="a regime of `bench --regimes` (its target and drafters)")
    ap.add_argument("--limit", type=int, default=None, help="the first N prompts of the set")
    ap.add_argument("--ngl", default=ngl, help=ngl_help)
    return ap


def load_ab_pair(target: str, drafts: Sequence[str], *, ngl: str, rpc: Sequence[str] = ()) -> Any:
    """The pair the lanes fork: a 1,024-token context, `ngl` layers of both models on the device."""
    from ggufspec.runtime import load_pair
    from ggufspec.settings import ContextSettings, PairSettings, parse_layers

    layers = parse_layers(ngl, flag="--ngl")
    return load_pair(target=target, draft=list(drafts),
                     settings=PairSettings(context=ContextSettings(n_ctx=1024), n_gpu_layers=layers,
                                           n_gpu_layers_draft=layers, rpc=tuple(rpc)))


class Lanes:
    """`len(arms)` forks of `pair` (its target and a copy of each drafter); greedy generations of
    MAX_TOKENS from a whole prompt (no prompt cache: each block prefills alike)."""

    def __init__(self, pair: Any, arms: Sequence[str]) -> None:
        self.arms = list(arms)
        self.names = [d.name for d in pair.drafters]
        self.lanes = [(target, dict(zip(self.names, copies)))
                      for target, copies in (pair.fork(list(pair.drafters)) for _ in self.arms)]

    def generate(self, lane: int, prompt: list[int], *, drafters: Sequence[str], controller: Any,
                 speculative: Any = None, asynchronous: bool | None = None) -> Any:
        """A generation on `lane` with the named drafters (the lane's copies); `asynchronous`:
        set the lane's target's (None: leave it)."""
        from ggufspec.loop.engine import generate
        from ggufspec.loop.sampling import SamplingSettings
        from ggufspec.loop.speculation import SpeculativeSettings

        target, copies = self.lanes[lane]
        if asynchronous is not None:
            target.asynchronous = asynchronous
        return generate(target=target, prompt=prompt, drafters=[copies[n] for n in drafters], max_tokens=MAX_TOKENS,
                        cache_prompt=False, sampling=SamplingSettings(temperature=0.0),
                        speculative=speculative or SpeculativeSettings(), controller=controller)

    def warm(self, start: Callable[[str, int], Any]) -> None:
        """One untimed generation on each lane: `start(arm, lane)` -> a generation."""
        for i, arm in enumerate(self.arms):
            start(arm, i).run()

    def block(self, block: int, start: Callable[[str, int], Any]) -> list[tuple[Any, float]]:
        """Block `block`: every arm's generation (`start(arm, lane)`) in lockstep, arm i on lane
        (i + block) mod arms. Returns each arm's generation and its tokens a second."""
        from ggufspec.bench.lockstep import interleave

        n = len(self.arms)
        gens = [start(a, (i + block) % n) for i, a in enumerate(self.arms)]
        busy = interleave(gens)
        return [(g, len(g.tokens) / max(1e-9, b - g.stats.prompt_s)) for g, b in zip(gens, busy)]
