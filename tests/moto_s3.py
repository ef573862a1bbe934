"""A real S3 API for tests: moto's werkzeug app served in-process on 127.0.0.1, reached through TensorStore.

Not moto's ``ThreadedMotoServer``: its default binds every interface and its start waits without a
bound. Here the server is bound to 127.0.0.1 on a free port and startup is bounded. Connections get
threads (TensorStore keeps idle keep-alive connections open, which would block a server with one
thread) but requests run one at a time under a lock, so moto's check-then-put of a conditional
write is atomic, as on S3. Clients use dummy credentials (requests are still signed) and find the
endpoint through ``AWS_ENDPOINT_URL``, as a user's environment would point at a non-AWS S3.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str

    def env(self) -> dict[str, str]:
        """Environment a client process needs to reach the server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def make_public(self) -> None:
        """Let anyone read this bucket (a bucket policy, as a lab publishing a dataset would set)."""
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"]}]}
        req = urllib.request.Request(f"{self.endpoint}/{self.bucket}?policy", method="PUT",
                                     data=json.dumps(policy).encode(), headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).close()

    def new_bucket(self) -> str:
        name = f"b{uuid.uuid4().hex[:12]}"
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=30).close()
        return name


@dataclass
class _Served:
    """Bytes of GET responses every moto server in this process sent (a test compares before and after:
    the server runs in the test's process, so tracemalloc cannot tell the client's reads from its own)."""

    bytes: int = 0


SERVED = _Served()


@contextmanager
def serve_moto(drop_headers: Sequence[str] = (), *, log: list[tuple[str, str, str | None]] | None = None,
               delay: float = 0.0) -> Iterator[str]:
    """moto's S3 app on 127.0.0.1 (free port, requests one at a time); its endpoint URL.

    ``drop_headers``: WSGI environ keys removed from every request (``HTTP_IF_MATCH`` … makes an
    S3 look-alike that ignores conditional writes). ``log``: each request's ``(method, path,
    Range header)`` is appended as it arrives (what a test counts). ``delay``: every request waits
    that many seconds before it is served, outside the one-at-a-time lock, so requests in flight
    together still overlap (a bucket's round trip, for benchmarks).
    """
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    moto_app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def app(environ: Any, start_response: Any) -> Any:
        for header in drop_headers:
            environ.pop(header, None)
        if log is not None:
            log.append((environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE")))
        if delay > 0:
            time.sleep(delay)
        with one_at_a_time:
            body = list(moto_app(environ, start_response))
            if environ.get("REQUEST_METHOD") == "GET":
                SERVED.bytes += sum(len(part) for part in body)
            return body

    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{server.host}:{server.port}"  # werkzeug sets port to the one bound (port 0 asked)
    finally:
        server.shutdown()
        thread.join(START_TIMEOUT_S)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with serve_moto() as endpoint:
        bucket = S3Server(endpoint, "").new_bucket()  # bounded: urlopen's timeout
        yield S3Server(endpoint, bucket)


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server with this process's environment pointing at it (and a fresh bucket per test)."""
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    return S3Server(s3_server.endpoint, s3_server.new_bucket())
