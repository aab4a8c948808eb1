"""Where each streamed token came from: ggufspec's opt-in extension of the stream chunks.

With ``"stream_options": {"include_speculative": true}`` every chunk that carries text also carries
``"speculative": {"tokens": [...]}``, one entry per token in the chunk, in order (a token may
release no text: a UTF-8 character or a possible stop string held back until a later token):

    {"text": "...", "by": "target" | "draft" | "lookup", "source": "target" | "draft" | "correction" |
     "bonus", "drafter": "<name>" | null, "round": 3, "drafted": 4}

``by`` is who proposed the token: the target itself (a round without a draft, a correction of a
rejected draft token, the bonus token after a fully accepted draft), a draft model, or prompt
lookup. ``round`` numbers the target's verify calls (0: the prompt's); ``drafted`` is how many
tokens that round drafted, so a client can chart the draft length per round and the accept rate.
Plain OpenAI clients never see the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from ggufspec.loop.engine import Step
from ggufspec.loop.rounds import Source
from ggufspec.models.resolve import LOOKUP


@dataclass(frozen=True, kw_only=True)
class Mark:
    """One emitted token and its provenance."""

    text: str
    by: str  # "target" | "draft" | "lookup"
    source: str  # the engine's Source value
    drafter: str | None
    round: int
    drafted: int

    @classmethod
    def of(cls, step: Step) -> Mark:
        by = "target"
        if step.source is Source.DRAFT:
            by = LOOKUP if step.drafter == LOOKUP else "draft"
        return cls(text=step.text, by=by, source=step.source.value, drafter=step.drafter, round=step.round,
                   drafted=step.drafted)

    def json(self) -> dict:
        return {"text": self.text, "by": self.by, "source": self.source, "drafter": self.drafter,
                "round": self.round, "drafted": self.drafted}


def extension(marks: list[Mark]) -> dict:
    """The chunk field carrying `marks`."""
    return {"tokens": [m.json() for m in marks]}
