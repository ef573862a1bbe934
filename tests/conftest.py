"""Shared fixtures: a range-capable HTTP server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http_range_server import RangeServer


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, RangeServer]]:
    """A directory served over HTTP with Range support: ``(directory, server)``."""
    root = tmp_path / "served"
    root.mkdir()
    server = RangeServer(root)
    try:
        yield root, server
    finally:
        server.close()
