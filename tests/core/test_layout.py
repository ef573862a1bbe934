"""The layout tree (core of the shard browser): lazy expansion, locate, world boxes, shard map, problems.

Everything is checked against an independent path: the inspectors' own ``inspect`` / ``locate`` /
``iter_chunks`` records, the sharding hash, and plain arithmetic on the volume geometry. Read
counts come from the byte stores' counters (a fake in-memory store for the 16 384-shard dataset,
whose listing is cheap, so that "opens at once" is a statement about reads, not about time).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore, ReadStats
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector
from napari_shardscope.core.formats.precomputed.morton import encode_morton
from napari_shardscope.core.formats.precomputed.shard_writer import write_shards
from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids, parse_sharding_spec
from napari_shardscope.core.layout import (
    LayoutNode,
    LayoutTree,
    format_bytes,
    format_ratio,
    open_layout,
    parse_position,
)
from napari_shardscope.core.sample_data import SampleDataset
from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume
from tests.volume_cases import FormatCase, format_cases, sample  # noqa: F401  (fixtures)


# -- a 16 384-shard dataset in memory ----------------------------------------------------------------
class MemoryStore:
    """A byte store in a dict: listing is free, every read is counted (as the real stores count)."""

    cheap_size = True

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self._stats = ReadStats()

    @property
    def url(self) -> str:
        return "memory://many-shards/"

    @property
    def stats(self) -> ReadStats:
        return self._stats

    def read(self, key: str) -> bytes | None:
        data = self.files.get(key)
        if data is not None:
            self._stats.add(len(data))
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        data = self.files.get(key)
        if data is None:
            return None
        self._stats.add(len(data[start:end]))
        return data[start:end]

    def read_suffix(self, key: str, length: int) -> bytes | None:
        data = self.files.get(key)
        return None if data is None else self.read_range(key, max(0, len(data) - length), len(data))

    def size(self, key: str) -> int | None:
        data = self.files.get(key)
        return None if data is None else len(data)

    def list(self, prefix: str = "") -> Iterator[str]:
        return iter(sorted(k for k in self.files if k.startswith(prefix)))

    def write(self, key: str, data: bytes) -> None:
        self.files[key] = bytes(data)

    def delete(self, key: str) -> None:
        self.files.pop(key, None)

    def clear(self) -> None:
        self.files.clear()


MANY_SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "murmurhash3_x86_128",
             "minishard_bits": 2, "shard_bits": 14, "minishard_index_encoding": "raw", "data_encoding": "raw"}
MANY_SIZE, MANY_CHUNK = (2048, 2048, 1024), (32, 32, 32)


@pytest.fixture(scope="module")
def many_shards() -> tuple[MemoryStore, int, dict[int, bytes]]:
    """``(store, real shard, its chunks)``: 2**14 shard files, one holding real chunks, the rest empty."""
    store = MemoryStore()
    info = {"@type": "neuroglancer_multiscale_volume", "type": "segmentation", "data_type": "uint64",
            "num_channels": 1, "scales": [{"key": "s0", "size": list(MANY_SIZE), "resolution": [8, 8, 40],
                                           "voxel_offset": [0, 0, 0], "chunk_sizes": [list(MANY_CHUNK)],
                                           "encoding": "raw", "sharding": MANY_SPEC}]}
    store.write("info", json.dumps(info).encode())
    spec = parse_sharding_spec(MANY_SPEC)
    grid = tuple(s // c for s, c in zip(MANY_SIZE, MANY_CHUNK, strict=True))
    pos = np.stack(np.meshgrid(*(np.arange(n) for n in grid), indexing="ij"), axis=-1).reshape(-1, 3)
    ids = encode_morton(pos, grid)
    shards = assign_chunk_ids(spec, ids).shard
    real = int(shards[0])
    chunks = {int(cid): bytes([i % 251]) * (100 + i) for i, cid in enumerate(ids[shards == real].tolist())}
    write_shards(store, "s0", spec, chunks)
    empty = bytes(spec.shard_index_size)  # every minishard empty
    for shard in range(spec.num_shards):
        store.files.setdefault(f"s0/{shard:04x}.shard", empty)
    return store, real, chunks


def test_ten_thousand_shards_open_and_list_without_reading_indexes(many_shards: tuple[MemoryStore, int,
                                                                                       dict[int, bytes]]) -> None:
    store, real, chunks = many_shards
    store.stats.reset()
    tree = LayoutTree(PrecomputedInspector(store, parse_info(store.read("info") or b"")))
    (scale,) = tree.roots()
    assert store.stats.requests == 1  # info
    assert scale.raw_bytes == math.prod(MANY_SIZE) * 8 and scale.chunks is None
    expansion = tree.expand(scale)
    assert len(expansion.children) == 1 << 14
    assert "16384 of 16384 shard files present" in expansion.node.detail
    assert store.stats.requests == 1  # listing and stats only: no shard index read
    shard_node = next(c for c in expansion.children if c.path[-1] == ("shard", real))
    assert shard_node.chunks is None and shard_node.file_size == len(store.files[shard_node.file or ""])

    # expanding one shard reads its shard index and its non-empty minishard indexes, nothing else
    minis = tree.children(shard_node)
    nonempty = len({int(m) for m in assign_chunk_ids(parse_sharding_spec(MANY_SPEC), list(chunks)).minishard})
    assert len(minis) == nonempty
    assert store.stats.requests == 1 + 1 + nonempty
    updated = tree.expand(shard_node).node
    assert updated.chunks == len(chunks) and updated.stored_bytes == sum(len(v) for v in chunks.values())
    assert updated.raw_bytes == len(chunks) * 32**3 * 8
    assert updated.ratio == pytest.approx(updated.raw_bytes / updated.stored_bytes)
    listed = {c.chunk_id: c for m in minis for c in tree.children(m)}
    assert store.stats.requests == 2 + nonempty  # chunks come from the cached minishard indexes
    assert set(listed) == set(chunks)
    for cid, node in listed.items():
        assert node.byte_range is not None
        a, b = node.byte_range
        assert store.files[node.file or ""][a:b] == chunks[cid]

    # an empty shard costs one read and shows zero chunks; a second expand reads nothing
    other = next(c for c in expansion.children if c.path[-1] != ("shard", real))
    before = store.stats.requests
    assert tree.children(other) == [] and tree.expand(other).node.chunks == 0
    tree.expand(other)
    assert store.stats.requests == before + 1
    tree.clear_cache()  # after the files changed: the same expansion reads the index again
    assert tree.children(tree.roots()[0])[int(other.path[-1][1])].path == other.path  # type: ignore[arg-type]
    tree.expand(other)
    assert store.stats.requests == before + 2


def test_locate_in_many_shards_reads_two_indexes_at_most(many_shards: tuple[MemoryStore, int,
                                                                              dict[int, bytes]]) -> None:
    store, real, chunks = many_shards
    tree = LayoutTree(PrecomputedInspector(store, parse_info(store.read("info") or b"")))
    cid = sorted(chunks)[1]
    grid = tree.locate_chunk(cid).node.grid_position
    assert grid is not None
    store.stats.reset()
    voxel = tuple(g * c + 5 for g, c in zip(grid, MANY_CHUNK, strict=True))
    hit = tree.locate_format_voxel(voxel)  # x, y, z as the files name it
    assert hit.node.chunk_id == cid and hit.node.present and hit.path[1] == ("shard", real)
    assert store.stats.requests == 0  # its shard's indexes were read by the first locate
    far = tree.locate_voxel((1000, 2000, 2000))  # z, y, x from 0
    assert not far.node.present or far.node.byte_range is not None
    assert store.stats.requests <= 2


# -- the sample: tree vs inspect ------------------------------------------------------------------------
def test_tree_matches_inspect_and_reads_only_expanded_indexes(sample: SampleDataset) -> None:  # noqa: F811
    url = str(sample.segmentation)
    summary = open_dataset(url).inspector().inspect()
    tree = open_layout(url)
    stats = tree.inspector.store.stats
    roots = tree.roots()
    assert [r.name for r in roots] == [s["key"] for s in summary["scales"]]
    assert tree.spatial_scales() == [r.name for r in roots]
    opened = stats.requests
    for root, expected in zip(roots, summary["scales"], strict=True):
        assert root.raw_bytes == math.prod(expected["size"]) * 8
        shards = tree.children(root)
        assert stats.requests == opened  # listing a scale reads nothing
        assert [c.path[-1][1] for c in shards] == [s["shard"] for s in expected["shards"]]
        assert [c.file_size for c in shards] == [s["file_size"] for s in expected["shards"]]
    scale0 = roots[0]
    for shard_node, expected in zip(tree.children(scale0), summary["scales"][0]["shards"], strict=True):
        before = stats.requests
        minis = tree.children(shard_node)
        assert stats.requests == before + 1 + expected["minishards"]
        node = tree.expand(shard_node).node
        assert (node.chunks, node.stored_bytes) == (expected["chunks"], expected["data_bytes"])
        # chunks listed under the minishards are exactly the reader's, with the same byte ranges
        reader = tree.inspector.reader(tree.inspector.source(scale0.scale))  # type: ignore[attr-defined]
        listed = sorted((c.chunk_id, c.byte_range) for m in minis for c in tree.children(m))
        assert listed == sorted((loc.chunk_id, loc.byte_range) for loc in reader.iter_chunks(expected["shard"]))
        assert stats.requests == before + 1 + expected["minishards"]
        full = [c for m in minis for c in tree.children(m) if c.grid_position is not None]
        assert all(c.raw_bytes == 64 * 64 * 8 * 8 for c in full)  # the sample's chunks are all whole
        row = tree.locate_node(full[0])  # a row of the tree is the same place a locate finds
        assert row.bounds == tree.locate_chunk(full[0].chunk_id or 0, scale0.scale).bounds is not None


def test_locate_voxel_matches_inspector_and_world_box(sample: SampleDataset) -> None:  # noqa: F811
    url = str(sample.segmentation)
    tree = open_layout(url)
    ins = open_dataset(url).inspector()
    rng = np.random.default_rng(1)
    for scale in tree.spatial_scales():
        geo = tree.geometry(scale)
        for _ in range(6):
            voxel = tuple(int(rng.integers(0, s)) for s in geo.shape)  # x, y, z, the format's order
            hit = tree.locate_voxel(voxel[::-1], scale)  # the same voxel as the reader indexes it: z, y, x
            ref = ins.locate_format_voxel(voxel, scale)
            assert hit.voxel == voxel and hit.voxel_index == voxel[::-1]
            assert hit.node.chunk_id == ref["chunk_id"] and hit.node.present == ref["present"]
            assert list(hit.node.byte_range or []) == (ref["byte_range"] or [])
            assert hit.path == (("scale", scale), ("shard", ref["shard"]), ("minishard", ref["minishard"]),
                                ("chunk", ref["chunk_id"]))
            assert tree.node_at(hit.path).byte_range == hit.node.byte_range  # the same row the tree shows
            # bounds: the chunk grid cell holding the voxel, clipped to the volume
            assert hit.bounds is not None and hit.world_box is not None
            start, stop = hit.bounds
            assert all(a <= v < b for a, v, b in zip(start, voxel, stop, strict=True))
            assert all((a - o) % c == 0 for a, o, c in zip(start, geo.origin, geo.chunk_shape, strict=True))
            # world box (z, y, x) in nm: voxel edges of the precomputed resolution, as the layer draws them
            level = tree.volume.level(scale)  # type: ignore[union-attr]
            res_zyx = np.asarray(level.voxel_size)
            lo, hi = (np.asarray(w) for w in hit.world_box)
            np.testing.assert_allclose(lo, (np.asarray(start[::-1]) - 0.5) * res_zyx)
            np.testing.assert_allclose(hi, (np.asarray(stop[::-1]) - 0.5) * res_zyx)
            # the centre of the voxel maps back to it, and to the same chunk
            centre = np.asarray(voxel[::-1]) * res_zyx
            assert geo.voxel_at_world(centre) == voxel
            assert tree.locate_world(centre, scale).node.chunk_id == hit.node.chunk_id
    with pytest.raises(ArgumentError, match="outside"):
        tree.locate_voxel((256, 0, 0))
    with pytest.raises(ArgumentError, match="not a chunk"):
        tree.locate_chunk(1 << 40)
    assert tree.locate_chunk(5).node.grid_position == (1, 0, 1)
    assert tree.locate_chunk((1, 0, 1)).node.chunk_id == 5


def test_shard_map_is_the_hash_of_each_chunk(sample: SampleDataset) -> None:  # noqa: F811
    tree = open_layout(str(sample.image))
    stats = tree.inspector.store.stats
    before = stats.requests
    for scale in tree.spatial_scales():
        source = tree.inspector.source(scale)  # type: ignore[attr-defined]
        spec, sc = source.sharding, source.scale
        for by in ("shard", "minishard"):
            smap = tree.shard_map(scale, by=by)  # type: ignore[arg-type]
            gx, gy, gz = sc.grid_shape
            assert smap.values.shape == (gz, gy, gx)
            for z, y, x in np.ndindex(smap.values.shape):
                a = assign_chunk_ids(spec, [sc.chunk_id((x, y, z))])
                want = int(a.shard[0]) if by == "shard" else int(a.shard[0]) * spec.num_minishards + int(
                    a.minishard[0])
                assert int(smap.values[z, y, x]) == want
            # value [0,0,0] is centred on the first chunk, one value per chunk
            geo = tree.geometry(scale)
            lo, hi = geo.chunk_world_box((0, 0, 0))
            np.testing.assert_allclose(smap.translate, (np.asarray(lo) + np.asarray(hi)) / 2)
            np.testing.assert_allclose(smap.voxel_size, np.asarray(geo.voxel_size) * np.asarray(sc.chunk_size[::-1]))
    assert stats.requests == before  # ids only
    with pytest.raises(ArgumentError, match="coarser"):
        tree.shard_map(max_chunks=10)


# -- validate -> problems -> chunks ------------------------------------------------------------------
def test_validate_clean_sample_and_problems_of_a_corrupted_copy(sample: SampleDataset,  # noqa: F811
                                                               tmp_path: Path) -> None:
    assert list(open_layout(str(sample.segmentation)).validate()) == []
    copy = tmp_path / "segmentation"
    shutil.copytree(sample.segmentation, copy)
    tree = open_layout(str(copy))
    bad = tree.locate_voxel((30, 70, 130), "8_8_40").node
    assert bad.byte_range is not None and bad.file is not None
    a, b = bad.byte_range
    path = copy / bad.file
    data = bytearray(path.read_bytes())
    data[a + 10 : b] = b"\xff" * (b - a - 10)  # the gzip stream of one chunk is destroyed
    path.write_bytes(bytes(data))
    problems = list(open_layout(str(copy)).validate("8_8_40"))
    assert problems and all(p.key == bad.file for p in problems)
    found = tree.locate_problem(problems[0])
    assert found is not None and found.node.chunk_id == bad.chunk_id and found.path == bad.path
    assert found.bounds == tree.locate_chunk(bad.chunk_id or 0).bounds and found.world_box is not None

    # a broken minishard index is reported on the minishard (its chunks cannot be listed)
    shard_node = tree.node_at(bad.path[:2])
    mini = tree.node_at(bad.path[:3])
    assert mini.byte_range is not None
    s, e = mini.byte_range
    data[s:e] = b"\x00" * (e - s)
    path.write_bytes(bytes(data))
    problems = list(open_layout(str(copy)).validate("8_8_40"))
    target = next(p for p in problems if p.message.startswith(f"minishard {mini.path[-1][1]}"))
    fresh = open_layout(str(copy))
    found = fresh.locate_problem(target)
    assert found is not None and found.path == mini.path and found.bounds is None
    errors = [c for c in fresh.children(fresh.node_at(shard_node.path)) if c.kind == "error"]
    assert errors and "minishard" in errors[0].name


# -- segment-keyed directories -------------------------------------------------------------------------
def test_segment_sources_are_roots_and_locate_segment(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=1)
    info = json.loads((path / "info").read_text())
    info.update(mesh="mesh")
    (path / "info").write_text(json.dumps(info))
    spec_json = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "murmurhash3_x86_128",
                 "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    (path / "mesh").mkdir()
    (path / "mesh" / "info").write_text(json.dumps({"@type": "neuroglancer_multilod_draco", "sharding": spec_json}))
    write_shards(LocalByteStore(path), "mesh", parse_sharding_spec(spec_json), {42: b"manifest-of-42", 7: b"seven"})
    tree = open_layout(str(path))
    names = [r.name for r in tree.roots()]
    assert names[-1] == "mesh" and tree.spatial_scales() == names[:-1]
    (hit,) = tree.locate_segment(42)
    assert hit.node.present and hit.node.name == "segment 42" and hit.bounds is None
    node = tree.node_at(hit.path)  # reachable by expanding the mesh root
    assert node.byte_range == hit.node.byte_range and node.grid_position is None
    with pytest.raises(ArgumentError):
        tree.shard_map("mesh")


# -- zarr v3 and N5 --------------------------------------------------------------------------------------
def test_zarr3_tree_locate_and_shard_map(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    url = str(format_cases["zarr3"].path)
    tree = open_layout(url)
    ins = open_dataset(url).inspector()
    (root,) = tree.roots()
    summary = ins.inspect()["scales"][0]
    shards = tree.children(root)
    assert [list(c.path[-1][1]) for c in shards] == [s["shard"] for s in summary["shards"]]  # type: ignore[arg-type]
    stats = tree.inspector.store.stats
    before = stats.requests
    chunks = tree.children(shards[1])
    assert stats.requests == before + 1  # the shard index only
    node = tree.expand(shards[1]).node
    assert node.chunks == summary["shards"][1]["chunks"] and node.stored_bytes == summary["shards"][1]["data_bytes"]
    assert sorted(tuple(c.grid_position or ()) for c in chunks) == sorted(
        tuple(r["inner_chunk"]) for r in ins.list_chunks(shard=list(shards[1].path[-1][1])))  # type: ignore[arg-type]
    hit = tree.locate_voxel((10, 33, 20))
    ref = ins.locate_format_voxel((10, 33, 20))
    assert hit.node.grid_position == tuple(ref["inner_chunk"]) and list(hit.node.byte_range or []) == ref["byte_range"]
    assert hit.path == (("scale", ""), ("shard", tuple(ref["shard"])), ("chunk", tuple(ref["inner_chunk"])))
    assert hit.bounds == ((8, 32, 16), (12, 40, 24))
    assert hit.world_box == ((7.5, 31.5, 15.5), (11.5, 39.5, 23.5))  # unit voxels, array order
    smap = tree.shard_map()
    inner = (3, 5, 4)  # 12x40x30 in 4x8x8 inner chunks
    assert smap.values.shape == inner
    for g in np.ndindex(inner):
        shard = tuple(i // n for i, n in zip(g, (2, 2, 2), strict=True))
        assert int(smap.values[g]) == np.ravel_multi_index(shard, (2, 3, 2))
    with pytest.raises(ArgumentError, match="minishards"):
        tree.shard_map(by="minishard")
    assert tree.shard_map_levels() == ("shard",)


def test_ome_zarr_world_boxes_follow_the_volume(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    tree = open_layout(str(format_cases["ome-zarr"].path))
    assert tree.spatial_scales() == ["0", "1", "2"]
    geo = tree.geometry("1")
    assert geo.voxel_size == pytest.approx((40.0, 16.0, 16.0)) and geo.translate == pytest.approx((1400.0, 80, 80))
    hit = tree.locate_voxel((5, 20, 3), "1")
    assert hit.path == (("scale", "1"), ("chunk", (1, 1, 0)))  # unsharded: one file per chunk
    assert hit.world_box == (pytest.approx((1400 + 3.5 * 40, 80 + 15.5 * 16, 80 - 0.5 * 16)),
                             pytest.approx((1400 + 7.5 * 40, 80 + 31.5 * 16, 80 + 15.5 * 16)))
    assert tree.node_at(hit.path).stored_bytes == hit.node.stored_bytes
    with pytest.raises(ArgumentError, match="not sharded"):
        tree.shard_map("1")
    assert tree.shard_map_levels("1") == ()


def test_n5_blocks_grouped_by_z(format_cases: dict[str, FormatCase], tmp_path: Path) -> None:  # noqa: F811
    url = str(format_cases["n5-multiscale"].path)
    tree = open_layout(url)
    assert [r.name for r in tree.roots()] == ["s0", "s1", "s2"]
    s0 = tree.roots()[0]
    groups = tree.children(s0)
    assert [g.name for g in groups] == ["z 0–8", "z 8–16"]  # 40x48x16 voxels in 16x16x8 blocks
    assert tree.expand(s0).node.chunks == 3 * 3 * 2
    blocks = tree.children(groups[1])
    assert len(blocks) == 9 and all(b.grid_position is not None and b.grid_position[2] == 1 for b in blocks)
    store = tree.inspector.store
    assert all(b.stored_bytes == store.size(b.file or "") for b in blocks)
    assert blocks[0].raw_bytes == 16 * 16 * 8 * 8
    hit = tree.locate_voxel((9, 20, 35))  # z, y, x; N5 stores x, y, z
    ref = open_dataset(url).inspector().locate_format_voxel((35, 20, 9))
    assert hit.node.grid_position == tuple(ref["grid_position"]) and hit.node.file == ref["chunk_key"]
    assert hit.path == (("scale", "s0"), ("group", 1), ("chunk", (2, 1, 1)))
    # 4 nm in x, y and 40 nm in z (µm converted), no offset
    assert hit.world_box == (pytest.approx((7.5 * 40, 15.5 * 4, 31.5 * 4)), pytest.approx((15.5 * 40, 31.5 * 4,
                                                                                          39.5 * 4)))
    with pytest.raises(ArgumentError, match="no shards"):
        tree.shard_map()
    assert tree.shard_map_levels() == () and tree.format_title == "N5"
    # a damaged block: validate's problem leads to that block
    copy = tmp_path / "seg.n5"
    shutil.copytree(format_cases["n5-multiscale"].path, copy)
    (copy / "s0" / "2" / "1" / "1").write_bytes(b"\x00\x00\x00")
    broken = open_layout(str(copy))
    problems = list(broken.validate("s0"))
    assert problems
    found = broken.locate_problem(problems[0])
    assert found is not None and found.path == hit.path


def test_unsharded_precomputed_groups_chunk_files(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    tree = open_layout(str(format_cases["precomputed"].path))
    s0 = tree.roots()[0]
    assert "unsharded" in s0.detail
    groups = tree.children(s0)
    assert [g.name for g in groups] == ["z 7–15", "z 15–23", "z 23–27"]  # offset 7, 20 planes, chunks of 8
    files = [c for g in groups for c in tree.children(g)]
    assert len(files) == 3 * 3 * 3 and tree.expand(s0).node.chunks == 27
    hit = tree.locate_format_voxel((101, 51, 8))  # absolute x, y, z: the voxel_offset included
    assert tree.locate_voxel(tree.geometry().reader_index((101, 51, 8))).path == hit.path  # z, y, x from 0
    assert hit.node.present and hit.path[:2] == (("scale", s0.scale), ("group", 0))
    assert tree.node_at(hit.path).file == hit.node.file
    assert hit.bounds == ((100, 50, 7), (116, 66, 15))
    with pytest.raises(ArgumentError, match="not sharded"):
        tree.shard_map()
    assert tree.shard_map_levels() == ()


def test_zarr3_corrupted_inner_chunk_is_located(format_cases: dict[str, FormatCase], tmp_path: Path) -> None:  # noqa: F811
    copy = tmp_path / "labels.zarr"
    shutil.copytree(format_cases["zarr3"].path, copy)
    tree = open_layout(str(copy))
    hit = tree.locate_voxel((5, 20, 17))
    assert hit.node.byte_range is not None and hit.node.file is not None
    a, b = hit.node.byte_range
    path = copy / hit.node.file
    data = bytearray(path.read_bytes())
    data[a:b] = b"\x13" * (b - a)
    path.write_bytes(bytes(data))
    problems = list(open_layout(str(copy)).validate())
    assert len(problems) == 1
    found = tree.locate_problem(problems[0])
    assert found is not None and found.path == hit.path and found.bounds == hit.bounds


# -- small helpers -----------------------------------------------------------------------------------------
def test_parse_position_and_formatting() -> None:
    assert parse_position("10, 20, 3") == (10, 20, 3) == parse_position(" [10 20 3] ") == parse_position("(10;20;3)")
    assert parse_position("42", length=1) == (42,)
    for bad in ("", "a, b", "1.5, 2"):
        with pytest.raises(ArgumentError):
            parse_position(bad)
    with pytest.raises(ArgumentError, match="expected 1"):
        parse_position("1, 2", length=1)
    assert [format_bytes(n) for n in (None, 0, 1023, 1536, 5 * 1024**3)] == ["", "0 B", "1023 B", "1.5 KiB",
                                                                              "5.0 GiB"]
    assert format_ratio(None) == "" and format_ratio(3.25) == "3.2×"
    node = LayoutNode("chunk", "s", "c", (("scale", "s"),), stored_bytes=100, raw_bytes=400)
    assert node.ratio == 4.0 and LayoutNode("chunk", "s", "c", (("scale", "s"),), stored_bytes=0).ratio is None


def test_a_volume_is_browsed_as_the_format_it_was_read_as(tmp_path: Path) -> None:
    """A directory holding a zarr v2 array and a stray zarr.json is zarr v3 by detection (zarr v3 is tried
    first); opened as ``zarr2://`` its layer's volume says zarr v2, and the tree of that volume must too."""
    import zarr

    from napari_shardscope.core.volumes import open_volumes

    path = tmp_path / "both.zarr"
    z = zarr.create(shape=(6, 8, 10), chunks=(3, 4, 5), dtype="uint8", store=str(path), zarr_format=2)
    z[:] = 1
    zarr.create_array(str(tmp_path / "v3"), shape=(6, 8, 10), chunks=(3, 4, 5), dtype="uint8", zarr_format=3)
    shutil.copy(tmp_path / "v3" / "zarr.json", path / "zarr.json")
    (volume,) = open_volumes(f"zarr2://{path}")
    assert volume.format == "zarr2" and volume.url == str(path)  # the prefix is not part of the volume's url
    assert open_layout(volume.url).format_name == "zarr3"  # what detection alone finds
    tree = open_layout(volume.url, volume)
    assert tree.format_name == "zarr2" and tree.format_title == "zarr v2" and tree.shard_map_levels() == ()
