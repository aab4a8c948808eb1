"""uvicorn's server, ending the generations first when told to stop (SIGTERM, Ctrl-C).

uvicorn's shutdown closes the listening sockets, waits up to `timeout_graceful_shutdown` for open
responses to finish, cancels what is left (a CancelledError traceback, a stream cut off without
an end) and only then runs the app's lifespan shutdown, which stops the generation worker. A
stream of thousands of tokens never finishes in that time. So this server halts the worker
first: each running generation ends after its current step with a `server_shutting_down` error
(a stream's error event, then ``data: [DONE]``; a non-streaming request's 503), waiting requests
get the same 503, and uvicorn's wait sees every response end at once.
"""

from __future__ import annotations

import socket
from typing import Callable

import uvicorn


class DrainingServer(uvicorn.Server):
    """A uvicorn server that calls `halt` (the worker's: returns at once) before it shuts down."""

    def __init__(self, config: uvicorn.Config, *, halt: Callable[[], None]) -> None:
        super().__init__(config)
        self._halt = halt

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._halt()
        await super().shutdown(sockets=sockets)
