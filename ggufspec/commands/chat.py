"""Talk with a target model, sped up by a draft, in an interactive multi-turn console.

Each line you type is a user message; the reply streams as it is generated, with the GGUF's chat
template around the whole conversation. The KV caches keep the conversation, so a turn decodes
only its new messages. Commands change the run live (/help lists them): /draft REF|lookup|none,
/k N|auto, /temp T, /top-p P, /accept greedy|rejection|match, /compare (the last reply again with
the target alone, speeds side by side), /stats, /verbose (colour by provenance), /system TEXT,
/save FILE, /reset. Ctrl-C stops a reply and keeps the console; Ctrl-D quits.

Reads a pipe too, one message or command a line (scripted sessions). --session FILE resumes the
conversation saved there (by /save or an earlier --session), its KV caches included, and saves it
back when the console quits. A conversation that outgrows --ctx is refused with a message, or with
--context-shift loses its oldest turns (the system prompt stays).

examples:
  ggufspec chat
  ggufspec chat --target ./big.gguf --draft ./small.gguf --system "You are terse." --session talk.bin
  printf 'Hi!\\n/k 4\\n/temp 0.7\\nTell me a joke.\\n/compare\\n' | ggufspec chat
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ggufspec.commands import (
    add_draft_kv_argument, add_model_arguments, add_remember_argument, add_sampling_arguments, pair_settings,
)
from ggufspec.commands.speculation_args import add_speculation_arguments, speculative_settings
from ggufspec.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p.add_argument_group("models"),
                        draft_help="draft model reference, 'lookup' for prompt lookup, 'none' for the target alone")
    c = p.add_argument_group("conversation")
    c.add_argument("--system", metavar="TEXT", help="system prompt")
    c.add_argument("--session", metavar="FILE", type=Path,
                   help="resume the conversation and KV caches saved in FILE (if it exists); save them there on quit")
    c.add_argument("--context-shift", action="store_true",
                   help="when the conversation outgrows the context, drop its oldest turns (the system prompt stays)")
    c.add_argument("-n", "--max-tokens", type=int, default=512, metavar="N", help="most tokens a reply generates (default 512)")
    add_sampling_arguments(p.add_argument_group("sampling (change live with /temp, /top-p)"))
    add_speculation_arguments(p.add_argument_group("speculation (change live with /draft, /k, /accept)"))
    r = p.add_argument_group("runtime")
    r.add_argument("--ctx", type=int, default=4096, metavar="N", help="context size in tokens (default 4096)")
    r.add_argument(
        "--cache-type", default="auto", choices=("auto", "f16", "q8_0", "q4_0", "f32"), metavar="TYPE",
        help="target KV cache: auto | f16 | q8_0 | q4_0 | f32 (default auto, as `ggufspec run`)",
    )
    r.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    r.add_argument("--ngl", default="auto", metavar="N|all|auto", help="target layers on the GPU (default auto: planner)")
    r.add_argument("--ngld", default="auto", metavar="N|all|auto", help="draft layers on the GPU (default auto)")
    add_draft_kv_argument(r)
    add_remember_argument(r)
    r.add_argument("--llama-log", action="store_true", help="show llama.cpp's own log")
    o = p.add_argument_group("output")
    o.add_argument("-v", "--verbose", action="store_true", help="colour each token by where it came from (/verbose)")


def run(args: argparse.Namespace) -> int:
    from ggufspec.console import ChatSettings, Console, Conversation
    from ggufspec.console.lines import open_reader
    from ggufspec.llama.lib import set_verbose
    from ggufspec.models.resolve import resolve_pair_refs
    from ggufspec.runtime import load_pair

    set_verbose(args.llama_log)
    # every setting checked before anything loads
    settings = ChatSettings(
        max_tokens=args.max_tokens, temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        seed=args.seed, verbose=args.verbose, speculative=speculative_settings(args),
    )
    settings_of_pair = pair_settings(args)
    if args.session is not None:  # before the conversation: a save at quit must not fail
        from ggufspec.session import check_save_path

        try:
            check_save_path(args.session)
        except UserError as exc:
            raise UserError(f"--session: {exc}") from None
    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair)
    draft_ref = refs.draft or "none"

    with load_pair(target=refs.target, draft=draft_ref, settings=settings_of_pair) as pair:
        if pair.drafters and settings.sampling().greedy and pair.inexact_greedy:
            sys.stderr.write(f"note: {pair.inexact_greedy}\n")
        console = Console(pair, settings=settings, conversation=Conversation(system=args.system),
                          draft_ref=str(draft_ref), context_shift=args.context_shift, session=args.session)
        console.banner()
        if args.session is not None and args.session.exists():
            console.resume(args.session)
            if args.system is not None:
                console.conv.system = args.system
        return console.run(open_reader())
