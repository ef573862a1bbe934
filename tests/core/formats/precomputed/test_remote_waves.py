"""Dependent round trips of a remote ``inspect``: detection, shard-index probes, minishard indexes.

The loopback server answers requests 0.2 s after the client goes quiet (a far bucket) and records when each request
arrived and was answered; :meth:`RangeServer.waves` numbers a request one wave after the latest wave
answered before it arrived. Requests a client issues together arrive within the delay, so the count is
what the client's dependencies force, not a time. Three waves are the minimum: every candidate
metadata document (``info`` and the other formats' ones, all at once, each one GET asking for at most
its first 64 KiB, so a hostile 5 GiB ``info`` is never downloaded; no probe first over HTTP:
``bytestore/bounded.py``), the shard indexes ``info`` locates, the minishard indexes those locate.
Every scale's work goes in the same waves. (On S3 and GCS a document is sized by a probe before it is
read: one wave more there.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from napari_shardscope.core.cli import run
from napari_shardscope.core.formats import open_dataset
from tests.http_range_server import RangeServer
from tests.precomputed_data import SHARDING_MURMUR_GZIP, garble_minishard_index, inspect_errors, write_ts_volume

DELAY_S = 0.2
#: ``info`` (+ the other formats' documents), shard indexes, minishard indexes.
MAX_WAVES = 3
#: The waves format detection takes (every candidate document at once, bounded).
DETECTION = 1
#: Inspects before the measured one, each opening connections the pool lacked.
WARM_UP = 2


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RangeServer]]:
    root = tmp_path_factory.mktemp("waves")
    write_ts_volume(root / "one", SHARDING_MURMUR_GZIP, scales=1)
    write_ts_volume(root / "three", SHARDING_MURMUR_GZIP, size=(90, 77, 41), scales=3)
    server = RangeServer(root, delay=DELAY_S)
    try:
        yield root, server
    finally:
        server.close()


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """An inspect summary without what depends on where it was read from.

    A remote store has no stat call, so shard files' sizes are unknown there (``file_size`` None).
    """
    out = {k: v for k, v in summary.items() if k not in ("url", "bytes_read", "requests")}
    out["scales"] = [{**sc, "shards": [{k: v for k, v in sh.items() if k != "file_size"} for sh in sc["shards"]]}
                     for sc in summary["scales"]]
    return out


def waves_of_inspect(server: RangeServer, name: str) -> tuple[dict[str, Any], list[tuple[int, str, str | None]]]:
    # Connections opened first, as a session's are after its first reads: libcurl (TensorStore's HTTP
    # client) holds a request for a new connection to a plain-HTTP host until an answer on an open
    # one tells it the server's HTTP version, a round trip the client adds whatever the code asks.
    for _ in range(WARM_UP):
        open_dataset(server.url + name).inspector().inspect()  # type: ignore[attr-defined]
    start = time.monotonic()  # the server's clock: it runs in this process
    summary = open_dataset(server.url + name).inspector().inspect()  # type: ignore[attr-defined]
    return summary, server.waves(since=start)


@pytest.mark.parametrize("name", ["one", "three"])
def test_remote_inspect_needs_four_dependent_waves(served: tuple[Path, RangeServer], name: str) -> None:
    root, server = served
    summary, waves = waves_of_inspect(server, name)
    assert comparable(summary) == comparable(open_dataset(root / name).inspector().inspect())  # type: ignore[attr-defined]
    assert max(w for w, _, _ in waves) <= MAX_WAVES, "\n".join(map(str, waves))
    # each wave is what it must be: the documents, then index probes, then minishard indexes
    assert all(not path.endswith(".shard") for w, path, _ in waves if w <= DETECTION), waves
    probes = {path for w, path, rng in waves if w == DETECTION + 1}
    shard_files = {"/" + p.relative_to(root).as_posix() for p in (root / name).rglob("*.shard")}
    # every possible shard is probed (plain HTTP cannot list); the missing ones' obsolete ``.index``
    # probes ride in wave 3 with the minishard indexes
    assert shard_files <= probes and all(p.endswith(".shard") for p in probes), waves
    assert any(path.endswith(".index") for w, path, _ in waves if w == DETECTION + 2) == (
        len(probes) > len(shard_files)), "\n".join(map(str, waves))
    assert len(summary["scales"]) == (1 if name == "one" else 3)


def test_cli_inspect_over_http_matches_local_in_four_waves(served: tuple[Path, RangeServer],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root, server = served
    for _ in range(WARM_UP):
        assert run(["inspect", server.url + "three", "--json"]) == 0
        capsys.readouterr()
    start = time.monotonic()
    assert run(["inspect", server.url + "three", "--json"]) == 0
    remote = json.loads(capsys.readouterr().out)
    waves = server.waves(since=start)
    assert max(w for w, _, _ in waves) <= MAX_WAVES, "\n".join(map(str, waves))
    assert run(["inspect", str(root / "three"), "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert comparable(remote) == comparable(local)


@pytest.mark.parametrize("damage", ["shard index", "minishard index"])
def test_damaged_index_of_one_scale_fails_remote_inspect_as_local(
        tmp_path: Path, http_root: tuple[Path, RangeServer], damage: str) -> None:
    """Every scale's indexes prefetched together: a damaged one still gives local inspect's typed error."""
    root, server = http_root
    write_ts_volume(root / "vol", SHARDING_MURMUR_GZIP, size=(90, 77, 41), scales=3)
    local = open_dataset(root / "vol").inspector()  # type: ignore[attr-defined]
    reader = local.reader(local.sources[1])  # the middle scale
    shard = reader.existing_shards()[0]
    index = reader.shard_index(shard)
    path = root / "vol" / reader.shard_key(shard)
    if damage == "shard index":
        blob = bytearray(path.read_bytes())
        m = int(index.nonempty_minishards()[0])
        blob[16 * m : 16 * m + 16] = (1000).to_bytes(8, "little") + (10).to_bytes(8, "little")  # end before start
        path.write_bytes(bytes(blob))
    else:
        garble_minishard_index(path, index, int(index.nonempty_minishards()[-1]))
    local_error, remote_error = inspect_errors(root / "vol", server.url + "vol")
    assert (remote_error.key, remote_error.offset) == (local_error.key, local_error.offset)
    assert remote_error.key is not None and reader.shard_key(shard) in remote_error.key
