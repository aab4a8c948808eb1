"""The draft/verify loop as a generator of steps; without a drafter, the target alone.

One round, with history h (the last token of h not yet in the target's KV cache):
    0. the controller (ggufspec.loop.control) picks which drafter proposes and K, from past rounds only;
    1. that drafter proposes x_0..x_{K-1} (K may be 0: then this is a plain target step);
    2. the target decodes [h_last, x_0..x_{K-1}] in one batch, logits for all K+1 rows;
       row i is the target's distribution for the token after batch token i;
    3. an acceptance rule keeps x_0..x_{n-1} and adds one token (correction or bonus);
    4. the target's KV cache drops the rejected positions; the drafter re-syncs next round.
The target alone is the same loop with K = 0, so both paths share every line of code but drafting.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from ggufspec.errors import UserError
from ggufspec.loop import clock
from ggufspec.loop.acceptance import AcceptRule, accept_greedy, accept_match, accept_rejection
from ggufspec.loop.control import Candidate, Choice, DraftController, Scored
from ggufspec.loop.drafters import Draft, Drafter, common_prefix
from ggufspec.loop.sampling import SamplingSettings, probabilities, sample
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.loop.speculation import DraftLengthSettings
from ggufspec.loop.stats import RunStats
from ggufspec.loop.target import Target
from ggufspec.loop.text import Detokenizer, StopText


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
    drafter: str | None = None  # the drafter that proposed it (DRAFT tokens only)
    drafted: int = 0  # tokens its round drafted (0: a round of the target alone, or the prefill)


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
    drafters: Sequence[Drafter] = (),
    max_tokens: int = 128,
    sampling: SamplingSettings = SamplingSettings(),
    speculative: SpeculativeSettings = SpeculativeSettings(),
    stop: Sequence[str] = (),
    controller: DraftController | None = None,
    cache_prompt: bool = True,
    drafting: Callable[[], bool] | None = None,
) -> Generation:
    """Generate from `prompt` with the target, sped up by `drafters` when given.

    Args:
        target: the target model's context, any `Target`.
        prompt: prompt token ids (BOS included if the model wants one).
        drafters: ModelDrafters and/or LookupDrafters (distinct names); () for the target alone.
        max_tokens: stop after this many generated tokens.
        sampling: temperature / top-k / top-p / min-p / seed, applied to target and draft alike.
        speculative: acceptance rule, variant and draft-length policy.
        stop: stop strings; the text ends before the first one.
        controller: chooses each round's drafter and length from measured throughput, and keeps
            what it learned (a pair keeps one); None: a fresh one. Not used with --fixed; a
            seeded sampled run (whose tokens must not depend on timings) always gets a fresh,
            counted one (ggufspec.loop.control: driven by accept counts, not time).
        cache_prompt: start from the longest common prefix of `prompt` with what the target's
            KV cache holds (and the model drafter's) and decode only the rest; the last prompt
            token is always decoded again, for its logits. False: clear both caches and decode
            the whole prompt. Same output either way (a suffix decoded after a reused prefix
            gives the same cache as the whole prompt at once where the kernels are
            batch-invariant).
        drafting: asked before the prefill (False: draft models are not prefilled) and before
            each round; False runs that round with the target alone (a server slot while other
            slots generate: batching them pays more than drafting).
            None: always draft when the controller says so. Greedy output is the same either way.

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
    drafters = tuple(drafters)
    names = [d.name for d in drafters]
    for name in names:
        if names.count(name) > 1:
            raise UserError(f"two drafters are named {name!r}; give each --draft once")
    if speculative.length.fixed or not drafters:
        controller = None
    elif not sampling.greedy and sampling.seed is not None:
        controller = DraftController(timed=False)  # reproducible: counts only, fresh each generation
    elif controller is None:
        controller = DraftController()
    gen = Generation()
    gen._steps = _steps(
        gen, target, list(prompt), drafters, max_tokens, sampling, speculative, rule, stop, controller, cache_prompt,
        drafting,
    )
    return gen


def _steps(
    gen: Generation,
    target: Target,
    prompt: list[int],
    drafters: tuple[Drafter, ...],
    max_tokens: int,
    sampling: SamplingSettings,
    speculative: SpeculativeSettings,
    rule: AcceptRule,
    stop: Sequence[str],
    controller: DraftController | None,
    cache_prompt: bool = True,
    drafting: Callable[[], bool] | None = None,
) -> Iterator[Step]:
    rng = sampling.rng()
    model = target.model
    detok = Detokenizer(model)
    stop_text = StopText(stop)
    lengths = speculative.length
    by_name = {d.name: d for d in drafters}
    # rule and drafts: rejection sampling needs the draft's q, so its drafts are sampled from q;
    # greedy and match take argmax drafts (q one-hot), as llama.cpp does
    sampled_drafts = rule is AcceptRule.REJECTION
    # positions a round may draft: a model's drafts, and lookup's continuation of them (`_extension`)
    extendable = controller is not None and any(d.free for d in drafters)
    positions = lengths.draft_max + (lengths.draft_extend if extendable else 0)
    drafted_at = [0] * positions
    accepted_at = [0] * positions
    drafted = accepted = rounds = paused = checks = checks_failed = extended = extended_accepted = 0
    k_hist: dict[int, int] = {}
    drafter_rounds: dict[str, int] = {}
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
        for d in drafters:
            d.reset()
    # the target first: a draft model that can import the target's cache (ggufspec.loop.kvshare)
    # takes the prompt from it instead of decoding it
    target.decode(prompt[cached:], logits="last")
    first = _pick(target.logits(-1), sampling, rng)
    # a server slot that starts while another generates runs the target alone (`drafting`): its
    # draft models' prefill would be paid for nothing (measured: ~19% of the decode time with 4
    # clients); they catch up if the slot drafts later
    drafting_now = drafting is None or drafting()
    prefilled: dict[str, tuple[int, float]] = {}  # draft model -> (tokens, seconds) of its prefill
    for d in drafters:
        # a model drafter keeps what its cache shares with the prompt; one the controller does
        # not expect to run soon is not prefilled (it catches up if it is chosen after all)
        lacks = d.backlog(prompt)
        if d.free or (drafting_now and (controller is None or controller.wants(
                d.name, backlog=lacks, remaining=min(max_tokens, target.n_ctx - len(prompt))))):
            seconds = d.prefill(prompt)
            if not d.free:
                prefilled[d.name] = (max(0, lacks - 1), seconds)  # (the last prompt token waits for the first draft)
    if controller is not None and drafting_now:  # (a slot beside others leaves the pair's controller alone)
        controller.begin(prefilled=list(prefilled), prefill=prefilled)
    t_first = clock.now()  # the prompt's time: the target's prefill and the draft models'


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
            k_hist=dict(sorted(k_hist.items())),
            drafter_rounds=drafter_rounds,
            checks=checks,
            checks_failed=checks_failed,
            extended=extended,
            extended_accepted=extended_accepted,
        )

    pending: list[tuple[int, Source, str | None]] = [(first, Source.TARGET, None)]  # (token, source, who drafted it)
    kd = 0  # tokens the round that produced `pending` drafted
    try:
        while True:
            # ---- emit what the last round produced, stopping where the request says -----------
            for tok, src, who in pending:
                history.append(tok)
                generated += 1
                if model.is_eog(tok):
                    stop_reason = "eog"
                    yield Step(tok, src, detok.flush() + stop_text.flush(), rounds, who, kd)
                    return
                text, hit = stop_text.push(detok.push(tok))
                if hit:
                    stop_reason = "stop"
                    yield Step(tok, src, text, rounds, who, kd)
                    return
                if generated >= max_tokens:
                    stop_reason = "length"
                    yield Step(tok, src, text + stop_text.push(detok.flush())[0] + stop_text.flush(), rounds, who, kd)
                    return
                if len(history) >= target.n_ctx:
                    stop_reason = "context"
                    yield Step(tok, src, text + stop_text.push(detok.flush())[0] + stop_text.flush(), rounds, who, kd)
                    return
                yield Step(tok, src, text, rounds, who, kd)

            # ---- choose and draft ----------------------------------------------------------------
            # Budget: tokens we may still emit; a round of K drafts emits up to K+1 and needs
            # K+1 free KV slots (the last history token is not yet in the target's cache).
            remaining = min(max_tokens - generated, target.n_ctx - len(history))
            draft_max = min(lengths.draft_max, remaining - 1, target.n_batch - 1)  # verify fits one batch
            t_round = clock.now()
            choice: Choice | None = None
            proposals: dict[str, Draft] = {}  # free drafters' proposals, asked before the choice
            draft_tokens: tuple[int, ...] = ()
            q_rows: tuple = ()
            appended: tuple[str | None, int, int] = (None, 0, 0)  # (free drafter, tokens, grade) appended to a model's draft
            round_draft_s = catchup_s = check_s = 0.0
            caught_up = 0
            first: tuple[float | None, int] = (None, 0)  # the draft's first call (seconds) and its calls
            if drafters and draft_max > 0 and (drafting is None or drafting()):
                if controller is None:  # --fixed: the first drafter, draft_max every round
                    choice = Choice(drafters[0].name, draft_max)
                else:
                    candidates = []
                    for d in drafters:
                        if d.free:  # a function of the history: asking it now is lossless
                            p = proposals[d.name] = d.propose(
                                history, draft_len=draft_max, draft_p_min=lengths.draft_p_min, sampled=sampled_drafts,
                                sampling=sampling, rng=rng,
                            )
                            candidates.append(Candidate(d.name, free=True, match_len=len(p.tokens), grade=p.grade))
                        else:
                            candidates.append(Candidate(d.name, backlog=d.backlog(history),
                                                        kv_shared=d.kv_shared))
                    choice = controller.choose(drafters=candidates, draft_max=draft_max, draft_min=lengths.draft_min,
                                               allow_none=not lengths.always_draft, remaining=remaining)
                    # paused: the target alone by choice, not for want of a proposal
                    paused += choice.drafter is None and any(
                        c.match_len is None or c.match_len >= max(1, lengths.draft_min) for c in candidates)
                if choice.drafter is not None:
                    k = choice.draft_len
                    d = proposals.get(choice.drafter)
                    if d is not None:
                        d = Draft(d.tokens[:k], d.q_rows[:k])
                        if choice.check is not None and d.tokens:
                            d, choice, check_s = _checked(d, choice, by_name[choice.check], history, lengths=lengths,
                                                          sampled=sampled_drafts, sampling=sampling, rng=rng)
                            checks += 1
                            checks_failed += choice.check is None
                            draft_s += check_s
                    else:
                        d = by_name[choice.drafter].propose(
                            history, draft_len=k, draft_p_min=lengths.draft_p_min, sampled=sampled_drafts,
                            sampling=sampling, rng=rng,
                        )
                    catchup_s = d.catchup_s  # catching up on history it missed is not this round's drafting
                    caught_up = d.catchup_tokens
                    round_draft_s = d.decode_s - d.catchup_s
                    first = (d.first_s, d.decode_calls)
                    draft_s += d.decode_s
                    if len(d.tokens) >= lengths.draft_min:
                        draft_tokens, q_rows = d.tokens, d.q_rows
                        if controller is not None and choice.drafter not in proposals and len(d.tokens) == choice.draft_len:
                            # a model's full proposal: lookup's continuation of it, as much as pays
                            room = min(lengths.draft_extend, remaining - 1 - len(d.tokens), target.n_batch - 1 - len(d.tokens))
                            by, ext = _extension(controller, choice.drafter, d.tokens, drafters, history, room=room)
                            if ext.tokens:
                                draft_tokens, q_rows = d.tokens + ext.tokens, d.q_rows + ext.q_rows
                                appended = (by, len(ext.tokens), ext.grade)
            elif controller is not None and drafters and draft_max <= 0:
                # one token left: a round of the target alone whatever the controller would say,
                # and a free measurement of its cost, a (it resets the retry of the target alone)
                choice = Choice(None, 0)
            source = choice.drafter if choice is not None and choice.drafter is not None else "none"
            drafter_rounds[source] = drafter_rounds.get(source, 0) + 1
            k_hist[len(draft_tokens)] = k_hist.get(len(draft_tokens), 0) + 1

            # ---- verify ----------------------------------------------------------------------
            kd = len(draft_tokens)
            n_keep = target.n_past + 1  # the last history token stays in every case
            t = clock.now()
            target.decode([history[-1], *draft_tokens], logits="all")
            verify_s += clock.now() - t
            rounds += 1

            if kd == 0:
                tok = _pick(target.logits(0), sampling, rng)
                if controller is not None and choice is not None:
                    _observe(controller, choice, proposals, drafted=0, accepted=0, emitted=[tok],
                             round_s=clock.now() - t_round - catchup_s, draft_s=round_draft_s,
                             catchup=(caught_up, catchup_s), first=first, check_s=check_s)
                pending = [(tok, Source.TARGET, None)]
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
            own = kd - appended[1]  # the chosen drafter's tokens; lookup's continuation after them
            extended += appended[1]
            extended_accepted += max(0, n - own)
            if controller is not None and choice is not None:
                _observe(controller, choice, proposals, drafted=kd, accepted=n, emitted=[*draft_tokens[:n], verdict.token],
                         round_s=clock.now() - t_round - catchup_s, draft_s=round_draft_s,
                         catchup=(caught_up, catchup_s), first=first, check_s=check_s, extended=appended)
            proposer = choice.drafter if choice is not None else None
            pending = [(x, Source.DRAFT, proposer if i < own else appended[0]) for i, x in enumerate(draft_tokens[:n])]
            pending.append((verdict.token, Source.BONUS if verdict.bonus else Source.CORRECTION, None))
    except GeneratorExit:
        stop_reason = "cancelled"
        raise
    finally:
        # Stats are final whichever way the loop ended (exhausted, stopped, or closed).
        gen.stats = stats()


