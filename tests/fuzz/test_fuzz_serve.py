"""Hostile HTTP requests against ``serve``'s loopback server: only well-formed answers, no traceback, no read
outside the served roots (``http_hostile.py``; the long run is ``scripts/fuzz.py --serve``).

The seeded CI run sends :data:`CI_REQUESTS` requests (about ten seconds); the checks below it make
sure the run cannot pass vacuously: every kind of answer occurs, and the judge, the log check and
the audit hook each catch what they are for.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.http_hostile import (
    BIG,
    CANARY,
    Answer,
    HttpReport,
    ServedWorld,
    build_world,
    exchange,
    fuzz_http,
    hostile_request,
    judge,
    parse_answer,
)
from tests.fuzz.runner import OutsideWatch

#: Seeds of the CI run, and of the slow run (``SHARDSCOPE_FUZZ_SLOW=1``).
CI_REQUESTS = range(0, 6000)
SLOW_REQUESTS = range(1_000_000, 1_100_000)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedWorld]:
    served = build_world(tmp_path_factory.mktemp("http-fuzz"))
    yield served
    served.close()


@pytest.fixture(scope="module")
def watch() -> OutsideWatch:
    return OutsideWatch()


@pytest.fixture(scope="module")
def ci_report(world: ServedWorld, watch: OutsideWatch) -> HttpReport:
    return fuzz_http(CI_REQUESTS, world, watch)


def _findings(report: HttpReport) -> str:
    return "\n".join(f"seed={f['seed']} status={f['status']}: {f['problem']}\n  {f['request'][:300]!r}"
                     for f in report.findings[:10])


def test_hostile_requests_get_well_formed_answers(ci_report: HttpReport) -> None:
    assert ci_report.requests == len(CI_REQUESTS)
    assert not ci_report.findings, _findings(ci_report)


def test_the_run_reaches_every_kind_of_answer(ci_report: HttpReport) -> None:
    """A generator that stopped producing ranges, traversals or bad request lines would pass vacuously."""
    for status in (200, 204, 206, 400, 404, 416, 421, 431, 501, 505):
        assert ci_report.statuses[status] > 0, ci_report.summary()


def test_the_server_still_serves_after_the_run(ci_report: HttpReport, world: ServedWorld) -> None:
    request = f"GET /data/ds/big HTTP/1.1\r\nHost: 127.0.0.1:{world.port}\r\nRange: bytes=0-13\r\n\r\n".encode()
    answer = exchange(world.port, request)
    assert (answer.status, answer.body) == (206, b"BIG-FILE-START")
    assert answer.headers["content-range"] == f"bytes 0-13/{BIG}" and not judge(request, answer)


def test_a_seed_always_builds_the_same_request(world: ServedWorld) -> None:
    assert [hostile_request(s, world) for s in (1, 77, 4242)] == [hostile_request(s, world) for s in (1, 77, 4242)]


def test_the_judge_catches_bad_answers() -> None:
    get = b"GET /data/ds/small HTTP/1.1\r\nHost: x\r\n\r\n"

    def answer(head: str, body: bytes = b"") -> Answer:
        return parse_answer(head.encode() + b"\r\n\r\n" + body, closed=True)

    assert judge(get, answer("HTTP/1.1 200 OK\r\nContent-Length: 3", b"abc")) == ""
    assert "status 500" in judge(get, answer("HTTP/1.1 500 Oops\r\nContent-Length: 0"))
    assert "Content-Length" in judge(get, answer("HTTP/1.1 200 OK\r\nContent-Length: 4", b"abc"))
    assert "Content-Length" in judge(get, answer("HTTP/1.1 200 OK", b"abc"))
    assert "canary" in judge(get, answer(f"HTTP/1.1 200 OK\r\nContent-Length: {len(CANARY)}", CANARY))
    up = b"GET /data/ds/%2e%2e/secret HTTP/1.1\r\n\r\n"
    assert "'..'" in judge(up, answer("HTTP/1.1 200 OK\r\nContent-Length: 0"))
    assert "206" in judge(get, answer("HTTP/1.1 206 Partial\r\nContent-Length: 2\r\nContent-Range: bytes 0-2/9", b"ab"))
    assert "status line" in judge(get, parse_answer(b"abc\r\n\r\n", closed=True))
    assert judge(get, parse_answer(b"", closed=True)) == "no answer"


def test_the_log_check_and_the_audit_hook_catch_what_they_are_for(world: ServedWorld, watch: OutsideWatch) -> None:
    """A log record with a traceback and a file opened outside the roots while requests run are findings."""
    report = HttpReport()
    logger = logging.getLogger("napari_shardscope.core.serve.server")

    class Spoiler:
        """Runs inside the request loop: between two requests, a traceback is logged and a file outside is read."""

        def __iter__(self) -> Iterator[int]:
            yield 1
            try:
                raise ValueError("planted")
            except ValueError:
                logger.exception("planted traceback")
            (world.base / "secret").read_bytes()
            yield 2

    fuzz_http(Spoiler(), world, watch, report)
    problems = " ".join(f["problem"] for f in report.findings)
    assert "traceback" in problems and "outside the served roots" in problems, problems


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SHARDSCOPE_FUZZ_SLOW"), reason="set SHARDSCOPE_FUZZ_SLOW=1 (a few minutes)")
def test_a_longer_run_finds_nothing(world: ServedWorld, watch: OutsideWatch) -> None:
    report = fuzz_http(SLOW_REQUESTS, world, watch)
    assert not report.findings, _findings(report)


def test_state_documents_answer_only_their_own_names(world: ServedWorld) -> None:
    """``/state/<sha256>.json``: the published document (whole, by range, ``HEAD``); any other name, a
    traversal or a name of thousands of characters, a plain 404 that reads nothing."""
    port = world.port
    doc = world.state_path.rsplit("/", 1)[-1]
    good = f"GET {world.state_path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    answer = exchange(port, good)
    assert answer.status == 200 and json.loads(answer.body)["layers"][0]["name"] == "seg" and not judge(good, answer)
    for name in ["0" * 64 + ".json", doc.upper(), doc + "/..", f"../data/ds/small#{doc}", "%2e%2e/data/ds/small",
                 "..%2f..%2fsecret", "..", "9" * 5000 + ".json", "/".join(["ab"] * 2100), doc[:-5], "sub/" + doc]:
        for method in ("GET", "HEAD"):
            request = f"{method} /state/{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            answer = exchange(port, request)
            assert answer.status in (400, 404), (name[:80], answer.status)
            assert b"small" not in answer.body or b"no key" in answer.body, answer.body[:200]
            assert bytes(range(16)) not in answer.body and CANARY[:24] not in answer.body
            assert judge(request, answer) == "", (name[:80], judge(request, answer))


def test_requests_that_once_broke_the_server(world: ServedWorld) -> None:
    """Findings of the fuzz run on the old server, each a request of a kind that got a 500, a traceback or a
    Content-Length that was not the body's."""
    port = world.port
    cases = [  # (request, the status it gets now)
        (f"GET /data/ds/big HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nRange: bytes={'9' * 5000}-\r\n\r\n", 200),  # 500
        (f"GET /data/ds/dir HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", 404),  # 500: a directory
        (f"GET /data/ds/{'a' * 300} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", 404),  # 500: ENAMETOOLONG
        (f"GET /v/{'a' * 300}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", 404),  # a traceback in the log
        ("HEAD /data/ds/small\x00\r\nHost: x\r\n\r\n", 400),  # an HTTP/0.9 line: no status line, a body after HEAD
        (f"GET /data/ds/small HTTP/0.9\r\nHost: 127.0.0.1:{port}\r\n\r\n", 400),  # no status line at all
        (f"HEAD /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nRange : bytes=0-1\r\nContent-Length: 3\r\n\r\nabc",
         400),  # the body was read as a second request
        (f"GET /events/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nbbbbb",
         404),  # the same, by a second Content-Length
        (f"GET /data/remote/link HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", 502),  # the origin's 400 as a 500
    ]
    for text, status in cases:
        request = text.encode()
        answer = exchange(port, request)
        assert answer.status == status, (text[:200], answer.status)
        assert judge(request, answer) == "", (text[:200], judge(request, answer))
    assert CANARY[:24] not in Path(world.roots / "ds" / "small").read_bytes()
