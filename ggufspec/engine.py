"""The draft/verify loop as a generator of steps; without a drafter, the target alone.

One round, with history h (the last token of h not yet in the target's KV cache):
    1. the drafter proposes x_0..x_{K-1} (K may be 0: then this is a plain target step);
    2. the target decodes [h_last, x_0..x_{K-1}] in one batch, logits for all K+1 rows;
       row i is the target's distribution for the token after batch token i;
    3. an acceptance rule keeps x_0..x_{n-1} and adds one token (correction or bonus);
    4. the target's KV cache drops the rejected positions; the drafter re-syncs next round.
The target alone is the same loop with K = 0, so both paths share every line of code but drafting.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from ggufspec import clock
from ggufspec.acceptance import AcceptRule, Variant, accept_greedy, accept_match, accept_rejection
from ggufspec.drafters import Drafter, DraftLength, DraftLengthSettings
from ggufspec.errors import UserError
from ggufspec.pacing import DraftPacer
from ggufspec.sampling import SamplingSettings, probabilities, sample
from ggufspec.stats import RunStats
from ggufspec.target import Target
from ggufspec.text import Detokenizer, StopText


class Source(str, enum.Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # proposed by the drafter, accepted by the target
    CORRECTION = "correction"  # the target's token replacing a rejected draft token
    BONUS = "bonus"  # the target's extra token after a fully accepted draft
    TARGET = "target"  # the target alone (prompt's first token, or a round with no draft)


@dataclass(frozen=True, slots=True)
class Step:
    """One emitted token. `text` is the text released with it (may be empty: an incomplete
    UTF-8 character or a possible stop-string prefix is held back until resolved)."""

    token: int
    source: Source
    text: str
    round: int


@dataclass(frozen=True, kw_only=True)
class SpeculativeSettings:
    """How drafts are judged and sized."""

    accept: AcceptRule | None = None  # None: greedy at temperature 0, rejection otherwise
    variant: Variant = Variant.LEVIATHAN
    length: DraftLengthSettings = field(default_factory=DraftLengthSettings)

    def rule_for(self, sampling: SamplingSettings) -> AcceptRule:
        if sampling.greedy:
            return AcceptRule.GREEDY  # every rule reduces to greedy on one-hot distributions
        if self.accept is None:
            return AcceptRule.REJECTION
        if self.accept is AcceptRule.GREEDY:
            raise UserError("--accept greedy needs --temp 0; use rejection or match when sampling")
        return self.accept


class _TargetRows:
    """Target distributions p_i, shaped only when an acceptance rule asks for row i."""

    def __init__(self, ctx: Target, sampling: SamplingSettings) -> None:
        self._ctx, self._sampling, self._rows = ctx, sampling, {}

    def __getitem__(self, i: int) -> np.ndarray:
        row = self._rows.get(i)
        if row is None:
            row = self._rows[i] = probabilities(self._ctx.logits(i), self._sampling)
        return row


class Generation:
    """A running generation: iterate it for `Step`s; `stats` and `text` are set when it ends.

    `close()` stops it early (a client that went away): the caches keep only tokens they hold,
    so the next generation reuses what it can (or starts clean with cache_prompt=False).
    """

    def __init__(self) -> None:
        self._steps: Iterator[Step] = iter(())
        self.stats: RunStats | None = None
        self.tokens: list[int] = []
        self.sources: list[Source] = []
        self._text: list[str] = []

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> Step:
        step = next(self._steps)
        self.tokens.append(step.token)
        self.sources.append(step.source)
        self._text.append(step.text)
        return step

    @property
    def text(self) -> str:
        return "".join(self._text)

    def run(self) -> "Generation":
        """Drain the generation (non-streaming use)."""
        for _ in self:
            pass
        return self

    def close(self) -> None:
        self._steps.close()  # type: ignore[attr-defined]


def generate(
    *,
    target: Target,
    prompt: Sequence[int],
    drafter: Drafter | None = None,
    max_tokens: int = 128,
    sampling: SamplingSettings = SamplingSettings(),
    speculative: SpeculativeSettings = SpeculativeSettings(),
    stop: Sequence[str] = (),
    pacer: DraftPacer | None = None,
    cache_prompt: bool = True,
) -> Generation:
    """Generate from `prompt` with the target, sped up by `drafter` when given.

    Args:
        target: the target model's context, any `Target`.
        prompt: prompt token ids (BOS included if the model wants one).
        drafter: a ModelDrafter or LookupDrafter; None for the target alone.
        max_tokens: stop after this many generated tokens.
        sampling: temperature / top-k / top-p / min-p / seed, applied to target and draft alike.
        speculative: acceptance rule, variant and draft-length policy.
        stop: stop strings; the text ends before the first one.
        pacer: cost estimates to learn from and keep (a pair keeps one per drafter); None: a
            fresh one. Used with the paced adaptive length (not --fixed, not --always-draft),
            unless a seeded sampled run (whose tokens must not depend on timings) asks for
            reproducibility.
        cache_prompt: start from the longest common prefix of `prompt` with what the target's
            KV cache holds (and the model drafter's) and decode only the rest; the last prompt
            token is always decoded again, for its logits. False: clear both caches and decode
            the whole prompt. Same output either way (a suffix decoded after a reused prefix
            gives the same cache as the whole prompt at once where the kernels are
            batch-invariant).

    Returns:
        A `Generation` to iterate; its `stats` are set when it ends.

    Raises:
        UserError: empty prompt, or a prompt that does not fit the context.
    """
    if not prompt:
        raise UserError("the prompt is empty; give some text with -p")
    if len(prompt) >= target.n_ctx:
        raise UserError(
            f"the prompt is {len(prompt)} tokens but the context holds {target.n_ctx}; "
            "raise --ctx or shorten the prompt"
        )
    if max_tokens < 1:
        raise UserError(f"max tokens must be >= 1, got {max_tokens}")
    rule = speculative.rule_for(sampling)
    gen = Generation()
    pacing = drafter is not None and speculative.length.paced and (sampling.greedy or sampling.seed is None)
    if pacing and pacer is None:
        pacer = DraftPacer()
    gen._steps = _steps(
        gen, target, list(prompt), drafter, max_tokens, sampling, speculative, rule, stop, pacer if pacing else None,
        cache_prompt,
    )
    return gen


def _steps(
    gen: Generation,
    target: Target,
    prompt: list[int],
    drafter: Drafter | None,
    max_tokens: int,
    sampling: SamplingSettings,
    speculative: SpeculativeSettings,
    rule: AcceptRule,
    stop: Sequence[str],
    pacer: DraftPacer | None,
    cache_prompt: bool = True,
) -> Iterator[Step]:
    rng = sampling.rng()
    model = target.model
    detok = Detokenizer(model)
    stop_text = StopText(stop)
    lengths = speculative.length
    length = DraftLength(lengths)
    # rule and drafts: rejection sampling needs the draft's q, so its drafts are sampled from q;
    # greedy and match take argmax drafts (q one-hot), as llama.cpp does
    sampled_drafts = rule is AcceptRule.REJECTION
    drafted_at = [0] * lengths.draft_max
    accepted_at = [0] * lengths.draft_max
    drafted = accepted = rounds = paused = 0
    draft_s = verify_s = 0.0
    history = list(prompt)
    generated = 0
    stop_reason = "length"

    t_start = clock.now()
    cached = 0
    if cache_prompt:
        # reuse the longest common prefix, but decode at least the last prompt token (its logits)
        cached = min(common_prefix(target.tokens, prompt), len(prompt) - 1)
        target.truncate(cached)
    else:
        target.clear()
        if drafter is not None:
            drafter.reset()
    if drafter is not None and not (pacer is not None and pacer.pausing):
        drafter.prefill(prompt)  # while paused, a probe catches the draft up on the history instead
    target.decode(prompt[cached:], logits="last")
    first = _pick(target.logits(-1), sampling, rng)
    t_first = clock.now()

    def stats() -> RunStats:
        t_end = clock.now()
        return RunStats(
            prompt_tokens=len(prompt),
            cached_tokens=cached,
            generated_tokens=generated,
            prompt_s=t_first - t_start,
            gen_s=t_end - t_first,
            drafted=drafted,
            accepted=accepted,
            rounds=rounds,
            draft_s=draft_s,
            verify_s=verify_s,
            drafted_at=tuple(drafted_at),
            accepted_at=tuple(accepted_at),
            stop_reason=stop_reason,
            paused_rounds=paused,
        )

    pending: list[tuple[int, Source]] = [(first, Source.TARGET)]
    try:
        while True:
            # ---- emit what the last round produced, stopping where the request says -----------
            for tok, src in pending:
                history.append(tok)
                generated += 1
                if model.is_eog(tok):
                    stop_reason = "eog"
                    yield Step(tok, src, detok.flush() + stop_text.flush(), rounds)
                    return
                text, hit = stop_text.push(detok.push(tok))
                if hit:
                    stop_reason = "stop"
                    yield Step(tok, src, text, rounds)
                    return
                if generated >= max_tokens:
                    stop_reason = "length"
                    yield Step(tok, src, text + stop_text.push(detok.flush())[0] + stop_text.flush(), rounds)
                    return
                if len(history) >= target.n_ctx:
                    stop_reason = "context"
                    yield Step(tok, src, text + stop_text.push(detok.flush())[0] + stop_text.flush(), rounds)
                    return
                yield Step(tok, src, text, rounds)

            # ---- draft ---------------------------------------------------------------------
            # Budget: tokens we may still emit; a round of K drafts emits up to K+1 and needs
            # K+1 free KV slots (the last history token is not yet in the target's cache).
            remaining = min(max_tokens - generated, target.n_ctx - len(history))
            draft_max = min(lengths.draft_max, remaining - 1, target.n_batch - 1)  # verify fits one batch
            draft_len = min(length.current, draft_max)
            if pacer is not None and draft_len > 0:
                draft_len = pacer.decide(draft_len=draft_len, draft_max=draft_max)
                paused += draft_len == 0
            draft_tokens: tuple[int, ...] = ()
            q_rows: tuple = ()
            round_draft_s, round_draft_calls = 0.0, 0
            if drafter is not None and draft_len > 0:
                d = drafter.propose(
                    history, draft_len=draft_len, draft_p_min=lengths.draft_p_min, sampled=sampled_drafts,
                    sampling=sampling, rng=rng,
                )
                round_draft_s = d.decode_s - d.catchup_s  # catching up after a pause is not drafting
                round_draft_calls = d.decode_calls
                draft_s += d.decode_s
                if len(d.tokens) >= lengths.draft_min:
                    draft_tokens, q_rows = d.tokens, d.q_rows

            # ---- verify ----------------------------------------------------------------------
            kd = len(draft_tokens)
            n_keep = target.n_past + 1  # the last history token stays in every case
            t = clock.now()
            target.decode([history[-1], *draft_tokens], logits="all")
            round_verify_s = clock.now() - t
            verify_s += round_verify_s
            rounds += 1

            if kd == 0:
                if pacer is not None:
                    pacer.observe(drafted=0, accepted=0, draft_s=round_draft_s, verify_s=round_verify_s)
                pending = [(_pick(target.logits(0), sampling, rng), Source.TARGET)]
                continue
            if rule is AcceptRule.GREEDY:
                argmax = [int(np.argmax(target.logits(i))) for i in range(kd + 1)]
                verdict = accept_greedy(draft_tokens, argmax)
            elif rule is AcceptRule.REJECTION:
                rows = _TargetRows(target, sampling)
                verdict = accept_rejection(
                    draft_tokens, q_rows=q_rows, p_rows=rows, rng=rng, variant=speculative.variant
                )
            else:
                verdict = accept_match(draft_tokens, p_rows=_TargetRows(target, sampling), rng=rng)

            n = verdict.n_accepted
            target.truncate(n_keep + n)  # drop KV of rejected drafts (and of nothing if all kept)
            drafted += kd
            accepted += n
            for i in range(kd):
                drafted_at[i] += 1
                accepted_at[i] += i < n
            length.update(drafted=kd, accepted=n)
            if pacer is not None:
                pacer.observe(
                    drafted=kd, accepted=n, draft_s=round_draft_s, verify_s=round_verify_s, draft_calls=round_draft_calls
                )
            pending = [(x, Source.DRAFT) for x in draft_tokens[:n]]
            pending.append((verdict.token, Source.BONUS if verdict.bonus else Source.CORRECTION))
    except GeneratorExit:
        stop_reason = "cancelled"
        raise
    finally:
        # Stats are final whichever way the loop ended (exhausted, stopped, or closed).
        gen.stats = stats()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _pick(logits: np.ndarray, sampling: SamplingSettings, rng: np.random.Generator) -> int:
    if sampling.greedy:
        return int(np.argmax(logits))
    return sample(probabilities(logits, sampling), rng)
