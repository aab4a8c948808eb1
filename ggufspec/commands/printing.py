"""A generation's text on stdout as it comes: plain, or coloured by where each token came from
(`run -v`): a draft accepted (one colour per drafter), the target's correction, the bonus token."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator


class Printed:
    """A generation whose steps print their text as they come, for `run --compare`'s lockstep
    interleave: its `wait` is the generation's (an asynchronous target's round launched ahead)."""

    def __init__(self, gen: Any, *, colour: bool, drafters: list[str]) -> None:
        self._show = printer(colour=colour, drafters=drafters)
        self._steps = iter(gen)
        self.wait = getattr(gen, "wait", None)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            step = next(self._steps)
        except StopIteration:
            self._show(None)
            raise
        self._show(step)
        return step


_DRAFT_STYLES = ("green", "cyan", "magenta", "yellow")  # accepted drafts, one colour per drafter


def stream(gen: Any, *, colour: bool, drafters: list[str]) -> None:
    """Run generation `gen` to its end, printing its text as it comes."""
    for _ in Printed(gen, colour=colour, drafters=drafters):
        pass


def printer(*, colour: bool, drafters: list[str]) -> Callable[[Any], None]:
    """show(step) prints a step's text (`colour`: by where it came from); show(None) ends the text."""
    from ggufspec.loop.rounds import Source

    styles = {Source.DRAFT: "green", Source.CORRECTION: "red", Source.BONUS: "blue", Source.TARGET: "default"}
    by_drafter = {name: _DRAFT_STYLES[i % len(_DRAFT_STYLES)] for i, name in enumerate(drafters)}
    console = None
    if colour:
        from rich.console import Console

        console = Console(highlight=False, soft_wrap=True)
    out = sys.stdout

    def show(step: Any) -> None:
        if step is None:
            if console is not None:
                console.print()
                accepted = (" ".join(f"[{by_drafter[n]}]accepted from {_escape(n)}[/]" for n in drafters)
                            or "[green]draft accepted[/]")
                console.print(f"{accepted} [red]target correction[/] [blue]bonus[/] plain: target alone", style="dim")
            else:
                out.write("\n")
                out.flush()
            return
        if not step.text:
            return
        if console is not None:
            style = by_drafter.get(step.drafter, styles[step.source]) if step.drafter else styles[step.source]
            console.print(step.text, style=style, end="", markup=False)
        else:
            out.write(step.text)
            out.flush()

    return show


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
