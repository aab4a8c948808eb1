"""Download models from the Hugging Face Hub into its cache; print their files, sizes and sha256.

  ggufspec pull bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0
  ggufspec pull Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M@main ./local.gguf
  ggufspec pull --pair qwen3-8b
  ggufspec pull --offline --json owner/repo:Q4_K_M

REF is ./file.gguf, owner/repo:QUANT, owner/repo/path/file.gguf (either with @REVISION), or
embedded:NAME:QUANT. The quant is matched case-insensitively against the repo's GGUF file names;
a split model (-00001-of-00003.gguf) comes down whole, first shard first. Downloads resume after a
dropped connection and land in the Hugging Face cache only when complete; every file is hashed and
Hub files are checked against the Hub's LFS sha256 (a bad file is deleted).

--pair NAME fetches both models of a catalog pair (see `ggufspec pairs`) and checks that the
draft's vocabulary matches the target's.

--json prints {"models": [{"ref", "paths", "bytes", "sha256"}]}: "paths" and "sha256" list the
files first shard first, "bytes" is their total size; with --pair also "pair" and "vocab".

Environment: HF_TOKEN (gated or private repos), HF_ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE=1
(same as --offline: the cache only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ggufspec.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("refs", nargs="*", metavar="REF", help="model references to fetch")
    parser.add_argument("--pair", metavar="NAME", help="fetch both models of a catalog pair")
    parser.add_argument("--offline", action="store_true", help="use the local cache only, no network")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")
    parser.add_argument("--no-progress", action="store_true", help="hide download progress bars")


def run(args: argparse.Namespace) -> int:
    from ggufspec.hub import sha256_file
    from ggufspec.models.refs import resolve_model

    if bool(args.refs) == bool(args.pair):
        raise UserError("give model references or --pair NAME (one of the two); see `ggufspec pull --help`")
    pair = None
    refs: list[str] = list(args.refs)
    if args.pair:
        from ggufspec.models.catalog import get_pair

        pair = get_pair(args.pair)
        refs = [pair.target, pair.draft]

    models: list[dict[str, Any]] = []
    for ref in refs:
        resolved = resolve_model(ref, offline=args.offline, progress=not args.no_progress, verify=True)
        digests = list(resolved.sha256) + [None] * (len(resolved.paths) - len(resolved.sha256))
        sha = [d or sha256_file(p) for p, d in zip(resolved.paths, digests)]
        sizes = [p.stat().st_size for p in resolved.paths]
        models.append({"ref": ref, "paths": [str(p) for p in resolved.paths], "bytes": sum(sizes),
                       "sha256": sha, "sizes": sizes})

    vocab = None
    if pair is not None:
        vocab = _vocab_check(Path(models[0]["paths"][0]), Path(models[1]["paths"][0]))

    if args.json:
        out: dict[str, Any] = {"models": [{k: m[k] for k in ("ref", "paths", "bytes", "sha256")} for m in models]}
        if pair is not None:
            out["pair"] = pair.name
            out["vocab"] = vocab
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for role, m in zip(("target", "draft") if pair else ("",) * len(models), models):
            n = len(m["paths"])
            head = f"{role}: " if role else ""
            print(f"{head}{m['ref']}  ({n} file{'s' if n > 1 else ''}, {_human(m['bytes'])})")
            for path, size, digest in zip(m["paths"], m["sizes"], m["sha256"]):
                print(f"  {path}")
                print(f"    {size:,} bytes  sha256 {digest}")
        if vocab is not None:
            flag = "" if vocab["compatible"] else "INCOMPATIBLE: "
            print(f"vocab: {flag}{vocab['message']}")
    if vocab is not None and vocab["compatible"] is False:
        return 1
    return 0


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return f"{n} B"  # unreachable


def _vocab_check(target: Path, draft: Path) -> dict[str, Any]:
    """The vocabulary verdict (``ggufspec.models.vocab``) as a dict."""
    from ggufspec import ggufinfo
    from ggufspec.models import vocab
    verdict = vocab.compare_vocab(target=ggufinfo.read_vocab(target), draft=ggufinfo.read_vocab(draft))
    return {
        "status": getattr(verdict, "status", None),
        "compatible": bool(getattr(verdict, "ok", True)),
        "llama_cpp_compatible": getattr(verdict, "llama_cpp_compatible", None),
        "first_diff_id": getattr(verdict, "first_diff_id", None),
        "message": getattr(verdict, "message", str(verdict)),
    }
