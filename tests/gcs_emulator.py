"""A Google Cloud Storage JSON API for tests: gcp-storage-emulator served in-process on 127.0.0.1.

TensorStore's ``gcs`` kvstore driver is pointed at it by ``TENSORSTORE_GCS_HTTP_URL`` (the
driver's own variable, read when a store opens; ``parse_url`` needs no change) and sends no
credentials: none are configured, and ``GCE_METADATA_ROOT`` names a closed local port so no
metadata server is asked. The emulator binds 127.0.0.1 on a free port; startup is bounded.

What it is NOT: a store with compare-and-swap. gcp-storage-emulator (2026.7.19) ignores
``ifGenerationMatch`` — a create over an existing object and a write with a stale generation both
succeed — so the remotes' CAS probe must refuse to push to it (see the tests using this fixture).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class GcsServer:
    endpoint: str
    bucket: str

    def env(self) -> dict[str, str]:
        """Environment a client process needs to reach the emulator without credentials."""
        return {"TENSORSTORE_GCS_HTTP_URL": self.endpoint, "GCE_METADATA_ROOT": "127.0.0.1:9",
                "GOOGLE_APPLICATION_CREDENTIALS": ""}

    def url(self, prefix: str) -> str:
        return f"gs://{self.bucket}/{prefix}"


@contextmanager
def serve_gcs() -> Iterator[tuple[str, Any]]:
    """The emulator on 127.0.0.1 (free port, in memory); its endpoint URL and the server object."""
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", 0, in_memory=True)
    api = server._api  # the emulator's thread: bind port 0 and wait with a bound (its start() waits forever)
    api.daemon = True
    api.start()
    if not api.is_running.wait(START_TIMEOUT_S) or api._httpd is None:
        raise RuntimeError(f"gcp-storage-emulator did not start within {START_TIMEOUT_S} s")
    host, port = api._httpd.server_address[:2]
    try:
        yield f"http://{host}:{port}", server
    finally:
        server.stop()


def new_bucket(server: Any) -> str:
    from gcp_storage_emulator.handlers import buckets

    name = f"b{uuid.uuid4().hex[:12]}"
    buckets.create_bucket(name, server._storage)
    return name


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[tuple[str, Any]]:
    with serve_gcs() as running:
        yield running


@pytest.fixture
def gcs(gcs_server: tuple[str, Any], monkeypatch: pytest.MonkeyPatch) -> GcsServer:
    """The emulator with this process's environment pointing at it (and a fresh bucket per test)."""
    endpoint, server = gcs_server
    found = GcsServer(endpoint, new_bucket(server))
    for k, v in found.env().items():
        if v:
            monkeypatch.setenv(k, v)
        else:
            monkeypatch.delenv(k, raising=False)
    return found
