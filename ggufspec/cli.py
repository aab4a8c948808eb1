"""ggufspec command line: a dispatcher that imports only the subcommand it runs.

Each subcommand lives in ``ggufspec/commands/<name>.py`` and defines
``add_arguments(parser)`` and ``run(args) -> int``; its module docstring is its help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from ggufspec.errors import UserError

# name -> one-line summary (shown by `ggufspec --help` without importing anything heavy)
COMMANDS: dict[str, str] = {
    "run": "generate with a target sped up by a draft model (or prompt lookup)",
    "pull": "download models from the Hugging Face Hub into the cache",
    "pairs": "list the catalog of known target/draft pairs",
    "inspect": "show a GGUF model's metadata and per-layer sizes",
    "plan": "plan GPU offload of a target and a draft inside a VRAM budget",
    "bench": "measure speedup, accept rate and peers side by side",
    "serve": "OpenAI-compatible HTTP server with speculative decoding",
    "chat": "interactive multi-turn console; switch draft, K and sampling live",
    "devices": "list the devices llama.cpp can run layers on (GPUs, RPC workers, the CPU)",
    "rpc-server": "serve this machine's CPU as an RPC worker for --rpc on another process",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one `error:` line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def _build_parser(command: str | None) -> tuple[_Parser, object | None]:
    parser = _Parser(prog="ggufspec", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    module = None
    for name, summary in COMMANDS.items():
        if name == command:
            module = importlib.import_module(f"ggufspec.commands.{name.replace('-', '_')}")
            p = sub.add_parser(
                name,
                help=summary,
                description=module.__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            module.add_arguments(p)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser, module


def _version() -> str:
    from ggufspec import __version__

    return f"ggufspec {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        sys.stderr.write(f"error: unknown command {command!r}; choose one of: {', '.join(COMMANDS)}\n")
        return 2
    try:
        parser, module = _build_parser(command)
        args = parser.parse_args(argv)
        if module is None:
            parser.print_help()
            return 0
        return int(module.run(args) or 0)
    except UserError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
