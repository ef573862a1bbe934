"""Opening every format over loopback HTTP: each document is asked for once, in one request, never probed.

A metadata document is read bounded (a hostile server's 5 GiB ``info`` must not be downloaded),
and over HTTP that costs one GET asking for its first 64 KiB (``bytestore/bounded.py``), not a
one-byte probe and then the read. Format detection asks for every format's document at once; an
opener then needing one of them (N5's ``s0/attributes.json``) is answered from what detection
read. Opening reads metadata only: no chunk, no shard.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore.bounded import FIRST_WINDOW
from napari_shardscope.core.volumes import open_volume
from tests.http_range_server import RangeServer
from tests.volume_cases import FormatCase, build_format_cases


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, FormatCase], RangeServer]]:
    root = tmp_path_factory.mktemp("openreq")
    cases = build_format_cases(root)
    server = RangeServer(root)
    try:
        yield root, cases, server
    finally:
        server.close()


CASES = ["precomputed", "precomputed-channels", "zarr3", "n5", "n5-multiscale", "n5-bdv", "zarr2", "ome-zarr",
         "ome-zarr-0.4"]


@pytest.mark.parametrize("name", CASES)
def test_opening_over_http_asks_for_each_document_once(served: tuple[Path, dict[str, FormatCase], RangeServer],
                                                       name: str) -> None:
    root, cases, server = served
    case = cases[name]
    server.requests.clear()
    vol = open_volume(server.url + case.path.relative_to(root).as_posix())
    assert vol.levels[0].array.shape == case.shape
    asked = Counter(path for path, _ in server.requests)
    assert asked and max(asked.values()) == 1, asked  # no key asked for twice in one open
    # every request is a bounded whole read: the first window, no probe at the limit, no other range
    assert {rng for _, rng in server.requests} == {f"bytes=0-{FIRST_WINDOW - 1}"}, server.requests
