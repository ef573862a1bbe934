"""Threads meeting the same uncached shard index read it once, also when that read fails.

The reader loads a shard's index once for all the decode threads that need it at the same moment
(:meth:`Zarr3ArrayReader.read_shard_index`). When the index is damaged, the threads that waited for
that load get its error (typed, naming the shard and byte offset) instead of each reading and
checking the same bytes again in turn; and the error is not cached: a later call reads afresh.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import ChecksumError
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, ChunkKeyEncoding, CodecSpec
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.writer import write_array

KEY = "c/0/0"
INDEX_SIZE = 16 * 4 + 4
THREADS = 4


def damaged(root: Path) -> tuple[Zarr3ArrayReader, int]:
    """A 8×8 uint16 array in one shard of four 4×4 chunks whose index fails its crc32c; where that checksum is."""
    codecs = (CodecSpec("sharding_indexed", {
        "chunk_shape": [4, 4],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end",
    }),)
    store = LocalByteStore(root)
    write_array(store, "", ArrayMetadata((8, 8), "uint16", (8, 8), ChunkKeyEncoding(), 0, codecs),
                np.arange(64, dtype="uint16").reshape(8, 8))
    blob = bytearray((root / KEY).read_bytes())
    blob[len(blob) - INDEX_SIZE + 3] ^= 0x40  # one bit of the first index entry
    (root / KEY).write_bytes(bytes(blob))
    return Zarr3ArrayReader(store), len(blob) - 4


def test_threads_waiting_for_a_failing_index_load_get_its_error_and_do_not_read_it_again(tmp_path: Path) -> None:
    reader, crc_at = damaged(tmp_path)
    real_load = reader._load_index
    loads: list[str] = []
    others_waiting = threading.Event()

    def load(shard: tuple[int, ...], config: Any) -> Any:
        loads.append(threading.current_thread().name)
        if len(loads) == 1:  # the first load finishes only once the other threads wait for it (bounded)
            others_waiting.wait(10)
        return real_load(shard, config)

    reader._load_index = load  # type: ignore[method-assign]  # counts the real loads of the real file
    start = threading.Barrier(THREADS)
    errors: dict[int, BaseException | None] = {}

    def ask(i: int) -> None:
        start.wait(10)
        try:
            reader.read_shard_index((0, 0))
            errors[i] = None
        except BaseException as exc:  # recorded for the assertions below
            errors[i] = exc

    threads = [threading.Thread(target=ask, args=(i,), name=f"decode-{i}") for i in range(THREADS)]
    for t in threads:
        t.start()
    for _ in range(1000):  # bounded: until the other threads wait for the first one's load
        flight = reader._loading.get((0, 0))
        if getattr(flight, "waiters", 0) == THREADS - 1:
            break
        threading.Event().wait(0.01)
    others_waiting.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert len(loads) == 1, loads  # the damaged index was read and checked once
    for exc in errors.values():
        assert isinstance(exc, ChecksumError)
        assert exc.key == KEY and exc.offset == crc_at
    with pytest.raises(ChecksumError):  # errors are not cached: the next call reads again
        reader.read_shard_index((0, 0))
    assert len(loads) == 2
    assert not reader._loading  # nothing left in flight


def test_threads_waiting_for_an_index_load_get_the_index_read_once(tmp_path: Path) -> None:
    reader, _ = damaged(tmp_path)
    (tmp_path / KEY).unlink()  # a missing shard: ``None``, cached like an index
    results: list[Any] = []
    start = threading.Barrier(THREADS)

    def ask() -> None:
        start.wait(10)
        results.append(reader.read_shard_index((0, 0)))

    threads = [threading.Thread(target=ask) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [None] * THREADS
    assert reader._indexes.contains((0, 0)) and not reader._loading
