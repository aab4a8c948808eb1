"""ggufspec.hub against a hub-compatible server: the real huggingface_hub client, real GGUF files."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from hub_server import HubFiles, HubServer, fake_hub, go_offline, hub_files, sha256_of  # noqa: F401  (fixtures)

from ggufspec import hub
from ggufspec.errors import UserError
from ggufspec.models.refs import resolve_model

REPO = "acme/SmolLM2-135M-Instruct-GGUF"


def serve_quants(server: HubServer, files: HubFiles, repo: str = REPO) -> str:
    """A repo like bartowski's: one file per quant, a split Q8_0 in a folder, an mmproj to skip."""
    return server.add_repo(repo, {
        "README.md": files.tiny,
        "SmolLM2-135M-Instruct-Q4_K_M.gguf": files.smollm2,
        "SmolLM2-135M-Instruct-Q4_K_S.gguf": files.tiny2,
        "SmolLM2-135M-Instruct-IQ4_XS.gguf": files.tiny2,
        "SmolLM2-135M-Instruct-Q2_K.gguf": files.tiny,
        "mmproj-SmolLM2-F16.gguf": files.tiny2,
        **{f"Q8_0/{p.name}": p for p in files.shards},
    })


def blobs(cache_root: Path) -> list[Path]:
    return sorted(p for p in cache_root.rglob("blobs/*") if p.is_file())


def cache_root() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


# --------------------------------------------------------------------------- choosing a file (pure)

BARTOWSKI = [
    "Meta-Llama-3.1-8B-Instruct-IQ4_XS.gguf", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
    "Meta-Llama-3.1-8B-Instruct-Q4_K_L.gguf", "Meta-Llama-3.1-8B-Instruct-Q4_0.gguf",
    "Meta-Llama-3.1-8B-Instruct-Q4_0_4_4.gguf", "Meta-Llama-3.1-8B-Instruct-Q6_K.gguf",
    "Meta-Llama-3.1-8B-Instruct-Q6_K_L.gguf", "Meta-Llama-3.1-8B-Instruct-Q8_0.gguf",
    "Meta-Llama-3.1-8B-Instruct-f32.gguf", "Meta-Llama-3.1-8B-Instruct.imatrix", "README.md",
]
QWEN_SPLIT = [
    "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf",
    "qwen2.5-7b-instruct-q8_0-00001-of-00003.gguf", "qwen2.5-7b-instruct-q8_0-00002-of-00003.gguf",
    "qwen2.5-7b-instruct-q8_0-00003-of-00003.gguf", "qwen2.5-7b-instruct-fp16-00001-of-00004.gguf",
    "qwen2.5-7b-instruct-fp16-00002-of-00004.gguf", "qwen2.5-7b-instruct-fp16-00003-of-00004.gguf",
    "qwen2.5-7b-instruct-fp16-00004-of-00004.gguf", "LICENSE",
]
UNSLOTH = [
    "Qwen3-32B-Q4_K_M.gguf", "Qwen3-32B-UD-Q4_K_XL.gguf", "Qwen3-32B-Q8_0.gguf", "mmproj-F16.gguf",
    "BF16/Qwen3-32B-BF16-00001-of-00002.gguf", "BF16/Qwen3-32B-BF16-00002-of-00002.gguf",
]


