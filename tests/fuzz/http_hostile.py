"""Hostile HTTP requests against ``shardscope serve``'s loopback server, one per seed, and what an answer must be.

Each seed builds one raw request (:func:`hostile_request`): a method (the ones served, others,
lower case, garbage), a path (dataset keys, a labelmap version's chunks and meshes, the client's
files, a remote store relayed through the server, and ``..``, ``%2e%2e``, ``%252e``, absolute paths,
backslashes, NUL, 5,000-digit numbers, 300-byte names), a version (HTTP/1.1, 1.0, 0.9, 2.0, junk),
and headers (a right or foreign ``Host``, ``Range`` values from the grammar and far outside it,
``If-Range``, bodies announced by ``Content-Length`` or ``Transfer-Encoding``, ``Expect``, folded,
unterminated, overlong and too many header lines). It is written to a fresh connection whose sending
side is then shut, and the answer is read (at most :data:`READ_CAP` bytes of body).

:func:`judge` holds every answer to the rules: an HTTP/1.x status line and headers; no 5xx but
``501`` (a method not served), ``505`` (an HTTP version not served) and, for the relayed remote
store, ``502`` (the host behind it refused); a ``Content-Length`` that is the number of bytes that
follow; a ``206``'s ``Content-Range`` matching it; a ``4xx`` for every ``GET`` or ``HEAD`` of a path
with a ``..``, NUL or backslash component; never the canary's bytes. :func:`fuzz_http` runs seeds
against a :class:`ServedWorld` while an audit hook (``runner.OutsideWatch``) records any file opened
outside the served roots and a log handler records every log record of the server: a traceback or a
record at ``ERROR`` is a finding, as is an answer that breaks a rule.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import mimetypes
import random
import re
import socket
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

#: Bytes of body read from an answer before the connection is closed (a 256 MiB file is not read whole).
READ_CAP = 256 << 10
#: Seconds a read from the server may wait (an answer that does not come within it is a finding).
READ_TIMEOUT = 30.0
#: Marker bytes of the canary file beside the served roots: no answer may carry them.
CANARY = b"SHARDSCOPE-HTTP-CANARY-7d41a2c9-OUTSIDE:" * 64
#: 5xx statuses that are right answers to bad input (RFC 9110: a method or version the server does not do).
ALLOWED_5XX = frozenset({501, 505})
#: Length of the sparse file among the served keys.
BIG = (256 << 20) + 3

_STATUS = re.compile(rb"^HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?$")
_CONTENT_RANGE = re.compile(r"^bytes ([0-9]+)-([0-9]+)/([0-9]+|\*)$")


# -- the world served -------------------------------------------------------------------------------------
@dataclass
class ServedWorld:
    """A running server over a dataset directory, a labelmap version, the client and a relayed remote store."""

    base: Path
    roots: Path
    server: Any
    version_prefix: str
    supervoxel: int
    closers: list[Any] = field(default_factory=list)
    #: The path of a state document the server handed out a link to (``/state/<sha256>.json``).
    state_path: str = ""

    @property
    def port(self) -> int:
        return int(self.server.port)

    def close(self) -> None:
        for close in reversed(self.closers):
            with contextlib.suppress(Exception):
                close()


def build_world(base: Path) -> ServedWorld:
    """Files, links, a FIFO and a labelmap repository under ``base/roots``; the canary at ``base/secret``."""
    import os

    import numpy as np

    from napari_shardscope.core.bytestore import open_store
    from napari_shardscope.core.labelmap import create_labelmap
    from napari_shardscope.core.serve.handoff import mount_version
    from napari_shardscope.core.serve.server import ShardServer, StoreMount
    from napari_shardscope.core.versioned import create_repository
    from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

    roots = base / "roots"
    ds = roots / "ds"
    (ds / "sub").mkdir(parents=True)
    (ds / "dir").mkdir()
    (base / "secret").write_bytes(CANARY)
    (ds / "small").write_bytes(bytes(range(256)) * 4)
    (ds / "empty").write_bytes(b"")
    (ds / "info").write_text(json.dumps({"@type": "neuroglancer_multiscale_volume"}))
    (ds / "sub" / "x").write_bytes(b"x" * 100)
    with open(ds / "big", "wb") as fh:
        fh.write(b"BIG-FILE-START")
        fh.truncate(BIG)
    (ds / "link").symlink_to(base / "secret")
    (ds / "sub" / "uplink").symlink_to("../../../secret")
    (ds / "inlink").symlink_to("small")
    os.mkfifo(ds / "fifo")
    seg = voronoi_supervoxels((8, 32, 32), 6, seed=5)
    write_precomputed(roots / "seg", seg, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 16, 4), sharded=True)
    repo = create_repository(roots / "repo")
    lm = create_labelmap(repo, "seg", roots / "seg", block=16)
    svs = [int(s) for s in np.unique(seg)]
    lm.at("main").merge(svs[0], [svs[1]])
    server = ShardServer()
    world = ServedWorld(base, roots, server, "", svs[0], [repo.close, server.stop])
    server.client_root()
    server.mount("data/ds", StoreMount(open_store(str(ds))))
    server.mount("data/remote", StoreMount(open_store(server.url + "/data/ds/")))
    layer = mount_version(server, lm, "main")
    world.version_prefix = layer.layer.source.removeprefix("precomputed://").removeprefix(server.url)
    world.state_path = server.state_document_url({"layers": [{"type": "segmentation", "name": "seg",
                                                              "source": layer.layer.source}]}).removeprefix(server.url)
    return world


# -- requests -----------------------------------------------------------------------------------------
_METHODS = ["GET"] * 8 + ["HEAD"] * 3 + ["OPTIONS", "POST", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT", "get",
                                           "G\x00T", "GET\tGET", "\xff\xfe", "X" * 300, "M-SEARCH", "PRI"]
_HOSTILE_KEYS = [
    "..", "../secret", "../../secret", "%2e%2e/secret", "%2E%2e%2Fsecret", "..%2fsecret", "..%2F..%2Fsecret",
    "%252e%252e/secret", "sub/../../secret", "sub/..%2f..%2fsecret", "./small", "sub//x", ".", "%2e",
    "%00", "small%00", "small\x00", "%5c..%5csecret", "\\..\\secret", "..\\secret", "/etc/passwd",
    "%2fetc%2fpasswd", "//etc/passwd", "%2F%2Fetc/passwd", "a" * 300, "/".join(["ab"] * 2100), "ü", "%ff%fe",
    "%", "%zz", "%2", "small%", "sub/%2e%2e/%2e%2e/secret", "link", "sub/uplink", "fifo", "dir", "dir/", "sub/",
    "~/.ssh/id_rsa", "%7e", "small;x", "small/", "small/..", "small/../..", "..;/secret", "...", "....//secret",
    "%c0%ae%c0%ae/secret", "%e0%80%ae%e0%80%ae/secret", "%u002e%u002e/secret", "sub/x%00.json",
]
_GOOD_KEYS = ["small", "empty", "info", "sub/x", "big", "inlink"]
_VERSION_KEYS = ["info", "s0/0-16_0-16_0-8", "s1/0-16_0-16_0-8", "s0/16-32_16-32_0-8", "s0/0-32_0-32_0-8",
                 "s0/0-16_0-16_0-9", "s9/0-16_0-16_0-8", "s0/" + "9" * 5000 + "-1_0-16_0-8",
                 "s0/-16-0_0-16_0-8", "mesh/info", "mesh/{sv}:0", "mesh/{sv}:0:body", "mesh/1:0",
                 "mesh/" + "9" * 5000 + ":0", f"mesh/{1 << 64}:0:body", "mesh/-1:0", "mesh/{sv}", "mesh/{sv}:1",
                 "s0/0-16_0-16_0-8/..", "s0/", "s0"]
_CLIENT_KEYS = ["", "index.html", "main.bundle.js", "nonexistent.js", "../index.html", "%2e%2e/%2e%2e/secret",
                "static/../../secret", "a" * 300]
#: Names below ``/state/`` (``{doc}``: the published document's name).
_STATE_NAMES = ["{doc}", "{doc}/", "{doc}/..", "{doc}%00", "{doc}.json", "0" * 64 + ".json", "0" * 63 + ".json",
                "0" * 64, "F" * 64 + ".json", "..", "../data/ds/small", "%2e%2e/data/ds/small", "..%2fsecret",
                "x" * 300 + ".json", "9" * 5000 + ".json", "/".join(["ab"] * 2100), "", "%", "%zz", "sub/{doc}",
                "{doc}?x", "%30" * 64 + ".json"]
_IF_RANGE = ['"x"', "Wed, 21 Oct 2015 07:28:00 GMT", "", "W/\"1\""]
_VERSIONS = ["HTTP/1.1"] * 12 + ["HTTP/1.0"] * 3 + ["", "HTTP/0.9", "HTTP/2.0", "HTTP/1.1x", "FOO", "HTTP/1.1 x",
                                                    "HTTP/9.9", "http/1.1", "HTTP/1.10"]


def hostile_range(rng: random.Random) -> str:
    """A ``Range`` value: in the grammar (satisfiable or not), near it, or far from it."""
    def num() -> str:
        return rng.choice([str(rng.randrange(0, 2048)), str(rng.randrange(0, BIG + 10)), "0", str(BIG), str(BIG - 1),
                           "9" * rng.choice((19, 20, 21, 300, 5000)), "00000000000000000000000000001", "-1", "1e3",
                           "０", " 1", "0x10", ""])
    unit = rng.choice(["bytes"] * 8 + ["BYTES", "bytes ", " bytes", "items", "", "bytes=bytes"])
    specs = [f"{num()}-{num()}" if rng.random() < 0.7 else f"-{num()}" for _ in range(rng.choice((1, 1, 1, 2, 3, 50)))]
    sep = rng.choice([",", ", ", " ,", ",,", ";"])
    return f"{unit}={sep.join(specs)}" if rng.random() < 0.95 else rng.choice(["bytes", "=", "bytes=", "bytes=-"])


def hostile_path(rng: random.Random, world: ServedWorld) -> str:
    token = world.server.token
    kind = rng.random()
    if kind < 0.35:
        path = "/data/" + rng.choice(["ds", "remote"]) + "/" + rng.choice(_HOSTILE_KEYS + _GOOD_KEYS)
    elif kind < 0.55:
        path = world.version_prefix + rng.choice(_VERSION_KEYS).replace("{sv}", str(world.supervoxel))
    elif kind < 0.68:
        path = f"/v/{rng.choice([token, 'x', '..', ''])}/" + rng.choice(_CLIENT_KEYS)
    elif kind < 0.72:
        path = rng.choice([f"/events/{token}", "/events/", "/events"])
    elif kind < 0.75:
        doc = world.state_path.rsplit("/", 1)[-1]
        path = "/state/" + rng.choice(_STATE_NAMES).replace("{doc}", doc)
    elif kind < 0.8:
        path = rng.choice(["/", "", "*", "/data", "/data/", "/version/", "/v", "/v/", "/data/ds", "/data/nope/x",
                           f"http://127.0.0.1:{world.port}/data/ds/small", "http://evil.example/data/ds/small",
                           "//data/ds/small", "/data/ds/small?x=1#y", "/data/ds/%73mall", "/%64ata/ds/small"])
    else:  # random bytes and pieces
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-._~%/?#[]@!$&'()*+,;= \t\\\x00\x7f\u00e9\u4e2d"
        path = "/data/ds/" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
    if rng.random() < 0.1:
        path += rng.choice(["?", "?a=b", "#x", "?%00", ";x", "/"])
    return path


def hostile_request(seed: int, world: ServedWorld) -> bytes:
    """The raw bytes of request ``seed`` (the same seed and world give the same bytes)."""
    rng = random.Random(seed)
    clean = rng.random() < 0.5  # half the requests are well-formed around a hostile path, range or header
    method = rng.choice(["GET"] * 3 + ["HEAD"]) if clean else rng.choice(_METHODS)
    path = hostile_path(rng, world)
    version = "HTTP/1.1" if clean else rng.choice(_VERSIONS)
    eol = "\r\n" if clean or rng.random() < 0.95 else "\n"
    line = " ".join(p for p in (method, path, version) if p != "" or rng.random() < 0.1)
    headers: list[str] = []
    host = f"127.0.0.1:{world.port}" if clean else rng.choice(
        [f"127.0.0.1:{world.port}"] * 6 + [f"localhost:{world.port}", "evil.example", "", "127.0.0.1",
                                           f"[::1]:{world.port}", "a" * 1000, None])
    if host is not None:
        headers.append(f"Host: {host}")
    body = b""
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        what = rng.random() * (0.5 if clean else 1.0)  # clean: ranges, If-Range, bodies only
        if what < 0.45:
            headers.append(f"Range: {hostile_range(rng)}")
        elif what < 0.52:
            headers.append("If-Range: " + rng.choice(_IF_RANGE))
        elif what < 0.6:
            n = rng.choice((0, 5, 100, 1 << 40))
            headers.append(f"Content-Length: {n}")
            body = b"b" * min(n, 100)
        elif what < 0.65:
            headers.append(rng.choice(["Content-Length: -1", "Content-Length: abc", "Content-Length: 5, 6",
                                       "Content-Length: " + "9" * 5000]))
        elif what < 0.7:
            headers.append("Transfer-Encoding: chunked")
            body = b"5\r\nhello\r\n0\r\n\r\n"
        elif what < 0.74:
            headers.append("Expect: 100-continue")
        elif what < 0.8:
            headers.append(rng.choice(["Connection: close", "Connection: keep-alive", "Connection: upgrade",
                                       "Upgrade: h2c"]))
        elif what < 0.85:
            headers.append(rng.choice(["X-Folded: a", " continued", "NoColonHere", ": empty name", "X: \x00\x01",
                                       "Range : bytes=0-1", "X-Latin: \u00e9\u00e8"]))
        elif what < 0.88:
            headers.append("X-Long: " + "a" * rng.choice((8000, 70000)))
        elif what < 0.9:
            headers.extend(f"X-{i}: {i}" for i in range(rng.choice((50, 120))))
        else:
            headers.append(rng.choice(["Origin: http://evil.example", "Accept-Encoding: gzip",
                                       "Cookie: a=b", "Authorization: Basic Zm9vOmJhcg==", "Range: bytes=0-1"]))
    text = line + eol + "".join(h + eol for h in headers)
    if clean or rng.random() < 0.97:
        text += eol  # else: the header block never ends (the sending side is shut instead)
    return text.encode("utf-8", "surrogateescape") + body


# -- answers -----------------------------------------------------------------------------------------------
@dataclass
class Answer:
    status: int | None
    headers: dict[str, str]
    body: bytes
    complete: bool
    raw_head: bytes
    problem: str = ""


def exchange(port: int, request: bytes) -> Answer:
    """Send ``request`` on a new connection, shut the sending side, read the answer (interim 1xx skipped).

    The body is read until the server closes the connection (it does once it has answered: the
    request's sending side is shut) or :data:`READ_CAP` bytes have come; an event stream only to its headers.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT) as sock:
        with contextlib.suppress(OSError):  # the server may answer (and close) before all of it is sent
            sock.sendall(request)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        data = bytearray()
        closed = False
        try:
            while True:
                head_end = data.find(b"\r\n\r\n")
                if head_end >= 0:
                    first = bytes(data[: data.find(b"\r\n")])
                    m = _STATUS.match(first)
                    if m is not None and m.group(1).startswith(b"1"):  # 100 Continue: the answer follows
                        del data[: head_end + 4]
                        continue
                    if b"text/event-stream" in bytes(data[:head_end]).lower() or len(data) - head_end - 4 > READ_CAP:
                        break
                piece = sock.recv(1 << 16)
                if not piece:
                    closed = True
                    break
                data += piece
        except TimeoutError:
            return Answer(None, {}, b"", False, bytes(data[:200]), f"no complete answer within {READ_TIMEOUT} s")
        except ConnectionResetError:
            closed = True
        return parse_answer(bytes(data), closed=closed)


def parse_answer(data: bytes, *, closed: bool) -> Answer:
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return Answer(None, {}, b"", closed, data[:200], "" if not data else "answer without a complete header block")
    lines = data[:head_end].split(b"\r\n")
    m = _STATUS.match(lines[0])
    if m is None:
        return Answer(None, {}, b"", closed, data[:200], f"bad status line {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, sep, value = raw.partition(b":")
        if not sep or not name or name != name.strip():
            return Answer(int(m.group(1)), headers, b"", closed, data[:200], f"bad header line {raw[:100]!r}")
        headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    return Answer(int(m.group(1)), headers, data[head_end + 4:], closed, data[:head_end])


def is_traversal(path_bytes: bytes) -> bool:
    """Whether a request path, percent-decoded once as the server does, names a ``..``, NUL or backslash component."""
    path = unquote(path_bytes.decode("utf-8", "replace").split("?", 1)[0].split("#", 1)[0])
    return "\x00" in path or "\\" in path or any(part == ".." for part in path.split("/"))


def judge(request: bytes, answer: Answer) -> str:
    """What is wrong with ``answer`` to ``request`` ("" when nothing)."""
    if answer.problem:
        return answer.problem
    words = request.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
    if answer.status is None:
        # nothing at all: only for a request with no request line (the server has nothing to answer)
        return "" if not words else "no answer"
    method = words[0] if words else b""
    status = answer.status
    relayed = len(words) >= 2 and words[1].startswith(b"/data/remote/")
    if status >= 500 and status not in ALLOWED_5XX and not (status == 502 and relayed):
        return f"status {status} ({answer.body[:200]!r})"
    if CANARY[:24] in answer.body or CANARY[:24] in answer.raw_head:
        return "canary bytes in the answer"
    if method in (b"GET", b"HEAD") and len(words) >= 2 and is_traversal(words[1]) and status < 400:
        return f"status {status} for a path with a '..', NUL or backslash component"
    no_body = method == b"HEAD" or status in (204, 304) or status < 200
    if "content-length" not in answer.headers:
        return "" if answer.headers.get("content-type") == "text/event-stream" else "no Content-Length"
    try:
        length = int(answer.headers["content-length"])
    except ValueError:
        return f"Content-Length {answer.headers['content-length']!r}"
    expected = 0 if no_body else length
    got = len(answer.body)
    if expected <= READ_CAP and got != expected:
        return f"Content-Length {length} but {got} bytes followed"
    if expected > READ_CAP and got < READ_CAP:
        return f"Content-Length {length} but the body ended after {got} bytes"
    if status == 206:
        m = _CONTENT_RANGE.match(answer.headers.get("content-range", ""))
        if m is None or int(m.group(2)) - int(m.group(1)) + 1 != length:
            return f"206 with Content-Range {answer.headers.get('content-range')!r} and length {length}"
    if status == 416 and not re.match(r"^bytes \*/[0-9]+$", answer.headers.get("content-range", "")):
        return f"416 with Content-Range {answer.headers.get('content-range')!r}"
    return ""


# -- running ---------------------------------------------------------------------------------------------
class _Records(logging.Handler):
    """Every log record of the server's loggers (and its message, formatted once)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[logging.LogRecord, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record, record.getMessage()))


@dataclass
class HttpReport:
    """What a run of requests gave: statuses, and every finding with the seed that reproduces it."""

    requests: int = 0
    statuses: Counter[int | None] = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        top = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items(), key=lambda kv: -kv[1]))
        return f"{self.requests} requests, statuses {top}; {len(self.findings)} findings"


@contextlib.contextmanager
def watched(world: ServedWorld, watch: Any) -> Iterator[tuple[_Records, io.StringIO]]:
    """Log records, stderr and the audit hook over the served roots, while the requests run."""
    mimetypes.init()  # it reads /etc/mime.types once: not a read a request made
    records = _Records()
    logger = logging.getLogger("napari_shardscope.core.serve")
    old_level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), watch.watching(world.roots):
            yield records, err
    finally:
        logger.removeHandler(records)
        logger.setLevel(old_level)


def fuzz_http(seeds: Iterable[int], world: ServedWorld, watch: Any, report: HttpReport | None = None) -> HttpReport:
    """Send the request of each seed; every answer judged, and the log and the audit hook checked after each."""
    report = report or HttpReport()
    with watched(world, watch) as (records, err):
        for seed in seeds:
            request = hostile_request(seed, world)
            answer = exchange(world.port, request)
            report.requests += 1
            report.statuses[answer.status] += 1
            problems = [judge(request, answer)]
            for record, message in records.records:
                if record.exc_info is not None or record.levelno >= logging.ERROR or "\n" in message:
                    problems.append(f"log record at {record.levelname}: {message[:300]}"
                                    + (" (with a traceback)" if record.exc_info else ""))
            records.records.clear()
            if "Traceback" in err.getvalue():
                problems.append("a traceback on stderr: " + err.getvalue()[-1000:])
            err.seek(0)
            err.truncate()
            if watch.seen:
                problems.append("opened outside the served roots: " + "; ".join(watch.seen[:3]))
                watch.seen.clear()
            for problem in filter(None, problems):
                report.findings.append({"seed": seed, "problem": problem, "request": request[:300].decode("latin-1"),
                                        "status": answer.status})
    return report


def replay_http(seed: int, world: ServedWorld) -> str:
    """Request ``seed`` and its answer, as text (``scripts/fuzz.py --serve --replay SEED``)."""
    request = hostile_request(seed, world)
    answer = exchange(world.port, request)
    return (f"request {request[:2000]!r}\nstatus {answer.status} headers {answer.headers}\n"
            f"body {answer.body[:500]!r}\njudged: {judge(request, answer) or 'ok'}")
