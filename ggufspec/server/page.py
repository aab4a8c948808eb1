"""The chat page at ``GET /``: plain HTML, CSS and JavaScript files shipped in the package
(ggufspec/server/web/; no build step, nothing fetched from elsewhere), talking to this server's
own /v1/chat/completions with the stream extension of ggufspec.server.marks.

The files are open (they hold no data); ``GET /web/config`` (what the page may offer: the loaded
drafters, the draft-length limits, the slots) needs the API key like every other endpoint, so a
page without the key learns it must ask for one.
"""

from __future__ import annotations

from importlib import resources
from typing import Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ggufspec.server import adapter
from ggufspec.server.error_bodies import APIError
from ggufspec.settings import DRAFT_MAX_LIMIT

#: the page's files and their media types; nothing else is served from the folder
FILES = {
    "index.html": "text/html; charset=utf-8",
    "chat.css": "text/css; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "store.js": "text/javascript; charset=utf-8",
    "stream.js": "text/javascript; charset=utf-8",
    "stats.js": "text/javascript; charset=utf-8",
}
_HEADERS = {
    # everything from this origin; no inline script, no third party
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; connect-src 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def _file(name: str) -> Response:
    media_type = FILES.get(name)
    if media_type is None:
        raise APIError(404, f"GET /web/{name}: no such file", code="not_found")
    body = resources.files("ggufspec.server").joinpath("web", name).read_bytes()
    return Response(body, media_type=media_type, headers=_HEADERS)


def routers(require_key: Callable[[Request], None]) -> list[APIRouter]:
    """The page's routes, to include in this order (/web/config before /web/{name}): its config
    (behind `require_key`, the app's API-key dependency), then the page and its files (open)."""
    files, keyed = APIRouter(), APIRouter(dependencies=[Depends(require_key)])

    @files.get("/", include_in_schema=False)
    async def index() -> Response:
        return _file("index.html")

    @keyed.get("/web/config")
    async def config(request: Request) -> dict:
        st = request.app.state.server
        return {
            "model": st.model_name,
            "drafters": [{"name": name, "file": file} for name, file in st.info.drafters],
            "draft": st.info.draft_name,
            "draft_max": st.speculative.length.draft_max,
            "draft_max_limit": DRAFT_MAX_LIMIT,
            "always_draft": st.speculative.length.always_draft,
            "slots": adapter.parallel(st.pair),
            "context_length": st.info.n_ctx,
        }

    @files.get("/web/{name}", include_in_schema=False)
    async def web_file(name: str) -> Response:
        return _file(name)

    return [keyed, files]
