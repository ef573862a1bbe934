"""Shared fixtures: a range-capable HTTP server on loopback; the hypothesis profile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.http_range_server import RangeServer

# No per-example deadline: the machine is shared and noisy, and tests never assert on timing.
settings.register_profile("shardscope", deadline=None, print_blob=True)
settings.load_profile("shardscope")


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
