"""Loopback HTTP servers that misbehave, for the remote-I/O limit tests (no tests here).

Each binds 127.0.0.1 on a free port, serves from a daemon thread whose loops are bounded (a
listening timeout and a deadline), and is closed by :meth:`FaultServer.close`:

* ``"stall"``  accepts the connection and never answers (a host that hangs);
* ``"reset"``  accepts and resets the connection at once (RST, as a crashing proxy does);
* ``"lie"``    answers 200 with a ``Content-Length`` larger than the body it sends, then closes.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

#: No server thread outlives this, whatever the test does.
MAX_LIFETIME_S = 120.0


class FaultServer:
    """A misbehaving server (``mode`` is ``"stall"``, ``"reset"`` or ``"lie"``) at ``self.url``."""

    def __init__(self, mode: str) -> None:
        if mode not in ("stall", "reset", "lie"):
            raise ValueError(mode)
        self.mode = mode
        self.connections = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/data/"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + MAX_LIFETIME_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # the accept timeout, or the socket closed
                continue
            self.connections += 1
            if self.mode == "stall":
                self._held.append(conn)  # never answered, closed by close()
            elif self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()  # linger 0: the close sends RST
            else:
                self._lie(conn)

    @staticmethod
    def _lie(conn: socket.socket) -> None:
        conn.settimeout(1.0)
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nContent-Type: application/json\r\n\r\n"
                         b'{"type": "image"')
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._sock.close()

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
