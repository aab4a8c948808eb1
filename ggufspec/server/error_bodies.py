"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from fastapi.responses import JSONResponse


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


def invalid(message: str, *, param: str | None = None, code: str = "invalid_value") -> APIError:
    """A 400 for a request whose content is wrong (the common case)."""
    return APIError(400, message, param=param, code=code)


def client_gone() -> APIError:
    """The client closed the connection before its request was read (nginx's 499: nobody reads it)."""
    return APIError(499, "the client closed the connection while sending its request", code="client_closed")


def shutting_down() -> APIError:
    """A request refused, or a generation stopped, because the server is shutting down (SIGTERM)."""
    return APIError(503, "the server is shutting down; retry once it is back", type="server_error",
                    code="server_shutting_down")


def outcome(status: int) -> str:
    """The metrics label for a response status."""
    return {400: "invalid", 401: "unauthorized", 404: "not_found", 429: "rejected", 499: "cancelled"}.get(
        status, "error" if status >= 500 else "invalid"
    )
