"""The loopback HTTP server: the Neuroglancer client, datasets as stored, labelmap versions as precomputed.

One :class:`ThreadingHTTPServer` bound to ``127.0.0.1`` and run on a daemon thread, so it never
stalls the caller (napari's GUI thread, a notebook, the CLI's main thread waiting for Ctrl-C).
Paths it answers:

* ``/v/<token>/<file>`` — the Neuroglancer client from the ``neuroglancer`` wheel
  (:mod:`.client`); ``/events/<token>`` — an idle ``text/event-stream`` the client keeps open;
* ``/data/<name>/<key>`` — key ``key`` of a mounted dataset's byte store, whole or by byte range
  (``206`` with ``Content-Range``), ``HEAD`` with ``Content-Length``;
* ``/version/<name>/<uuid>/<key>`` — a labelmap version as an unsharded precomputed segmentation
  computed on request (:mod:`.version_source`); the version id is in the path, so a browser cache
  never mixes two versions;
* ``/state/<sha256>.json`` — a Neuroglancer state the server handed out a link to
  (:meth:`ShardServer.state_link`; why links name a document instead of holding the state: :mod:`.states`).

The client is served by the server itself, so its fetches are same-origin: no CORS header is sent
unless the user names the origins that may read the answers (``cors=``, ``--cors``; :mod:`.cors`).
Keys are checked by the byte stores' own guards (:func:`~..bytestore.containment.check_key`): a
request never reads outside a dataset's root, and an error body names the key relative to the
served root, never a local path (:mod:`.messages`; the server's log keeps the full message).

Bodies are streamed (:mod:`.bodies`): a stored value goes out in 1 MiB range reads, whatever the
request, so memory per connection is bounded and ``Content-Length`` is always the length sent.
``Range`` headers are read by :mod:`.ranges` (one range: ``206`` or ``416``; anything else: the
whole value). At most :data:`MAX_CONNECTIONS` connections are served at once. A client's bad
request is one line in the log at debug level, a client that goes away mid-answer too; only a
storage failure (a warning, one line) or a bug (an error with its traceback) is logged above that.
"""

from __future__ import annotations

import logging
import secrets
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.bytestore.containment import key_problem
from napari_shardscope.core.bytestore.local import LocalByteStore
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import (
    ArgumentError,
    NotARegularFileError,
    NotFoundError,
    OutsideRootError,
    ShardscopeError,
    StoragePermissionError,
)
from napari_shardscope.core.serve.bodies import PIECE, Body, StoreBody
from napari_shardscope.core.serve.client import client_directory, client_type
from napari_shardscope.core.serve.cors import CorsPolicy
from napari_shardscope.core.serve.messages import client_message, local_root
from napari_shardscope.core.serve.ranges import parse_range
from napari_shardscope.core.serve.states import STATE_ROOT, StateShelf, register_shelf

log = logging.getLogger(__name__)

#: Host names a request may use (anything else is a DNS-rebinding attempt on the loopback server).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: First path components the client's own routes and the state documents use.
RESERVED = ("v", "events", STATE_ROOT)
#: Seconds between keep-alive comments on an event stream (also how soon it notices a stop).
EVENT_INTERVAL = 1.0
#: Connections served at once (a thread each); more wait in the listen backlog.
MAX_CONNECTIONS = 64
#: Name of a connection's thread (``-<port>`` appended).
CONNECTION_THREAD = "shardscope-serve-connection"
#: Seconds a connection may stay idle (between requests, or not reading its answer) before it is closed.
IDLE_TIMEOUT = 60.0
#: Key names served as JSON.
JSON_NAMES = frozenset({"info", "zarr.json", "attributes.json", ".zarray", ".zattrs", ".zgroup"})
#: The longest key (bytes, UTF-8) and key component a request may name (Linux's PATH_MAX and NAME_MAX).
MAX_KEY_BYTES = 4096
MAX_NAME_BYTES = 255


class Mount(Protocol):
    """Something served below a path prefix: keys → bodies."""

    #: Whether a response may be cached by the browser (a committed version or a dataset: yes).
    cacheable: bool

    def open(self, key: str) -> Body | None:
        """The value of ``key`` to send, or ``None`` when nothing is there (a store learns it on the first read)."""
        ...

    def local_roots(self) -> Mapping[str, str]:
        """Local directories the mount reads, each with the name an HTTP client is told instead of its path
        (``""``: the served root, whose files are then named by their keys); see :mod:`.messages`."""
        ...


