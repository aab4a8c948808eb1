"""A job's events to its client: collected into one response, or streamed as server-sent events.

Either way a client that goes away cancels its job: `collect` watches for the disconnect while it
waits, and `JobStream` sets the cancel flag however the response ends.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from ggufspec.server.error_bodies import outcome
from ggufspec.server.marks import Mark, extension
from ggufspec.server.responses import Reply, finish_reason, sse
from ggufspec.server.worker import Job


class ClientGone(Exception):
    """The client disconnected before its (non-streaming) response was ready."""


async def collect(request: Request, job: Job) -> tuple[str, Any]:
    """Wait for a non-streaming job: (text, RunStats); ClientGone (job cancelled) on a disconnect."""

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
                raise ClientGone()
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


_TEXT = ("text", "step")


def _merged(events: list[tuple[str, Any]]) -> tuple[str, list[Mark] | None]:
    """Queued text (or step) events as one: their text, and their marks (None: plain text events)."""
    if events[0][0] == "text":
        return "".join(v for _, v in events), None
    marks = [v for _, v in events]
    return "".join(m.text for m in marks), marks


async def _events(job: Job) -> AsyncIterator[tuple[str, Any]]:
    """The job's events until its last ("end" or "error"), queued text events merged into one
    ("text", (text, marks or None))."""
    while True:
        kind, value = await job.events.get()
        if kind not in _TEXT:
            yield kind, value
            return
        parts, last = [(kind, value)], None
        while last is None and not job.events.empty():
            k, v = job.events.get_nowait()
            if k in _TEXT:
                parts.append((k, v))
            else:
                last = (k, v)
        yield "text", _merged(parts)
        if last is not None:
            yield last
            return


async def sse_events(
    reply: Reply, job: Job, *, include_usage: bool, done: Callable[[str], None]
) -> AsyncIterator[str]:
    """The stream's events, ending in ``data: [DONE]``; `done(outcome)` runs however it ends."""

    def shaped(chunk: dict) -> dict:
        if include_usage:
            chunk["usage"] = None  # OpenAI: null on every chunk but the last
        return chunk

    result = "cancelled"
    try:
        if reply.chat:
            yield sse(shaped(reply.chunk(role=True)))
        async for kind, value in _events(job):
            if kind == "text":
                text, marks = value
                chunk = shaped(reply.chunk(text))
                if marks is not None:
                    chunk["speculative"] = extension(marks)
                yield sse(chunk)
            elif kind == "error":
                result = outcome(value.status)
                yield sse(value.body())
            elif value is not None:
                yield sse(shaped(reply.chunk(finish=finish_reason(value))))
                if include_usage:
                    yield sse(reply.usage_chunk(value))
                result = "ok"
        yield sse("[DONE]")
    finally:
        job.cancel.set()
        done(result)


class JobStream(StreamingResponse):
    """A streaming response that cancels its job however the response ends (disconnect included)."""

    def __init__(self, content: AsyncIterator[str], job: Job) -> None:
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
