"""Our engine under bench: the target and every draft loaded once, one generation per call,
and the micro measurements of the cost model (c, and the verify cost of K+1 rows).
llama_cpp is imported when an `Ours` is built, not with this module."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ggufspec.bench.configs import LOOKUP, BenchPlan, Config
from ggufspec.bench.prompts import BenchPrompt
from ggufspec.errors import UserError
from ggufspec.loop.acceptance import AcceptRule
from ggufspec.loop.control import DraftController
from ggufspec.loop.engine import generate
from ggufspec.loop.rounds import Source
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.models.template import render_chat
from ggufspec.settings import ContextSettings, PairSettings


class Ours:
    """Our engine on one loaded target and every draft (contexts loaded once)."""

    def __init__(self, plan: BenchPlan) -> None:
        from ggufspec.runtime import load_pair
        self.plan = plan
        settings = PairSettings(context=ContextSettings(n_ctx=plan.n_ctx, n_threads=plan.n_threads),
                                n_gpu_layers=plan.n_gpu_layers, n_gpu_layers_draft=plan.n_gpu_layers_draft,
                                draft_kv=plan.draft_kv)  # type: ignore[arg-type]
        self.pair = load_pair(target=plan.target, draft="none", settings=settings)
        # every drafter loaded once, owned by the pair
        self.drafters: dict[str, Any] = {d.label: self.pair.load_drafter(d.ref) for d in plan.drafts}
        # one controller per configuration, kept across its prompts: what a user running that
        # configuration would have (shared, one configuration's rounds would steer another's)
        self.controllers: dict[str, Any] = {}
        # lockstep lanes (`start(lane=i)`): each its own target context and a copy of every drafter
        self.lanes: list[tuple[Any, dict[str, Any]]] = []
        self.paths: dict[str, Path] = {d.label: Path(self.pair.draft_name(self.drafters[d.label]))
                                       for d in plan.drafts if d.ref != LOOKUP}
        self.tokens: dict[str, list[int]] = {}
        self.texts: dict[str, str] = {}
        self.chat = bool(self.pair.target_model.chat_template())
        for p in plan.prompts:
            toks = prompt_tokens(self.pair, p)
            if len(toks) + plan.max_tokens + 16 > plan.n_ctx:
                raise UserError(
                    f"prompt {p.id!r} is {len(toks)} tokens: with {plan.max_tokens} new ones it does not fit "
                    f"a context of {plan.n_ctx}; shorten it"
                )
            self.tokens[p.id] = toks
            self.texts[p.id] = self.prompt_text(p)

    def prompt_text(self, p: BenchPrompt) -> str:
        """The prompt as text, rendered with the target's chat template (for the native peer); the
        messages as plain text where the target has none."""
        m = self.pair.target_model
        if not self.chat:
            return plain_text(p)
        return render_chat(
            template=m.chat_template(), messages=p.messages,
            bos_token=m.special_text(m.bos), eos_token=m.special_text(m.eos),
        )

    def start(self, cfg: Config, prompt: BenchPrompt, seed: int, *, lane: int | None = None):
        """One generation, not yet run. `lane`: on lockstep lane `lane`'s own contexts (made on
        its first use, `SpeculativePair.fork`), so that it can run beside the others; None: on
        the pair's.

        Why lanes rotate (the caller gives each configuration another lane from block to block):
        a context keeps its speed for the whole process, a few percent apart from another's
        (an A/A of the target alone on two contexts: +0.3% to +2.0% in three processes; one grid's
        Q4_1 lanes 5.6%, docs/bench/regimes-cpu-2026-11-27e). A configuration tied to one lane
        carries that lane's speed into every ratio; rotated, it averages over the lanes."""
        sampling = SamplingSettings(temperature=cfg.temperature, seed=seed)
        labels = [] if cfg.is_baseline else cfg.draft.split("+")  # "Q4_1+lookup": both
        if cfg.is_baseline:
            spec = SpeculativeSettings()
        else:  # the bench's flags (plan.speculative), with what this configuration varies
            base = self.plan.speculative or SpeculativeSettings()
            spec = replace(
                base.with_length(draft_max=cfg.draft_max, fixed=cfg.fixed, always_draft=cfg.always_draft,
                                 draft_min=min(base.length.draft_min, cfg.draft_max)),  # a K sweep below it: all of it
                accept=None if cfg.accept == "greedy" else AcceptRule.parse(cfg.accept),
            )

        def gen(target: Any, drafters: tuple, controller: DraftController):
            return generate(
                target=target, prompt=self.tokens[prompt.id], drafters=drafters, max_tokens=self.plan.max_tokens,
                sampling=sampling, speculative=spec, cache_prompt=False,  # every run prefills cold
                controller=controller,
            )

        if lane is None:
            target, drafters = self.pair.target_ctx, tuple(self.drafters[label] for label in labels)
        else:
            while len(self.lanes) <= lane:
                target, forked = self.pair.fork(list(self.drafters.values()))
                copies = dict(zip(self.drafters, forked))  # label -> this lane's copy
                self.lanes.append((target, copies))
                # A new lane's first generation is its memory's first use (KV cache and compute
                # buffers paged in, each batch shape's first graph): in the first lockstep bench
                # the first block ran the target alone at 13.6 tok/s against 24.0 in the next, and
                # the default's controller, timing it, ran the target alone 28 of 46 rounds. One
                # untimed generation warms the lane; a throwaway controller keeps the measured
                # one's history what a sequential bench gives it (warm contexts, a cold controller).
                gen(target, tuple(copies[label] for label in labels), self.pair.new_controller()).run()
            target, copies = self.lanes[lane]
            drafters = tuple(copies[label] for label in labels)
        return gen(target, drafters, self.controllers.setdefault(cfg.name, self.pair.new_controller()))

    def run(self, cfg: Config, prompt: BenchPrompt, seed: int):
        """One generation on the pair's contexts, run to its end."""
        return self.start(cfg, prompt, seed).run()

    def offload(self) -> dict:
        """Where the models run: llama.cpp's layer counts off the CPU (-1: all) and the devices."""
        return {"target_gpu_layers": self.pair.gpu_layers(),
                "target_layers": self.pair.target_model.n_layer + 1,  # blocks and the output layer
                "draft_gpu_layers": {label: self.pair.gpu_layers(d) for label, d in self.drafters.items()
                                     if label != LOOKUP},
                "devices": [d.as_dict() for d in self.pair.devices]}

    def micro(self) -> dict:
        """c per draft model and the verify cost of K+1 rows, timed turn about on the first prompt."""
        plan = self.plan
        prompt = self.tokens[plan.prompts[0].id]
        draft_lens = sorted({c.draft_max for c in plan.configs if c.engine == "ggufspec" and c.draft_max > 0} | {1})
        sizes = sorted({1} | {n + 1 for n in draft_lens})  # a verify of a draft_len-token draft: draft_len + 1 rows
        models = {label: d for label, d in self.drafters.items() if label != LOOKUP}
        contexts: dict[str, Any] = {"__target__": self.pair.target_ctx}
        contexts.update({label: d.ctx for label, d in models.items()})
        times = step_times(contexts, prompt, batch_sizes={"__target__": sizes})
        for d in models.values():
            d.reset()
        target = times["__target__"]
        out: dict[str, Any] = {
            "target_step_s": target[1],
            "verify_s": {str(n - 1): target[n] for n in sizes},  # key K: decode of K+1 rows
            "verify_cost": {str(n - 1): target[n] / target[1] for n in sizes},
            "draft_step_s": {},
            "c": {},
        }
        for label in self.drafters:
            d = 0.0 if label == LOOKUP else times[label][1]
            out["draft_step_s"][label] = d
            out["c"][label] = d / target[1]
        return out

    def close(self) -> None:
        self.pair.close()  # and the drafters it loaded


