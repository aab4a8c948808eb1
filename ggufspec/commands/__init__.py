"""Subcommands of the ggufspec CLI, one module each, and the model options they share."""

from __future__ import annotations

import argparse


def add_pair_argument(group: argparse._ArgumentGroup) -> None:
    """`--pair NAME`: a catalog pair (ggufspec/pairs/*.toml) instead of --target and --draft."""
    group.add_argument("--pair", metavar="NAME", help="target and draft of a known pair (see `ggufspec pairs`)")


def add_rpc_argument(group: argparse._ArgumentGroup) -> None:
    """`--rpc HOST:PORT[,HOST:PORT]`: llama.cpp RPC workers used as devices (ggufspec rpc-server)."""
    group.add_argument("--rpc", metavar="HOST:PORT[,..]",
                       help="RPC workers (`ggufspec rpc-server`) used as devices, before local GPUs")
