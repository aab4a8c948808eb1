"""Split-GGUF shard names, as llama.cpp writes them: ``PREFIX-00001-of-00003.gguf``.

llama.cpp's ``llama_split_path`` formats ``"%s-%05d-of-%05d.gguf"``; a split model is read from
its first shard and needs every other one beside it. Pure: no I/O but ``local_shards``' checks.
"""

from __future__ import annotations

import re
from pathlib import Path

from ggufspec.errors import UserError

__all__ = ["local_shards", "shard_names", "split_info"]

# Case-insensitive, as llama.cpp's -hf matching is; a shard number is always 5 digits.
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def split_info(name: str) -> tuple[str, int, int] | None:
    """``(prefix, number, count)`` of a shard name or path, else None.

    ``"a/m-Q4_K_M-00002-of-00003.gguf"`` -> ``("a/m-Q4_K_M", 2, 3)``.
    """
    m = _SHARD.match(name)
    if m is None:
        return None
    return m["prefix"], int(m["no"]), int(m["count"])


def shard_names(name: str) -> tuple[str, ...]:
    """Every shard name of the split model ``name`` belongs to, first first; ``(name,)`` if not split.

    Only the shard number changes: case and directory part are kept as given.
    """
    m = _SHARD.match(name)
    if m is None or int(m["count"]) <= 1:
        return (name,)
    head, tail = name[: m.start("no")], name[m.end("no"):]
    return tuple(f"{head}{i:05d}{tail}" for i in range(1, int(m["count"]) + 1))


def local_shards(path: Path) -> tuple[Path, ...]:
    """All shards on disk of the split model ``path`` belongs to, first first; ``(path,)`` if not split.

    Raises:
        UserError: a shard is missing.
    """
    shards = tuple(path.with_name(n) for n in shard_names(path.name))
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        raise UserError(f"split model {path.name} has {len(shards)} shards but {', '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} missing from {path.parent}; "
                        f"download all {len(shards)} files there")
    return shards
