"""The FastAPI app: routes over one `ServerState` (the pair, its worker, metrics, settings).

Routes are plain functions that take the state as a dependency; `create_app` builds the state,
the worker's lifespan and the error handlers. Every error has OpenAI's shape; a failing request
never takes the server down.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ggufspec.errors import UserError
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.server import adapter, drafting, page, schemas
from ggufspec.server.delivery import ClientGone, JobStream, collect, sse_events
from ggufspec.server.error_bodies import APIError, invalid, outcome
from ggufspec.server.metrics import Metrics
from ggufspec.server.responses import Reply
from ggufspec.server.slots import SlotWorker
from ggufspec.server.worker import Job, Worker

log = logging.getLogger("ggufspec.server")

DEFAULT_QUEUE_SIZE = 8
#: Request bodies above this are refused. 1 MiB holds ~250k tokens of English text, far beyond
#: any context these models have; a larger body is a mistake or an attack.
MAX_BODY_BYTES = 1 << 20
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


@dataclass(frozen=True, kw_only=True)
class ServerState:
    """Everything a route needs, built once by `create_app` (``app.state.server``)."""

    pair: adapter.Pair
    info: adapter.PairInfo
    model_name: str
    api_key: str | None
    queue_size: int
    max_body_bytes: int
    speculative: SpeculativeSettings  # the server's (serve's flags); a request may change some (ggufspec.server.drafting)
    created: int
    worker: Worker | SlotWorker
    metrics: Metrics


def _state(request: Request) -> ServerState:
    return request.app.state.server


def _require_key(request: Request) -> None:
    api_key = _state(request).api_key
    if api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise APIError(
            401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
            code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"},
        )


open_routes = APIRouter()
routes = APIRouter(dependencies=[Depends(_require_key)])


# ---- errors in OpenAI's shape --------------------------------------------------------------------


def _route(request: Request) -> str:
    """The matched route's template (bounded label cardinality), not the raw path."""
    return getattr(request.scope.get("route"), "path", "unmatched")


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    _state(request).metrics.request_done(_route(request), outcome(exc.status))
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code).response()


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request failed")
    _state(request).metrics.request_done(_route(request), "error")
    return APIError(500, f"internal error: {type(exc).__name__}", type="server_error", code="internal_error").response()


# ---- endpoints -----------------------------------------------------------------------------------


@open_routes.get("/health")
async def health(st: ServerState = Depends(_state)) -> JSONResponse:
    ok = st.worker.alive
    return JSONResponse(
        {
            "status": "ok" if ok else "unavailable",
            "model": st.model_name,
            "busy": st.worker.busy,
            "slots": adapter.parallel(st.pair),
            "slots_busy": st.worker.busy_slots(),
            "queue_depth": st.worker.depth(),
            "queue_size": st.queue_size,
            **({"reason": st.worker.lost} if st.worker.lost else {}),  # why it cannot generate
        },
        status_code=200 if ok else 503,
    )


@routes.get("/metrics")
async def prometheus(st: ServerState = Depends(_state)) -> Response:
    content, media_type = st.metrics.exposition()
    return Response(content, media_type=media_type)


def _model_card(st: ServerState) -> dict:
    return {
        "id": st.model_name, "object": "model", "created": st.created, "owned_by": "ggufspec",
        "target": st.info.target_file, "draft": st.info.draft_name, "context_length": st.info.n_ctx,
    }


@routes.get("/v1/models")
async def models(st: ServerState = Depends(_state)) -> dict:
    return {"object": "list", "data": [_model_card(st)]}


@routes.get("/v1/models/{model_id:path}")
async def model(model_id: str, st: ServerState = Depends(_state)) -> dict:
    if model_id != st.model_name:
        raise APIError(404, f"the model '{model_id}' does not exist; this server serves '{st.model_name}'",
                       param="model", code="model_not_found")
    return _model_card(st)


async def _encode(st: ServerState, param: str, **text) -> list[int]:
    """Prompt text or messages -> token ids (off the event loop), checked against the context."""
    try:
        tokens = await run_in_threadpool(adapter.encode, st.pair, **text)
    except UserError as exc:
        raise invalid(str(exc), param=param) from None
    schemas.check_tokens(tokens, param, n_ctx=st.info.n_ctx)
    return tokens


