"""`ggufspec pull` and `ggufspec pairs` through the CLI, against the fake hub."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import pytest
from hub_server import HubFiles, HubServer, fake_hub, hub_files, sha256_of  # noqa: F401  (fixtures)

import ggufspec.ggufinfo
import ggufspec.models.vocab
from ggufspec.cli import main

REPO = "acme/tiny-GGUF"


def serve(server: HubServer, files: HubFiles) -> None:
    server.add_repo(REPO, {"tiny-Q8_0.gguf": files.tiny, "tiny-Q4_K_M.gguf": files.tiny2})
    server.add_repo("acme/split-GGUF", {p.name: p for p in files.shards})


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_pull_json_lists_paths_bytes_sha256(fake_hub: HubServer, hub_files: HubFiles,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    serve(fake_hub, hub_files)
    code, out, _ = run_cli(["pull", "--json", "--no-progress", f"{REPO}:Q8_0", "acme/split-GGUF:Q8_0"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["models"]
    single, split = doc["models"]
    assert set(single) == {"ref", "paths", "bytes", "sha256"}
    assert single["ref"] == f"{REPO}:Q8_0"
    assert [Path(p).name for p in single["paths"]] == ["tiny-Q8_0.gguf"]
    assert single["bytes"] == hub_files.tiny.stat().st_size
    assert single["sha256"] == [sha256_of(hub_files.tiny)]
    assert [Path(p).name for p in split["paths"]] == [p.name for p in hub_files.shards]
    assert split["bytes"] == sum(p.stat().st_size for p in hub_files.shards)
    assert split["sha256"] == [sha256_of(p) for p in hub_files.shards]


def test_pull_human_output_and_local_files(fake_hub: HubServer, hub_files: HubFiles,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    serve(fake_hub, hub_files)
    code, out, _ = run_cli(["pull", "--no-progress", f"{REPO}:q4_k_m", str(hub_files.tiny)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{REPO}:q4_k_m  (1 file, ")
    assert lines[1].strip().endswith("tiny-Q4_K_M.gguf")
    assert lines[2].strip() == f"{hub_files.tiny2.stat().st_size:,} bytes  sha256 {sha256_of(hub_files.tiny2)}"
    assert lines[3].startswith(f"{hub_files.tiny}  (1 file, ")
    assert lines[5].strip().endswith(sha256_of(hub_files.tiny))


@pytest.mark.parametrize(("argv", "message"), [
    (["pull", f"{REPO}:Q5_K_M"], r"error: acme/tiny-GGUF has no GGUF file for quant 'Q5_K_M'; available quants: Q4_K_M, Q8_0"),
    (["pull", "acme/gated-GGUF:Q8_0"], r"error: acme/gated-GGUF is gated: accept its terms at http://127\.0\.0\.1:\d+/acme/gated-GGUF"),
    (["pull", "acme/missing-GGUF:Q8_0"], r"error: repo acme/missing-GGUF not found on http://127\.0\.0\.1:\d+ \(404\)"),
    (["pull", "--offline", f"{REPO}:Q8_0"], r"error: acme/tiny-GGUF@main is not in the Hugging Face cache .*offline mode is on"),
    (["pull", "./missing.gguf"], r"error: model file not found: missing\.gguf"),
    (["pull"], r"error: give model references or --pair NAME"),
    (["pull", "--pair", "qwen3-8b", f"{REPO}:Q8_0"], r"error: give model references or --pair NAME"),
    (["pull", "--pair", "nope"], r"error: unknown pair 'nope'; choose one of: default"),
])
def test_pull_errors_are_one_line_exit_2(fake_hub: HubServer, hub_files: HubFiles, capsys: pytest.CaptureFixture[str],
                                         argv: list[str], message: str) -> None:
    serve(fake_hub, hub_files)
    fake_hub.add_repo("acme/gated-GGUF", {"g-Q8_0.gguf": hub_files.tiny}, gated=True)
    code, out, err = run_cli(argv[:1] + ["--no-progress"] + argv[1:], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert re.match(message, err.strip()), err


@pytest.mark.parametrize("content", [b"root:x:0:0:root:/root:/bin/bash\n", b"", b"GGU"])
def test_pull_refuses_a_local_file_that_is_not_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_bytes(content)
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    code, out, err = run_cli(["pull", "../../etc/passwd"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == ("error: ../../etc/passwd is not a GGUF file (it does not start with the GGUF magic); "
                           "name a .gguf model file"), err


def test_pull_offline_refuses_a_revision_that_climbs_out_of_the_cache(
        fake_hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a refs file and a snapshot outside the Hugging Face cache, where ../../../outside/ref would lead
    from huggingface_hub import constants

    storage = Path(constants.HF_HUB_CACHE) / "models--acme--tiny-GGUF"
    (storage / "refs").mkdir(parents=True)
    outside = (storage / "refs" / "../../../outside").resolve()
    outside.mkdir(parents=True)
    commit = "c" * 40
    (outside / "ref").write_text(commit)
    (storage / "snapshots" / commit).mkdir(parents=True)
    (storage / "snapshots" / commit / "m-Q4_0.gguf").write_bytes(b"GGUF")
    code, out, err = run_cli(["pull", "--offline", f"{REPO}:Q4_0@../../../outside/ref"], capsys)
    assert code == 2 and out == ""
    assert re.fullmatch(r"error: bad revision '\.\./\.\./\.\./outside/ref' in 'acme/tiny-GGUF:Q4_0@\.\./\.\./\.\./outside/ref': "
                        r"[^\n]*branch, tag or commit[^\n]*", err.strip()), err


def test_pull_offline_from_the_cache_with_the_server_down(fake_hub: HubServer, hub_files: HubFiles,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    serve(fake_hub, hub_files)
    code, online, _ = run_cli(["pull", "--json", "--no-progress", "acme/split-GGUF:Q8_0"], capsys)
    assert code == 0
    fake_hub.stop()
    code, offline, _ = run_cli(["pull", "--json", "--offline", "acme/split-GGUF:Q8_0"], capsys)
    assert code == 0 and json.loads(offline) == json.loads(online)


# --------------------------------------------------------------------------- --pair and the vocabulary check


@pytest.fixture
def tiny_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    (d / "tiny.toml").write_text(f'title = "Tiny"\ntarget = "{REPO}:Q8_0"\ndraft = "{REPO}:Q4_K_M"\ncontext = 512\n')
    import ggufspec.models.catalog

    monkeypatch.setattr(ggufspec.models.catalog, "models_dir", lambda: d)
    return d


class FakeVocab:
    """Stand-ins for ggufspec.ggufinfo.read_vocab and ggufspec.models.vocab.compare_vocab that record calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.verdict = types.SimpleNamespace(status="identical", ok=True, llama_cpp_compatible=True,
                                             first_diff_id=None, message="vocabularies are identical (400 tokens, SPM)")

    def read_vocab(self, path: Path) -> str:
        self.calls.append(("read", Path(path).name))
        return Path(path).name

    def compare_vocab(self, *, target: str, draft: str) -> Any:
        self.calls.append(("compare", target, draft))
        return self.verdict


