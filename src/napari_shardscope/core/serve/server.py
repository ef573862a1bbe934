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
  never mixes two versions.

Every response, errors and ``OPTIONS`` included, carries ``Access-Control-Allow-Origin: *`` and
allows the ``range`` header, which is what Neuroglancer's fetches need from any origin. Keys are
checked by the byte stores' own guards (:func:`~..bytestore.containment.check_key`): a request
never reads outside a dataset's root.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.bytestore.containment import key_problem
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import ArgumentError, NotFoundError, ShardscopeError
from napari_shardscope.core.serve.client import client_directory, client_file

log = logging.getLogger(__name__)

CORS_HEADERS = (
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Allow-Headers", "range, content-type"),
    ("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS"),
    ("Access-Control-Expose-Headers", "content-range, content-length, accept-ranges, etag"),
)
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
#: Host names a request may use (anything else is a DNS-rebinding attempt on the loopback server).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: First path components the client's own routes use.
RESERVED = ("v", "events")
#: Seconds between keep-alive comments on an event stream (also how soon it notices a stop).
EVENT_INTERVAL = 1.0


class Mount(Protocol):
    """Something served below a path prefix: keys → bytes."""

    #: Whether a response may be cached by the browser (a committed version or a dataset: yes).
    cacheable: bool

    @property
    def cheap_size(self) -> bool:
        """Whether :meth:`size` is cheap; when not, a ``bytes=a-b`` range is answered without the total size."""
        ...

    def size(self, key: str) -> int | None:
        """Length of ``key`` in bytes, or ``None`` when it does not exist."""
        ...

    def read(self, key: str) -> bytes | None:
        """The whole value of ``key``, or ``None``."""
        ...

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of ``key``, or ``None``."""
        ...


@dataclass
class StoreMount:
    """A dataset's byte store, served as it is stored (any format the project opens).

    A remote store has no stat call: its sizes (needed for ``HEAD`` and suffix ranges only) come
    from one whole read of the key and are remembered.
    """

    store: ByteStore
    cacheable: bool = True
    _sizes: LruCache[str, int | None] = field(default_factory=lambda: LruCache(4096), repr=False)

    @property
    def cheap_size(self) -> bool:
        return self.store.cheap_size

    def size(self, key: str) -> int | None:
        if self.store.cheap_size:
            return self.store.size(key)
        return self._sizes.get_or_load(key, lambda: _len(self.store.read(key)))

    def read(self, key: str) -> bytes | None:
        return self.store.read(key)

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        return self.store.read_range(key, start, end)


def _len(data: bytes | None) -> int | None:
    return None if data is None else len(data)


class ShardServer:
    """A running loopback server; mount datasets and versions, then hand out URLs.

    Use as a context manager or call :meth:`stop`; the serving thread is a daemon, so a process
    that exits (napari closing, Ctrl-C on the CLI) never waits on it.
    """

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1") -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ArgumentError(f"the server binds a loopback address only, not {host!r}")
        self.token = secrets.token_hex(8)
        self.stopping = threading.Event()
        self._mounts: dict[str, Mount] = {}
        self._lock = threading.Lock()
        self._client: Path | None = None
        try:
            self._httpd = _Httpd((host, port), _Handler, self)
        except OSError as exc:
            raise ArgumentError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="shardscope-serve", daemon=True)
        self._thread.start()

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

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.stopping.is_set()

    def client_root(self) -> Path:
        if self._client is None:
            self._client = client_directory()
        return self._client

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
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ShardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Httpd(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    #: A browser or TensorStore opens dozens of connections at once; the default backlog of 5 drops
    #: their SYNs and each dropped one costs a one-second retransmit.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], owner: ShardServer) -> None:
        self.owner = owner
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: Headers and body are two writes: with Nagle's algorithm the body waits for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Httpd

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # -- verbs ---------------------------------------------------------------------------------
    def do_OPTIONS(self) -> None:
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Max-Age", "86400")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    # -- routing -------------------------------------------------------------------------------
    def _dispatch(self, *, head: bool) -> None:
        owner = self.server.owner
        path = unquote(self.path.split("?", 1)[0].split("#", 1)[0])
        host = (self.headers.get("Host") or "").lower()
        if host not in {f"{name}:{owner.port}" for name in LOOPBACK_NAMES}:  # DNS rebinding: a foreign name
            self._error(421, f"this server answers only to 127.0.0.1:{owner.port}, not {host!r}")
            return
        try:
            if path.startswith("/v/"):
                self._client(path, head)
            elif path.startswith("/events/"):
                self._events()
            else:
                found = owner.find(path.lstrip("/"))
                if found is None:
                    self._error(404, f"nothing is served at {path}")
                else:
                    self._serve(found[0], found[1], head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except NotFoundError as exc:
            self._error(404, str(exc))
        except ArgumentError as exc:  # a key outside the root, a bad range…
            self._error(400, str(exc))
        except ShardscopeError as exc:
            self._error(500, str(exc))
        except Exception as exc:  # a server thread never dies silently: the client sees why
            log.exception("serving %s", path)
            self._error(500, f"{type(exc).__name__}: {exc}")

    def _client(self, path: str, head: bool) -> None:
        owner = self.server.owner
        parts = path.split("/", 3)  # '', 'v', token, rest
        if len(parts) < 3:
            self._error(404, "no such client path")
            return
        if len(parts) == 3:  # /v/token → /v/token/ so relative script paths resolve
            self.send_response(301)
            self._cors()
            self.send_header("Location", path + "/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        got = client_file(owner.client_root(), parts[3])
        if got is None:
            self._error(404, f"no client file {parts[3]!r}")
            return
        data, ctype = got
        self._send(200, data, ctype, head=head, cache="no-cache" if ctype.startswith("text/html") else "max-age=3600")

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

    def _serve(self, mount: Mount, key: str, head: bool) -> None:
        if not key or key_problem(key) is not None:
            self._error(404, f"no key {key!r}")
            return
        cache = "max-age=86400" if mount.cacheable else "no-store"
        ctype = "application/json" if key.rsplit("/", 1)[-1] in ("info", "zarr.json", "attributes.json",
                                                                 ".zarray", ".zattrs", ".zgroup") \
            else "application/octet-stream"
        rng = self.headers.get("Range")
        if rng is None:
            if head:
                size = mount.size(key)
                if size is None:
                    self._error(404, f"no key {key!r}")
                    return
                self._send(200, b"", ctype, head=True, length=size, cache=cache)
                return
            data = mount.read(key)
            if data is None:
                self._error(404, f"no key {key!r}")
                return
            self._send(200, data, ctype, head=False, cache=cache)
            return
        m = _RANGE.match(rng.strip())
        if m is None or (not m.group(1) and not m.group(2)):  # multi-range or odd: whole value is allowed
            data = mount.read(key)
            if data is None:
                self._error(404, f"no key {key!r}")
                return
            self._send(200, data, ctype, head=head, cache=cache)
            return
        if m.group(1) and m.group(2) and not mount.cheap_size:  # bytes=a-b without the total (RFC 9110 '*')
            self._send_unsized_range(mount, key, int(m.group(1)), int(m.group(2)) + 1, ctype, cache, head)
            return
        size = mount.size(key)
        if size is None:
            self._error(404, f"no key {key!r}")
            return
        if m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1, size) if m.group(2) else size
        else:
            start, end = max(size - int(m.group(2)), 0), size
        if start >= size or end <= start:
            self.send_response(416)
            self._cors()
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        part = b"" if head else mount.read_range(key, start, end)
        if part is None:
            self._error(404, f"no key {key!r}")
            return
        self.send_response(206)
        self._cors()
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", cache)
        self.end_headers()
        if not head:
            self.wfile.write(part)

    def _send_unsized_range(self, mount: Mount, key: str, start: int, end: int, ctype: str, cache: str,
                            head: bool) -> None:
        if end <= start:
            self._error(416, f"empty range of {key!r}")
            return
        part = mount.read_range(key, start, end)
        if part is None:
            self._error(404, f"no key {key!r}")
            return
        if not part:
            self.send_response(416)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206)
        self._cors()
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/*")
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", cache)
        self.end_headers()
        if not head:
            self.wfile.write(part)

    # -- responses -----------------------------------------------------------------------------
    def _cors(self) -> None:
        for name, value in CORS_HEADERS:
            self.send_header(name, value)

    def _send(self, status: int, data: bytes, ctype: str, *, head: bool, length: int | None = None,
              cache: str = "no-store") -> None:
        self.send_response(status)
        self._cors()
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", cache)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        body = (message + "\n").encode("utf-8", "replace")
        try:
            self._send(status, body, "text/plain; charset=utf-8", head=self.command == "HEAD")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