def _observe(
    controller: DraftController, choice: Choice, proposals: dict[str, Draft], *, drafted: int, accepted: int,
    emitted: Sequence[int], round_s: float, draft_s: float, catchup: tuple[int, float] = (0, 0.0),
    first: tuple[float | None, int] = (None, 0), check_s: float = 0.0,
    extended: tuple[str | None, int, int] = (None, 0, 0),
) -> None:
    """Tell the controller how the round went, and score the free drafters it did not pick against
    the tokens the target emitted (full information: no extra target call)."""
    scored = {name: Scored(len(p.tokens), common_prefix(p.tokens, emitted), p.grade)
              for name, p in proposals.items() if name != choice.drafter}
    controller.observe(choice=choice, drafted=drafted, accepted=accepted, emitted=len(emitted), round_s=round_s,
                       draft_s=draft_s, free=choice.drafter in proposals, scored=scored,
                       catchup_tokens=catchup[0], catchup_s=catchup[1],
                       draft_first_s=first[0], draft_calls=first[1], check_s=check_s,
                       extended=extended[1], extended_by=extended[0], extended_grade=extended[2])


def _extension(
    controller: DraftController, model: str, drafts: tuple[int, ...], drafters: Sequence[Drafter],
    history: Sequence[int], *, room: int,
) -> tuple[str | None, Draft]:
    """(free drafter, its tokens) to append to draft model `model`'s full proposal `drafts`: a free
    drafter's continuation of history + drafts, as many tokens as pay for their verify rows
    (`DraftController.extend`), at most `room`. Lossless: a function of the history and the
    drafts (q one-hot), so each position's q is still what drew its token."""
    if room <= 0:
        return None, Draft((), ())
    for d in drafters:
        if not d.free:
            continue
        cont = d.continue_after(history, drafts, draft_len=room)
        e = controller.extend(model, draft_len=len(drafts), free=d.name, grade=cont.grade, match_len=len(cont.tokens))
        if e > 0:
            return d.name, Draft(cont.tokens[:e], cont.q_rows[:e], grade=cont.grade)
    return None, Draft((), ())