@pytest.fixture
def fake_vocab(monkeypatch: pytest.MonkeyPatch) -> FakeVocab:
    fake = FakeVocab()
    monkeypatch.setattr(ggufspec.ggufinfo, "read_vocab", fake.read_vocab)
    monkeypatch.setattr(ggufspec.models.vocab, "compare_vocab", fake.compare_vocab)
    return fake


def test_pull_pair_checks_vocabularies_once_both_files_are_present(
    fake_hub: HubServer, hub_files: HubFiles, tiny_catalog: Path, fake_vocab: FakeVocab,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve(fake_hub, hub_files)
    code, out, _ = run_cli(["pull", "--no-progress", "--pair", "tiny"], capsys)
    assert code == 0
    assert fake_vocab.calls == [("read", "tiny-Q8_0.gguf"), ("read", "tiny-Q4_K_M.gguf"),
                                ("compare", "tiny-Q8_0.gguf", "tiny-Q4_K_M.gguf")]
    assert out.splitlines()[0].startswith(f"target: {REPO}:Q8_0")
    assert out.splitlines()[-1] == "vocab: vocabularies are identical (400 tokens, SPM)"

    fake_vocab.verdict = types.SimpleNamespace(status="incompatible", ok=False, llama_cpp_compatible=False,
                                               first_diff_id=7, message="the draft's vocabulary does not match")
    code, out, _ = run_cli(["pull", "--json", "--no-progress", "--pair", "tiny"], capsys)
    doc = json.loads(out)
    assert code == 1
    assert doc["pair"] == "tiny" and [m["ref"] for m in doc["models"]] == [f"{REPO}:Q8_0", f"{REPO}:Q4_K_M"]
    assert doc["vocab"] == {"status": "incompatible", "compatible": False, "llama_cpp_compatible": False,
                            "first_diff_id": 7, "message": "the draft's vocabulary does not match"}


def test_pull_pair_with_the_real_vocabulary_checker(fake_hub: HubServer, hub_files: HubFiles, tiny_catalog: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    serve(fake_hub, hub_files)
    code, out, _ = run_cli(["pull", "--json", "--no-progress", "--pair", "tiny"], capsys)
    vocab = json.loads(out)["vocab"]
    assert code == 0 and vocab["compatible"] is True and vocab["status"] == "identical", vocab


# --------------------------------------------------------------------------- pairs


def test_pairs_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    from ggufspec.models.catalog import load_pairs

    names = [p.name for p in load_pairs()]
    code, out, _ = run_cli(["pairs"], capsys)
    assert code == 0
    for p in load_pairs():
        assert p.name in out and p.target in out and p.draft in out
    assert "https://github.com/ggml-org/llama.cpp/issues/5877" in out
    code, out, _ = run_cli(["pairs", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and [p["name"] for p in doc["pairs"]] == names
    assert {"name", "title", "target", "draft", "context", "licence", "notes", "expected"} == set(doc["pairs"][0])
