"""Server slots: N generations at once on one loaded pair, their decodes batched (pure).

A `Slot` is one sequence in the target's multi-sequence context (and in each draft model's): its
own KV cache and prefix, its own drafters (a `ModelDrafter` on its draft-model sequence, its own
prompt lookup); generations that draft by policy (only while alone) share one draft controller,
always_draft ones use the slot's own. Each slot runs the ordinary `engine.generate` in its
own thread; its views' decodes go through the context's `Batcher`, which merges the slots that
decode at the same moment into one decode.

Policy: a batched decode of several rows costs far less than that many decodes (measured on a
2-core CPU: 4 rows ~1.8x one row), while speculation pays ~1.0-1.1x there; so while another slot
generates, a slot runs the target alone (one row per step, merged with the others), and drafts
again once it is alone. `always_draft` requests keep drafting. Greedy output is the target's
either way (batch-invariant kernels make a row's logits independent of its batch).

`pick_slot` chooses, as llama-server does, the free slot whose cached tokens share the longest
prefix with the prompt; when even that one shares less than half of the prompt (llama-server's
--slot-prompt-similarity 0.5), the least recently used free slot, so a new conversation does not
evict another's cache for a shared chat-template header.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

from ggufspec.errors import UserError
from ggufspec.loop.batcher import Batcher
from ggufspec.loop.control import DraftController
from ggufspec.loop.drafters import Drafter, common_prefix
from ggufspec.loop.engine import Generation, generate
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.loop.target import Target


@dataclass(eq=False)
class Activity:
    """Counts the slots that are generating."""

    _n: int = 0
    _ticks: int = 0  # generations started, for least-recently-used order
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self) -> int:
        """One more slot generating; returns a tick that orders generation starts."""
        with self._lock:
            self._n += 1
            self._ticks += 1
            return self._ticks

    def exit(self) -> None:
        with self._lock:
            self._n -= 1

    def active(self) -> int:
        with self._lock:
            return self._n


@dataclass(eq=False, kw_only=True)
class Slot:
    """One sequence of a pair's contexts, with its own drafters and controller."""

    index: int
    target: Target  # this slot's view of the target's context
    drafters: tuple[Drafter, ...]  # this slot's drafters (its own draft-model views and lookup)
    batcher: Batcher | None  # the target context's batcher (None: a one-sequence context)
    draft_batchers: tuple[Batcher, ...]  # the draft models' (this slot joins them while it drafts)
    activity: Activity
    # drafting by policy happens only while a slot is alone, so one generation at a time uses
    # `shared`: one controller for every slot (the pair's), so consecutive requests that land on
    # different slots (least recently used) learn as one instead of each slot from scratch.
    # always_draft requests draft while others do too: each slot's own `controller`.
    controller: DraftController = field(default_factory=DraftController)
    shared: DraftController | None = None  # None: `controller` for every request
    last_used: int = 0  # Activity tick of its latest generation (0: never used)

    @property
    def tokens(self) -> Sequence[int]:
        """What this slot's target cache holds (prefix reuse)."""
        return self.target.tokens

    def chosen(self, names: Sequence[str] | None) -> tuple[Drafter, ...]:
        """This slot's drafters named `names`, in that order (None: all)."""
        if names is None:
            return self.drafters
        by_name = {d.name: d for d in self.drafters}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise UserError(f"this slot has no drafter named {missing[0]!r}; it has: {', '.join(by_name) or 'none'}")
        return tuple(by_name[n] for n in names)

    def generate(
        self,
        *,
        prompt: Sequence[int],
        max_tokens: int,
        sampling: SamplingSettings,
        speculative: SpeculativeSettings,
        stop: Sequence[str] = (),
        cache_prompt: bool = True,
        drafters: Sequence[str] | None = None,
    ) -> Generation:
        """`engine.generate` on this slot (its own thread only), drafting only while alone.
        `drafters`: the names of this slot's drafters to use, in that order (None: all of them;
        (): the target alone); UserError for a name it does not have."""
        # always_draft, and seeded sampling (its text must not depend on the other slots: the
        # draws follow the rounds), draft as at --parallel 1
        always = speculative.length.always_draft or (not sampling.greedy and sampling.seed is not None)
        drafting_now = [False]

        def drafting() -> bool:
            want = always or self.activity.active() <= 1
            if want != drafting_now[0]:
                drafting_now[0] = want
                for b in self.draft_batchers:  # wait for this slot's draft decodes only while it drafts
                    (b.join if want else b.leave)(self.index)
            return want

        controller = self.controller if always or self.shared is None else self.shared
        gen = generate(
            target=self.target, prompt=prompt, drafters=self.chosen(drafters),
            max_tokens=max_tokens, sampling=sampling, speculative=speculative, stop=stop,
            controller=controller, cache_prompt=cache_prompt, drafting=drafting,
        )
        return _Tracked(gen, self, drafting_now)


class _Tracked(Generation):
    """A generation that counts as active (joins the batchers) from its first step to its end."""

    def __init__(self, gen: Generation, slot: Slot, drafting_now: list[bool]) -> None:
        super().__init__()
        self._gen, self._slot, self._drafting_now = gen, slot, drafting_now
        self._started = self._ended = False

    def __next__(self):  # type: ignore[override]
        if not self._started:
            self._started = True
            self._slot.last_used = self._slot.activity.enter()
            if self._slot.batcher is not None:
                self._slot.batcher.join(self._slot.index)
        try:
            step = next(self._gen)
        except BaseException:
            self._end()
            raise
        self.tokens, self.sources, self._text = self._gen.tokens, self._gen.sources, self._gen._text
        return step

    @property
    def stats(self):  # type: ignore[override]
        return self._gen.stats

    @stats.setter
    def stats(self, value) -> None:  # Generation.__init__ sets it
        pass

    def close(self) -> None:
        try:
            self._gen.close()
        finally:
            self._end()

    def _end(self) -> None:
        if self._started and not self._ended:
            self._ended = True
            if self._slot.batcher is not None:
                self._slot.batcher.leave(self._slot.index)
            if self._drafting_now[0]:
                for b in self._slot.draft_batchers:
                    b.leave(self._slot.index)
            self._slot.activity.exit()


#: below this share of the prompt found in a slot's cache, take the least recently used slot
SIMILARITY = 0.5


def pick_slot(free: Sequence[Slot], prompt: Sequence[int]) -> Slot:
    """The free slot whose cache shares the longest prefix with `prompt` (ties: the lowest index),
    unless it shares less than `SIMILARITY` of the prompt: then the least recently used one."""
    if not free:
        raise ValueError("no free slot")
    best = max(free, key=lambda s: (common_prefix(s.tokens, prompt), -s.index))
    if prompt and common_prefix(best.tokens, prompt) >= SIMILARITY * len(prompt):
        return best
    return min(free, key=lambda s: (s.last_used, s.index))
