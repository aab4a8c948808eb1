"""Sessions on disk (ggufspec.session): a pair's caches saved after a generation and loaded into a
new process continue the conversation exactly as the uninterrupted run, decoding only the new
suffix; a file for another model, context size or cache type, a truncated, corrupt or foreign
file is refused with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggufspec.errors import UserError
from ggufspec.loop.drafters import common_prefix
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings
from ggufspec.runtime import SpeculativePair, load_pair
from ggufspec.session import MAGIC, SessionInfo, fingerprint, read_session
from ggufspec.settings import ContextSettings, PairSettings

ROOT = Path(__file__).resolve().parents[1]
SPEC = SpeculativeSettings(length=DraftLengthSettings(draft_max=4, always_draft=True))
TURN1 = [{"role": "user", "content": "Hi! Can you tell me a joke about cats?"}]


def _open(target: Path, draft: Path | str | None, *, n_ctx: int = 512, cache: str = "auto") -> SpeculativePair:
    return load_pair(target=str(target), draft=str(draft) if draft else "none", settings=PairSettings(
        context=ContextSettings(n_ctx=n_ctx, n_threads=1, cache_type_k=cache, cache_type_v=cache)))  # type: ignore[arg-type]


def turn2(text: str) -> list[dict]:
    return [*TURN1, {"role": "assistant", "content": text}, {"role": "user", "content": "And one about dogs?"}]


@pytest.fixture(scope="module")
def saved(tiny_target_q8, tiny_draft_q8, tmp_path_factory) -> dict:
    """Turn 1, saved; then turn 2 uninterrupted (the reference a resumed run must equal)."""
    path = tmp_path_factory.mktemp("sessions") / "chat.session"
    with _open(tiny_target_q8, tiny_draft_q8) as pair:
        first = pair.generate(messages=TURN1, max_tokens=24, speculative=SPEC).run()
        pair.save_session(path, meta={"messages": TURN1, "reply": first.text})
        saved_tokens = pair.target_ctx.tokens
        draft_tokens = pair.drafters[0].ctx.tokens  # type: ignore[union-attr]
        prompt2 = pair.encode(messages=turn2(first.text))
        second = pair.generate(prompt_tokens=prompt2, max_tokens=24, speculative=SPEC).run()
    return dict(path=path, text=first.text, prompt1=first.stats.prompt_tokens, tokens=saved_tokens, draft_tokens=draft_tokens, prompt2=prompt2,
                second=second.tokens, target=tiny_target_q8, draft=tiny_draft_q8)


def test_a_session_resumes_in_a_new_process_exactly(saved) -> None:
    script = f"""
import json, sys
from ggufspec import load_pair, PairSettings, ContextSettings, SpeculativeSettings, DraftLengthSettings
settings = PairSettings(context=ContextSettings(n_ctx=512, n_threads=1))
with load_pair(target={str(saved['target'])!r}, draft={str(saved['draft'])!r}, settings=settings) as pair:
    info = pair.load_session({str(saved['path'])!r})
    draft_tokens = list(pair.drafters[0].ctx.tokens)
    spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=4, always_draft=True))
    gen = pair.generate(prompt_tokens={saved['prompt2']!r}, max_tokens=24, speculative=spec).run()
    print(json.dumps(dict(info_tokens=list(info.tokens), meta=info.meta, tokens=gen.tokens,
                          cached=gen.stats.cached_tokens, draft_tokens=draft_tokens)))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["info_tokens"] == list(saved["tokens"]) and len(saved["tokens"]) > 10
    assert out["meta"] == {"messages": TURN1, "reply": saved["text"]}
    assert out["draft_tokens"] == list(saved["draft_tokens"])  # the draft's cache came back too
    assert out["tokens"] == saved["second"]  # as if the process had never stopped
    assert out["cached"] == min(common_prefix(saved["tokens"], saved["prompt2"]), len(saved["prompt2"]) - 1)
    assert out["cached"] > saved["prompt1"]  # turn 1's prompt and part of its reply


def test_load_session_returns_the_tokens_and_keeps_a_lookup_pair_working(saved) -> None:
    with _open(saved["target"], "lookup") as pair:  # no draft model: the saved draft cache is unused
        info = pair.load_session(saved["path"])
        assert isinstance(info, SessionInfo) and info.tokens == saved["tokens"]
        assert pair.target_ctx.tokens == saved["tokens"]
        gen = pair.generate(prompt_tokens=saved["prompt2"], max_tokens=24, drafters=()).run()
    assert gen.tokens == saved["second"]


