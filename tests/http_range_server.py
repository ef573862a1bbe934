"""A loopback HTTP server that honours ``Range`` requests (Python's ``http.server`` ignores them).

Used to test remote reads for real: TensorStore's http kvstore issues range and suffix requests
exactly as it would against a bucket. Serves a directory on 127.0.0.1, counts requests and bytes.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Collection
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: The longest a gated request waits for its test to open the gate.
GATE_WAIT_S = 60.0
#: A delayed request waits for its client's quiet at most this many times ``delay`` after its arrival.
QUIET_CAP = 10
#: A client thread that ran or waited for a core this long within one look (10 ms) is working.
BUSY_S = 0.001

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def thread_busy_seconds(skip: Collection[int] = ()) -> dict[int, float]:
    """Seconds each thread of this process (but ``skip``) has been running or runnable (Linux schedstat).

    Time waiting for a core counts: a client starved by a loaded machine is still working. ``{}`` where
    there is no ``/proc``.
    """
    busy: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            if int(task) in skip:
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that just ended
                on_cpu, waiting = Path(f"/proc/self/task/{task}/schedstat").read_text().split()[:2]
                busy[int(task)] = (int(on_cpu) + int(waiting)) / 1e9
    return busy


class RangeServer:
    """Serve ``root`` at ``self.url`` until :meth:`close`; ``self.requests`` lists (path, range).

    With ``gate``, every request waits (at most :data:`GATE_WAIT_S`) until the event is set: a host
    that has not answered yet, released by the test. ``self.held`` counts requests waiting at the gate;
    ``self.arrived`` lists the path of every request as it arrives, before the gate (a client that
    retried a request it gave up on appears twice); ``self.arrivals`` adds the time and range, and
    ``self.exchanges`` the time of the answer (recorded before the answer goes out, so a client that
    has its answer finds it recorded), from which :meth:`waves` groups requests into
    dependent waves.
    With ``delay``, a request is answered once the client has been quiet for ``delay`` seconds: no
    request arrived and no thread of this process but the server's own ran or waited for a core
    (:func:`thread_busy_seconds`). That is a far bucket's latency, with the requests a client issues
    together answered together however slowly a loaded machine lets it issue them: the client runs in
    this process, and where other processes take the cores a few milliseconds of its work can last
    seconds. The wait stops at :data:`QUIET_CAP` times ``delay`` after the request's arrival, below the
    client's 3 s stall timeout. A request then arrives after an answer only if the client waited for one.
    """

    def __init__(self, root: str | os.PathLike[str], *, gate: threading.Event | None = None,
                 delay: float = 0.0) -> None:
        self.root = Path(root)
        self.requests: list[tuple[str, str | None]] = []
        self.bytes_sent = 0
        self.held = 0
        self.arrived: list[str] = []
        #: ``(time.monotonic(), path, Range header)`` per request as it arrives (before delay and gate).
        self.arrivals: list[tuple[float, str, str | None]] = []
        #: ``(arrived, answered, path, Range header)`` per answered request (``time.monotonic()``); :meth:`waves`.
        self.exchanges: list[tuple[float, float, str, str | None]] = []
        self._gate = gate
        self._connections: set[socket.socket] = set()  # kept alive: closed by close()
        self._last_arrival = 0.0  # time.monotonic() of the latest request: ``delay`` waits for quiet
        self._server_threads: set[int] = set()  # native ids: their work is not the client's
        self._busy: dict[int, float] = {}  # thread_busy_seconds() of the latest look
        self._looked_at = 0.0  # time.monotonic() of the latest look
        self._client_busy_at = 0.0  # time.monotonic() of the latest look that saw the client working
        self._released = 0.0  # every request that arrived before this time.monotonic() is answered now
        self._lock = threading.Lock()
        server = self
        held_lock = self._lock

        class Handler(SimpleHTTPRequestHandler):
            # Connections stay open between requests, as a bucket's and nginx's do: closing each one
            # makes every wave of a client's requests open new connections, and libcurl (TensorStore's
            # HTTP client) then holds some requests back until an earlier answer arrives (an extra
            # round trip per wave that a real server never causes). Headers and body go out without
            # Nagle's delay, which on a kept-alive connection stalls each answer by the peer's
            # delayed ACK (40 ms).
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                super().__init__(*args, directory=str(server.root), **kwargs)

            def setup(self) -> None:
                super().setup()
                with held_lock:
                    server._connections.add(self.connection)
                    server._server_threads.add(threading.get_native_id())

            def finish(self) -> None:
                with held_lock:
                    server._connections.discard(self.connection)
                super().finish()

            def log_message(self, format, *args):  # type: ignore[no-untyped-def]
                pass

            def do_GET(self) -> None:
                arrived_at = time.monotonic()
                with held_lock:
                    if delay > 0 and arrived_at > server._last_arrival:
                        server._last_arrival = arrived_at
                    server.arrived.append(self.path)
                    server.arrivals.append((arrived_at, self.path, self.headers.get("Range")))
                self.recorded = False
                try:
                    self._answer(arrived_at)
                finally:
                    if not self.recorded:  # the answer failed before it began to go out
                        self._record(arrived_at)

            def _record(self, arrived_at: float) -> None:
                """Record the exchange, dated now, before anything of the answer goes out.

                Recorded after the answer, a client can read the answer, finish its work and ask
                :meth:`RangeServer.waves` before this thread runs again (under load it is descheduled
                between the write and the record): the exchange is then missing from the waves. Dated
                after the answer, a request that arrived before that date would be counted one wave too
                early.
                """
                self.recorded = True
                with held_lock:
                    server.exchanges.append((arrived_at, time.monotonic(), self.path, self.headers.get("Range")))

            def _answer_empty(self, status: int) -> None:
                # send_error() closes the connection; nginx and buckets keep it open after a 404
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, arrived_at: float) -> None:
                if delay > 0:  # a bucket's round trip, ended when the client has gone quiet
                    while (left := server._wait_left(arrived_at, delay)) > 0 and (
                            time.monotonic() < arrived_at + QUIET_CAP * delay):
                        time.sleep(min(left, 0.01))
                if gate is not None and not gate.is_set():
                    with held_lock:  # handlers run on threads of their own: += is not atomic
                        server.held += 1
                    gate.wait(GATE_WAIT_S)
                    with held_lock:
                        server.held -= 1
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                self._record(arrived_at)  # nothing of the answer has gone out yet
                path = Path(self.translate_path(self.path))
                if not path.is_file():
                    self._answer_empty(404)
                    return
                size = path.stat().st_size
                if rng is None:
                    start, end, status = 0, size, 200
                else:
                    m = _RANGE.match(rng.strip())
                    if not m:
                        self._answer_empty(416)
                        return
                    a, b = m.groups()
                    if a == "":
                        start, end = max(0, size - int(b)), size
                    else:
                        start = int(a)
                        end = min(size, int(b) + 1) if b else size
                    if start >= size and size > 0:
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.send_header("Content-Length", "0")  # a kept-alive connection needs the length
                        self.end_headers()
                        return
                    status = 206
                with path.open("rb") as fh:
                    fh.seek(start)
                    body = fh.read(max(0, end - start))
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{max(start, end - 1)}/{size}")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Accept-Ranges", "bytes")
                with held_lock:  # counted before it goes out, as the exchange is recorded: see _record
                    server.bytes_sent += len(body)
                self.end_headers()
                self.wfile.write(body)


        class Server(ThreadingHTTPServer):
            # The default listen backlog of 5 overflows under concurrent clients (TensorStore issues
            # dozens of range requests at once) and the kernel then delays SYNs by a whole second.
            request_queue_size = 256
            daemon_threads = True

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._lock:
            self._server_threads.add(threading.get_native_id())
        self._httpd.serve_forever()

    def _wait_left(self, arrived_at: float, delay: float) -> float:
        """Seconds a request that arrived at ``arrived_at`` still waits: 0 once its batch is released.

        A batch (every request waiting) is released at once when the client has been quiet ``delay``
        seconds: answering part of it lets the client's reaction hold back the rest, splitting a wave.
        """
        with self._lock:
            now = time.monotonic()
            if arrived_at <= self._released:
                return 0.0
            if now - self._looked_at >= 0.01:  # one look per 10 ms however many handlers ask
                busy = thread_busy_seconds(self._server_threads)
                if any(t - self._busy.get(tid, 0.0) > BUSY_S for tid, t in busy.items()):
                    self._client_busy_at = now
                self._busy, self._looked_at = busy, now
            left = delay - (now - max(self._last_arrival, self._client_busy_at))
            if left <= 0:
                self._released = now
            return max(0.0, left)

    def waves(self, since: float = 0.0) -> list[tuple[int, str, str | None]]:
        """``(wave, path, range)`` of each request answered that arrived at ``since`` or later
        (``time.monotonic()``), in arrival order, waves numbered from 1.

        A request is in wave ``1 + w``, ``w`` the highest wave among the requests answered before it
        arrived (0 when none was): a client cannot have needed an answer it had not received. With a
        ``delay`` longer than the client takes to issue one wave, requests issued together are never
        counted as dependent, so the count is an upper bound of the client's dependent round trips.
        """
        out: list[tuple[int, str, str | None]] = []
        done: list[tuple[float, int]] = []  # (answered at, wave)
        for arrived_at, answered_at, path, rng in sorted(e for e in self.exchanges if e[0] >= since):
            wave = 1 + max((w for at, w in done if at <= arrived_at), default=0)
            out.append((wave, path, rng))
            done.append((answered_at, wave))
        return out

    def close(self) -> None:
        if self._gate is not None:
            self._gate.set()  # release held requests: no handler outlives the server
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:  # kept-alive connections too: after close() the server answers nothing
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            with contextlib.suppress(OSError):  # the client closed it already
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