async def _generate(
    request: Request, st: ServerState, body: schemas.Params, *, tokens: list[int], max_tokens: int,
    endpoint: str, started: float,
) -> Response:
    """Queue the generation, then stream its events or answer with all of it."""
    chosen = drafting.choose(body, info=st.info, speculative=st.speculative)
    gen = adapter.generation_request(body, tokens=tokens, max_tokens=max_tokens, speculative=chosen.speculative,
                                     drafters=chosen.drafters)
    job = Job(request=gen, loop=asyncio.get_running_loop(), stream=bool(body.stream), marks=body.include_speculative)
    st.worker.submit(job)
    reply = Reply.new(chat=endpoint == CHAT, model=st.model_name, draft=chosen.shown)
    if body.stream:
        def done(result: str) -> None:
            st.metrics.request_done(endpoint, result, started=started)

        return JobStream(sse_events(reply, job, include_usage=body.include_usage, done=done), job)
    try:
        text, stats = await collect(request, job)
    except ClientGone:
        st.metrics.request_done(endpoint, "cancelled")
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
    st.metrics.request_done(endpoint, "ok", started=started)
    return JSONResponse(reply.body(text, stats))


@routes.post(COMPLETIONS)
async def completions(request: Request, st: ServerState = Depends(_state)) -> Response:
    started = time.perf_counter()
    body: schemas.CompletionBody = schemas.parse(schemas.CompletionBody, await schemas.read_json(request, st.max_body_bytes))
    prompt = schemas.completion_prompt(body, n_vocab=st.info.n_vocab)
    if isinstance(prompt, list):
        schemas.check_tokens(prompt, "prompt", n_ctx=st.info.n_ctx)
        tokens = prompt
    else:
        tokens = await _encode(st, "prompt", prompt=prompt)
    max_tokens = body.max_tokens or 16  # OpenAI's default for completions
    return await _generate(request, st, body, tokens=tokens, max_tokens=max_tokens, endpoint=COMPLETIONS, started=started)


@routes.post(CHAT)
async def chat_completions(request: Request, st: ServerState = Depends(_state)) -> Response:
    started = time.perf_counter()
    body: schemas.ChatBody = schemas.parse(schemas.ChatBody, await schemas.read_json(request, st.max_body_bytes))
    tokens = await _encode(st, "messages", messages=schemas.chat_messages(body))
    max_tokens = body.max_completion_tokens or body.max_tokens or (st.info.n_ctx - len(tokens))
    return await _generate(request, st, body, tokens=tokens, max_tokens=max_tokens, endpoint=CHAT, started=started)


# ---- the app -------------------------------------------------------------------------------------


def create_app(
    *,
    pair: adapter.Pair,
    model_name: str,
    api_key: str | None = None,
    queue_size: int = DEFAULT_QUEUE_SIZE,
    max_body_bytes: int = MAX_BODY_BYTES,
    speculative: SpeculativeSettings = SpeculativeSettings(),
) -> FastAPI:
    """The OpenAI-compatible app around one loaded pair.

    Args:
        pair: the loaded target/draft pair; the app's worker thread is its only user (with
            `settings.parallel` N > 1, its N slot threads, one per sequence).
        model_name: the id served by /v1/models (requests may name any model: there is one).
        api_key: when set, every endpoint but /health needs ``Authorization: Bearer <api_key>``.
        queue_size: requests that may wait while every slot generates; beyond that, 429.
        max_body_bytes: larger request bodies get 400.
        speculative: the server's speculation settings (serve's --draft-max ... --variant); a
            request's draft_max, draft_min, fixed, always_draft and accept fields override those
            (`SpeculativeSettings.from_request`).

    Returns:
        A FastAPI app; its worker thread starts with the app (lifespan) and stops with it.

    Raises:
        UserError: a negative queue size.
    """
    if queue_size < 0:
        raise UserError(f"queue size must be >= 0, got {queue_size}")
    metrics = Metrics()
    # --parallel 1: the one worker thread; N > 1: a thread per slot, their decodes batched
    worker: Worker | SlotWorker = (
        SlotWorker(pair, queue_size=queue_size, metrics=metrics) if adapter.parallel(pair) > 1
        else Worker(pair, queue_size=queue_size, metrics=metrics)
    )
    adapter.on_device_lost(pair, worker.fail)  # an RPC worker's death: 503s, /health still answers
    state = ServerState(
        pair=pair, info=adapter.describe(pair), model_name=model_name, api_key=api_key, queue_size=queue_size,
        max_body_bytes=max_body_bytes, speculative=speculative, created=int(time.time()),
        worker=worker, metrics=metrics,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        try:
            yield
        finally:
            await run_in_threadpool(worker.stop)
            # what the controller learnt, for the next run (--remember): only once no generation runs
            # (a lost pair's is stuck mid-round in llama.cpp; one past stop's timeout may be mid-update)
            if worker.stopped and worker.lost is None:
                await run_in_threadpool(pair.save_controller)

    app = FastAPI(title="ggufspec", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.server = state
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal)
    app.include_router(open_routes)
    app.include_router(routes)
    for router in page.routers(_require_key):  # GET /: the chat page
        app.include_router(router)
    return app