@dataclass
class StoreMount:
    """A dataset's byte store, served as it is stored (any format the project opens).

    Bodies are read by range through the store (:class:`~.bodies.StoreBody`), so every piece
    passes its guards. A remote store has no stat call: the sizes it needs (whole values, ``HEAD``,
    suffix ranges) are probed with range reads and remembered.
    """

    store: ByteStore
    cacheable: bool = True
    _sizes: LruCache[str, int | None] = field(default_factory=lambda: LruCache(4096), repr=False)

    @property
    def gateway(self) -> bool:
        """Whether the store is another host (a failure there is answered ``502 Bad Gateway``, not ``500``)."""
        return not isinstance(self.store, LocalByteStore) and not self.store.url.startswith("file://")

    def open(self, key: str) -> Body | None:
        return StoreBody(self.store, key, self._sizes if self.cacheable else None)

    def local_roots(self) -> Mapping[str, str]:
        return local_root(self.store.url, "")


class ShardServer:
    """A running loopback server; mount datasets and versions, then hand out URLs.

    Use as a context manager or call :meth:`stop`; the serving thread is a daemon, so a process
    that exits (napari closing, Ctrl-C on the CLI) never waits on it.
    """

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1", max_connections: int = MAX_CONNECTIONS,
                 cors: Iterable[str] = ()) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ArgumentError(f"the server binds a loopback address only, not {host!r}")
        #: The origins (besides its own) whose pages may read the answers (:mod:`.cors`).
        self.cors = CorsPolicy.of(cors)
        self.token = secrets.token_hex(8)
        self.stopping = threading.Event()
        self._mounts: dict[str, Mount] = {}
        self._lock = threading.Lock()
        self._client: Path | None = None
        self._client_mount: StoreMount | None = None
        #: The states links were handed out for (:meth:`state_link`), served at ``/state/<id>.json``.
        self.states = StateShelf()
        try:
            self._httpd = _Httpd((host, port), _Handler, self, max(1, max_connections))
        except OSError as exc:
            raise ArgumentError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="shardscope-serve", daemon=True)
        self._thread.start()
        register_shelf(self.url, self.states)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_url(self) -> str:
        """The Neuroglancer client's page (append ``#!<state>``)."""
        return f"{self.url}/v/{self.token}/"

    def state_link(self, state: Mapping[str, Any]) -> str:
        """A link that opens the served client at ``state``: ``client_url#!<URL of the state document>``.

        The state is kept by the server and fetched by the client once it has started; a
        ``#!{state}`` link loses a layer in most page loads (:mod:`.states` tells why).
        """
        return f"{self.client_url}#!{self.state_document_url(state)}"

    def state_document_url(self, state: Mapping[str, Any]) -> str:
        """Keep ``state``; the URL its JSON document is served at (``/state/<sha256>.json``)."""
        return f"{self.url}/{STATE_ROOT}/{self.states.publish(state)}"

    @property
    def connections(self) -> int:
        """Connections being served now (each on its own thread; at most ``max_connections``)."""
        return self._httpd.active

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.stopping.is_set()

    def client_root(self) -> Path:
        if self._client is None:
            self._client = client_directory()
        return self._client

    def client_mount(self) -> StoreMount:
        """The Neuroglancer client's files, served like a dataset: by range, through a local store's guards."""
        if self._client_mount is None:
            self._client_mount = StoreMount(LocalByteStore(self.client_root(), follow_symlinks=False))
        return self._client_mount

    def mount(self, path: str, mount: Mount) -> str:
        """Serve ``mount`` under ``/<path>/``; returns its URL (ending in ``/``)."""
        path = path.strip("/")
        if not path or key_problem(path) is not None:
            raise ArgumentError(f"mount path {path!r} is not a plain relative path")
        if path.split("/", 1)[0] in RESERVED:
            raise ArgumentError(f"mount path {path!r} is taken by the client ({', '.join(RESERVED)} are reserved)")
        with self._lock:
            self._mounts[path] = mount
        return f"{self.url}/{path}/"

    def unmount(self, path: str) -> None:
        with self._lock:
            self._mounts.pop(path.strip("/"), None)

    def mounts(self) -> Mapping[str, Mount]:
        with self._lock:
            return dict(self._mounts)

    def local_roots(self) -> list[tuple[str, str]]:
        """Every local directory served or read (the client's included) with its client-side name."""
        roots = [(str(self.client_root()), "")] if self._client is not None else []
        for mount in self.mounts().values():
            roots.extend(mount.local_roots().items())
        return roots

    def find(self, path: str) -> tuple[Mount, str] | None:
        """The mount serving URL path ``path`` and the key inside it (longest prefix wins)."""
        with self._lock:
            mounts = sorted(self._mounts.items(), key=lambda kv: -len(kv[0]))
        for prefix, mount in mounts:
            if path.startswith(prefix + "/"):
                return mount, path[len(prefix) + 1:]
        return None

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent); open event streams end within a second."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        register_shelf(self.url, None)
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ShardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Httpd(ThreadingHTTPServer):
    """One thread per connection, at most ``max_connections`` (:data:`MAX_CONNECTIONS`) at once.

    A connection past the limit waits in the listen backlog until one ends (an idle keep-alive
    connection ends after :data:`IDLE_TIMEOUT` seconds), so no client can make the server start
    threads without bound. Errors the socket layer raises outside a request are one line in the
    log: a client that went away is not a server error.
    """

    daemon_threads = True
    block_on_close = False
    #: A browser or TensorStore opens dozens of connections at once; the default backlog of 5 drops
    #: their SYNs and each dropped one costs a one-second retransmit.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], owner: ShardServer,
                 max_connections: int) -> None:
        self.owner = owner
        self.slots = threading.BoundedSemaphore(max_connections)
        self.active = 0  # connections holding a slot
        self._count = threading.Lock()
        super().__init__(address, handler)

    def _take(self, delta: int) -> None:
        with self._count:
            self.active += delta

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own once a slot is free (the accept loop waits for one)."""
        while not self.slots.acquire(timeout=0.2):
            if self.owner.stopping.is_set():
                self.shutdown_request(request)
                return
        self._take(1)
        try:
            threading.Thread(target=self.process_request_thread, args=(request, client_address),
                             name=f"{CONNECTION_THREAD}-{self.server_address[1]}", daemon=True).start()
        except BaseException:
            self._release()
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        self._take(-1)
        self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("%s: connection ended: %s", client_address[0], _one_line(str(exc) or type(exc).__name__))
        else:  # a bug of ours: the traceback is what fixes it
            log.error("internal error serving %s", client_address[0], exc_info=exc)


#: Errors writing to a client that has gone away (or stopped reading for :data:`IDLE_TIMEOUT` s).
_CLIENT_GONE = (ConnectionError, TimeoutError)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: Headers and body are two writes: with Nagle's algorithm the body waits for the client's delayed ACK.
    disable_nagle_algorithm = True
    #: Socket timeout: an idle keep-alive connection, or a client that stops reading, is let go.
    timeout = IDLE_TIMEOUT
    server: _Httpd
    #: Whether this request's status line went out (after it, an error can only end the connection).
    _answered = False
    #: Whether this request is served from another host (a remote store).
    _gateway = False

    #: A request line without a version (HTTP/0.9) is answered as HTTP/1.0 would be: with a status line.
    default_request_version = "HTTP/1.0"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def parse_request(self) -> bool:
        self._answered = False  # a new request on a kept-alive connection
        self._gateway = False
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9" or len(self.requestline.split()) == 2:  # no client of ours speaks it
            self.close_connection = True
            self._error(400, "HTTP/0.9 requests are not served")
            return False
        if self.headers.defects:  # a header line without a colon, a space before one (RFC 9112 §5.1: 400):
            # the parser took the lines after it for a body, so where this request ends is unknown
            self.close_connection = True
            self._error(400, f"malformed header block: {type(self.headers.defects[0]).__name__}")
            return False
        return True

    def send_response_only(self, code: int, message: str | None = None) -> None:
        if self.request_version == "HTTP/0.9":  # http.server answers an HTTP/0.9 line without status line or headers
            self.request_version = "HTTP/1.0"
            self.close_connection = True
        super().send_response_only(code, message)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a bad request line, a method not served, overlong headers) as ours:
        a one-line text body (none for ``HEAD``), CORS headers, one debug line in the log, the connection closed."""
        self.close_connection = True
        self._error(code, message or explain or HTTPStatus(code).phrase)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._answered = True
        super().send_response(code, message)

    # -- verbs ---------------------------------------------------------------------------------
    def do_OPTIONS(self) -> None:
        self._refuse_bodies()
        self.send_response(204)
        self._cors(preflight=True)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def _refuse_bodies(self) -> None:
        """A request with a body (which these verbs never have) ends the connection after its answer:
        the body is never read, so it must not be parsed as the next request."""
        lengths = self.headers.get_all("Content-Length") or []
        if any(v.strip() != "0" for v in lengths) or self.headers.get_all("Transfer-Encoding"):
            self.close_connection = True

    # -- routing -------------------------------------------------------------------------------
    def _dispatch(self, *, head: bool) -> None:
        self._refuse_bodies()
        owner = self.server.owner
        path = unquote(self.path.split("?", 1)[0].split("#", 1)[0])
        host = (self.headers.get("Host") or "").lower()
        try:
            if host not in {f"{name}:{owner.port}" for name in LOOPBACK_NAMES}:  # DNS rebinding: a foreign name
                self._error(421, f"this server answers only to 127.0.0.1:{owner.port}, not {host[:100]!r}")
            elif path.startswith("/v/"):
                self._client(path, head)
            elif path.startswith(f"/{STATE_ROOT}/"):
                self._serve(owner.states, path[len(STATE_ROOT) + 2:], head, ctype="application/json",
                            cache="max-age=86400")
            elif path.startswith("/events/"):
                if path != f"/events/{owner.token}":
                    self._error(404, "no such event stream")
                else:
                    self._events()
            else:
                found = owner.find(path.lstrip("/"))
                if found is None:
                    self._error(404, f"nothing is served at {path[:200]!r}")
                else:
                    self._serve(found[0], found[1], head)
        except _CLIENT_GONE as exc:  # the client went away mid-answer: not an error of anyone's
            log.debug("%s: client went away during %s: %s", self.address_string(), path[:200],
                      type(exc).__name__)
            self.close_connection = True
        except (NotFoundError, NotARegularFileError) as exc:
            self._fail(404, exc)
        except StoragePermissionError as exc:
            self._fail(403, exc)
        except OutsideRootError as exc:  # a link out of the root: which key, not where it leads
            log.debug("%s: %s", self.address_string(), _one_line(str(exc)))
            self._error(400, f"key {exc.key!r} leads outside its dataset (a symbolic link out of it): not served")
        except ArgumentError as exc:
            self._fail(400, exc)
        except ShardscopeError as exc:  # the storage failed (a remote store: the host behind it), told in one line
            self._fail(502 if self._gateway else 500, exc)
        except Exception as exc:  # a bug: a server thread never dies silently, the client sees why
            log.error("internal error serving %s", path[:200], exc_info=exc)
            self._fail(500, exc)

    def _client(self, path: str, head: bool) -> None:
        owner = self.server.owner
        parts = path.split("/", 3)  # '', 'v', token, rest
        if len(parts) == 3 and parts[2] == owner.token:  # /v/token → /v/token/ so relative paths resolve
            self.send_response(301)
            self._cors()
            self.send_header("Location", quote(path + "/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if parts[2] != owner.token:  # the client lives only under this server's token
            self._error(404, "no such client path")
            return
        rel = parts[3] or "index.html"
        ctype = client_type(rel)
        self._serve(owner.client_mount(), rel, head, ctype=ctype,
                    cache="no-cache" if ctype.startswith("text/html") else "max-age=3600")

    def _events(self) -> None:
        owner = self.server.owner
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.flush()
        while not owner.stopping.wait(EVENT_INTERVAL):
            self.wfile.write(b": idle\n\n")
            self.wfile.flush()

    def _serve(self, mount: Mount, key: str, head: bool, *, ctype: str | None = None, cache: str | None = None
               ) -> None:
        problem = served_key_problem(key)
        if problem is not None:
            self._error(404, f"no key {key[:200]!r}: it {problem}")
            return
        if cache is None:
            cache = "max-age=86400" if mount.cacheable else "no-store"
        if ctype is None:
            ctype = "application/json" if key.rsplit("/", 1)[-1] in JSON_NAMES else "application/octet-stream"
        self._gateway = bool(getattr(mount, "gateway", False))
        body = mount.open(key)
        if body is None:
            self._error(404, f"no key {key!r}")
            return
        spec = parse_range(self.headers.get("Range"), self.headers.get("If-Range"))
        if (spec is not None and spec.first is not None and spec.last is not None and not body.cheap_size
                and spec.last - spec.first < PIECE):  # a small range of a remote value: no size needed
            part = body.read(spec.first, spec.last + 1)
            if part is None:
                self._error(404, f"no key {key!r}")
                return
            if part:
                self._head(206, ctype, cache, len(part), f"bytes {spec.first}-{spec.first + len(part) - 1}/*")
                if not head:
                    self.wfile.write(part)
                return
            # nothing there: past the end, answered below with the length (416)
        size = body.size()
        if size is None:
            self._error(404, f"no key {key!r}")
            return
        if spec is None:
            start, end, status, crange = 0, size, 200, None
        else:
            span = spec.resolve(size)
            if span is None:
                self.send_response(416)
                self._cors()
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = span
            status, crange = 206, f"bytes {start}-{end - 1}/{size}"
        self._head(status, ctype, cache, end - start, crange)
        if not head:
            self._stream(body, key, start, end)

    def _stream(self, body: Body, key: str, start: int, end: int) -> None:
        """Bytes ``[start, end)`` of ``body`` to the socket, :data:`PIECE` bytes at a time.

        A value that shrank or vanished since its size was read cannot deliver the promised
        ``Content-Length``: the connection is closed, which the client sees as a cut-off body.
        """
        pos = start
        while pos < end:
            piece = body.read(pos, min(pos + PIECE, end))
            if not piece:
                log.warning("%s: %r ended at byte %d of the %d promised; connection closed",
                            self.address_string(), key, pos, end)
                self.close_connection = True
                return
            self.wfile.write(piece)
            pos += len(piece)

    # -- responses -----------------------------------------------------------------------------
    def _cors(self, *, preflight: bool = False) -> None:
        headers = getattr(self, "headers", None)  # none when the request line itself was refused
        origin = headers.get("Origin") if headers is not None else None
        private = preflight and headers is not None and (
            headers.get("Access-Control-Request-Private-Network", "").strip().lower() == "true")
        for name, value in self.server.owner.cors.headers(origin, preflight=preflight, private_network=private):
            self.send_header(name, value)

    def _head(self, status: int, ctype: str, cache: str, length: int, content_range: str | None = None) -> None:
        self.send_response(status)
        self._cors()
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        if content_range is not None:
            self.send_header("Content-Range", content_range)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", cache)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def _fail(self, status: int, exc: BaseException) -> None:
        """Answer ``status`` for ``exc``: the log gets its message, the client the same with local paths
        replaced by keys (:func:`~.messages.client_message`)."""
        message = _one_line(str(exc)) or type(exc).__name__
        if status >= 500 and not isinstance(exc, ShardscopeError):
            message = f"{type(exc).__name__}: {message}"
        elif status >= 500:
            log.warning("%s: %s %s: %s", self.address_string(), self.command, self.path[:200], message)
        self._error(status, client_message(message, self.server.owner.local_roots()))

    def _error(self, status: int, message: str) -> None:
        """An error answer with a one-line text body; after a status line went out, the connection is ended."""
        method = self.command or (getattr(self, "requestline", "").split() or ["-"])[0]
        log.debug("%s: %s %s -> %d %s", self.address_string(), method[:20], getattr(self, "path", "")[:200], status,
                  _one_line(message)[:300])
        if self._answered:  # the body is under way: the client can only be told by a cut
            self.close_connection = True
            return
        body = (_one_line(message)[:2000] + "\n").encode("utf-8", "replace")
        try:
            self._head(status, "text/plain; charset=utf-8", "no-store", len(body))
            if method != "HEAD":
                self.wfile.write(body)
        except _CLIENT_GONE:
            self.close_connection = True


def _one_line(text: str) -> str:
    return " ".join(text.split())


def served_key_problem(key: str) -> str | None:
    """Why ``key`` cannot name a served file (:func:`key_problem`, or a name no file system holds), or ``None``.

    A component longer than 255 bytes or a key longer than 4,096 would make the file system fail
    (``ENAMETOOLONG``, a storage error); a client asking for one gets a 404 like any missing key.
    """
    problem = key_problem(key)
    if problem is not None:
        return problem
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        return f"is longer than {MAX_KEY_BYTES} bytes"
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in key.split("/")):
        return f"has a component longer than {MAX_NAME_BYTES} bytes"
    return None
