"""The chat page's server side through a real `ggufspec serve` on the embedded default pair:
the stream extension (each token's provenance, opt-in; plain OpenAI clients see standard chunks),
a request's choice of drafters and draft length (the CLI's limits and messages), and the page's
files and config (the config behind the API key)."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from web_serve import API_KEY, AUTH  # noqa: E402

pytestmark = pytest.mark.slow
CHAT = "/v1/chat/completions"
# a reply that copies its prompt: prompt lookup has something to propose
COPY = [{"role": "user", "content": "Repeat exactly, nothing else: the quick brown fox jumps over the lazy dog, "
                                    "the quick brown fox jumps over the lazy dog."}]
TOKEN_KEYS = {"text", "by", "source", "drafter", "round", "drafted"}


def _stream(url: str, body: dict) -> list[dict]:
    chunks = []
    with httpx.stream("POST", f"{url}{CHAT}", json={**body, "stream": True}, headers=AUTH, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def _text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_the_extension_marks_every_token_and_only_when_asked(web_server) -> None:
    body = {"messages": COPY, "temperature": 0, "max_tokens": 40,
            "stream_options": {"include_usage": True, "include_speculative": True}}
    marked = _stream(web_server.url, body)
    tokens = [t for c in marked if c["choices"] for t in c.get("speculative", {}).get("tokens", [])]
    final = marked[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == len(tokens)
    assert all(set(t) == TOKEN_KEYS and t["by"] in ("target", "draft", "lookup") for t in tokens)
    assert "".join(t["text"] for t in tokens) == _text(marked)
    # every content chunk carries its tokens; the usage chunk has the stats block, not tokens
    assert all("tokens" in c["speculative"] for c in marked if c["choices"] and c["choices"][0]["delta"].get("content"))
    # rounds: the drafts a round kept are at most what it drafted, and they add up to the stats
    rounds: dict[int, list[dict]] = {}
    for t in tokens:
        rounds.setdefault(t["round"], []).append(t)
    kept = {r: sum(t["by"] != "target" for t in ts) for r, ts in rounds.items()}
    assert all(kept[r] <= ts[0]["drafted"] and {t["drafted"] for t in ts} == {ts[0]["drafted"]} for r, ts in rounds.items())
    spec = final["speculative"]
    assert sum(ts[0]["drafted"] for r, ts in rounds.items() if r > 0) == spec["drafted"]
    # every round's kept drafts are shown, but the last round's past the end (eog, stop, length)
    last = max(rounds)
    assert 0 < sum(kept.values()) <= spec["accepted"] <= sum(kept.values()) + rounds[last][0]["drafted"]

    # the same request without the option, and through OpenAI's own client: standard chunks only
    plain = _stream(web_server.url, {**body, "stream_options": {"include_usage": True}})
    assert not any("tokens" in c.get("speculative", {}) for c in plain) and _text(plain) == _text(marked)
    with openai.OpenAI(base_url=f"{web_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300) as client:
        stream = client.chat.completions.create(model="any", messages=COPY, temperature=0, max_tokens=40, stream=True)
        chunks = [c.model_dump() for c in stream]
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks if c["choices"]) == _text(marked)
    assert chunks and not any("speculative" in c for c in chunks)  # model_dump keeps fields it does not know


def test_a_request_chooses_its_drafters_and_draft_length(web_server) -> None:
    url = web_server.url
    config = httpx.get(f"{url}/web/config", headers=AUTH, timeout=30).json()
    files = [d["file"] for d in config["drafters"]]
    assert files[-1] == "lookup" and len(files) == 2 and config["slots"] == 2
    base = {"messages": COPY, "temperature": 0, "max_tokens": 32, "stream_options": {"include_usage": True, "include_speculative": True}}

    alone = _stream(url, {**base, "draft": "none"})
    assert alone[-1]["speculative"]["draft"] == "none" and alone[-1]["speculative"]["drafted"] == 0
    tokens = [t for c in alone if c["choices"] for t in c.get("speculative", {}).get("tokens", [])]
    assert {t["by"] for t in tokens} == {"target"}

    lookup = _stream(url, {**base, "draft": ["lookup"], "fixed": True, "draft_max": 3})
    spec = lookup[-1]["speculative"]
    assert spec["draft"] == "lookup" and set(spec["drafter_rounds"]) <= {"lookup", "none"}
    assert max(int(k) for k in spec["k_hist"]) <= 3 and spec["accepted"] > 0
    by = {t["by"] for c in lookup if c["choices"] for t in c.get("speculative", {}).get("tokens", [])}
    assert "lookup" in by and "draft" not in by
    assert _text(lookup) == _text(alone)  # greedy: the drafters change the speed, not the text

    model = _stream(url, {**base, "draft": files[0], "draft_max": 2, "fixed": True})
    assert model[-1]["speculative"]["draft"] == files[0] and _text(model) == _text(alone)
    assert set(model[-1]["speculative"]["drafter_rounds"]) <= {config["drafters"][0]["name"], "none"}


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"draft_max": 65}, "draft_max", "draft-max must be in [1, 64], got 65"),  # the CLI's message (--draft-max 65)
    ({"draft_max": 0}, "draft_max", "draft-max must be in [1, 64], got 0"),
    ({"draft_max": 2, "draft_min": 3}, "draft_min", "draft-min must be in [0, draft-max=2], got 3"),
    ({"draft": "other.gguf"}, "draft", "draft 'other.gguf' is not loaded on this server"),
    ({"draft": ["none", "lookup"]}, "draft", "cannot be combined"),
    ({"draft": ["lookup", "lookup"]}, "draft", "two drafters are named 'lookup'"),
    ({"draft": 3}, "draft", "'draft' must be"),
    ({"fixed": "yes"}, "fixed", "invalid 'fixed'"),
])
def test_drafting_fields_out_of_bounds_are_400(web_server, extra, param, words) -> None:
    r = httpx.post(f"{web_server.url}{CHAT}", json={"messages": COPY, "max_tokens": 1, **extra}, headers=AUTH, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_the_page_and_its_files_are_served_and_the_config_needs_the_key(web_server) -> None:
    url = web_server.url
    page = httpx.get(f"{url}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script type="module" src="/web/chat.js">' in page.text and "http" not in page.text.replace("http-equiv", "")
    for name, kind in [("chat.js", "text/javascript"), ("stream.js", "text/javascript"), ("chat.css", "text/css")]:
        r = httpx.get(f"{url}/web/{name}", timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind) and "https://" not in r.text
    for bad in ("/web/nothing.js", "/web/..%2F__init__.py", "/web/%2E%2E%2Fpage.py"):
        assert httpx.get(f"{url}{bad}", timeout=30).status_code == 404, bad
    assert httpx.get(f"{url}/web/config", timeout=30).status_code == 401
    assert httpx.get(f"{url}/web/config", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    config = httpx.get(f"{url}/web/config", headers=AUTH, timeout=30).json()
    assert config["draft_max_limit"] == 64 and config["draft_max"] >= 1 and config["context_length"] == 2048


@pytest.fixture(scope="module")
def one_slot(tiny_target_q8, tiny_draft_q8, tmp_path_factory):
    """`serve --parallel 1` (the pair's own drafters, not a slot's) on the tiny Q8_0 pair."""
    from test_server import _start

    server = _start(tiny_target_q8, tiny_draft_q8, tmp_path_factory.mktemp("one-slot") / "server.log")
    yield server
    server.proc.terminate()
    server.proc.wait(timeout=20)


def test_one_slot_runs_the_drafters_a_request_names(one_slot) -> None:
    from test_server import AUTH as TINY_AUTH

    def ask(**extra) -> dict:
        body = {"messages": COPY, "temperature": 0, "max_tokens": 24, **extra}
        r = httpx.post(f"{one_slot.url}{CHAT}", json=body, headers=TINY_AUTH, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    default, alone = ask(), ask(draft="none")
    named = ask(draft="tiny_draft.Q8_0.gguf", draft_max=2, fixed=True)
    assert default["speculative"]["drafted"] > 0 and alone["speculative"]["drafted"] == 0
    assert alone["speculative"]["draft"] == "none" and named["speculative"]["draft"] == "tiny_draft.Q8_0.gguf"
    assert set(named["speculative"]["k_hist"]) <= {"0", "1", "2"} and named["speculative"]["drafted"] > 0
    texts = {r["choices"][0]["message"]["content"] for r in (default, alone, named)}
    assert len(texts) == 1  # greedy: the same text whoever drafts
    r = httpx.post(f"{one_slot.url}{CHAT}", json={"messages": COPY, "draft": "lookup"}, headers=TINY_AUTH, timeout=60)
    assert r.status_code == 400 and "it has: tiny_draft.Q8_0.gguf" in r.json()["error"]["message"]
