"""The allocator settings and the cache size the default context gets.

The fault count is measured in a fresh child process (mallopt is process-wide and the parent's
heap history would blur it): with the settings, a second cold read of a plane through a new cache
reuses the first one's freed memory instead of faulting in fresh pages. (A script's first read of a
chunk layer skips the cache altogether; the second read, which fills it, is the one measured.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.allocator import available_memory, tune_malloc
from napari_shardscope.core.bytestore import context as context_module

CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from napari_shardscope.core.volumes import make_context, open_volume
    path = sys.argv[1]
    faults = []
    for z in (5, 40, 70, 100, 20):
        arr = open_volume(path, context=make_context(256 << 20)).levels[0].array  # a cold cache each time
        arr[z].read()  # a first read of the chunk layer skips the cache (test_cache_admission.py)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        plane = np.asarray(arr[z + 1].read())  # the second fills the cache: the reads this test is about
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        del arr
    print(min(faults[2:]))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_cold_reads_reuse_memory_instead_of_faulting(tmp_path: Path) -> None:
    ts = pytest.importorskip("tensorstore")
    n = 192
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 3, "hash": "murmurhash3_x86_128",
                "minishard_bits": 3, "shard_bits": 3, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/v",
                     "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
                     "scale_metadata": {"size": [n, n, n], "resolution": [8, 8, 8], "chunk_size": [64, 64, 64],
                                        "encoding": "raw", "sharding": sharding}, "create": True}).result()
    # What the compressed chunks look like decides glibc's default behaviour (its mmap threshold moves
    # with what is freed): ~500 KiB of gzip per 2 MiB chunk shows the faults; all-random or blocky
    # labels do not. A ramp (``arange // 7``) gets there but takes gzip -9 ~14 CPU-s to write; rows of
    # 16 random labels then 48 of one label (x rows, as stored) get the same compressed size ~5x faster.
    data = np.broadcast_to((np.arange(n, dtype=np.uint64) // 64)[None, None, :], (n, n, n)).copy()  # x, y, z
    noisy = np.arange(n) % 64 < 16
    data[noisy] = np.random.default_rng(0).integers(0, 1 << 63, (int(noisy.sum()), n, n), dtype=np.uint64)
    store[..., 0] = data
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    counts = {}
    for tuning in ("1", "0"):
        out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "v")], capture_output=True, text=True,
                             env={**env, "SHARDSCOPE_MALLOC_TUNING": tuning}, timeout=120, check=True)
        counts[tuning] = int(out.stdout.split()[-1])
    # a plane crosses nine 2 MiB chunks: without the settings each is faulted in afresh (~500 pages each)
    assert counts["0"] > 2000
    assert counts["1"] < counts["0"] / 4, counts


def test_tuning_is_idempotent_and_memory_is_known() -> None:
    assert tune_malloc() == tune_malloc()
    avail = available_memory()
    assert avail is None or avail > 0


def test_default_cache_is_sized_from_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDSCOPE_CACHE_MB", raising=False)
    monkeypatch.setattr("napari_shardscope.core.allocator.available_memory", lambda: 8 << 30)
    assert context_module.cache_bytes_from_env() == 1 << 30
    monkeypatch.setattr("napari_shardscope.core.allocator.available_memory", lambda: 1 << 30)
    assert context_module.cache_bytes_from_env() == context_module.MIN_DEFAULT_CACHE_BYTES
    monkeypatch.setattr("napari_shardscope.core.allocator.available_memory", lambda: 1 << 40)
    assert context_module.cache_bytes_from_env() == context_module.MAX_DEFAULT_CACHE_BYTES
    monkeypatch.setattr("napari_shardscope.core.allocator.available_memory", lambda: None)
    assert context_module.cache_bytes_from_env() == context_module.DEFAULT_CACHE_BYTES
    monkeypatch.setenv("SHARDSCOPE_CACHE_MB", "64")
    assert context_module.cache_bytes_from_env() == 64 << 20


def test_bulk_reads_bypass_the_chunk_cache_and_return_the_same_voxels(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A read above BULK_READ_BYTES goes through an uncached twin of the view: same voxels, cache untouched."""
    ts = pytest.importorskip("tensorstore")
    from napari_shardscope.core.volumes import lazy, make_context, open_volume

    data = (np.arange(64 * 96 * 80, dtype=np.uint64) * 2654435761 % 1000).reshape(64, 96, 80)  # z, y, x
    ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/v",
             "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
             "scale_metadata": {"size": [80, 96, 64], "resolution": [8, 8, 8], "chunk_size": [32, 32, 32],
                                "encoding": "raw"}, "create": True}).result()[..., 0].write(data.T).result()
    monkeypatch.setattr(lazy, "BULK_READ_BYTES", 1 << 16)
    arr = open_volume(tmp_path / "v", context=make_context(64 << 20)).levels[0].array

    def misses() -> int:
        found = ts.experimental_collect_matching_metrics("/tensorstore/cache/miss_count")
        return sum(v["value"] for m in found for v in m["values"])

    def cached(view: object) -> bool:
        """Whether reading ``view`` straight from the level's (cached) TensorStore misses no chunk."""
        before = misses()
        view.read().result()  # type: ignore[attr-defined]
        return misses() == before

    for _ in range(2):  # bulk: through the uncached twin, so nothing is left in the cache
        np.testing.assert_array_equal(arr.read(), data)
        np.testing.assert_array_equal(arr[3:40, 5:90, 7:].read(), data[3:40, 5:90, 7:])
    assert not cached(arr.store[40, :, :])
    # a small read (4 KiB) uses the cached store from its second read on (the first skips the cache:
    # test_cache_admission.py), which leaves its chunks cached
    for _ in range(2):
        np.testing.assert_array_equal(arr[10, :8, :64].read(), data[10, :8, :64])
    assert cached(arr.store[10, :8, :64])
