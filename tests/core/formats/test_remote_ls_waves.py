"""Dependent round trips of a remote ``ls``: the chunk listing of a sharded scale over loopback HTTP.

The server answers requests 0.2 s after the client goes quiet and numbers each request one wave after the latest wave
answered before it arrived (:meth:`RangeServer.waves`), so the count is what the client's
dependencies force, not a time. ``ls`` of a precomputed scale needs the ``info`` document, the
shard-index probes (plain HTTP cannot list) and the minishard indexes: three waves, whatever the
number of shards (one per shard before, one after the other). A zarr v3 array needs its
``zarr.json`` and the shard indexes. The listing equals the local one, also from a bucket (moto's S3),
where the shards are listed instead of probed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.cli import run
from tests.http_range_server import RangeServer
from tests.moto_s3 import S3Server, s3, s3_server  # noqa: F401  (fixtures)
from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume
from tests.volume_cases import write_zarr3_array

DELAY_S = 0.2
#: ``info`` (+ the other formats' documents), shard-index probes, minishard indexes (+ obsolete ``.index`` probes).
MAX_WAVES = 3
WARM_UP = 2  # runs before the measured one, opening the connections a session would have open


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RangeServer]]:
    root = tmp_path_factory.mktemp("lswaves")
    write_ts_volume(root / "vol", SHARDING_MURMUR_GZIP, size=(90, 77, 41), scales=1)
    write_zarr3_array(root)
    server = RangeServer(root, delay=DELAY_S)
    try:
        yield root, server
    finally:
        server.close()


def _ls(target: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert run(["ls", target, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["vol", "labels.zarr"])
def test_remote_ls_lists_every_shard_in_a_bounded_number_of_waves(served: tuple[Path, RangeServer], name: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    root, server = served
    for _ in range(WARM_UP):
        _ls(server.url + name, capsys)
    start = time.monotonic()
    remote = _ls(server.url + name, capsys)
    waves = server.waves(since=start)
    local = _ls(str(root / name), capsys)
    assert remote == local and len({str(r.get("shard")) for r in local}) >= 4
    assert max(w for w, _, _ in waves) <= MAX_WAVES, "\n".join(map(str, waves))


@pytest.mark.parametrize("name", ["vol", "labels.zarr"])
def test_ls_of_a_listing_store_equals_the_local_listing(served: tuple[Path, RangeServer], s3: S3Server,  # noqa: F811
                                                        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """On a bucket the shards are listed, not probed; the batched index loads give the local answer."""
    root, _ = served
    store = open_store(s3.url(name))
    for path in sorted((root / name).rglob("*")):
        if path.is_file():
            store.write(path.relative_to(root / name).as_posix(), path.read_bytes())
    assert _ls(s3.url(name), capsys) == _ls(str(root / name), capsys)
