"""Show a GGUF model's metadata, vocabulary and bytes per layer (reads the header only).

  ggufspec inspect ./model.gguf
  ggufspec inspect embedded:smollm2:Q4_1 --json
  ggufspec inspect bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M --offline

Layers with the same size and attention kind are shown as one row (e.g. "0-29").
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", metavar="REF", help="model: ./file.gguf, owner/repo:QUANT, embedded:NAME:QUANT")
    parser.add_argument("--json", action="store_true", help="print everything as JSON, the tensor table included")
    parser.add_argument("--offline", action="store_true", help="use the Hugging Face cache only")


def info_dict(info: Any) -> dict[str, Any]:
    """A ModelInfo as JSON-ready data."""
    return {
        "path": str(info.path),
        "paths": [str(p) for p in info.paths],
        "file_bytes": info.file_bytes,
        "name": info.name,
        "architecture": info.architecture,
        "file_type": info.file_type,
        "n_params": info.n_params,
        "n_layer": info.n_layer,
        "n_embd": info.n_embd,
        "n_ff": info.n_ff,
        "n_head": info.n_head,
        "n_head_kv": list(info.n_head_kv),
        "head_dim_k": list(info.head_dim_k),
        "head_dim_v": list(info.head_dim_v),
        "n_swa": info.n_swa,
        "swa_layers": [il for il, s in enumerate(info.swa_layers) if s],
        "context_length": info.context_length,
        "vocab": {"size": info.vocab_size, "type": info.vocab_type, "bos_id": info.bos_id, "eos_id": info.eos_id,
                  "add_bos": info.add_bos},
        "chat_template": info.has_chat_template,
        "tied_embeddings": info.tied_embeddings,
        "bytes": {
            "weights": info.weights_bytes,
            "input": info.input_bytes,
            "output": info.output_bytes,
            "other": info.other_bytes,
            "layers": list(info.layer_bytes),
        },
        "tensors": [
            {"name": t.name, "type": t.ggml_type, "shape": list(t.shape), "bytes": t.n_bytes, "layer": t.layer,
             "shard": t.shard}
            for t in info.tensors
        ],
    }


def _runs(info: Any) -> list[tuple[int, int, int, bool, int]]:
    """(first, last, bytes, swa, kv heads) for runs of alike layers."""
    runs: list[tuple[int, int, int, bool, int]] = []
    for il in range(info.n_layer):
        key = (info.layer_bytes[il], info.swa_layers[il], info.n_head_kv[il])
        if runs and runs[-1][2:] == key and runs[-1][1] == il - 1:
            runs[-1] = (runs[-1][0], il, *key)
        else:
            runs.append((il, il, *key))
    return runs


def _types(info: Any, layer: int | None, group: str | None = None) -> str:
    counts: dict[str, int] = {}
    for t in info.tensors:
        if (layer is not None and t.layer == layer) or (group is not None and t.group == group):
            counts[t.ggml_type] = counts.get(t.ggml_type, 0) + t.n_bytes
    return ", ".join(k for k, _ in sorted(counts.items(), key=lambda kv: -kv[1]))


def run(args: argparse.Namespace) -> int:
    from ggufspec.ggufinfo import read_model_info
    from ggufspec.models.refs import resolve_path

    path = resolve_path(args.ref, offline=args.offline)
    info = read_model_info(path)
    if args.json:
        json.dump(info_dict(info), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ggufspec.commands.tables import table_console
    from ggufspec.hardware import format_bytes as fb

    def heads(values: tuple[int, ...]) -> str:
        return str(values[0]) if len(set(values)) == 1 else f"{min(values)}-{max(values)} (per layer)"

    meta = Table(box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    meta.add_column(style="bold", no_wrap=True)
    meta.add_column(overflow="fold")
    files = str(info.path) if len(info.paths) == 1 else f"{info.path} (+{len(info.paths) - 1} more shards)"
    swa = "none"
    if info.n_swa:
        n_swa_layers = sum(info.swa_layers)
        swa = f"{info.n_swa} tokens on {n_swa_layers}/{info.n_layer} layers"
    rows = [
        ("file", files),
        ("name", info.name or "-"),
        ("architecture", info.architecture),
        ("file type", info.file_type),
        ("parameters", f"{info.n_params / 1e6:,.1f} M"),
        ("layers", str(info.n_layer)),
        ("embedding / FFN", f"{info.n_embd} / {info.n_ff}"),
        ("heads / KV heads", f"{info.n_head} / {heads(info.n_head_kv)}"),
        ("head dim K / V", f"{heads(info.head_dim_k)} / {heads(info.head_dim_v)}"),
        ("sliding window", swa),
        ("trained context", f"{info.context_length:,}"),
        ("vocabulary", f"{info.vocab_size:,} tokens, {info.vocab_type}; BOS {info.bos_id}, EOS {info.eos_id}, "
                       f"add BOS {'yes' if info.add_bos else 'no'}"),
        ("chat template", "yes" if info.has_chat_template else "no"),
        ("weights", f"{fb(info.weights_bytes)} ({info.weights_bytes:,} bytes) in {fb(info.file_bytes)} of file"),
        ("embeddings (RAM)", f"{fb(info.input_bytes)} ({_types(info, None, 'input')})"),
        ("output layer", f"{fb(info.output_bytes + info.other_bytes)}"
                         + (" + a copy of the embeddings (tied)" if info.tied_embeddings else "")
                         + (f" ({_types(info, None, 'output')})" if info.output_bytes else "")),
    ]
    for k, v in rows:
        meta.add_row(k, escape(v))

    layers = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    layers.add_column("layers", no_wrap=True)
    layers.add_column("bytes each", justify="right")
    layers.add_column("bytes", justify="right")
    layers.add_column("attention")
    layers.add_column("KV per 1k tokens (f16)", justify="right")
    layers.add_column("tensor types")
    for first, last, size, is_swa, nkv in _runs(info):
        n = last - first + 1
        kv1k = 1024 * 2 * nkv * (info.head_dim_k[first] + info.head_dim_v[first])
        layers.add_row(
            str(first) if n == 1 else f"{first}-{last}",
            fb(size), fb(size * n),
            f"window {info.n_swa}" if is_swa else "full",
            fb(kv1k) if nkv else "-",
            _types(info, first),
        )
    console = table_console(highlight=False, fit=[meta, layers])
    console.print(meta)
    console.print(layers)
    return 0

