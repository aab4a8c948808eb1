"""Subcommands of the ggufspec CLI, one module each, and the options they share (one definition each)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ggufspec.settings import PairSettings


def add_pair_argument(group: argparse._ArgumentGroup) -> None:
    """`--pair NAME`: a catalog pair (ggufspec/pairs/*.toml) instead of --target and --draft."""
    group.add_argument("--pair", metavar="NAME", help="target and draft of a known pair (see `ggufspec pairs`)")


def add_rpc_argument(group: argparse._ArgumentGroup) -> None:
    """`--rpc HOST:PORT[,HOST:PORT]`: llama.cpp RPC workers used as devices (ggufspec rpc-server)."""
    group.add_argument("--rpc", metavar="HOST:PORT[,..]",
                       help="RPC workers (`ggufspec rpc-server`) used as devices, before local GPUs")


def add_draft_kv_argument(group: argparse._ArgumentGroup) -> None:
    """`--draft-kv auto|own`: whether a draft model that is the target's network takes the target's
    KV cache instead of decoding the history itself (ggufspec.loop.kvshare)."""
    group.add_argument(
        "--draft-kv", default="auto", choices=("auto", "own"), metavar="auto|own",
        help="auto (default): a draft model that is the target's network at another precision takes the "
             "target's KV cache (no draft prefill or catch-up decodes); own: it decodes the history itself",
    )


def add_remember_argument(group: argparse._ArgumentGroup) -> None:
    """`--remember` / `--no-remember`: the draft controller starts from what earlier runs on the same
    pair and machine learnt, and keeps what this one learns (ggufspec.remember)."""
    group.add_argument(
        "--remember", action=argparse.BooleanOptionalAction, default=True,
        help="start the draft controller from what earlier runs of this pair on this machine learnt, and keep "
             "what this run learns (default; in ~/.local/state/ggufspec, or GGUFSPEC_STATE); "
             "--no-remember: start fresh and keep nothing",
    )


def add_model_arguments(group: argparse._ArgumentGroup, *, draft_help: str, repeatable_draft: bool = False) -> None:
    """`--target`, `--draft`, `--pair` and `--offline`, as every command that loads a pair names them
    (ggufspec.models.resolve turns them into a target and its drafters)."""
    group.add_argument("--target", metavar="REF", help="target model: ./file.gguf, owner/repo:QUANT, embedded:NAME:QUANT")
    if repeatable_draft:
        group.add_argument("--draft", metavar="REF", action="append", default=None, help=draft_help)
    else:
        group.add_argument("--draft", metavar="REF", help=draft_help)
    add_pair_argument(group)
    group.add_argument("--offline", action="store_true", help="use the Hugging Face cache only")


def add_sampling_arguments(group: argparse._ArgumentGroup) -> None:
    """`--temp`, `--top-k`, `--top-p`, `--min-p`, `--seed` (ggufspec.loop.sampling.SamplingSettings)."""
    group.add_argument("--temp", type=float, default=0.0, metavar="T", help="temperature; 0 = greedy (default)")
    group.add_argument("--top-k", type=int, default=0, metavar="K", help="top-k (0 = off)")
    group.add_argument("--top-p", type=float, default=1.0, metavar="P", help="top-p in (0, 1] (1 = off)")
    group.add_argument("--min-p", type=float, default=0.0, metavar="P", help="min-p (0 = off)")
    group.add_argument("--seed", type=int, default=None, help="random seed (reproducible runs); -1: a fresh random seed")


def pair_settings(args: argparse.Namespace) -> "PairSettings":
    """PairSettings from the runtime options `run` and `chat` share (--ctx, --threads, --cache-type,
    --ngl, --ngld, --draft-kv, --remember, --offline, and --rpc where the command has it); raises UserError on bad values."""
    from ggufspec.settings import ContextSettings, PairSettings, parse_layers

    rpc = getattr(args, "rpc", None)
    return PairSettings(
        context=ContextSettings(n_ctx=args.ctx, n_threads=args.threads, cache_type_k=args.cache_type,
                                cache_type_v=args.cache_type),
        n_gpu_layers=parse_layers(args.ngl, flag="--ngl"),
        n_gpu_layers_draft=parse_layers(args.ngld, flag="--ngld"),
        offline=args.offline,
        rpc=(rpc,) if rpc else (),
        draft_kv=args.draft_kv,
        remember=args.remember,
    )
