"""The writer: complete collections, refused destinations, atomic replacement, remote stores both ways."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ArgumentError, RefusedDestinationError, StoreError
from napari_shardscope.core.formats import open_annotations
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema, PropertySpec
from napari_shardscope.core.formats.precomputed.annotations.table import make_annotations
from napari_shardscope.core.formats.precomputed.annotations.validate import validate_annotations
from napari_shardscope.core.formats.precomputed.annotations.writer import (
    choose_id_sharding,
    choose_spatial_sharding,
    write_annotations,
)
from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, assert_same, random_batch
from tests.http_range_server import RangeServer
from tests.moto_s3 import S3Server, s3, s3_server  # noqa: F401  (fixtures)

SYNAPSES = AnnotationSchema("point", DIMENSIONS, (PropertySpec("score", "float32"),), ("pre", "post"))


def test_a_sharded_collection_is_complete_and_clean(tmp_path: Path) -> None:
    batch = random_batch(SYNAPSES, 3000, 2)
    report = write_annotations(tmp_path / "syn", batch, limit=200, shard_bytes=8192)
    source = open_annotations(tmp_path / "syn")
    assert_same(source.all(), batch)
    assert source.ids().tolist() == sorted(batch.ids.tolist())
    assert list(validate_annotations(source)) == []
    assert report.annotations == 3000 and sum(report.level_counts) == 3000
    assert source.info.by_id.sharding is not None and source.info.by_id.sharding.data_encoding == "raw"
    everything = source.query_box([0, 0, 0], [1000, 1000, 1000])
    assert sorted(everything.ids.tolist()) == sorted(batch.ids.tolist())
    coarse = source.query_box([0, 0, 0], [1000, 1000, 1000], max_level=0)
    assert 0 < len(coarse) < 400  # the first level is a subsample of about ``limit``
    box = source.query_box([100, 200, 300], [400, 500, 600])
    lo = batch.geometry
    inside = np.all((lo >= [100, 200, 300]) & (lo <= [400, 500, 600]), axis=1)
    assert sorted(box.ids.tolist()) == sorted(batch.ids[inside].tolist())


def test_destinations_are_refused_unless_they_hold_a_collection_to_replace(tmp_path: Path) -> None:
    batch = random_batch(SYNAPSES, 50, 1)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "thesis.tex").write_text("do not delete")
    with pytest.raises(RefusedDestinationError, match="already holds files"):
        write_annotations(tmp_path / "busy", batch)
    with pytest.raises(RefusedDestinationError, match="not a precomputed annotation collection"):
        write_annotations(tmp_path / "busy", batch, overwrite=True)
    assert (tmp_path / "busy" / "thesis.tex").read_text() == "do not delete"
    write_annotations(tmp_path / "ann", batch, sharded=True, shard_bytes=512)
    with pytest.raises(RefusedDestinationError, match="overwrite=True"):
        write_annotations(tmp_path / "ann", batch)
    write_annotations(tmp_path / "ann", batch.take(np.arange(10)), sharded=False, overwrite=True)
    assert not list((tmp_path / "ann").rglob("*.shard"))  # nothing of the old collection is left
    assert len(open_annotations(tmp_path / "ann").all()) == 10
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


@pytest.mark.parametrize(("change", "match"), [
    ({"lower_bound": [900, 900, 900]}, "outside the bounds"),
    ({"upper_bound": [0, 0, 0], "lower_bound": [0, 0, 0]}, "must exceed lower_bound"),
    ({"limit": 0}, "limit must be a positive integer"),
    ({"gzip_level": 12}, "compression level"),
])
def test_bad_options_are_argument_errors(tmp_path: Path, change: dict[str, object], match: str) -> None:
    with pytest.raises(ArgumentError, match=match):
        write_annotations(tmp_path / "x", random_batch(SYNAPSES, 20, 3), **change)  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


def test_duplicate_ids_and_non_finite_geometry_are_refused(tmp_path: Path) -> None:
    schema = AnnotationSchema("point", DIMENSIONS)
    with pytest.raises(ArgumentError, match="unique; 7 appears 2 times"):
        write_annotations(tmp_path / "x", make_annotations(schema, [7, 7], [[1, 2, 3], [4, 5, 6]]))
    with pytest.raises(ArgumentError, match="non-finite geometry"):
        write_annotations(tmp_path / "x", make_annotations(schema, [1, 2], [[1, 2, 3], [np.nan, 5, 6]]))


def test_a_write_killed_midway_leaves_the_old_collection_whole(tmp_path: Path) -> None:
    old = random_batch(SYNAPSES, 500, 4)
    write_annotations(tmp_path / "syn", old, limit=50)
    # A second process rewrites it and is killed (SIGKILL) while the new indexes are half written.
    script = textwrap.dedent(f"""
        import sys, time
        from tests.core.formats.precomputed.annotations.cases import random_batch
        from tests.core.formats.precomputed.annotations.test_writer import SYNAPSES
        from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations

        def progress(done, total, what):
            if done == 2:
                print("half written", flush=True)
                time.sleep(600)

        write_annotations({str(tmp_path / 'syn')!r}, random_batch(SYNAPSES, 5000, 9), overwrite=True, limit=50,
                          sharded=False, progress=progress)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=Path(__file__).parents[5])
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"half written\n"
    finally:
        proc.kill()
        proc.wait(60)
    source = open_annotations(tmp_path / "syn")
    assert_same(source.all(), old)
    assert list(validate_annotations(source)) == []
    staging = [p.name for p in tmp_path.iterdir() if p.name.startswith(".syn.writing-")]
    assert len(staging) == 1  # the killed write's files, beside and apart from the collection