@pytest.mark.parametrize(("files", "quant", "expected"), [
    (BARTOWSKI, "Q4_K_M", ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",)),
    (BARTOWSKI, "q4_k_m", ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",)),  # any case
    (BARTOWSKI, "Q4_0", ("Meta-Llama-3.1-8B-Instruct-Q4_0.gguf",)),  # not Q4_0_4_4
    (BARTOWSKI, "Q6_K", ("Meta-Llama-3.1-8B-Instruct-Q6_K.gguf",)),  # not Q6_K_L
    (BARTOWSKI, "F32", ("Meta-Llama-3.1-8B-Instruct-f32.gguf",)),
    (BARTOWSKI, None, ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",)),  # llama.cpp's default
    (QWEN_SPLIT, "Q4_K_M", tuple(QWEN_SPLIT[:2])),
    (QWEN_SPLIT, "Q8_0", tuple(QWEN_SPLIT[2:5])),
    (QWEN_SPLIT, "fp16", tuple(QWEN_SPLIT[5:9])),
    (UNSLOTH, "Q4_K_M", ("Qwen3-32B-Q4_K_M.gguf",)),
    (UNSLOTH, "UD-Q4_K_XL", ("Qwen3-32B-UD-Q4_K_XL.gguf",)),
    (UNSLOTH, "Q4_K_XL", ("Qwen3-32B-UD-Q4_K_XL.gguf",)),
    (UNSLOTH, "BF16", ("BF16/Qwen3-32B-BF16-00001-of-00002.gguf", "BF16/Qwen3-32B-BF16-00002-of-00002.gguf")),
])
def test_pick_variant_matches_quant_tokens(files: list[str], quant: str | None, expected: tuple[str, ...]) -> None:
    assert hub.pick_quant_files(files, quant, repo_id="o/r").files == expected


def test_available_quants_fold_shards_and_skip_companions() -> None:
    assert hub.available_quants(QWEN_SPLIT) == ("FP16", "Q4_K_M", "Q8_0")
    assert hub.available_quants(UNSLOTH) == ("BF16", "Q4_K_M", "Q8_0", "UD-Q4_K_XL")
    assert "F16" not in hub.available_quants(UNSLOTH)  # mmproj-F16 is not a model
    assert hub.available_quants(["SmolLM2-135M-Instruct.Q4_1.gguf"]) == ("Q4_1",)


def test_missing_quant_lists_what_the_repo_has() -> None:
    with pytest.raises(UserError, match=r"no GGUF file for quant 'Q3_K_S'; available quants: FP16, Q4_K_M, Q8_0"):
        hub.pick_quant_files(QWEN_SPLIT, "Q3_K_S", repo_id="Qwen/Qwen2.5-7B-Instruct-GGUF")


def test_ambiguous_quant_names_the_candidates() -> None:
    files = ["m-Q4_K_M.gguf", "m-UD-Q4_K_M.gguf"]
    with pytest.raises(UserError, match=r"ambiguous .* m-Q4_K_M.gguf, m-UD-Q4_K_M.gguf; name the file"):
        hub.pick_quant_files(files, "Q4_K_M", repo_id="o/r")
    assert hub.pick_quant_files(files, "UD-Q4_K_M", repo_id="o/r").first == "m-UD-Q4_K_M.gguf"


def test_incomplete_split_and_empty_repo_are_errors() -> None:
    with pytest.raises(UserError, match=r"lacks shard\(s\) 2 of 3"):
        hub.pick_quant_files(["m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"], "Q8_0", repo_id="o/r")
    with pytest.raises(UserError, match="no GGUF model files"):
        hub.pick_quant_files(["README.md", "mmproj-F16.gguf"], None, repo_id="o/r")
    with pytest.raises(UserError, match="several GGUF models; name one"):
        hub.pick_quant_files(["m-Q2_K.gguf", "m-Q3_K_S.gguf"], None, repo_id="o/r")


# --------------------------------------------------------------------------- against the fake hub


def test_quant_pick_downloads_only_the_named_file(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    model = resolve_model(f"{REPO}:q2_k", progress=False)
    assert [p.name for p in model.paths] == ["SmolLM2-135M-Instruct-Q2_K.gguf"]
    assert model.sha256 == (sha256_of(hub_files.tiny),)
    assert model.path.read_bytes() == hub_files.tiny.read_bytes()
    assert fake_hub.downloads() == ["SmolLM2-135M-Instruct-Q2_K.gguf"]
    assert model.path.is_relative_to(cache_root())  # the standard Hugging Face cache


def test_split_model_fetches_every_shard_and_loads_in_llama_cpp(fake_hub: HubServer, hub_files: HubFiles) -> None:
    import llama_cpp

    from ggufspec.llama.lib import high_level_repack

    serve_quants(fake_hub, hub_files)
    model = resolve_model(f"{REPO}:Q8_0", progress=False)
    assert [p.name for p in model.paths] == [p.name for p in hub_files.shards]
    assert len({p.parent for p in model.paths}) == 1  # side by side, as llama.cpp looks for them
    assert model.sha256 == tuple(sha256_of(p) for p in hub_files.shards)

    # Naming any shard stands for the whole model, first shard first.
    second = f"{REPO}/Q8_0/{hub_files.shards[1].name}"
    assert resolve_model(second, progress=False).paths == model.paths

    # logits_all: without it llama-cpp-python 0.3.36's eval stores no logits, and `scores` is an
    # uninitialized array (zeros in a fresh process, old data in a used one: a flaky comparison)
    with high_level_repack():  # no AMX repacking where llama.cpp's AMX matmul crashes, as ggufspec loads
        split = llama_cpp.Llama(model_path=str(model.path), n_ctx=64, logits_all=True, verbose=False)
        whole = llama_cpp.Llama(model_path=str(hub_files.smollm2), n_ctx=64, logits_all=True, verbose=False)
    tokens = split.tokenize(b"The capital of France is")
    assert tokens == whole.tokenize(b"The capital of France is")
    split.eval(tokens)
    whole.eval(tokens)
    last = np.asarray(whole.scores[len(tokens) - 1])
    assert np.abs(last).max() > 1.0  # real logits, not an unwritten array
    np.testing.assert_array_equal(np.asarray(split.scores[: len(tokens)]), np.asarray(whole.scores[: len(tokens)]))


def test_connection_dropped_mid_file_is_resumed_with_a_range_request(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    name = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
    fake_hub.drop_once.add(name)
    model = resolve_model(f"{REPO}:Q4_K_M", progress=False)
    ranges = fake_hub.ranges(name)
    assert len(ranges) == 2 and ranges[0] == ""
    resumed_at = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at < hub_files.smollm2.stat().st_size
    assert model.sha256 == (sha256_of(hub_files.smollm2),)
    assert not list(cache_root().rglob("*.incomplete"))


def test_corrupted_download_is_deleted_never_handed_back(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    name = "SmolLM2-135M-Instruct-Q2_K.gguf"
    fake_hub.corrupt.add(name)  # same length, one byte flipped: huggingface_hub's size check passes
    with pytest.raises(UserError, match=r"is corrupted: sha256 .* the file was removed"):
        resolve_model(f"{REPO}:Q2_K", progress=False)
    assert blobs(cache_root()) == []
    assert not list(cache_root().rglob(name))
    assert resolve_model(f"{REPO}:Q2_K", progress=False).sha256 == (sha256_of(hub_files.tiny),)  # next try is clean


def test_short_download_leaves_nothing(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    fake_hub.truncate.add("SmolLM2-135M-Instruct-Q2_K.gguf")  # body shorter than X-Linked-Size
    with pytest.raises(UserError, match="was incomplete .* nothing partial was kept"):
        resolve_model(f"{REPO}:Q2_K", progress=False)
    assert blobs(cache_root()) == []
    assert not list(cache_root().rglob("*.incomplete"))


def test_verify_rehashes_cached_files(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    model = resolve_model(f"{REPO}:Q2_K", progress=False)
    blob = model.path.resolve()
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF  # bit rot in the cache, same size
    blob.write_bytes(bytes(data))
    assert resolve_model(f"{REPO}:Q2_K", progress=False).sha256 == (None,)  # cached: size check only
    with pytest.raises(UserError, match="is corrupted"):
        resolve_model(f"{REPO}:Q2_K", progress=False, verify=True)
    assert not blob.exists()


def test_404_for_a_quant_lists_the_available_ones(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    with pytest.raises(UserError, match=r"no GGUF file for quant 'Q5_K_M'; available quants: IQ4_XS, Q2_K, Q4_K_M, Q4_K_S, Q8_0$"):
        resolve_model(f"{REPO}:Q5_K_M", progress=False)
    with pytest.raises(UserError, match=r"nope\.gguf is not in .*; its GGUF files: .*Q2_K\.gguf"):
        resolve_model(f"{REPO}/nope.gguf", progress=False)
    assert fake_hub.downloads() == []


def test_404_repo_and_revision(fake_hub: HubServer, hub_files: HubFiles) -> None:
    serve_quants(fake_hub, hub_files)
    with pytest.raises(UserError, match=r"repo acme/nothing-here not found on http://127\.0\.0\.1:\d+ \(404\); "
                                        r"check the name; a private repo needs HF_TOKEN"):
        resolve_model("acme/nothing-here:Q4_K_M", progress=False)
    with pytest.raises(UserError, match=r"revision 'v9' not found in acme/"):
        resolve_model(f"{REPO}:Q4_K_M@v9", progress=False)


def test_401_gated_repo_then_hf_token(fake_hub: HubServer, hub_files: HubFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_hub.add_repo("acme/gated-GGUF", {"m-Q8_0.gguf": hub_files.tiny}, gated=True)
    with pytest.raises(UserError, match=r"acme/gated-GGUF is gated: accept its terms at http://127\.0\.0\.1:\d+/acme/gated-GGUF, then set HF_TOKEN"):
        resolve_model("acme/gated-GGUF:Q8_0", progress=False)
    assert blobs(cache_root()) == []

    monkeypatch.setenv("HF_TOKEN", "hf_no_access")  # authenticated, not granted: 403
    with pytest.raises(UserError, match="HF_TOKEN has not been granted access"):
        resolve_model("acme/gated-GGUF:Q8_0", progress=False)

    monkeypatch.setenv("HF_TOKEN", "hf_typo")
    with pytest.raises(UserError, match=r"rejected HF_TOKEN \(401 invalid credentials\)"):
        resolve_model("acme/gated-GGUF:Q8_0", progress=False)

    monkeypatch.setenv("HF_TOKEN", "hf_valid")
    fake_hub.requests.clear()
    model = resolve_model("acme/gated-GGUF:Q8_0", progress=False)
    assert model.sha256 == (sha256_of(hub_files.tiny),)
    hub_auth = {r.headers.get("authorization") for r in fake_hub.requests if r.server == "hub"}
    cdn_auth = {r.headers.get("authorization") for r in fake_hub.requests if r.server == "cdn"}
    assert hub_auth == {"Bearer hf_valid"} and cdn_auth == {None}  # the token never leaves the Hub


def test_revision_selects_the_commit(fake_hub: HubServer, hub_files: HubFiles) -> None:
    old = fake_hub.add_repo("acme/rev-GGUF", {"m-Q8_0.gguf": hub_files.tiny2}, revision="v1")
    fake_hub.add_repo("acme/rev-GGUF", {"m-Q8_0.gguf": hub_files.tiny}, revision="main")
    assert resolve_model("acme/rev-GGUF:Q8_0", progress=False).sha256 == (sha256_of(hub_files.tiny),)
    at_v1 = resolve_model("acme/rev-GGUF:Q8_0@v1", progress=False)
    assert at_v1.sha256 == (sha256_of(hub_files.tiny2),)
    assert old in at_v1.path.parts  # snapshots/<commit>/...
    assert resolve_model(f"acme/rev-GGUF/m-Q8_0.gguf@{old}", progress=False).paths == at_v1.paths


def test_offline_mode_uses_the_cache_with_the_server_down(
    fake_hub: HubServer, hub_files: HubFiles, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    serve_quants(fake_hub, hub_files)
    online = resolve_model(f"{REPO}:Q8_0", progress=False)
    fake_hub.stop()

    offline = resolve_model(f"{REPO}:Q8_0", offline=True, progress=False)
    assert offline.paths == online.paths
    assert resolve_model(f"{REPO}/Q8_0/{hub_files.shards[0].name}", offline=True, progress=False).paths == online.paths

    with caplog.at_level(logging.WARNING, logger="ggufspec.hub"):  # no flag: falls back to the cache
        assert resolve_model(f"{REPO}:Q8_0", progress=False).paths == online.paths
    assert "cannot be reached" in caplog.text

    with pytest.raises(UserError, match=r"cannot reach the Hugging Face Hub .* \(ConnectError\) and acme/never-fetched@main is not in the cache"):
        resolve_model("acme/never-fetched:Q8_0", progress=False)
    with pytest.raises(UserError, match=r"no GGUF file for quant 'Q4_K_M'; available quants: Q8_0 \(listing the local cache only"):
        resolve_model(f"{REPO}:Q4_K_M", offline=True, progress=False)  # only what the cache holds

    go_offline(monkeypatch)  # HF_HUB_OFFLINE=1
    assert resolve_model(f"{REPO}:Q8_0", progress=False).paths == online.paths
    with pytest.raises(UserError, match=r"not in the Hugging Face cache .* offline mode is on"):
        resolve_model("acme/never-fetched:Q8_0", progress=False)


def test_unreachable_hub_with_nothing_cached(fake_hub: HubServer) -> None:
    fake_hub.stop()
    with pytest.raises(UserError, match=r"cannot reach the Hugging Face Hub at http://127\.0\.0\.1:\d+ \(ConnectError\) and acme/anything@main is not in the cache"):
        resolve_model("acme/anything:Q4_K_M", progress=False)


def test_fetch_checks_names_before_touching_the_cache(fake_hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # the public API refuses what the reference parser refuses, before any path is built from it
    read: list[Path] = []
    real_read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self) or real_read_text(self, *a, **k))
    with pytest.raises(UserError, match=r"^bad revision '\.\./\.\./x': .*branch, tag or commit"):
        hub.fetch("acme/repo", revision="../../x", offline=True)
    with pytest.raises(UserError, match=r"^bad repo name 'acme/\.\./x'"):
        hub.fetch("acme/../x", offline=True)
    with pytest.raises(UserError, match=r"^bad repo name 'acme'"):
        hub.list_repo("acme", offline=True)
    assert [p for p in read if "models--" in str(p)] == []  # no refs file was read


def test_a_cached_ref_that_holds_no_commit_hash_is_ignored(fake_hub: HubServer) -> None:
    storage = cache_root() / "models--acme--repo"
    (storage / "refs").mkdir(parents=True)
    (storage / "snapshots").mkdir()
    (storage / "refs" / "main").write_text("../../../elsewhere")  # snapshots/../../../elsewhere
    elsewhere = (storage / "snapshots" / "../../../elsewhere").resolve()
    elsewhere.mkdir()
    (elsewhere / "m-Q8_0.gguf").write_bytes(b"GGUF")
    with pytest.raises(UserError, match=r"acme/repo@main is not in the Hugging Face cache"):
        hub.list_repo("acme/repo", offline=True)
