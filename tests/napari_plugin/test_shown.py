"""What napari reads: a damaged chunk is drawn as background and reported once; the rest is read as stored.

No viewer needed: the arrays :func:`volume_layer_data` hands to napari are read the way napari reads
them (index with the visible region, then ``np.asarray``), and compared with the strict reader on an
intact copy.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ChunkDecodeError, ReadOnlyVolumeError
from napari_shardscope.core.layout import open_layout
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import open_volumes
from napari_shardscope.napari_plugin.layers import volume_layer_data
from napari_shardscope.napari_plugin.shown import DamagedChunkWarning, ShownArray
from tests.volume_cases import sample  # noqa: F401  (fixture)


def test_a_damaged_chunk_is_background_and_reported_once(sample: SampleDataset, tmp_path: Path) -> None:  # noqa: F811
    copy = tmp_path / "broken"
    shutil.copytree(sample.segmentation, copy)
    bad = open_layout(str(copy)).locate_voxel((50, 140, 200), "8_8_40")  # z, y, x
    assert bad.node.byte_range is not None and bad.node.file is not None
    a, b = bad.node.byte_range
    data = bytearray((copy / bad.node.file).read_bytes())
    data[a + 12: b] = bytes(b - a - 12)  # the chunk's gzip stream no longer decodes
    (copy / bad.node.file).write_bytes(bytes(data))

    intact = np.asarray(open_volumes(str(sample.segmentation))[0].arrays[0][50])
    arrays, _, kind = volume_layer_data(open_volumes(str(copy))[0])
    assert kind == "labels"
    level0 = arrays[0] if isinstance(arrays, list) else arrays
    assert isinstance(level0, ShownArray)
    with pytest.raises(ChunkDecodeError):  # the strict array behind it still raises for other readers
        level0.inner[50].read()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plane = np.asarray(level0[50])  # napari: index first, convert later
        again = np.asarray(level0[50, 100:200, 100:250])
    reports = [w for w in caught if issubclass(w.category, DamagedChunkWarning)]
    assert len(reports) == 1 and "drawn as background" in str(reports[0].message)
    damaged = plane != intact
    assert damaged.any() and np.all(plane[damaged] == 0)
    ys, xs = np.nonzero(damaged)
    chunk = level0.chunks
    assert chunk is not None
    assert ys.max() - ys.min() < chunk[1] and xs.max() - xs.min() < chunk[2]  # one chunk, nothing else
    assert 140 in range(ys.min(), ys.max() + 1) and 200 in range(xs.min(), xs.max() + 1)
    np.testing.assert_array_equal(again, plane[100:200, 100:250])
    with pytest.raises(ReadOnlyVolumeError):
        level0[0, 0, 0] = 1


# -- one report per volume, rate-limited; images hatched, not black -----------------------------------------
def _failure(key: str) -> ChunkDecodeError:
    return ChunkDecodeError("bad gzip data", key=key, offset=16)


def test_failures_are_reported_once_then_at_most_once_per_interval() -> None:
    from napari_shardscope.napari_plugin.shown import REPORT_INTERVAL_S, DamageLog, DamageReport

    now = [100.0]
    log = DamageLog("vol", "file:///vol", clock=lambda: now[0])
    got: list[DamageReport] = []
    log.sinks.append(got.append)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(50):  # one slice touching 50 damaged chunks, each read twice
            log.record(_failure(f"s0/{i}.shard"))
            log.record(_failure(f"s0/{i}.shard"))
        now[0] += REPORT_INTERVAL_S / 2
        log.record(_failure("s0/50.shard"))  # within the interval: counted, not reported
        now[0] += REPORT_INTERVAL_S
        log.record(_failure("s0/51.shard"))  # due: one summary of what came since
    assert [(r.failures, r.new) for r in got] == [(1, 1), (52, 51)]
    assert "s0/0.shard" in got[0].text and "bad gzip data" in got[0].text and got[0].text.startswith("vol: ")
    assert "51 more" in got[1].text and "s0/51.shard" in got[1].text
    assert [str(w.message) for w in caught if issubclass(w.category, DamagedChunkWarning)] == [r.text for r in got]


def test_a_sink_that_fails_does_not_break_drawing() -> None:
    from napari_shardscope.napari_plugin.shown import DamageLog

    log = DamageLog("vol")

    def broken(_report: object) -> None:
        raise RuntimeError("a viewer that went away")

    log.sinks.append(broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log.record(_failure("k"))
    assert log.failures == 1


def test_an_image_whose_chunks_do_not_decode_is_hatched_not_black() -> None:
    """ngscripts_sharded/zlib_as_gzip: no chunk decodes; napari gets stripes between the contrast limits."""
    from tests.realdata import REALDATA, missing

    path = REALDATA / "ngscripts_sharded" / "zlib_as_gzip"
    if not path.is_dir():
        missing()
    arrays, kwargs, kind = volume_layer_data(open_volumes(str(path))[0])
    assert kind == "image" and kwargs["contrast_limits"] == (0.0, 255.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        planes = [np.asarray(arrays[0][z]) for z in range(0, 19, 3)]  # napari: a view first, then the read
    reports = [str(w.message) for w in caught if issubclass(w.category, DamagedChunkWarning)]
    assert len(reports) == 1 and "zlib_as_gzip" in reports[0] and "drawn hatched" in reports[0]
    assert "gzip" in reports[0] and ".shard" in reports[0]
    for plane in planes:
        assert set(np.unique(plane).tolist()) == {0, 255}  # the two stripe values, about half each
        assert 0.4 < float(np.mean(plane == 255)) < 0.6
