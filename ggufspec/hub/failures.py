"""A ``huggingface_hub`` or HTTP failure as one clear ``UserError``.

401/403 (gated, token refused), 404 (repo, revision, file), 429, 5xx, connection failures,
offline misses and incomplete downloads each get one line naming the fix; anything else passes
through unchanged.
"""

from __future__ import annotations

import importlib

from ggufspec.errors import UserError
from ggufspec.hub.env import hub_endpoint


def _connection_errors() -> tuple[type[BaseException], ...]:
    classes: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests", ("ConnectionError", "Timeout"))):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        classes += [getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type)]
    return tuple(classes)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def failure_reason(exc: BaseException) -> str:
    status = _status(exc)
    return f"HTTP {status}" if status is not None else type(exc).__name__


def is_unreachable(exc: BaseException) -> bool:
    status = _status(exc)
    return isinstance(exc, _connection_errors()) or (status is not None and status >= 500)


def user_error(exc: BaseException, *, repo_id: str, revision: str, filename: str | None = None,
                offline: bool = False) -> BaseException:
    """One clear ``UserError`` for a ``huggingface_hub`` failure (other exceptions pass through)."""
    from huggingface_hub import errors, get_token

    endpoint = hub_endpoint()
    what = f"{repo_id}/{filename}" if filename else repo_id
    status = _status(exc)
    if isinstance(exc, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)):
        if offline:
            return UserError(f"{what}@{revision} is not in the Hugging Face cache and offline mode is on "
                             "(--offline or HF_HUB_OFFLINE=1); run `ggufspec pull` with network access first")
        return UserError(f"cannot reach the Hugging Face Hub at {endpoint} to fetch {what}, and it is not "
                         "cached; check the network (and HF_ENDPOINT), or use --offline for cached models")
    if isinstance(exc, errors.GatedRepoError):
        page = f"{endpoint}/{repo_id}"
        if get_token() and status == 403:
            return UserError(f"{repo_id} is gated and your HF_TOKEN has not been granted access: "
                             f"request it at {page}")
        return UserError(f"{repo_id} is gated: accept its terms at {page}, then set HF_TOKEN to a token "
                         "of that account (or run `hf auth login`)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return UserError(f"revision {revision!r} not found in {repo_id}; use a branch, tag or commit it has")
    if isinstance(exc, errors.RepositoryNotFoundError):
        hint = "check the name" if get_token() else "check the name; a private repo needs HF_TOKEN"
        return UserError(f"repo {repo_id} not found on {endpoint} ({status or 404}); {hint}")
    if isinstance(exc, errors.EntryNotFoundError):
        return UserError(f"{filename or 'the file'} not found in {repo_id}@{revision} (404)")
    if isinstance(exc, errors.HfHubHTTPError) and status is not None:
        if status == 401:
            return UserError(f"the Hub at {endpoint} rejected HF_TOKEN (401 invalid credentials); "
                             "fix or unset HF_TOKEN")
        if status == 403:
            return UserError(f"access to {repo_id} refused (403); check that HF_TOKEN may read it")
        if status == 429:
            return UserError(f"the Hub at {endpoint} is rate-limiting requests (429); wait and retry, "
                             "or set HF_TOKEN for a higher limit")
        if status >= 500:
            return UserError(f"the Hub at {endpoint} failed ({status}) on {what}; try again later, "
                             "or use --offline for cached models")
    if isinstance(exc, _connection_errors()):
        return UserError(f"cannot reach the Hugging Face Hub at {endpoint} ({type(exc).__name__}) to fetch "
                         f"{what}; check the network (and HF_ENDPOINT), or use --offline for cached models")
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        first = str(exc).splitlines()[0]
        return UserError(f"download of {what} was incomplete ({first}); nothing partial was kept, "
                         "run the command again")
    return exc
