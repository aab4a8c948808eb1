"""List the catalog of known target/draft pairs (one TOML file each in ggufspec/pairs/).

  ggufspec pairs
  ggufspec pairs --json
  ggufspec pull --pair qwen3-8b        # fetch both models and check their vocabularies
  ggufspec run --pair qwen3-8b -p "Hi" --chat --compare   # --pair works in run, plan, bench, serve

Accept rate and speedup are shown only where a public report gives them; its URL and conditions
are listed under the table. Measure your own with `ggufspec bench`.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the catalog as JSON")


def run(args: argparse.Namespace) -> int:
    from ggufspec.models.catalog import load_pairs

    pairs = load_pairs()
    if args.json:
        json.dump({"pairs": [p.to_dict() for p in pairs]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    from rich import box
    from rich.table import Table

    from ggufspec.commands.tables import table_console

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("pair", style="bold", no_wrap=True)
    widest = max((len(r) for p in pairs for r in (p.target, p.draft)), default=10)
    table.add_column("target / draft", overflow="fold", min_width=widest)
    table.add_column("context", justify="right", no_wrap=True)
    table.add_column("licence", max_width=14)
    table.add_column("accept", justify="right", no_wrap=True)
    table.add_column("speedup", justify="right", no_wrap=True)
    notes: list[str] = []
    for p in pairs:
        mark = ""
        if p.source:
            notes.append(f"[{len(notes) + 1}] {p.name}: {p.source}" + (f" ({p.conditions})" if p.conditions else ""))
            mark = f" [{len(notes)}]"
        table.add_row(
            p.name, f"{p.target}\n{p.draft}",
            f"{p.context:,}" if p.context else "-",
            p.licence or "-",
            f"{p.accept_rate:.0%}{mark}" if p.accept_rate is not None else "-",
            f"{p.speedup:.2f}x{mark}" if p.speedup is not None else "-",
            end_section=True,
        )
    console = table_console(soft_wrap=False, fit=[table])
    console.print(table)
    from ggufspec.models.standin import STANDINS

    for p in pairs:
        stand_in = STANDINS.get(p.target.split(":")[1]) if p.target.startswith("embedded:") else None
        if stand_in is not None:
            console.print(f"{p.name}: a cost stand-in of {stand_in.base} ({stand_in.like}): its output and accept "
                          f"rates are {stand_in.base}'s, its decode costs are a bigger model's", markup=False,
                          highlight=False)
    for note in notes:
        console.print(note, markup=False, highlight=False)
    return 0
