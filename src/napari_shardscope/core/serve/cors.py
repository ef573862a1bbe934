"""Which web pages may read the server's answers: none but its own, unless the user names an origin.

The Neuroglancer client is served by the server itself (``/v/<token>/``), so its fetches are
same-origin and need no CORS header. A header such as ``Access-Control-Allow-Origin: *`` would
let *any* page open in the user's browser read the served datasets and versions (the server
binds 127.0.0.1, but a browser is on 127.0.0.1 too; a page only has to guess the port). So no
CORS header is sent by default.

A user who reads the data from a Neuroglancer at another origin — one they run themselves
(``http://localhost:8080``), or a hosted one (``https://neuroglancer-demo.appspot.com``) — names
it (``shardscope serve … --cors ORIGIN``, ``ShardServer(cors=[...])``): a request from that exact
origin is answered with ``Access-Control-Allow-Origin: <origin>`` (and the range headers exposed),
a preflight also with ``Access-Control-Allow-Private-Network: true`` when Chrome asks for it (a
public page reaching a loopback server). Every answer then carries ``Vary: Origin``, so a cache
never hands one origin's answer to another. ``*`` is refused: it is the leak this module exists
to prevent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from napari_shardscope.core.errors import ArgumentError

#: Headers a cross-origin reader needs: byte ranges asked for, their answers' lengths read.
ALLOW_HEADERS = "range, content-type"
ALLOW_METHODS = "GET, HEAD, OPTIONS"
EXPOSE_HEADERS = "content-range, content-length, accept-ranges, etag"
#: Seconds a browser may remember a preflight's answer.
MAX_AGE = "86400"

_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])$")


def normalize_origin(text: str) -> str:
    """``scheme://host[:port]`` as a browser sends it in ``Origin`` (lower case, no trailing ``/``).

    Raises
    ------
    ArgumentError
        For anything but an ``http``/``https`` origin with a host: ``*``, a path, a bare host name.
    """
    raw = text.strip()
    try:
        parts = urlsplit(raw[:-1] if raw.endswith("/") and raw.count("/") == 3 else raw)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or not _HOST.match(parts.hostname) or parts.path or parts.query or parts.fragment
            or parts.username is not None or "@" in parts.netloc):
        raise ArgumentError(f"a CORS origin is a web origin such as http://localhost:8080 (scheme://host[:port], "
                            f"no path, not '*'), not {text!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")


@dataclass(frozen=True)
class CorsPolicy:
    """The origins allowed to read answers (empty: same-origin only, no CORS header at all)."""

    origins: frozenset[str] = frozenset()

    @classmethod
    def of(cls, origins: Iterable[str]) -> CorsPolicy:
        return cls(frozenset(normalize_origin(o) for o in origins))

    def headers(self, origin: str | None, *, preflight: bool = False, private_network: bool = False
                ) -> list[tuple[str, str]]:
        """The CORS headers of an answer to a request sent with ``Origin: origin``."""
        if not self.origins:
            return []
        out = [("Vary", "Origin")]
        if origin is None or origin.strip().lower() not in self.origins:
            return out
        out += [("Access-Control-Allow-Origin", origin.strip().lower()),
                ("Access-Control-Expose-Headers", EXPOSE_HEADERS)]
        if preflight:
            out += [("Access-Control-Allow-Headers", ALLOW_HEADERS), ("Access-Control-Allow-Methods", ALLOW_METHODS),
                    ("Access-Control-Max-Age", MAX_AGE)]
            if private_network:
                out.append(("Access-Control-Allow-Private-Network", "true"))
        return out
