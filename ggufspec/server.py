"""OpenAI-compatible HTTP server over one loaded target/draft pair (DESIGN.md, Server).

    app = create_app(pair=load_pair(...), model_name="smollm2")
    uvicorn.run(app, host="127.0.0.1", port=8080)

Endpoints: POST /v1/completions, POST /v1/chat/completions (``stream: true`` as server-sent events
ending in ``data: [DONE]``), GET /v1/models, GET /health, GET /metrics (Prometheus text).
Responses carry OpenAI's ``usage`` and a ``speculative`` block (drafted, accepted, accept_rate,
mean_accepted_len, gen_tps, draft).

Concurrency: llama.cpp contexts are not thread-safe, so ONE worker thread runs every generation,
fed by a bounded queue; a request that finds the queue full gets 429 with Retry-After. Steps go
from the worker to the event loop through ``loop.call_soon_threadsafe``; a client that goes away
sets its job's cancel flag, which the worker checks after every emitted token (so the pair is free
again within one decode step) and which makes a job still waiting in the queue be skipped.

Every error has OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``; a failing
request never takes the server down.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ggufspec.acceptance import AcceptRule
from ggufspec.drafters import DraftLengthSettings
from ggufspec.engine import SpeculativeSettings
from ggufspec.errors import UserError
from ggufspec.runtime import SpeculativePair
from ggufspec.sampling import SamplingSettings
from ggufspec.stats import RunStats

log = logging.getLogger("ggufspec.server")

DEFAULT_QUEUE_SIZE = 8
#: Request bodies above this are refused. 1 MiB holds ~250k tokens of English text, far beyond
#: any context these models have; a larger body is a mistake or an attack.
MAX_BODY_BYTES = 1 << 20
#: Most tokens one request may draft per round (the verify batch is draft_max + 1 rows).
MAX_DRAFT = 64
MAX_STOP = 16


# ---- errors ------------------------------------------------------------------------------------


class APIError(Exception):
    """An error response in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class _ClientGone(Exception):
    """The client disconnected before its (non-streaming) response was ready."""


def _route(request: Request) -> str:
    """The matched route's template (bounded label cardinality), not the raw path."""
    return getattr(request.scope.get("route"), "path", "unmatched")


def _shutting_down() -> APIError:
    return APIError(503, "the server is shutting down", type="server_error", code="unavailable")


def _outcome(status: int) -> str:
    return {400: "invalid", 401: "unauthorized", 404: "not_found", 429: "rejected"}.get(
        status, "error" if status >= 500 else "invalid"
    )


