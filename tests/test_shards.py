"""shards: llama.cpp's split-GGUF names, the one definition ggufinfo, refs and hub share."""

from __future__ import annotations

from pathlib import Path

import pytest

from ggufspec import ggufinfo, hub
from ggufspec.errors import UserError
from ggufspec.models import refs
from ggufspec.models.shards import local_shards, shard_names, split_info


def test_split_info() -> None:
    assert split_info("a/m-Q4_K_M-00002-of-00003.gguf") == ("a/m-Q4_K_M", 2, 3)
    assert split_info("M-00001-OF-00002.GGUF") == ("M", 1, 2)
    assert split_info("m-0001-of-0002.gguf") is None and split_info("m.gguf") is None


def test_shard_names_keep_everything_but_the_number() -> None:
    assert shard_names("d/M-00002-OF-00003.GGUF") == ("d/M-00001-OF-00003.GGUF", "d/M-00002-OF-00003.GGUF",
                                                      "d/M-00003-OF-00003.GGUF")
    assert shard_names("m-00001-of-00001.gguf") == ("m-00001-of-00001.gguf",)
    assert shard_names("m.gguf") == ("m.gguf",)


def test_local_shards(tmp_path: Path) -> None:
    names = [f"m-{i:05d}-of-00002.gguf" for i in (1, 2)]
    (tmp_path / names[0]).write_bytes(b"GGUF")
    with pytest.raises(UserError, match=rf"{names[1]} is missing from"):
        local_shards(tmp_path / names[0])
    (tmp_path / names[1]).write_bytes(b"GGUF")
    assert local_shards(tmp_path / names[1]) == tuple(tmp_path / n for n in names)


def test_one_definition() -> None:
    # checked in the modules that look the names up
    assert refs.local_shards is local_shards and ggufinfo.header.local_shards is local_shards
    assert hub.quants.split_info is split_info and hub.download.split_info is split_info
    assert hub.split_info is split_info
