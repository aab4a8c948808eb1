"""The OpenAI-compatible server as its users meet it: a real `ggufspec serve` process on 127.0.0.1,
the official `openai` client for the happy paths, raw HTTP (httpx) for the error cases.

Greedy output through the server (speculative, tiny Q8_0 target + noised Q8_0 draft) must equal the
target alone run in-process on the same file: Q8_0 logits are batch-invariant on CPU, so greedy
speculative decoding is token-identical to plain decoding (conftest.py, tiny_target_q8). It must
also equal llama-cpp-python's own `Llama` on that file (its own greedy loop, tokenizer, detokenizer
and chat template), so a bug in code the server shares with ggufspec's reference cannot cancel out.

Queue and disconnect tests run the app in-process with a hook on its one call that starts a
generation (`ggufspec.server.adapter.start_generation`): a gate that holds the generation between
tokens, so nothing depends on how fast this host decodes.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

import llama_cpp  # noqa: E402
import web_serve  # noqa: E402

from ggufspec.ggufinfo import read_model_info  # noqa: E402
from ggufspec.llama.lib import high_level_repack  # noqa: E402
from ggufspec.loop.exactness import auto_cache_type  # noqa: E402
from ggufspec.loop.speculation import SpeculativeSettings  # noqa: E402
from ggufspec.models.resolve import PairRefs  # noqa: E402
from ggufspec.runtime import load_pair  # noqa: E402
from ggufspec.server import adapter, create_app, open_pair  # noqa: E402
from ggufspec.settings import ContextSettings, PairSettings  # noqa: E402

API_KEY = "sk-test-ggufspec"
N_CTX = 4096
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None and httpx.get(f"{self.url}/health", timeout=5).status_code == 200


def _start(target: Path, draft: Path, log: Path) -> Server:
    """Start `ggufspec serve` on a free port; bounded wait for the port line and /health."""
    served = web_serve.start(
        ["--target", str(target), "--draft", str(draft), "--threads", "1", "--ctx", str(N_CTX), "--queue", "1",
         "--api-key", API_KEY,
         # the tiny pair's draft costs what its target does, so the controller would run the target
         # alone; these tests check the draft path itself (one test below lets the controller choose)
         "--always-draft"], log=log, timeout_s=60)
    return Server(served.proc, served.url, served.log)


@pytest.fixture(scope="module")
def server(tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path_factory: pytest.TempPathFactory):
    srv = _start(tiny_target_q8, tiny_draft_q8, tmp_path_factory.mktemp("server") / "server.log")
    yield srv
    srv.proc.terminate()
    try:
        rc = srv.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        pytest.fail("the server did not stop within 15 s of SIGTERM")
    # uvicorn shuts down gracefully, then re-raises the signal it caught (exit status -SIGTERM)
    assert rc in (0, -signal.SIGTERM), srv.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def client(server: Server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def reference(tiny_target_q8: Path):
    """The target alone, in-process, on the same file: what greedy output must be."""
    pair = load_pair(target=tiny_target_q8, draft="none",
                     settings=PairSettings(context=ContextSettings(n_ctx=N_CTX, n_threads=1)))

    def run(*, prompt=None, messages=None, max_tokens: int, stop=()):
        tokens = pair.encode(prompt=prompt, messages=messages)
        gen = pair.generate(prompt_tokens=tokens, max_tokens=max_tokens, stop=list(stop), drafters=()).run()
        return gen.text, gen.stats

    yield run
    pair.close()


@pytest.fixture(scope="module")
def plain_llama(tiny_target_q8: Path):
    """llama-cpp-python's `Llama` on the same file, with the KV cache type and flash attention the
    server's target uses (exactness.auto_cache_type), so its logits are the target's."""
    cache = {"q8_0": llama_cpp.GGML_TYPE_Q8_0, "f16": llama_cpp.GGML_TYPE_F16}[auto_cache_type(read_model_info(tiny_target_q8), on_gpu=False)]
    with high_level_repack():  # no AMX repacking where llama.cpp's AMX matmul crashes, as ggufspec loads
        llm = llama_cpp.Llama(model_path=str(tiny_target_q8), n_ctx=N_CTX, n_threads=1, n_gpu_layers=0,
                              type_k=cache, type_v=cache, flash_attn=True, verbose=False)
    yield llm
    llm.close()


def _llama_greedy(llm, prompt: str, max_tokens: int) -> tuple[list[int], str]:
    """Llama's own token loop at temperature 0 (greedy sampler): tokens up to an end-of-generation
    token, and their text decoded at once, invalid UTF-8 as U+FFFD (ggufspec's choice; Llama's
    create_completion drops such bytes: PROMPTS[1] makes one)."""
    tokens: list[int] = []
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    for t in llm.generate(llm.tokenize(prompt.encode(), add_bos=True, special=False), temp=0.0, repeat_penalty=1.0):
        if llama_cpp.llama_vocab_is_eog(vocab, t) or len(tokens) == max_tokens:
            break
        tokens.append(t)
    return tokens, llm.detokenize(tokens).decode("utf-8", errors="replace")


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=AUTH, timeout=10).text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


PROMPTS = ["Once upon a time", "def quicksort(xs):", "The capital of France is"]
CHATS = [
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}],
]


# ---- the happy paths, through the official client ------------------------------------------------


def test_models_health_and_metrics(server: Server, client) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny_target.Q8_0"]
    assert client.models.retrieve("tiny_target.Q8_0").id == "tiny_target.Q8_0"
    health = httpx.get(f"{server.url}/health", timeout=5)  # open without the key
    assert health.status_code == 200 and health.json()["status"] == "ok"
    metrics = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=5)
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in ("ggufspec_accept_rate", "ggufspec_queue_depth", "ggufspec_busy", "ggufspec_drafted_tokens_total",
                 "ggufspec_accepted_tokens_total", "ggufspec_time_to_first_token_seconds_bucket"):
        assert re.search(rf"^{name}", metrics.text, re.M), name


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_greedy_equals_target_alone(client, reference, prompt: str) -> None:
    want, stats = reference(prompt=prompt, max_tokens=40)
    resp = client.completions.create(model="any", prompt=prompt, max_tokens=40, temperature=0)
    assert resp.choices[0].text == want
    assert resp.choices[0].finish_reason == ("length" if stats.stop_reason == "length" else "stop")
    assert resp.usage.completion_tokens == stats.generated_tokens
    assert resp.usage.prompt_tokens == stats.prompt_tokens
    spec = resp.model_extra["speculative"]
    assert spec["draft"] == "tiny_draft.Q8_0.gguf"
    assert spec["drafted"] > 0 and 0 <= spec["accepted"] <= spec["drafted"]
    assert set(spec) >= {"accept_rate", "mean_accepted_len", "gen_tps"}


def test_controlled_request_pauses_a_draft_that_does_not_pay(client, reference) -> None:
    # always_draft false: the controller measures the tiny draft (as slow as its target) and runs
    # the target alone but for a few short tries (none once earlier requests measured it: a draft
    # that cannot pay even fully accepted is retried every 128 rounds); the output is the target's
    want, _ = reference(prompt=PROMPTS[0], max_tokens=48)
    resp = client.completions.create(
        model="any", prompt=PROMPTS[0], max_tokens=48, temperature=0, extra_body={"always_draft": False}
    )
    assert resp.choices[0].text == want
    spec = resp.model_extra["speculative"]
    assert spec["paused_rounds"] > 0
    assert spec["drafted"] <= 3 * 4  # at most a few short tries
    # where the rounds went, as `--json` reports them
    assert sum(spec["drafter_rounds"].values()) == sum(spec["k_hist"].values()) >= spec["drafter_rounds"].get("none", 0) > 0
    assert spec["drafted"] == sum(int(k) * n for k, n in spec["k_hist"].items())


def test_completion_stream_equals_target_alone(client, reference) -> None:
    want, stats = reference(prompt=PROMPTS[0], max_tokens=48)
    texts, usage = [], None
    for chunk in client.completions.create(
        model="any", prompt=PROMPTS[0], max_tokens=48, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ):
        texts.extend(c.text for c in chunk.choices)
        usage = chunk.usage or usage
    assert "".join(texts) == want
    assert usage.completion_tokens == stats.generated_tokens


@pytest.mark.parametrize("messages", CHATS)
def test_chat_greedy_equals_target_alone(client, reference, messages) -> None:
    want, stats = reference(messages=messages, max_tokens=32)
    resp = client.chat.completions.create(model="any", messages=messages, max_tokens=32, temperature=0)
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == want
    assert resp.usage.prompt_tokens == stats.prompt_tokens
    assert resp.model_extra["speculative"]["drafted"] > 0


def test_chat_stream_equals_target_alone(client, reference) -> None:
    want, stats = reference(messages=CHATS[1], max_tokens=32)
    deltas, finish = [], None
    for chunk in client.chat.completions.create(
        model="any", messages=CHATS[1], max_tokens=32, temperature=0, stream=True,
    ):
        for c in chunk.choices:
            deltas.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(deltas) == want
    assert finish == ("length" if stats.stop_reason == "length" else "stop")


def test_stop_strings_reach_the_engine(client, reference) -> None:
    full, _ = reference(prompt=PROMPTS[1], max_tokens=40)
    stop = full.split()[len(full.split()) // 2]  # a word from the middle of the greedy text
    want, stats = reference(prompt=PROMPTS[1], max_tokens=40, stop=[stop])
    resp = client.completions.create(model="any", prompt=PROMPTS[1], max_tokens=40, temperature=0, stop=[stop])
    assert resp.choices[0].text == want and stop not in want
    assert stats.stop_reason == "stop" and resp.choices[0].finish_reason == "stop"


def test_seeded_sampling_repeats_and_speculative_fields_apply(client) -> None:
    kw = dict(model="any", prompt=PROMPTS[2], max_tokens=24, temperature=0.9, top_p=0.95, seed=7)
    a = client.completions.create(**kw, extra_body={"accept": "rejection", "draft_max": 3, "top_k": 50})
    b = client.completions.create(**kw, extra_body={"accept": "rejection", "draft_max": 3, "top_k": 50})
    assert a.choices[0].text == b.choices[0].text
    c = client.completions.create(**kw, extra_body={"accept": "match", "draft_max": 2})
    assert c.usage.completion_tokens == 24


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_greedy_equals_plain_llama(client, plain_llama, prompt: str) -> None:
    tokens, want = _llama_greedy(plain_llama, prompt, 40)
    resp = client.completions.create(model="any", prompt=prompt, max_tokens=40, temperature=0)
    assert resp.choices[0].text == want
    assert resp.usage.completion_tokens == len(tokens)
    assert resp.usage.prompt_tokens == len(plain_llama.tokenize(prompt.encode(), add_bos=True, special=False))


def test_completion_equals_llama_create_completion(client, plain_llama) -> None:
    # the public path of llama-cpp-python (its create_completion drops invalid UTF-8 bytes, which
    # this prompt's 40 greedy tokens do not produce)
    want = plain_llama.create_completion(PROMPTS[0], max_tokens=40, temperature=0.0, repeat_penalty=1.0)
    resp = client.completions.create(model="any", prompt=PROMPTS[0], max_tokens=40, temperature=0)
    assert resp.choices[0].text == want["choices"][0]["text"]
    assert resp.choices[0].finish_reason == want["choices"][0]["finish_reason"]
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (
        want["usage"]["prompt_tokens"], want["usage"]["completion_tokens"])


@pytest.mark.parametrize("messages", CHATS)
def test_chat_greedy_equals_llama_create_chat_completion(client, plain_llama, messages) -> None:
    # Llama renders the GGUF's chat template with its own Jinja formatter
    want = plain_llama.create_chat_completion(messages=messages, max_tokens=32, temperature=0.0, repeat_penalty=1.0)
    resp = client.chat.completions.create(model="any", messages=messages, max_tokens=32, temperature=0)
    assert resp.choices[0].message.content == want["choices"][0]["message"]["content"]
    assert resp.choices[0].finish_reason == want["choices"][0]["finish_reason"]
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (
        want["usage"]["prompt_tokens"], want["usage"]["completion_tokens"])


def _stream(client, chat: bool, **kw) -> list:
    common = dict(model="any", max_tokens=12, temperature=0, stream=True, **kw)
    if chat:
        return list(client.chat.completions.create(messages=CHATS[0], **common))
    return list(client.completions.create(prompt=PROMPTS[0], **common))


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_stream_usage_only_when_asked_once_at_the_end(client, chat: bool) -> None:
    """OpenAI's rule: no usage in a stream unless stream_options.include_usage; with it, one last
    chunk with no choices carries it (and ggufspec's speculative block)."""
    plain = _stream(client, chat)
    assert plain and all(c.usage is None and c.choices for c in plain)
    assert not any("speculative" in (c.model_extra or {}) for c in plain)

    with_usage = _stream(client, chat, stream_options={"include_usage": True})
    *body, last = with_usage
    assert all(c.usage is None and c.choices for c in body)
    assert last.choices == [] and last.usage is not None
    assert last.model_extra["speculative"]["drafted"] > 0

    create = client.chat.completions.create if chat else client.completions.create
    whole = create(model="any", max_tokens=12, temperature=0,
                   **({"messages": CHATS[0]} if chat else {"prompt": PROMPTS[0]}))
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens


def _sse_chunks(url: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{url}{path}", json=body, headers=AUTH, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def test_raw_sse_ends_with_done(server: Server) -> None:
    body = {"messages": CHATS[0], "max_tokens": 8, "temperature": 0, "stream": True}
    chunks = _sse_chunks(server.url, "/v1/chat/completions", body)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert not any("usage" in c or "speculative" in c for c in chunks)  # the key is absent, as OpenAI's

    chunks = _sse_chunks(server.url, "/v1/completions", {**body, "prompt": PROMPTS[0], "stream_options": {"include_usage": True}})
    assert all(c["usage"] is None for c in chunks[:-1])  # present and null, as OpenAI's
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
    assert chunks[-1]["object"] == "text_completion" and "speculative" in chunks[-1]


# ---- errors, through raw HTTP ------------------------------------------------------------------

C, CHAT = "/v1/completions", "/v1/chat/completions"
BAD = [
    # (id, path, raw body, expected param, expected code)
    ("malformed-json", C, b'{"prompt": "x",', None, "invalid_json"),
    ("not-an-object", C, b"[1, 2]", None, "invalid_json"),
    ("nan", C, b'{"prompt": "x", "temperature": NaN}', None, "invalid_json"),
    ("missing-prompt", C, {"max_tokens": 3}, "prompt", "missing_required_parameter"),
    ("max-tokens-string", C, {"prompt": "x", "max_tokens": "10"}, "max_tokens", "invalid_type"),
    ("prompt-number", C, {"prompt": 5}, "prompt", "invalid_type"),
    ("stream-string", C, {"prompt": "x", "stream": "yes"}, "stream", "invalid_type"),
    ("stop-mixed", C, {"prompt": "x", "stop": ["a", 1]}, "stop", "invalid_type"),
    ("messages-string", CHAT, {"messages": "hi"}, "messages", "invalid_type"),
    ("content-number", CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages", "invalid_type"),
    ("messages-empty", CHAT, {"messages": []}, "messages", "invalid_value"),
    ("temperature-high", C, {"prompt": "x", "temperature": 2.5}, "temperature", "invalid_value"),
    ("top-p-zero", C, {"prompt": "x", "top_p": 0}, "top_p", "invalid_value"),
    ("min-p-one", C, {"prompt": "x", "min_p": 1.0}, "min_p", "invalid_value"),
    ("top-k-negative", C, {"prompt": "x", "top_k": -1}, "top_k", "invalid_value"),
    ("max-tokens-zero", C, {"prompt": "x", "max_tokens": 0}, "max_tokens", "invalid_value"),
    ("seed-negative", C, {"prompt": "x", "seed": -1}, "seed", "invalid_value"),
    ("draft-max-zero", C, {"prompt": "x", "draft_max": 0}, "draft_max", "invalid_value"),
    ("draft-max-huge", C, {"prompt": "x", "draft_max": 100000}, "draft_max", "invalid_value"),
    ("accept-unknown", C, {"prompt": "x", "accept": "sometimes"}, "accept", "invalid_value"),
    ("accept-greedy-sampling", C, {"prompt": "x", "accept": "greedy", "temperature": 0.5}, "accept", "invalid_value"),
    ("n-3", C, {"prompt": "x", "n": 3}, "n", "invalid_value"),
    ("chat-n-2", CHAT, {"messages": CHATS[0], "n": 2}, "n", "invalid_value"),
    ("token-out-of-vocab", C, {"prompt": [1, 10**9]}, "prompt", "invalid_value"),
    ("two-prompts", C, {"prompt": ["a", "b"]}, "prompt", "invalid_value"),
    ("empty-prompt", C, {"prompt": ""}, "prompt", "invalid_value"),
    ("image-part", CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages", "invalid_value"),
    ("prompt-over-context", C, {"prompt": "hello " * (N_CTX + 100)}, "prompt", "context_length_exceeded"),
    ("chat-over-context", CHAT, {"messages": [{"role": "user", "content": "hello " * (N_CTX + 100)}]}, "messages", "context_length_exceeded"),
    ("oversize-body", C, {"prompt": "x" * (2 << 20)}, None, "request_too_large"),
    ("role-bogus", CHAT, {"messages": [{"role": "bogus", "content": "hi"}]}, "messages", "invalid_value"),
    ("role-tool", CHAT, {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}]}, "messages", "invalid_value"),
    ("role-missing", CHAT, {"messages": [{"content": "hi"}]}, "messages", "missing_required_parameter"),
    ("json-object", CHAT, {"messages": CHATS[0], "response_format": {"type": "json_object"}}, "response_format", "invalid_value"),
    ("json-schema", CHAT, {"messages": CHATS[0], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "invalid_value"),
    ("completion-json-object", C, {"prompt": "x", "response_format": {"type": "json_object"}}, "response_format", "invalid_value"),
    ("response-format-string", CHAT, {"messages": CHATS[0], "response_format": "json"}, "response_format", "invalid_type"),
    # issue 42: 1,000 levels (2 KB) were a 500 (RecursionError) and reset the connection
    ("nested-1000", CHAT, b'{"messages": [], "tools": ' + b"[" * 1000 + b"]" * 1000 + b"}", None, "invalid_json"),
    ("nested-100", C, b'{"prompt": "x", "logit_bias": ' + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}", None, "invalid_json"),
    ("nested-array-body", C, b"[" * 5000 + b"]" * 5000, None, "invalid_json"),
]


@pytest.mark.parametrize("path,body,param,code", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_requests_get_openai_shaped_400(server: Server, path, body, param, code) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{server.url}{path}", content=raw, headers={**AUTH, "Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"]
    assert err["type"] == "invalid_request_error"
    assert (err["param"], err["code"]) == (param, code)
    if b"[[[[" in raw or b'{"a":{"a":' in raw:
        assert err["message"] == "the request body nests deeper than 64 levels"


def test_unknown_role_and_json_modes_are_named(server: Server, client) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="any", messages=[{"role": "bogus", "content": "hi"}], max_tokens=2)
    assert "messages[0].role 'bogus' is not supported" in exc.value.body["message"]
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="any", messages=CHATS[0], max_tokens=2, response_format={"type": "json_object"})
    assert "response_format 'json_object' is not supported" in exc.value.body["message"]


def test_developer_role_is_the_system_role_and_text_format_is_plain(client) -> None:
    system = client.chat.completions.create(model="any", messages=CHATS[1], max_tokens=8, temperature=0)
    developer = client.chat.completions.create(
        model="any", messages=[{**CHATS[1][0], "role": "developer"}, CHATS[1][1]], max_tokens=8, temperature=0,
        response_format={"type": "text"},
    )
    assert developer.choices[0].message.content == system.choices[0].message.content
    assert developer.usage.prompt_tokens == system.usage.prompt_tokens


def test_the_server_survives_bad_requests(server: Server, client) -> None:
    for _, path, body, _, _ in BAD[:6]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        httpx.post(f"{server.url}{path}", content=raw, headers=AUTH, timeout=30)
    assert server.alive()
    r = httpx.post(f"{server.url}{C}", json={"prompt": "x", "max_tokens": 2, "foo": {"bar": [1]}, "user": "u"},
                   headers=AUTH, timeout=30)
    assert r.status_code == 200  # unknown fields are ignored
    assert client.completions.create(model="any", prompt="ok", max_tokens=2).usage.completion_tokens == 2
    r = httpx.get(f"{server.url}/no/such/route", headers=AUTH, timeout=5)
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_api_key_required(server: Server) -> None:
    body = {"prompt": "x", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
        r = httpx.post(f"{server.url}{C}", json=body, headers=headers, timeout=10)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{server.url}/v1/models", timeout=10).status_code == 401
    assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="any", prompt="x", max_tokens=2)


# ---- load and faults: in-process, with a gate on the generation ------------------------------------


def _wait_until(predicate, timeout: float = 60.0) -> None:
    web_serve.wait_until(predicate, timeout, poll_s=0.01)


class Gate:
    """Installed as the server's `adapter.start_generation`: while the gate is shut, a generation
    stops before each token after its first and waits for the gate to open."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    @contextlib.contextmanager
    def shut(self):
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()

    def start_generation(self, real, pair, request):
        gen, gate, emitted = real(pair, request), self._open, [0]

        class Held:
            stats = property(lambda _: gen.stats)
            close = gen.close

            def __iter__(self):
                return self

            def __next__(self):
                if emitted[0]:  # the first token passes; each later one waits for the gate
                    gate.wait()
                emitted[0] += 1
                return next(gen)

        return Held()


@dataclass
class Gated:
    url: str
    gate: Gate

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()

    def metric(self, name: str) -> float:
        return _metric(self.url, name)


@pytest.fixture(scope="module")
def gated(tiny_target_q8: Path, tiny_draft_q8: Path):
    """The app in this process (uvicorn on a thread, 127.0.0.1), --queue 1, behind a `Gate`."""
    gate = Gate()
    real = adapter.start_generation
    with pytest.MonkeyPatch.context() as mp, open_pair(
        refs=PairRefs(target=str(tiny_target_q8), drafts=(str(tiny_draft_q8),)),
        settings=PairSettings(context=ContextSettings(n_ctx=N_CTX, n_threads=1), offline=True),
    ) as pair:
        mp.setattr(adapter, "start_generation", lambda pair, request: gate.start_generation(real, pair, request))
        app = create_app(pair=pair, model_name="gated", api_key=API_KEY, queue_size=1,
                         speculative=SpeculativeSettings.from_options(always_draft=True))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        _wait_until(lambda: server.started or not thread.is_alive())
        assert server.started
        try:
            yield Gated(f"http://127.0.0.1:{sock.getsockname()[1]}", gate)
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()
        assert not thread.is_alive()


def _raw_post(url: str, path: str, body: dict) -> socket.socket:
    """Send a request on a plain socket; closing the socket is the client going away."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
    )
    return sock


CANCELLED = 'ggufspec_generations_total{stop_reason="cancelled"}'
GENERATED = "ggufspec_generated_tokens_total"


def _gone(endpoint: str) -> str:
    return f'ggufspec_requests_total{{endpoint="{endpoint}",outcome="cancelled"}}'


def test_full_queue_gets_429_with_retry_after(gated: Gated) -> None:
    """--queue 1: one generation runs, one request waits, the next is refused at once; a waiting
    client that leaves gives its place up."""
    long = {"messages": CHATS[0], "max_tokens": 2000, "temperature": 0, "stream": True}
    short = {"prompt": "x", "max_tokens": 2}
    results: dict[str, httpx.Response] = {}

    def post(name: str) -> None:
        results[name] = httpx.post(f"{gated.url}{C}", json=short, headers=AUTH, timeout=60)

    with gated.gate.shut():
        with httpx.Client(timeout=60, headers=AUTH) as c1, c1.stream("POST", f"{gated.url}{CHAT}", json=long) as running:
            assert running.status_code == 200
            lines = running.iter_lines()  # keep it: a dropped iterator closes the connection
            next(lines)  # the role chunk
            _wait_until(lambda: gated.health()["busy"])  # generating, held by the gate
            leaver = _raw_post(gated.url, C, short)
            _wait_until(lambda: gated.health()["queue_depth"] == 1)
            r = httpx.post(f"{gated.url}{C}", json=short, headers=AUTH, timeout=10)
            assert r.status_code == 429
            assert int(r.headers["Retry-After"]) >= 1
            assert r.json()["error"]["code"] == "queue_full" and r.json()["error"]["type"] == "rate_limit_error"
            leaver.close()  # it gives up while waiting
            _wait_until(lambda: gated.health()["queue_depth"] == 0)
            waiter = threading.Thread(target=post, args=("waiter",))
            waiter.start()
            _wait_until(lambda: gated.health()["queue_depth"] == 1)  # accepted into the freed place
            assert gated.health()["busy"] and "waiter" not in results
        # leaving the `with` closed the long stream: its generation stops, the waiting request runs
    waiter.join(60)
    assert results["waiter"].status_code == 200
    assert results["waiter"].json()["usage"]["completion_tokens"] == 2
    _wait_until(lambda: not gated.health()["busy"])


KILLED_CLIENT = """
import sys, httpx
url, key = sys.argv[1], sys.argv[2]
body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000, "temperature": 0, "stream": True}
with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer " + key}, timeout=60) as r:
    for line in r.iter_lines():
        print("streaming", flush=True)
"""


def test_killed_client_frees_the_pair_within_a_step(gated: Gated, tmp_path: Path) -> None:
    """A streaming client killed mid-generation: its generation ends at the next token."""
    cancelled0, generated0, gone0 = gated.metric(CANCELLED), gated.metric(GENERATED), gated.metric(_gone(CHAT))
    script = tmp_path / "client.py"
    script.write_text(KILLED_CLIENT)
    with gated.gate.shut():
        proc = subprocess.Popen([sys.executable, str(script), gated.url, API_KEY], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "streaming"
            _wait_until(lambda: gated.health()["busy"])  # its first token is out; the gate holds the second
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
        _wait_until(lambda: gated.metric(_gone(CHAT)) > gone0)  # the server saw the client go
    # the gate is open: without the cancel the generation would go on for 2000 tokens
    _wait_until(lambda: gated.metric(CANCELLED) > cancelled0)
    assert gated.metric(GENERATED) - generated0 <= 2, "the killed generation went on past one more token"
    _wait_until(lambda: not gated.health()["busy"])
    r = httpx.post(f"{gated.url}{C}", json={"prompt": "Hello", "max_tokens": 2}, headers=AUTH, timeout=60)
    assert r.status_code == 200


def test_a_client_gone_while_sending_its_body_is_no_error(gated: Gated, caplog: pytest.LogCaptureFixture) -> None:
    """A client that closes the connection halfway through its body left a ClientDisconnect
    traceback and counted as an error in /metrics (issue 42): now it counts as cancelled."""
    errors, gone0 = f'ggufspec_requests_total{{endpoint="{C}",outcome="error"}}', gated.metric(_gone(C))
    errors0 = gated.metric(errors)
    host, port = gated.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST {C} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {API_KEY}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\": \"x".encode())
        time.sleep(0.2)  # the server is reading the body
    _wait_until(lambda: gated.metric(_gone(C)) > gone0)
    assert gated.metric(errors) == errors0
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert httpx.post(f"{gated.url}{C}", json={"prompt": "x", "max_tokens": 2}, headers=AUTH, timeout=60).status_code == 200


def test_disconnected_plain_request_is_cancelled(gated: Gated) -> None:
    """A non-streaming client that gives up stops its generation too."""
    cancelled0, generated0, gone0 = gated.metric(CANCELLED), gated.metric(GENERATED), gated.metric(_gone(C))
    with gated.gate.shut():
        sock = _raw_post(gated.url, C, {"prompt": PROMPTS[0], "max_tokens": 2000, "temperature": 0})
        _wait_until(lambda: gated.health()["busy"])
        sock.close()
        _wait_until(lambda: gated.metric(_gone(C)) > gone0)
    _wait_until(lambda: gated.metric(CANCELLED) > cancelled0)
    assert gated.metric(GENERATED) - generated0 <= 2
    _wait_until(lambda: not gated.health()["busy"])
