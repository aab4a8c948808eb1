"""Model references: parsing every form, and local/shard/embedded resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ggufspec.errors import UserError
from ggufspec.models.refs import EmbeddedRef, HubRef, LocalRef, ResolvedModel, parse_ref, resolve_model


@pytest.mark.parametrize(("text", "expected"), [
    ("bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0", HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF", "Q8_0")),
    ("Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m", HubRef("Qwen/Qwen2.5-7B-Instruct-GGUF", "q4_k_m")),
    ("unsloth/Qwen3-32B-GGUF:UD-Q4_K_XL", HubRef("unsloth/Qwen3-32B-GGUF", "UD-Q4_K_XL")),
    ("ggml-org/gemma-3-1b-it-GGUF", HubRef("ggml-org/gemma-3-1b-it-GGUF")),
    ("Qwen/Qwen3-8B-GGUF:Q4_K_M@main", HubRef("Qwen/Qwen3-8B-GGUF", "Q4_K_M", revision="main")),
    ("o/r:Q8_0@refs/pr/3", HubRef("o/r", "Q8_0", revision="refs/pr/3")),
    ("o/r@" + "a" * 40, HubRef("o/r", revision="a" * 40)),
    ("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
     HubRef("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", filename="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")),
    ("unsloth/Qwen3-235B-A22B-GGUF/Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf@v2",
     HubRef("unsloth/Qwen3-235B-A22B-GGUF", filename="Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf",
            revision="v2")),
    ("embedded:smollm2:F32", EmbeddedRef("smollm2", "F32")),
    ("embedded:gemma3-270m:Q4_K_M", EmbeddedRef("gemma3-270m", "Q4_K_M")),
    ("./model.gguf", LocalRef(Path("model.gguf"))),
    ("/models/m.gguf", LocalRef(Path("/models/m.gguf"))),
    ("~/m.gguf", LocalRef(Path("~/m.gguf").expanduser())),
    ("model.gguf", LocalRef(Path("model.gguf"))),
    ("../x/y.gguf", LocalRef(Path("../x/y.gguf"))),
])
def test_parse_forms(text: str, expected: object) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty model reference"),
    ("   ", "empty model reference"),
    ("llama3", "not a model reference: 'llama3'; write ./file.gguf, owner/repo:QUANT"),
    ("o/r:", "bad quant '' in 'o/r:'"),
    ("o/r:Q4 K", "bad quant"),
    ("o/r:Q8_0@", "empty revision"),
    ("o/r/../x.gguf", "bad file path"),
    ("embedded:smollm2", "bad embedded model reference"),
    ("embedded::F32", "bad embedded model reference"),
    ("o/r:Q4_0@../../../outside/ref", r"bad revision '\.\./\.\./\.\./outside/ref'"),
    ("o/r:Q4_0@/etc", "bad revision '/etc'"),
    ("o/r@a\\b", "bad revision"),
    ("o/r@main~1", "bad revision"),
    ("o/r@a b", "bad revision"),
    ("o/r@a\x01", "bad revision"),
    ("o/r@x.lock", "bad revision"),
    ("o/r@refs/.hidden", "bad revision"),
    ("o/r@v1.", "bad revision"),
    ("o/r@a//b", "bad revision"),
    ("o/r@HEAD^", "bad revision"),
    ("o/r@a:b", "bad revision"),
    ("o/r@@{1}", "bad revision"),
    ("own--er/repo:Q8_0", "bad repo name 'own--er/repo'.*Cannot have -- or \\.\\."),
    ("owner/re..po", "bad repo name 'owner/re\\.\\.po'"),
    ("owner/repo.git", "bad repo name"),
    ("owner/" + "r" * 97, "bad repo name"),
    ("owner/re po:Q8_0", "bad repo name"),
    ("own--er/repo/m.gguf", "bad repo name"),
])
def test_parse_errors_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_ref(text)


def test_an_existing_file_wins_over_the_hub_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "repo.gguf").write_bytes(b"GGUF")
    assert parse_ref("owner/repo.gguf") == LocalRef(Path("owner/repo.gguf"))
    (tmp_path / "acme" / "models").mkdir(parents=True)  # a directory reads as a Hub ref
    assert parse_ref("acme/models") == HubRef("acme/models")


_name = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?", fullmatch=True).filter(
    lambda n: "--" not in n and ".." not in n and not n.endswith(".git"))  # huggingface_hub's rules
_quant = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,12}", fullmatch=True)
_rev_part = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,8}(\.[A-Za-z0-9]{1,4})?", fullmatch=True).filter(
    lambda p: not p.endswith(".lock"))  # git's rules for a branch or tag name
_rev = st.one_of(st.none(), st.lists(_rev_part, min_size=1, max_size=3).map("/".join))


@settings(max_examples=50, deadline=None)
@given(owner=_name, name=_name, quant=st.one_of(st.none(), _quant), revision=_rev)
def test_hub_refs_round_trip(owner: str, name: str, quant: str | None, revision: str | None) -> None:
    ref = HubRef(f"{owner}/{name}", quant, None, revision)
    if Path(str(ref)).exists():  # pragma: no cover - a file named like the ref in the cwd
        return
    assert parse_ref(str(ref)) == ref


def test_resolve_local_file(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    resolved = resolve_model(str(f))
    assert resolved == ResolvedModel(str(f), (f,), "local")
    assert resolved.path == f


def test_resolve_local_shard_gives_every_shard_first_first(tmp_path: Path) -> None:
    shards = [tmp_path / f"m-Q8_0-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    for s in shards:
        s.write_bytes(b"GGUF")
    for named in shards:
        assert resolve_model(str(named)).paths == tuple(shards)
    shards[2].unlink()
    with pytest.raises(UserError, match=r"has 3 shards but m-Q8_0-00003-of-00003\.gguf is missing from"):
        resolve_model(str(shards[0]))


def test_resolve_refuses_a_local_file_that_is_not_gguf(tmp_path: Path) -> None:
    shards = [tmp_path / f"m-{i:05d}-of-00002.gguf" for i in (1, 2)]
    shards[0].write_bytes(b"GGUF")
    shards[1].write_bytes(b"<html>")  # a shard saved from an error page
    with pytest.raises(UserError, match=r"m-00002-of-00002\.gguf is not a GGUF file \(it does not start with"):
        resolve_model(str(shards[0]))


def test_resolve_missing_local_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"model file not found: {tmp_path / 'nope.gguf'}"):
        resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(UserError, match="is not a file"):
        resolve_model(str(tmp_path))


def test_resolve_embedded_delegates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ggufspec.models.refs

    calls = []

    def fake(name: str, quant: str) -> Path:
        calls.append((name, quant))
        return tmp_path / f"{name}.{quant}.gguf"

    monkeypatch.setattr(ggufspec.models.refs, "resolve_embedded", fake)  # where refs looks it up
    resolved = resolve_model("embedded:smollm2:Q4_0")
    assert calls == [("smollm2", "Q4_0")]
    assert resolved.paths == (tmp_path / "smollm2.Q4_0.gguf",) and resolved.source == "embedded"
