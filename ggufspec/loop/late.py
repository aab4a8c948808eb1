"""Free drafters asked late: the history as they see it, and a held round's proposals scored later (pure).

A free drafter (prompt lookup) is a function of the history: the runner asks it every round before
the choice and scores its proposal against the token the target emitted (full information for the
controller). Where a hold covers a round whatever the free drafters would propose
(`DraftController.held` with their grades), asking them can wait: the round's history length, its
draft_max and the emitted token are kept, and the proposals are asked in order, each at the
history it would have seen, when something reads the round's scores (the controller's replay of
its held rounds, before any choice made from them), before the next round that asks them, or when
the generation ends (`settle`). The proposals equal those asked on time: the free drafters see a
list of the runner's own that grows only as far as the round asked about (lookup indexes what was
appended to the object it saw last). Asked together, after the decodes rather than between them,
they run warm (after a decode our Python runs cache-cold: docs/bench/overhead.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Callable, Sequence

from ggufspec.loop.drafters import Draft, Drafter, common_prefix
from ggufspec.loop.rounds import Scored

Propose = Callable[[Drafter, Sequence[int], int], Draft]  # (drafter, history, draft_len) -> its proposal


def score(p: Draft, emitted: Sequence[int]) -> Scored:
    """A free drafter's proposal `p` that did not run, scored against the tokens the target emitted."""
    return Scored(len(p.tokens), common_prefix(p.tokens, emitted), p.grade)


class LateScores(Mapping[str, Scored]):
    """A held round's free proposals, scored against its emitted token when first read (`Round.scored`)."""

    __slots__ = ("_view", "_scores")

    def __init__(self, view: FreeView) -> None:
        self._view = view
        self._scores: dict[str, Scored] | None = None  # (filled by `FreeView.settle`)

    @property
    def settled(self) -> bool:
        """Were the free drafters asked already?"""
        return self._scores is not None

    def _got(self) -> dict[str, Scored]:
        if self._scores is None:
            self._view.settle()
        assert self._scores is not None
        return self._scores

    def __getitem__(self, name: str) -> Scored:
        return self._got()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._got())

    def __len__(self) -> int:
        return len(self._got())

    def __repr__(self) -> str:
        return f"LateScores({self._scores!r})"


class FreeView:
    """One generation's free drafters: what they have seen of its history, and their late asks."""

    def __init__(self, drafters: Sequence[Drafter], propose: Propose) -> None:
        self.drafters = tuple(d for d in drafters if d.free)
        self._propose = propose
        self._seen: list[int] = []  # the history as far as the free drafters were asked (a prefix of it)
        self._history: Sequence[int] = ()  # the generation's history (a list the engine only appends to)
        self._late: list[tuple[int, int, int, LateScores]] = []  # (history length, draft_len, token, scores)

    def __call__(self, history: Sequence[int]) -> list[int]:
        """`history` as the free drafters see it now (the late asks first, in order)."""
        self.settle()
        seen = self._seen
        if len(seen) < len(history):
            seen.extend(history[len(seen):])
        return seen

    def later(self, history: Sequence[int], *, draft_len: int, token: int) -> LateScores:
        """The scores of a round the free drafters were not asked in: after `history`, up to
        `draft_len` tokens, the target emitted `token`."""
        self._history = history
        scores = LateScores(self)
        self._late.append((len(history), draft_len, token, scores))
        return scores

    def settle(self) -> None:
        """Ask the free drafters what each round kept for later would have had them propose."""
        late, self._late = self._late, []
        seen = self._seen
        for n, draft_len, token, scores in late:
            if len(seen) < n:
                seen.extend(self._history[len(seen):n])
            scores._scores = {d.name: score(self._propose(d, seen, draft_len), (token,)) for d in self.drafters}