def test_sharding_parameters_follow_what_an_index_holds() -> None:
    small = choose_id_sharding(100, 5000)
    assert (small.shard_bits, small.minishard_bits, small.hash) == (0, 0, "murmurhash3_x86_128")
    big = choose_id_sharding(10**7, 10**7 * 40, shard_bytes=1 << 28)
    assert big.minishard_bits <= 9 and 10**7 / (big.num_shards * big.num_minishards) <= 1024
    level = choose_spatial_sharding((512, 256, 16), 100_000, 1 << 31, shard_bytes=1 << 28)
    assert level.hash == "identity" and level.shard_bits == 3
    assert level.preshift_bits + level.minishard_bits + level.shard_bits == 9 + 8 + 4


# -- remote stores ---------------------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, RangeServer]]:
    server = RangeServer(tmp_path)
    try:
        yield tmp_path, server
    finally:
        server.close()


@pytest.mark.parametrize("sharded", [True, False])
def test_collections_read_over_http_as_they_read_locally(served: tuple[Path, RangeServer], sharded: bool) -> None:
    root, server = served
    batch = random_batch(SYNAPSES, 400, 6)
    write_annotations(root / "syn", batch, sharded=sharded, limit=40, shard_bytes=4096)
    remote = open_annotations(server.url + "syn")
    local = open_annotations(root / "syn")
    if sharded:  # shards are probed where the store cannot list
        assert_same(remote.all(), batch)
        assert list(validate_annotations(remote)) == []
    else:  # one file per annotation, and plain HTTP cannot list a directory: said, not guessed
        with pytest.raises(StoreError, match="listing is not supported"):
            remote.all()
    assert_same(remote.get_many(batch.ids[::7]), local.get_many(batch.ids[::7]))
    seg = int(batch.relationships["pre"].values[0]) if batch.relationships else 0
    assert_same(remote.related("pre", seg), local.related("pre", seg), relationships=False)
    box = ([0, 0, 0], [500, 500, 500])
    assert_same(remote.query_box(*box), local.query_box(*box), relationships=False)
    assert remote.locate_annotation(int(batch.ids[0]))["present"]


@pytest.mark.parametrize("sharded", [True, False])
def test_a_collection_written_to_a_bucket_reads_back(s3: S3Server, sharded: bool) -> None:  # noqa: F811
    """Sharded: 300 synapses fill several 4 KiB shards. Unsharded, each annotation is its own object (plus
    its relationship and spatial cells), one PUT and one GET each through the S3 server: 100 are as many
    code paths as 300 (two spatial levels at ``limit=40``) at a third of the requests."""
    batch = random_batch(SYNAPSES, 300 if sharded else 100, 8)
    write_annotations(s3.url("syn"), batch, sharded=sharded, limit=40, shard_bytes=4096)
    assert_same(open_annotations(s3.url("syn")).all(), batch)
    with pytest.raises(RefusedDestinationError):
        write_annotations(s3.url("syn"), batch)
    write_annotations(s3.url("syn"), batch.take(np.arange(5)), sharded=not sharded, overwrite=True)
    source = open_annotations(s3.url("syn"))
    assert len(source.all()) == 5
    assert list(validate_annotations(source)) == []