# ---- request bodies ----------------------------------------------------------------------------


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class _Params(BaseModel):
    """Fields both endpoints share. Unknown fields are ignored; known ones are type-checked strictly."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, lt=1.0)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    user: str | None = None
    # speculative decoding (ggufspec's own fields)
    draft_max: int | None = Field(default=None, ge=1, le=MAX_DRAFT)
    always_draft: bool | None = None  # None: the server's default (serve --always-draft)
    accept: Literal["greedy", "rejection", "match"] | None = None
    # OpenAI fields this server does not implement: accepted only at their neutral value
    best_of: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None


class _CompletionBody(_Params):
    prompt: str | list[str] | list[int]
    echo: bool | None = False
    suffix: str | None = None


class _ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: str
    text: str | None = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: str
    content: str | list[_ContentPart] | None = None


class _ChatBody(_Params):
    messages: list[_Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


_EXPECTED = {  # readable names for union-typed fields (pydantic reports each union arm)
    "stop": "a string or a list of strings",
    "prompt": "a string, a list of one string, or a list of token ids",
}


def _validation_error(exc: ValidationError) -> APIError:
    err = exc.errors()[0]
    # pydantic names union arms in the location ("stop", "list[str]", 1): keep the field path only
    loc = [p for p in err["loc"] if isinstance(p, int) or ("[" not in p and p not in ("str", "int", "float", "bool"))]
    param = str(loc[0]) if loc else None
    path = ".".join(str(p) for p in loc) or "body"
    kind = err["type"]
    if kind == "missing":
        return APIError(400, f"missing required parameter '{path}'", param=param, code="missing_required_parameter")
    if param in _EXPECTED and len(loc) <= 2 and kind.endswith("_type"):
        msg = f"'{param}' must be {_EXPECTED[param]}"
    else:
        msg = f"invalid '{path}': {err['msg']}"
        if "input" in err and not isinstance(err["input"], (dict, list)):
            msg += f", got {json.dumps(err['input'])[:80]}"
    code = "invalid_type" if kind.endswith("_type") else "invalid_value"
    return APIError(400, msg, param=param, code=code)


def _unsupported(body: _Params) -> None:
    """Refuse OpenAI options we would otherwise silently ignore."""
    if body.n not in (None, 1):
        raise APIError(400, f"n={body.n} is not supported: this server returns one choice per request", param="n", code="invalid_value")
    if body.best_of not in (None, 1):
        raise APIError(400, "best_of is not supported; use 1", param="best_of", code="invalid_value")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(body, name) not in (None, 0, 0.0):
            raise APIError(400, f"{name} is not supported; use 0", param=name, code="invalid_value")
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported", param="logit_bias", code="invalid_value")
    if body.logprobs not in (None, False, 0) or body.top_logprobs not in (None, 0):
        raise APIError(400, "logprobs are not supported", param="logprobs", code="invalid_value")
    if body.tools:
        raise APIError(400, "tools are not supported", param="tools", code="invalid_value")
    if isinstance(body.stop, list) and len(body.stop) > MAX_STOP:
        raise APIError(400, f"at most {MAX_STOP} stop strings, got {len(body.stop)}", param="stop", code="invalid_value")
    if isinstance(body, _CompletionBody):
        if body.echo:
            raise APIError(400, "echo is not supported", param="echo", code="invalid_value")
        if body.suffix:
            raise APIError(400, "suffix is not supported", param="suffix", code="invalid_value")


def _settings(body: _Params, *, always_draft: bool = False) -> tuple[SamplingSettings, SpeculativeSettings]:
    """Request fields -> engine settings (OpenAI's defaults: temperature 1, top_p 1)."""
    if body.accept == "greedy" and body.temperature != 0:
        raise APIError(400, "accept 'greedy' needs temperature 0; use 'rejection' or 'match' when sampling",
                       param="accept", code="invalid_value")
    try:
        sampling = SamplingSettings(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_k=body.top_k or 0,
            top_p=1.0 if body.top_p is None else body.top_p,
            min_p=body.min_p or 0.0,
            seed=body.seed,
        )
        draft_max = body.draft_max or DraftLengthSettings().draft_max
        speculative = SpeculativeSettings(
            accept=AcceptRule(body.accept) if body.accept else None,
            length=DraftLengthSettings(
                draft_max=draft_max, pace=not (always_draft if body.always_draft is None else body.always_draft)
            ),
        )
        speculative.rule_for(sampling)  # greedy acceptance with temperature > 0 is refused here
    except UserError as exc:
        raise APIError(400, str(exc), code="invalid_value") from None
    return sampling, speculative


def _stops(body: _Params) -> tuple[str, ...]:
    if body.stop is None:
        return ()
    return (body.stop,) if isinstance(body.stop, str) else tuple(body.stop)


async def _read_json(request: Request, limit: int) -> dict:
    """The request body as a JSON object, or a 400: too large, not JSON, not an object."""
    too_large = APIError(400, f"the request body is larger than the limit of {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            n = int(declared)
        except ValueError:
            raise APIError(400, "invalid Content-Length header", code="invalid_request") from None
        if n > 64 * limit:
            raise too_large  # far too big to be worth reading; the connection will be closed
    body = bytearray()
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > 64 * limit:
            break
        if received <= limit:
            body += chunk
        # else keep reading (and dropping): the client then gets the 400, not a connection reset
    if received > limit:
        raise too_large

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        data = json.loads(bytes(body), parse_constant=no_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    return data


# ---- the worker --------------------------------------------------------------------------------


@dataclass(eq=False)
class _Job:
    """One generation request, shared by the event loop (consumer) and the worker (producer)."""

    tokens: list[int]
    max_tokens: int
    sampling: SamplingSettings
    speculative: SpeculativeSettings
    stop: tuple[str, ...]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.perf_counter)

    def emit(self, kind: str, value: Any = None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is gone (shutdown): nobody is listening
            self.cancel.set()


class _Metrics:
    """Prometheus metrics in the app's own registry (several apps can live in one process)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("ggufspec_requests", "HTTP requests by endpoint and outcome", ["endpoint", "outcome"], registry=r)
        self.request_seconds = Histogram(
            "ggufspec_request_duration_seconds", "Request latency, arrival to last byte", ["endpoint"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.generations = Counter("ggufspec_generations", "Generations by stop reason", ["stop_reason"], registry=r)
        self.prompt_tokens = Counter("ggufspec_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generated_tokens = Counter("ggufspec_generated_tokens", "Tokens generated", registry=r)
        self.drafted = Counter("ggufspec_drafted_tokens", "Tokens proposed by the drafter", registry=r)
        self.accepted = Counter("ggufspec_accepted_tokens", "Drafted tokens the target accepted", registry=r)
        self.accept_rate = Gauge("ggufspec_accept_rate", "Accepted / drafted over all generations", registry=r)
        self.queue_depth = Gauge("ggufspec_queue_depth", "Requests waiting for the pair", registry=r)
        self.busy = Gauge("ggufspec_busy", "1 while a generation runs", registry=r)
        self.queue_wait = Histogram(
            "ggufspec_queue_wait_seconds", "Time from acceptance to the start of the generation", registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.ttft = Histogram(
            "ggufspec_time_to_first_token_seconds", "Time from acceptance to the first generated token", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.gen_tps = Histogram(
            "ggufspec_generation_tokens_per_second", "Generation speed of each request (after the first token)",
            registry=r, buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
        )
        self._lock = threading.Lock()
        self._drafted = self._accepted = 0
        self.accept_rate.set_function(self._rate)

    def _rate(self) -> float:
        with self._lock:
            return self._accepted / self._drafted if self._drafted else 0.0

    def record(self, stats: RunStats) -> None:
        self.generations.labels(stats.stop_reason).inc()
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.generated_tokens.inc(stats.generated_tokens)
        self.drafted.inc(stats.drafted)
        self.accepted.inc(stats.accepted)
        with self._lock:
            self._drafted += stats.drafted
            self._accepted += stats.accepted
        if stats.generated_tokens > 1 and stats.stop_reason != "cancelled":
            self.gen_tps.observe(stats.gen_tps)


class _Worker:
    """The one thread that touches the pair's llama.cpp contexts, and its bounded waiting line."""

    def __init__(self, pair: SpeculativePair, *, queue_size: int, metrics: _Metrics) -> None:
        self.pair = pair
        self.queue_size = queue_size
        self.metrics = metrics
        self._cond = threading.Condition()
        self._waiting: deque[_Job] = deque()
        self._current: _Job | None = None
        self._stopping = False
        self._mean_s = 1.0  # running mean of job durations, for Retry-After
        self._thread = threading.Thread(target=self._run, name="ggufspec-generate", daemon=True)
        metrics.queue_depth.set_function(self.depth)
        metrics.busy.set_function(lambda: 1.0 if self.busy else 0.0)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def busy(self) -> bool:
        return self._current is not None

    def depth(self) -> int:
        """Requests waiting whose clients are still there."""
        with self._cond:
            return sum(not j.cancel.is_set() for j in self._waiting)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stopping:
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Refuse new jobs, fail the waiting ones, cancel the running one, join the thread."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), deque()
            if self._current is not None:
                self._current.cancel.set()
            self._cond.notify_all()
        for job in waiting:
            job.cancel.set()
            job.emit("error", _shutting_down())
        if self._thread.is_alive():
            self._thread.join(timeout)

    def submit(self, job: _Job) -> None:
        """Queue a job, or raise 429 (queue full) / 503 (shutting down)."""
        with self._cond:
            if self._stopping or not self._thread.is_alive():
                raise _shutting_down()
            # Jobs whose clients left give their places up now, not when the worker reaches them.
            if any(j.cancel.is_set() for j in self._waiting):
                self._waiting = deque(j for j in self._waiting if not j.cancel.is_set())
            idle = self._current is None and not self._waiting
            if idle or len(self._waiting) < self.queue_size:
                self._waiting.append(job)
                self._cond.notify()
                return
            n = len(self._waiting)
        wait = max(1, math.ceil(self._mean_s * (n + 1)))
        raise APIError(
            429, f"the server is busy (one generation running, {n} waiting); retry in {wait} s",
            type="rate_limit_error", code="queue_full", headers={"Retry-After": str(wait)},
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = self._waiting.popleft()
                if job.cancel.is_set():  # the client left while waiting
                    continue
                self._current = job
            t0 = time.perf_counter()
            try:
                self._generate(job)
            except Exception as exc:  # never let one request kill the worker
                log.exception("generation failed")
                job.emit("error", APIError(500, f"generation failed: {type(exc).__name__}: {exc}",
                                           type="server_error", code="internal_error"))
            finally:
                with self._cond:
                    self._current = None
                self._mean_s = 0.8 * self._mean_s + 0.2 * (time.perf_counter() - t0)

    def _generate(self, job: _Job) -> None:
        started = time.perf_counter()
        self.metrics.queue_wait.observe(started - job.enqueued)
        try:
            gen = self.pair.generate(
                prompt_tokens=job.tokens, max_tokens=job.max_tokens, sampling=job.sampling,
                speculative=job.speculative, stop=job.stop,
            )
        except UserError as exc:
            job.emit("error", APIError(400, str(exc), code="invalid_value"))
            return
        first = True
        try:
            for step in gen:
                if first:
                    self.metrics.ttft.observe(time.perf_counter() - job.enqueued)
                    first = False
                if step.text:
                    job.emit("text", step.text)
                if job.cancel.is_set():
                    break  # the client is gone: free the pair now
        finally:
            gen.close()  # no-op when the generation ran to its end
        if gen.stats is not None:
            self.metrics.record(gen.stats)
        if self._stopping and job.cancel.is_set():
            job.emit("error", _shutting_down())
        else:
            job.emit("end", gen.stats)


# ---- responses ---------------------------------------------------------------------------------


def _finish_reason(stats: RunStats) -> str:
    return "stop" if stats.stop_reason in ("eog", "stop") else "length"


def _usage(stats: RunStats) -> dict:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
    }


def _speculative(stats: RunStats, draft: str) -> dict:
    return {
        "draft": draft,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "accept_rate": round(stats.accept_rate, 4),
        "mean_accepted_len": round(stats.mean_accepted_len, 4),
        "paused_rounds": stats.paused_rounds,
        "gen_tps": round(stats.gen_tps, 2),
    }


def _sse(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


class _JobStream(StreamingResponse):
    """A streaming response that cancels its job however the response ends (disconnect included)."""

    def __init__(self, content: AsyncIterator[str], job: _Job) -> None:
        super().__init__(
            content, media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self.job = job

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[override]
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel.set()
            # A disconnect cancels the response while the body generator may sit at a `yield`;
            # close it now so its cleanup (metrics) runs here, not whenever it is collected.
            try:
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            except RuntimeError:
                pass


# ---- the app -----------------------------------------------------------------------------------


def create_app(
    *,
    pair: SpeculativePair,
    model_name: str,
    api_key: str | None = None,
    queue_size: int = DEFAULT_QUEUE_SIZE,
    max_body_bytes: int = MAX_BODY_BYTES,
    always_draft: bool = False,
) -> FastAPI:
    """The OpenAI-compatible app around one loaded pair.

    Args:
        pair: the loaded target/draft pair; the app's worker thread is its only user.
        model_name: the id served by /v1/models (requests may name any model: there is one).
        api_key: when set, every endpoint but /health needs ``Authorization: Bearer <api_key>``.
        queue_size: requests that may wait while one generates; beyond that, 429.
        max_body_bytes: larger request bodies get 400.
        always_draft: draft every round even when the measured costs say the target alone is
            faster (a request's `always_draft` field overrides it).

    Returns:
        A FastAPI app; its worker thread starts with the app (lifespan) and stops with it.
    """
    if queue_size < 0:
        raise UserError(f"queue size must be >= 0, got {queue_size}")
    metrics = _Metrics()
    worker = _Worker(pair, queue_size=queue_size, metrics=metrics)
    n_ctx = pair.target_ctx.n_ctx
    n_vocab = pair.target_model.n_vocab
    created = int(time.time())
    draft_name = pair.draft_name if pair.draft_path is None else pair.draft_path.name

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        try:
            yield
        finally:
            await run_in_threadpool(worker.stop)

    app = FastAPI(title="ggufspec", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.worker, app.state.metrics, app.state.pair = worker, metrics, pair

    # -- errors in OpenAI's shape ----------------------------------------------------------------
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        metrics.requests.labels(_route(request), _outcome(exc.status)).inc()
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return APIError(exc.status_code, msg, code=code).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        metrics.requests.labels(_route(request), "error").inc()
        return APIError(500, f"internal error: {type(exc).__name__}", type="server_error", code="internal_error").response()

    def auth(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(
                401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"},
            )

    protected = [Depends(auth)]

    # -- plumbing shared by both generation endpoints ----------------------------------------------
    def check_tokens(tokens: list[int], param: str) -> None:
        if not tokens:
            raise APIError(400, f"the {param} is empty", param=param, code="invalid_value")
        if len(tokens) >= n_ctx:
            raise APIError(
                400, f"this model's context is {n_ctx} tokens, but the {param} is {len(tokens)} tokens; "
                "shorten it or restart the server with a larger --ctx",
                param=param, code="context_length_exceeded",
            )

    def submit(body: _Params, tokens: list[int], max_tokens: int) -> _Job:
        sampling, speculative = _settings(body, always_draft=always_draft)
        job = _Job(
            tokens=tokens, max_tokens=max_tokens, sampling=sampling, speculative=speculative,
            stop=_stops(body), loop=asyncio.get_running_loop(),
        )
        worker.submit(job)
        return job

    async def collect(request: Request, job: _Job) -> tuple[str, RunStats]:
        """Wait for a non-streaming job; cancel it if the client disconnects meanwhile."""

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(disconnected())
        parts: list[str] = []
        try:
            while True:
                getter = asyncio.ensure_future(job.events.get())
                done, _ = await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    raise _ClientGone()
                kind, value = getter.result()
                if kind == "text":
                    parts.append(value)
                elif kind == "error":
                    raise value
                else:
                    return "".join(parts), value
        finally:
            job.cancel.set()
            watcher.cancel()

    async def events(job: _Job) -> AsyncIterator[tuple[str, Any]]:
        """The job's events until its last ("end" or "error"), queued text events merged into one."""
        while True:
            kind, value = await job.events.get()
            if kind != "text":
                yield kind, value
                return
            parts, last = [value], None
            while last is None and not job.events.empty():
                k, v = job.events.get_nowait()
                if k == "text":
                    parts.append(v)
                else:
                    last = (k, v)
            yield "text", "".join(parts)
            if last is not None:
                yield last
                return

    async def stream(
        endpoint: str, job: _Job, chunk, *, include_usage: bool, first: dict | None, t0: float
    ) -> AsyncIterator[str]:
        outcome = "cancelled"
        try:
            if first is not None:
                yield _sse(first)
            async for kind, value in events(job):
                if kind == "text":
                    yield _sse(chunk(text=value))
                elif kind == "error":
                    outcome = _outcome(value.status)
                    yield _sse(value.body())
                elif value is not None:
                    stats: RunStats = value
                    final = chunk(finish_reason=_finish_reason(stats))
                    final["usage"] = _usage(stats)
                    final["speculative"] = _speculative(stats, draft_name)
                    yield _sse(final)
                    if include_usage:
                        tail = chunk()
                        tail["choices"] = []
                        tail["usage"], tail["speculative"] = final["usage"], final["speculative"]
                        yield _sse(tail)
                    outcome = "ok"
            yield _sse("[DONE]")
        finally:
            job.cancel.set()
            metrics.requests.labels(endpoint, outcome).inc()
            metrics.request_seconds.labels(endpoint).observe(time.perf_counter() - t0)

    def gone(endpoint: str) -> Response:
        metrics.requests.labels(endpoint, "cancelled").inc()
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    def parse(model: type[_Params], data: dict) -> Any:
        try:
            body = model.model_validate(data)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        _unsupported(body)
        return body

    # -- endpoints ----------------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> JSONResponse:
        ok = worker.alive
        return JSONResponse(
            {
                "status": "ok" if ok else "unavailable",
                "model": model_name,
                "busy": worker.busy,
                "queue_depth": worker.depth(),
                "queue_size": queue_size,
            },
            status_code=200 if ok else 503,
        )

    @app.get("/metrics", dependencies=protected)
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def model_card() -> dict:
        return {
            "id": model_name, "object": "model", "created": created, "owned_by": "ggufspec",
            "target": pair.target_path.name, "draft": draft_name, "context_length": n_ctx,
        }

    @app.get("/v1/models", dependencies=protected)
    async def models() -> dict:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}", dependencies=protected)
    async def model(model_id: str) -> dict:
        if model_id != model_name:
            raise APIError(404, f"the model '{model_id}' does not exist; this server serves '{model_name}'",
                           param="model", code="model_not_found")
        return model_card()

    @app.post("/v1/completions", dependencies=protected)
    async def completions(request: Request) -> Response:
        t0 = time.perf_counter()
        endpoint = "/v1/completions"
        body: _CompletionBody = parse(_CompletionBody, await _read_json(request, max_body_bytes))
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            tokens = list(prompt)  # token ids
            bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
            if bad is not None:
                raise APIError(400, f"token id {bad} is outside the vocabulary [0, {n_vocab})", param="prompt", code="invalid_value")
        else:
            if isinstance(prompt, list):
                if len(prompt) != 1:
                    raise APIError(400, f"one prompt per request, got {len(prompt)}", param="prompt", code="invalid_value")
                prompt = prompt[0]
            try:
                tokens = await run_in_threadpool(pair.encode, prompt=prompt)
            except UserError as exc:
                raise APIError(400, str(exc), param="prompt", code="invalid_value") from None
        check_tokens(tokens, "prompt")
        max_tokens = body.max_tokens or 16  # OpenAI's default for completions
        job = submit(body, tokens, max_tokens)
        cid, now = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())

        def chunk(text: str = "", finish_reason: str | None = None) -> dict:
            return {
                "id": cid, "object": "text_completion", "created": now, "model": model_name,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}],
            }

        if body.stream:
            opts = body.stream_options
            return _JobStream(
                stream(endpoint, job, chunk, include_usage=bool(opts and opts.include_usage), first=None, t0=t0), job
            )
        try:
            text, stats = await collect(request, job)
        except _ClientGone:
            return gone(endpoint)
        out = chunk(text, _finish_reason(stats))
        out["usage"], out["speculative"] = _usage(stats), _speculative(stats, draft_name)
        metrics.requests.labels(endpoint, "ok").inc()
        metrics.request_seconds.labels(endpoint).observe(time.perf_counter() - t0)
        return JSONResponse(out)

    @app.post("/v1/chat/completions", dependencies=protected)
    async def chat_completions(request: Request) -> Response:
        t0 = time.perf_counter()
        endpoint = "/v1/chat/completions"
        body: _ChatBody = parse(_ChatBody, await _read_json(request, max_body_bytes))
        messages = []
        for i, m in enumerate(body.messages):
            content = m.content
            if isinstance(content, list):
                texts = []
                for part in content:
                    if part.type != "text" or part.text is None:
                        raise APIError(400, f"messages[{i}]: only text content parts are supported, got '{part.type}'",
                                       param="messages", code="invalid_value")
                    texts.append(part.text)
                content = "\n".join(texts)
            messages.append({"role": m.role, "content": content or ""})
        try:
            tokens = await run_in_threadpool(pair.encode, messages=messages)
        except UserError as exc:
            raise APIError(400, str(exc), param="messages", code="invalid_value") from None
        check_tokens(tokens, "messages")
        max_tokens = body.max_completion_tokens or body.max_tokens or (n_ctx - len(tokens))
        job = submit(body, tokens, max_tokens)
        cid, now = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())

        if body.stream:

            def chunk(text: str | None = None, finish_reason: str | None = None) -> dict:
                delta = {} if text is None else {"content": text}
                return {
                    "id": cid, "object": "chat.completion.chunk", "created": now, "model": model_name,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
                }

            first = chunk()
            first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            opts = body.stream_options
            return _JobStream(
                stream(endpoint, job, chunk, include_usage=bool(opts and opts.include_usage), first=first, t0=t0), job
            )
        try:
            text, stats = await collect(request, job)
        except _ClientGone:
            return gone(endpoint)
        out = {
            "id": cid, "object": "chat.completion", "created": now, "model": model_name,
            "choices": [{
                "index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": _finish_reason(stats),
            }],
            "usage": _usage(stats),
            "speculative": _speculative(stats, draft_name),
        }
        metrics.requests.labels(endpoint, "ok").inc()
        metrics.request_seconds.labels(endpoint).observe(time.perf_counter() - t0)
        return JSONResponse(out)

    return app