def one_line_error(pair: SpeculativePair, path: Path, match: str) -> str:
    with pytest.raises(UserError, match=match) as exc:
        pair.load_session(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_another_model_is_refused(saved) -> None:
    assert fingerprint(saved["target"]) != fingerprint(saved["draft"])
    with _open(saved["draft"], None) as pair:  # same vocabulary, same size, other weights
        one_line_error(pair, saved["path"], "belongs to another target model")
        assert pair.target_ctx.tokens == ()


def test_another_context_size_is_refused(saved) -> None:
    with _open(saved["target"], saved["draft"], n_ctx=256) as pair:
        assert "--ctx 512" in one_line_error(pair, saved["path"], "context of 512 tokens, this pair has 256")


def test_another_cache_type_is_refused(saved) -> None:
    with _open(saved["target"], saved["draft"]) as pair:
        saved_type = pair.target_ctx.settings.cache_type_k
    other = "f32" if saved_type != "f32" else "f16"
    with _open(saved["target"], saved["draft"], cache=other) as pair:
        one_line_error(pair, saved["path"], f"saved with a {saved_type} KV cache, this pair's is {other}")


def test_truncated_corrupt_and_foreign_files_are_refused(saved, tmp_path: Path) -> None:
    data = saved["path"].read_bytes()
    cases = {
        "half.session": (data[: len(data) // 2], "is truncated"),
        "header.session": (data[: len(MAGIC) + 20], "is truncated"),
        "magic.session": (data[:5], "is truncated"),
        "flipped.session": (data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:], "is corrupt"),
        "longer.session": (data + b"\0", "is corrupt"),
        "model.session": (saved["target"].read_bytes()[:4096], "not a ggufspec session file"),
        "text.session": (b"hello, world\n", "not a ggufspec session file"),
        "empty.session": (b"", "is truncated"),
    }
    with _open(saved["target"], saved["draft"]) as pair:
        for name, (blob, match) in cases.items():
            path = tmp_path / name
            path.write_bytes(blob)
            one_line_error(pair, path, match)
        one_line_error(pair, tmp_path / "missing.session", "no session file")
        # a refused load changes nothing the next generation relies on
        gen = pair.generate(prompt_tokens=saved["prompt2"], max_tokens=24, speculative=SPEC).run()
    assert gen.tokens == saved["second"]


def _crafted(saved_path: Path, dst: Path, edit) -> Path:
    """The saved session with its header edited by `edit(header)` and the blobs kept: every checksum
    still matches (what an attacker or a hand edit makes)."""
    data = saved_path.read_bytes()
    n = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    header = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + n])
    edit(header)
    text = json.dumps(header).encode()
    dst.write_bytes(MAGIC + len(text).to_bytes(8, "little") + text + data[len(MAGIC) + 8 + n:])
    return dst


CRAFTED = {  # issue 42: valid checksums, a field of the wrong type
    "meta string": (lambda h: h.update(meta="x"), "meta is not an object"),
    "tokens number": (lambda h: h["caches"][0].update(tokens=5), "caches[0].tokens is not a list of token ids"),
    "tokens strings": (lambda h: h["caches"][0].update(tokens=["abc"]), "caches[0].tokens is not a list"),
    "tokens booleans": (lambda h: h["caches"][0].update(tokens=[True]), "caches[0].tokens is not a list"),
    "draft tokens": (lambda h: h["caches"][1].update(tokens=[-1]), "caches[1].tokens is not a list"),
    "n_ctx string": (lambda h: h["caches"][0].update(n_ctx="512"), "caches[0].n_ctx is not a whole number"),
    "bytes string": (lambda h: h["caches"][0].update(bytes=str(h["caches"][0]["bytes"])), "caches[0].bytes"),
    "caches object": (lambda h: h.update(caches={"role": "target"}), "caches is not a list"),
    "cache string": (lambda h: h["caches"].__setitem__(1, "x"), "caches[1] is not an object"),
    "role missing": (lambda h: h["caches"][0].pop("role"), "caches[0].role is not a string"),
    "header list": (lambda h: (h.clear(), h.update(version=1)), "caches is not a list"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_crafted_headers_are_refused_field_by_field(saved, tmp_path: Path, case: str) -> None:
    edit, words = CRAFTED[case]
    path = _crafted(saved["path"], tmp_path / "crafted.session", edit)
    with _open(saved["target"], saved["draft"]) as pair:
        msg = one_line_error(pair, path, "is corrupt")
    assert words in msg and msg.endswith("save the session again"), msg


def test_a_crafted_session_is_one_error_line_in_chat(saved, tmp_path: Path) -> None:
    """`chat --session` on such a file gave a TypeError traceback and exit 1."""
    path = _crafted(saved["path"], tmp_path / "crafted.session", CRAFTED["tokens number"][0])
    r = subprocess.run([sys.executable, "-m", "ggufspec.cli", "chat", "--target", str(saved["target"]), "--draft",
                        str(saved["draft"]), "--threads", "1", "--ctx", "512", "--session", str(path)],
                       input="", capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: session file {path} is corrupt (header: caches[0]")
    assert "Traceback" not in r.stderr


def test_saving_is_atomic_and_meta_must_be_json(saved, tmp_path: Path) -> None:
    path = tmp_path / "s.session"
    with _open(saved["target"], None) as pair:
        pair.generate(prompt="Hello", max_tokens=4).run()
        pair.save_session(path, meta={"n": 1})
        before = path.read_bytes()
        with pytest.raises(UserError, match="session meta must be plain JSON"):
            pair.save_session(path, meta={"x": object()})
        assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.session"]
        with pytest.raises(UserError, match="does not exist"):
            pair.save_session(tmp_path / "no" / "s.session")
        header, blobs = read_session(path)
    assert header["meta"] == {"n": 1} and [c["role"] for c in header["caches"]] == ["target"] and len(blobs) == 1