def prompt_tokens(pair: Any, p: BenchPrompt) -> list[int]:
    """A bench prompt as `pair`'s target reads it: its messages through the chat template, or, for a
    target with none (a base model: the gemma regime's Gemma 3 270M), as plain text, one after the
    other, as a user would pass them with -p."""
    if pair.target_model.chat_template():
        return pair.encode(messages=p.messages)
    return pair.encode(prompt=plain_text(p))


def plain_text(p: BenchPrompt) -> str:
    """A prompt's messages as plain text (a model with no chat template): their contents, a blank line apart."""
    return "\n\n".join(m["content"] for m in p.messages)


def rejections(gen) -> int:
    """Rounds of a finished generation that rejected: each ends with the target's correction token."""
    return sum(1 for s in gen.sources if s is Source.CORRECTION)


def step_times(
    contexts: Mapping[str, Any], prompt: Sequence[int], *, batch_sizes: Mapping[str, Sequence[int]] | None = None,
    reps: int = 24,
) -> dict[str, dict[int, float]]:
    """Median seconds of one decode of n tokens (logits for all n rows) after `prompt`, per
    context and n. The contexts take turns sample by sample, so a load change on a shared machine
    hits every figure alike. n = 1 is one plain decode step; n = K+1 is the price of verifying K drafts.
    """
    sizes = {name: list((batch_sizes or {}).get(name, (1,))) for name in contexts}
    samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in sizes[name]} for name in contexts}
    base: dict[str, int] = {}
    for name, ctx in contexts.items():
        ctx.clear()
        ctx.decode(list(prompt), logits="last")
        base[name] = ctx.n_past
    tok = prompt[-1]
    for _ in range(reps):
        for name, ctx in contexts.items():
            for n in sizes[name]:
                t = time.perf_counter()
                ctx.decode([tok] * n, logits="all")
                samples[name][n].append(time.perf_counter() - t)
                ctx.truncate(base[name])
    for ctx in contexts.values():
        ctx.clear()
    return {name: {n: statistics.median(v) for n, v in per.items()} for name, per in samples.items()}