def _checked(
    proposal: Draft, choice: Choice, model: Drafter, history: Sequence[int], *, lengths: DraftLengthSettings,
    sampled: bool, sampling: SamplingSettings, rng: np.random.Generator,
) -> tuple[Draft, Choice, float]:
    """A free drafter's proposal checked by draft model `model`'s first token (`DraftController._check`):
    (the round's draft, its choice, the check's seconds). Where the two first tokens agree the
    proposal runs (check's seconds: the model's call), its first q row the model's: at T > 0 that
    token is the model's draw, the rest of the proposal a function of it and the history, so each
    position's q is what drew it and rejection sampling stays exact. Where they differ the round
    is the model's, `choice.check_len` tokens from the one it drafted (its seconds the round's drafting)."""
    kw = dict(draft_p_min=lengths.draft_p_min, sampled=sampled, sampling=sampling, rng=rng)
    head = model.propose(history, draft_len=1, **kw)
    if head.tokens and head.tokens[0] == proposal.tokens[0]:
        return Draft(proposal.tokens, (head.q_rows[0], *proposal.q_rows[1:])), choice, head.decode_s
    rest = (model.propose([*history, *head.tokens], draft_len=choice.check_len - 1, **kw)
            if head.tokens and choice.check_len > 1 else Draft((), ()))
    merged = Draft(head.tokens + rest.tokens, head.q_rows + rest.q_rows, head.decode_s + rest.decode_s,
                   head.catchup_s + rest.catchup_s, head.decode_calls + rest.decode_calls,
                   head.catchup_tokens + rest.catchup_tokens, first_s=head.first_s)
    return merged, Choice(model.name, choice.check_len), 0.0


def _pick(logits: np.ndarray, sampling: SamplingSettings, rng: np.random.Generator) -> int:
    if sampling.greedy:
        return int(np.argmax(logits))
    return sample(probabilities(logits, sampling), rng)
