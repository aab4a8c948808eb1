"""One generation: the prompt's prefill, then rounds until a stop; without a drafter, the target alone.

Each round is played by ggufspec.loop.round_runner (plan, draft, verify, accept), which tells the
controller its `Round` record; the record goes to the generation's tally too. On an asynchronous
target the next round of the target alone may already be computing while the tokens are emitted.
The target alone is the same loop with K = 0, so both paths share every line of code but drafting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ggufspec.errors import UserError
from ggufspec.loop import clock
from ggufspec.loop.acceptance import AcceptRule
from ggufspec.loop.control import DraftController
from ggufspec.loop.drafters import Drafter, common_prefix
from ggufspec.loop.rounds import Source
from ggufspec.loop.round_runner import Emitted, RoundRunner, pick
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.loop.stats import RoundTally, RunStats
from ggufspec.loop.target import Target
from ggufspec.loop.text import Detokenizer, StopText


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
        self._wait: Callable[[], None] | None = None  # the runner's: wait for a round launched ahead
        self._away = 0.0  # seconds between steps declared not this generation's (`wait`)
        self._away_since: float | None = None

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> Step:
        if self._away_since is not None:
            self._away += clock.now() - self._away_since
            self._away_since = None
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

    def wait(self) -> None:
        """Wait for what this generation left computing on the device (on an asynchronous target,
        a round of the target alone launched ahead: ggufspec.loop.round_runner), and take the time
        until its next step as not its own. Lockstep (ggufspec.bench.lockstep) calls it after each
        step, so that each lane is charged its own device time and other lanes' steps stay out of
        its rounds' times; without it the time between steps (the caller's) is the round's."""
        if self._wait is not None:
            self._wait()
        self._away_since = clock.now()


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
    runner = RoundRunner(target=target, drafters=drafters, controller=controller, sampling=sampling,
                         speculative=speculative, rule=rule, rng=rng, drafting=drafting, away=lambda: gen._away)
    gen._wait = runner.wait
    tally = RoundTally(positions=runner.positions)
    detok = Detokenizer(target.model)
    stop_text = StopText(stop)
    history = list(prompt)
    generated = 0
    stop_reason = "length"

    t_start = clock.now()
    cached = _prefill_target(target, prompt, drafters, cache_prompt=cache_prompt)
    pending: Emitted = [(pick(target.logits(-1), sampling, rng), Source.TARGET, None)]
    target_prefill = (len(prompt) - cached, clock.now() - t_start)  # (the logits read waited for it)
    _prefill_drafters(prompt, drafters, controller, drafting=drafting, remaining=min(max_tokens, target.n_ctx - len(prompt)),
                      target_prefill=target_prefill)
    t_first = clock.now()  # the prompt's time: the target's prefill and the draft models'
    kd = 0  # tokens the round that produced `pending` drafted
    try:
        while True:
            # emit what the last round produced, stopping where the request says
            for tok, src, who in pending:
                history.append(tok)
                generated += 1
                eog = target.model.is_eog(tok)
                text, hit = ("", False) if eog else stop_text.push(detok.push(tok))
                end = ("eog" if eog else "stop" if hit else "length" if generated >= max_tokens
                       else "context" if len(history) >= target.n_ctx else None)
                if end is None:
                    yield Step(tok, src, text, tally.rounds, who, kd)
                    continue
                stop_reason = end
                if end == "eog":
                    text = detok.flush() + stop_text.flush()
                elif end != "stop":
                    text += stop_text.push(detok.flush())[0] + stop_text.flush()
                yield Step(tok, src, text, tally.rounds, who, kd)
                return
            # a round: it may emit what the budget leaves (tokens and free KV slots)
            record, pending = runner.play(history, min(max_tokens - generated, target.n_ctx - len(history)))
            tally.add(record)  # (the runner told the controller)
            kd = record.drafted
    except GeneratorExit:
        stop_reason = "cancelled"
        raise
    finally:
        runner.settle()
        # stats are final whichever way the loop ended (exhausted, stopped, or closed)
        gen.stats = tally.stats(prompt_tokens=len(prompt), cached_tokens=cached, generated_tokens=generated,
                                prompt_s=t_first - t_start, gen_s=clock.now() - t_first, stop_reason=stop_reason)


def _prefill_target(target: Target, prompt: list[int], drafters: tuple[Drafter, ...], *, cache_prompt: bool) -> int:
    """Decode the prompt into the target; returns the prompt tokens reused from its KV cache.
    `cache_prompt`: reuse the longest common prefix, but decode at least the last prompt token
    (its logits); else start clean (the drafters too)."""
    cached = 0
    if cache_prompt:
        cached = min(common_prefix(target.tokens, prompt), len(prompt) - 1)
        target.truncate(cached)
    else:
        target.clear()
        for d in drafters:
            d.reset()
    # the target first: a draft model that can import the target's cache (ggufspec.loop.kvshare)
    # takes the prompt from it instead of decoding it
    target.decode(prompt[cached:], logits="last")
    return cached


def _prefill_drafters(
    prompt: list[int], drafters: tuple[Drafter, ...], controller: DraftController | None, *,
    drafting: Callable[[], bool] | None, remaining: int, target_prefill: tuple[int, float] | None = None,
) -> None:
    """Prefill the drafters that may run soon with the prompt, and start the controller's generation
    (`target_prefill`: the target's prompt tokens decoded and seconds)."""
    # a server slot that starts while another generates runs the target alone (`drafting`): its
    # draft models' prefill would be paid for nothing (measured: ~19% of the decode time with 4
    # clients); they catch up if the slot drafts later
    drafting_now = drafting is None or drafting()
    prefilled: dict[str, tuple[int, float]] = {}  # draft model -> (tokens, seconds) of its prefill
    for d in drafters:
        # a model drafter keeps what its cache shares with the prompt; one the controller does
        # not expect to run soon is not prefilled (it catches up if it is chosen after all)
        lacks = d.backlog(prompt)
        if d.free or (drafting_now and (controller is None
                                        or controller.wants(d.name, backlog=lacks, remaining=remaining))):
            seconds = d.prefill(prompt)
            if not d.free:
                prefilled[d.name] = (max(0, lacks - 1), seconds)  # (the last prompt token waits for the first draft)
    if controller is not None and drafting_now:  # (a slot beside others leaves the pair's controller alone)
        controller.begin(prefilled=list(prefilled), prefill=prefilled, target_prefill=target_prefill)
