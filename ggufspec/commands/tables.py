"""The rich Console a command prints its tables on.

On a terminal, rich fits what it prints to the terminal's width. Piped or redirected
(`ggufspec run --compare 2>&1 | tee log`), it assumes 80 columns and wraps a table's cells and
its title to fit: a model file's name, the drafters' names and a cell such as "rounds per
drafter" then break over two or three lines. There the console is made as wide as what it will
print, so each row of a table is one line of the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.measure import Measurement

UNBOUNDED = 10_000  # columns: a measurement's limit wide enough for any table we print


def table_console(*, fit: Sequence[RenderableType] = (), least: int = 0, stderr: bool = False, **options: Any) -> Console:
    """A Console on stdout (`stderr`: on stderr) with rich's `options`. Not on a terminal, at least
    `least` columns wide and as wide as each of `fit` (tables, text) prints unwrapped."""
    out = Console(stderr=stderr, **options)
    if out.is_terminal:
        return out
    width = max([least, *(natural_width(out, r) for r in fit)])
    return Console(stderr=stderr, width=width, **options) if width > out.width else out


def natural_width(out: Console, renderable: RenderableType) -> int:
    """The columns `renderable` takes unwrapped on `out`. (A table's title is wrapped to the
    table's own width whatever the console's: a title longer than its table belongs on a line of
    its own.)"""
    return Measurement.get(out, out.options.update(max_width=UNBOUNDED), renderable).maximum
