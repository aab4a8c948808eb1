"""The server's prompt cache, as a client meets it: a real `ggufspec serve` process, the official
`openai` client.

The pair's KV caches are the server's one slot: a request decodes only what its prompt does not
share with the previous one. A conversation's turns 2 and 3 must report cached prompt tokens
(`usage.prompt_tokens_details.cached_tokens`, OpenAI's field; also on a stream's usage chunk), and
their greedy text must equal both the same request with `cache_prompt: false` (llama.cpp's name:
decode the whole prompt afresh) and the target alone in-process. The Prometheus counter of reused
prompt tokens adds up what the responses reported.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from ggufspec.runtime import load_pair  # noqa: E402
from ggufspec.settings import ContextSettings, PairSettings  # noqa: E402
from test_server import API_KEY, AUTH, N_CTX, _metric, _start  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a helpful assistant who answers in full sentences."}
TURNS = [
    "Tell me a story about a lighthouse keeper and a storm.",
    "What happened to the keeper's cat during the storm?",
    "Now give the story a happy ending, please.",
]
N_NEW = 24


@pytest.fixture(scope="module")
def server(tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path_factory: pytest.TempPathFactory):
    srv = _start(tiny_target_q8, tiny_draft_q8, tmp_path_factory.mktemp("server-cache") / "server.log")
    yield srv
    srv.proc.terminate()
    try:
        srv.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        srv.proc.kill()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def alone(tiny_target_q8: Path):
    """The target alone in-process, every prompt decoded cold: what greedy text must be."""
    pair = load_pair(target=tiny_target_q8, draft="none",
                     settings=PairSettings(context=ContextSettings(n_ctx=N_CTX, n_threads=1)))

    def run(messages: list[dict]) -> str:
        tokens = pair.encode(messages=messages)
        return pair.generate(prompt_tokens=tokens, max_tokens=N_NEW, drafters=(), cache_prompt=False).run().text

    yield run
    pair.close()


def _ask(client, messages: list[dict], **extra):
    resp = client.chat.completions.create(model="any", messages=messages, max_tokens=N_NEW, temperature=0,
                                          extra_body=extra or None)
    return resp.choices[0].message.content, resp.usage


def test_a_conversation_reuses_its_prefix_and_keeps_greedy_output(server, client, alone) -> None:
    cached_before = _metric(server.url, "ggufspec_prompt_cached_tokens_total")
    messages = [SYSTEM]
    replies, usages = [], []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        text, usage = _ask(client, messages)
        replies.append(text)
        usages.append(usage)
        messages.append({"role": "assistant", "content": text})
    # turns 2 and 3 re-read nothing of the history they share with the previous request
    first, *later = usages
    for prev, usage in zip(usages, later):
        cached = usage.prompt_tokens_details.cached_tokens
        assert cached > 0.8 * prev.prompt_tokens, (cached, prev.prompt_tokens)
        assert cached < usage.prompt_tokens  # at least the new user message is decoded
    counted = _metric(server.url, "ggufspec_prompt_cached_tokens_total") - cached_before
    assert counted == sum(u.prompt_tokens_details.cached_tokens for u in usages)

    # the same requests decoded afresh (cache_prompt false), and the target alone: the same text
    for i, want in enumerate(replies):
        history = messages[: 2 + 2 * i]  # system, then user/assistant pairs up to turn i's user message
        fresh, usage = _ask(client, history, cache_prompt=False)
        assert usage.prompt_tokens_details.cached_tokens == 0
        assert fresh == want == alone(history), f"turn {i + 1}"


def test_the_stream_usage_chunk_reports_cached_tokens(client) -> None:
    messages = [SYSTEM, {"role": "user", "content": TURNS[0]}]
    _ask(client, messages)  # leaves this prompt in the cache
    messages += [{"role": "assistant", "content": "It was a dark night."}, {"role": "user", "content": TURNS[1]}]
    chunks = list(client.chat.completions.create(
        model="any", messages=messages, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert 0 < usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens


def test_cache_prompt_must_be_a_boolean(server) -> None:
    body = {"messages": [SYSTEM], "max_tokens": 2, "cache_prompt": "no"}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "cache_prompt"
