"""Labelmap behaviour on real files: the sample dataset (sharded precomputed, striding pyramid), a
designed dumbbell volume for body splits, a zarr v3 uint32 base; versions, branches, restarts,
notifications and errors."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import (
    EditEvent,
    Labelmap,
    LabelmapStateError,
    MappingError,
    NothingToUndoError,
    UnknownLabelError,
    VoxelMask,
    create_labelmap,
    open_labelmap,
)
from napari_shardscope.core.labelmap.geometry import BlockGrid, Box
from napari_shardscope.core.labelmap.label_index import build_base_index
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import CommittedVersionError, Repository, create_repository
from napari_shardscope.core.volumes import open_volume
from tests.core.labelmap.volumes import mode_downsample, write_precomputed
from tests.volume_cases import run_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDataset:
    return run_sample(tmp_path_factory)  # made once per test run, shared by the xdist workers


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    r = create_repository(tmp_path / "repo")
    yield r
    r.close()


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


# -- the sample dataset -------------------------------------------------------------------------------


def test_sample_reads_index_and_split(sample: SampleDataset, repo: Repository) -> None:
    before = tree_digest(sample.segmentation)
    base = open_volume(sample.segmentation)
    lm = create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)
    body_of = sample.body_map()
    base0 = np.asarray(base.levels[0].array)
    assert lm.config.id_start == int(base0.max()) + 1
    v = lm.at("main")
    # before any edit: the base, its agglomeration, the base's own chunking, uint64
    for scale, level in enumerate(base.levels):
        arr = v.supervoxel_arrays()[scale]
        assert arr.shape == level.shape and arr.dtype == np.uint64 and arr.chunks == level.array.chunks
        np.testing.assert_array_equal(np.asarray(arr[5]), np.asarray(level.array[5]))
    plane = v.read_bodies((7, slice(None), slice(None)))
    want = np.vectorize(lambda s: body_of.get(int(s), int(s)), otypes=[np.uint64])(base0[7])
    np.testing.assert_array_equal(plane, want)

    # label index = one pass of np.unique over the base
    body = int(want[100, 100])
    members = sorted(s for s, b in body_of.items() if b == body)
    assert v.supervoxels(body) == members
    assert v.size(body) == int(np.isin(base0, members).sum())
    where = np.argwhere(np.isin(base0, members))
    assert v.bbox(body) == Box(tuple(where.min(0)), tuple(where.max(0) + 1))  # type: ignore[arg-type]
    coarse = v.bbox(body, exact=False)
    assert coarse.intersect(v.bbox(body)) == v.bbox(body)
    np.testing.assert_array_equal(v.mask(body, (7,)), np.isin(base0[7], members))

    # split a supervoxel in half along y: only its blocks change, at every scale
    sv = members[0]
    voxels = np.argwhere(base0 == sv)
    cut = voxels[voxels[:, 1] < np.median(voxels[:, 1])]
    a, b = v.split_supervoxel(sv, cut)
    new0 = base0.copy()
    new0[base0 == sv] = b
    new0[tuple(cut.T)] = a
    np.testing.assert_array_equal(np.asarray(v.supervoxel_arrays()[0]), new0)
    assert v.supervoxels(body) == sorted([*members[1:], a, b])
    assert v.supervoxel_size(a) == len(cut) and v.supervoxel_size(b) == len(voxels) - len(cut)
    for scale in range(1, len(base.levels)):
        f = lm.config.scales[scale].factors
        got = np.asarray(v.supervoxel_arrays()[scale])
        old = np.asarray(base.levels[scale].array)
        touched = mode_downsample((base0 == sv).astype(np.uint64), f).astype(bool)
        touched = ts.downsample(ts.array((base0 == sv).astype(np.uint8)), list(f), "max").read().result() > 0
        # windows that held the split supervoxel: TensorStore's mode of the new scale 0 ...
        np.testing.assert_array_equal(got[touched], mode_downsample(new0, f)[touched])
        # ... every other voxel: the base's own pyramid (striding here), untouched
        np.testing.assert_array_equal(got[~touched], old[~touched])
        assert not (got == sv).any()
    with pytest.raises(UnknownLabelError, match="does not exist"):
        v.split_supervoxel(sv, cut)
    assert tree_digest(sample.segmentation) == before  # the base is never written


# -- a designed volume: body splits -------------------------------------------------------------------


def dumbbell() -> np.ndarray:
    """sv 10: two blobs joined by a thin neck along x; sv 30 and 40 touch one blob each; sv 5 around."""
    vol = np.full((8, 16, 32), 5, dtype=np.uint64)
    vol[2:6, 3:13, 2:12] = 10
    vol[3:5, 7:9, 12:20] = 10
    vol[2:6, 3:13, 20:30] = 10
    vol[2:6, 13:16, 2:12] = 30
    vol[2:6, 13:16, 20:30] = 40
    return vol


@pytest.fixture(scope="module")
def dumbbell_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dumbbell") / "seg"
    write_precomputed(path, dumbbell(), ((1, 1, 1), (1, 2, 2), (2, 2, 2)), chunk_xyz=(16, 8, 4), sharded=True)
    return path


@pytest.fixture
def dumbbell_lm(dumbbell_base: Path, repo: Repository) -> Labelmap:
    return create_labelmap(repo, "seg", dumbbell_base, agglomeration={30: 10, 40: 10}, block=8)


def all_scales(lm: Labelmap, ref: str) -> list[np.ndarray]:
    return [np.asarray(a) for a in lm.at(ref).supervoxel_arrays()]


def test_body_split_cuts_a_supervoxel_at_its_neck_and_undoes(dumbbell_lm: Labelmap) -> None:
    lm = dumbbell_lm
    v = lm.at("main")
    before = all_scales(lm, "main")
    events: list[EditEvent] = []
    lm.subscribe(events.append)
    out = v.split_body(10, {1: [[4, 8, 5]], 2: [[4, 8, 25]]})
    assert out.bodies[1] == 10 and out.bodies[2] >= lm.config.id_start
    (parts,) = out.cut.values()
    assert list(out.cut) == [10] and len(parts) == 2
    sv0 = v.read_supervoxels()
    bodies = v.read_bodies()
    old = dumbbell()
    assert (bodies[old == 5] == 5).all()
    assert (bodies[:, :, :12][old[:, :, :12] != 5] == 10).all()  # blob A and sv 30
    assert (bodies[:, :, 20:][old[:, :, 20:] != 5] == out.bodies[2]).all()  # blob B and sv 40
    assert set(np.unique(sv0[old == 10]).tolist()) == set(parts)
    assert v.supervoxels(out.bodies[2]) == sorted([40, *[p for p in parts if v.body_of(p) == out.bodies[2]]])
    for scale, f in enumerate(((1, 1, 1), (1, 2, 2), (2, 2, 2))):
        np.testing.assert_array_equal(np.asarray(v.supervoxel_arrays()[scale]), mode_downsample(sv0, f))
    assert len(events) == 1 and events[0].blocks_changed and events[0].mutation.operation == "split-body"
    after = all_scales(lm, "main")

    undo = v.undo()  # one undo reverts the cut and the cleave
    assert undo.operation == "undo" and undo.args["mutation"] == events[0].mutation.mutation_id
    for got, want in zip(all_scales(lm, "main"), before, strict=True):
        np.testing.assert_array_equal(got, want)
    assert v.supervoxels(10) == [10, 30, 40] and not v.exists(out.bodies[2])
    v.redo()
    for got, want in zip(all_scales(lm, "main"), after, strict=True):
        np.testing.assert_array_equal(got, want)
    assert v.body_at((4, 14, 25)) == out.bodies[2]


def test_body_split_by_region_growing_only(dumbbell_lm: Labelmap) -> None:
    v = dumbbell_lm.at("main")
    out = v.split_body(10, {1: VoxelMask((3, 14, 4), np.ones((1, 1, 2), bool)), 2: [[3, 14, 25]]})
    assert out.cut == {}
    assert {v.body_of(30), v.body_of(40)} == {10, out.bodies[2]} and v.body_of(30) == 10
    assert v.body_of(10) in (10, out.bodies[2])
    with pytest.raises(ArgumentError, match="at least two groups"):
        v.split_body(10, {1: [[3, 14, 4]]})
    with pytest.raises(MappingError, match="not in body"):
        v.split_body(10, {1: [[3, 14, 4]], 2: [[0, 0, 0]]})
    with pytest.raises(ArgumentError, match="seed of groups 1 and 2"):
        v.split_body(10, {1: [[3, 14, 4]], 2: [[3, 14, 4]]})


def test_merge_and_cleave_update_the_same_body_arrays(dumbbell_lm: Labelmap) -> None:
    lm = dumbbell_lm
    v = lm.at("main")
    events: list[EditEvent] = []
    unsubscribe = lm.subscribe(events.append)
    bodies = v.body_arrays()
    assert int(np.asarray(bodies[0])[4, 14, 5]) == 10
    v.merge(5, [10])
    assert bodies is not None and v.body_arrays()[0] is bodies[0]  # same lazy array, new mapping
    assert (np.asarray(bodies[0]) == 5).all()
    assert events[-1].blocks_changed is False
    new = v.cleave(5, [30])
    assert int(np.asarray(bodies[0])[4, 14, 5]) == new and v.size(new) == int((dumbbell() == 30).sum())
    with pytest.raises(MappingError, match="merged into body 5"):
        v.merge(10, [40])
    with pytest.raises(MappingError, match="not in body"):
        v.cleave(new, [40])
    with pytest.raises(UnknownLabelError):
        v.size(10)  # merged away
    with pytest.raises(UnknownLabelError):
        v.cleave(5, [123456])
    with pytest.raises(ArgumentError):
        v.merge(5, [0])
    unsubscribe()
    v.undo()
    assert len(events) == 2
    assert [h.mutation.operation for h in v.history(5)] == ["merge", "cleave", "undo"]


def test_versions_branches_and_restart(dumbbell_lm: Labelmap, repo: Repository) -> None:
    lm = dumbbell_lm
    root = repo.root
    a, b = lm.at(root).split_supervoxel(30, [[2, 13, 2]])
    repo.commit(root, "split")
    frozen = all_scales(lm, root.uuid)
    with pytest.raises(CommittedVersionError):
        lm.at(root).merge(5, [10])
    with pytest.raises(NothingToUndoError):  # a committed version's edits are history, not undoable
        lm.at(repo.new_version(root)).undo()
    other = repo.new_version(root, "other")
    ids_main = {lm.at("main").cleave(10, [a]), lm.at("main").cleave(10, [40])}
    ids_other = {lm.at(other).cleave(10, [b]), *lm.at(other).split_supervoxel(40, [[2, 13, 20]])}
    assert not ids_main & ids_other  # one repository-wide allocator
    for got, want in zip(all_scales(lm, root.uuid), frozen, strict=True):
        np.testing.assert_array_equal(got, want)  # later edits on both branches left it alone
    # another process: nothing cached, undo stacks from the log
    lm2 = open_labelmap(repo, "seg")
    v2 = lm2.at(other)
    assert v2.can_undo and not v2.can_redo
    v2.undo()
    v2.undo()
    assert not v2.can_undo and v2.can_redo
    assert lm.at(other).supervoxels(10) == sorted([10, a, b, 40])  # the first handle sees the other's edits
    lm.at(other).redo()
    assert lm2.at(other).body_of(b) != 10
    history = lm.at("main").history(10)
    assert [h.mutation.operation for h in history] == ["split-supervoxel", "cleave", "cleave"]
    assert history[0].version == root.uuid
    assert repo.verify() == []


def test_store_merge_of_conflicting_branches_is_a_typed_error(dumbbell_lm: Labelmap, repo: Repository) -> None:
    lm = dumbbell_lm
    repo.commit(repo.root, "base")
    left, right = repo.new_version(repo.root, "left"), repo.new_version(repo.root, "right")
    lm.at(left).cleave(10, [30])
    lm.at(right).cleave(10, [30])
    repo.commit(left, "l")
    repo.commit(right, "r")
    merged = repo.merge(left, right, policy="ours", branch="both").version
    with pytest.raises(LabelmapStateError, match="do not replay"):
        lm.at(merged)


# -- other bases, lazy index ---------------------------------------------------------------------------


def test_zarr3_uint32_base_and_lazy_index(tmp_path: Path, repo: Repository) -> None:
    data = dumbbell().astype(np.uint32)
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "z")}},
                    create=True, dtype=ts.uint32, shape=data.shape,
                    chunk_layout=ts.ChunkLayout(chunk_shape=[4, 8, 8])).result()
    store.write(data).result()
    with pytest.raises(ArgumentError, match="id_start must be an integer >= 41"):
        create_labelmap(repo, "z", tmp_path / "z", id_start=7)
    lm = create_labelmap(repo, "z", tmp_path / "z", id_start=2**40, build_index=False, block=8)
    assert repo.get_unversioned("z", b"index/meta") is None  # built on first need
    v = lm.at("main")
    split, rest = v.split_supervoxel(30, [[2, 13, 2], [2, 13, 3]])
    assert repo.get_unversioned("z", b"index/meta") is not None
    assert split == 2**40 and v.supervoxel_at((2, 13, 3)) == split and v.supervoxel_at((3, 14, 5)) == rest
    assert v.supervoxel_arrays()[0].dtype == np.uint64
    low = create_labelmap(repo, "low", tmp_path / "z", id_start=7, build_index=False, block=8)
    assert low.at("main").split_supervoxel(30, [[2, 13, 2]]) == (41, 42)  # lifted above the base ids


def test_base_index_counts_blocks() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 5, size=(9, 10, 11)).astype(np.uint64)
    grid = BlockGrid((9, 10, 11), (4, 4, 4))
    built = build_base_index(lambda box: data[box.slices], grid)
    assert built.summary.supervoxels.tolist() == [1, 2, 3, 4] and built.summary.max_id == 4
    for sv in (1, 2, 3, 4):
        entry = built.entry(sv)
        assert entry is not None
        for c, n in zip(entry.block_set(), entry.counts, strict=True):
            assert int((data[grid.box(c).slices] == sv).sum()) == int(n)
        assert entry.total == int((data == sv).sum()) == built.summary.total(sv)
    assert built.entry(0) is None


def test_reads_from_other_threads_during_edits(dumbbell_lm: Labelmap, repo: Repository) -> None:
    """napari slices on its own threads while the proofreader edits: no torn reads, no errors."""
    import threading

    v = dumbbell_lm.at("main")
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for arr in (*v.body_arrays(), *v.supervoxel_arrays()):
                    np.asarray(arr[arr.shape[0] // 2])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        v.merge(5, [10])
        a, _ = v.split_supervoxel(30, [[2, 13, 2], [3, 13, 2]])
        v.cleave(5, [a])
        v.undo()
        v.undo()
        v.split_body(5, {1: [[4, 8, 5]], 2: [[4, 8, 25]]})
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    want = v.read_supervoxels()
    np.testing.assert_array_equal(np.asarray(v.supervoxel_arrays()[0]), want)
    np.testing.assert_array_equal(np.asarray(v.body_arrays()[0]), v.bodies_of(want))


def test_handed_out_body_arrays_follow_edits_made_elsewhere(dumbbell_lm: Labelmap, repo: Repository) -> None:
    bodies = dumbbell_lm.at("main").body_array(0)
    other = open_labelmap(repo, "seg")  # another process, in effect
    other.at("main").merge(5, [10])
    # records are read on demand and checked against the version's stamp: the handed-out array shows
    # the other process's merge on its next read of records, at the latest once the version is looked at
    dumbbell_lm.at("main")
    assert int(np.asarray(bodies[4, 14, 5])) == 5
    other.at("main").undo()
    dumbbell_lm.at("main")
    assert int(np.asarray(bodies[4, 14, 5])) == 10


def test_a_zarr_v2_segmentation_is_a_labelmap_base(tmp_path: Path, repo: Repository) -> None:
    """Issue 16: zarr v2 (and OME-Zarr 0.4) volumes serve as a labelmap's base like every other format."""
    import zarr

    base = np.zeros((8, 16, 16), dtype="<u4")
    base[:, :, :8], base[:, :, 8:] = 11, 12
    z = zarr.create(shape=base.shape, chunks=(4, 8, 8), dtype=base.dtype, store=str(tmp_path / "seg.zarr"),
                    zarr_format=2, fill_value=0)
    z[:] = base
    z.attrs["_ARRAY_DIMENSIONS"] = ["z", "y", "x"]
    lm = create_labelmap(repo, "v2", tmp_path / "seg.zarr", block=8)
    v = lm.at("main")
    np.testing.assert_array_equal(v.read_bodies(), base)
    v.merge(11, [12])
    np.testing.assert_array_equal(v.read_bodies(), np.full_like(base, 11))
    np.testing.assert_array_equal(np.asarray(zarr.open(str(tmp_path / "seg.zarr"), mode="r")[:]), base)  # untouched


# -- reads past the caches (exports) ----------------------------------------------------------------


def odd_boxes(shape: tuple[int, ...]) -> list[Box]:
    """The whole scale, one voxel, and boxes crossing chunk and overlay-block edges at odd offsets."""
    z, y, x = shape
    boxes = [Box((0, 0, 0), (z, y, x)), Box((z - 1, y - 1, x - 1), (z, y, x))]
    boxes.append(Box((0, 0, 0), (min(z, 4), min(y, 8), min(x, 16))))  # one whole base chunk: decoded in place
    boxes.append(Box((z // 3, 1, 3), (z, max(2, y - 2), max(4, x - 1))))
    boxes.append(Box((0, y // 2, x // 3), (max(1, z // 2), y, x)))
    return boxes


def check_read_once(v: object, scales: int) -> None:
    for scale in range(scales):
        shape = tuple(np.asarray(v.read_supervoxels(..., scale)).shape)  # type: ignore[attr-defined]
        for box in odd_boxes(shape):
            np.testing.assert_array_equal(v.read_once(box, scale),  # type: ignore[attr-defined]
                                          v.read_bodies(box, scale))  # type: ignore[attr-defined]
            np.testing.assert_array_equal(v.read_once(box, scale, bodies=False),  # type: ignore[attr-defined]
                                          v.read_supervoxels(box, scale))  # type: ignore[attr-defined]
    assert v.read_once((1, 4, 5)).shape == () and int(v.read_once((1, 4, 5))) == v.body_at((1, 4, 5))  # type: ignore[attr-defined]


def test_read_once_matches_cached_reads_over_splits_and_merges(dumbbell_lm: Labelmap, repo: Repository) -> None:
    """The export read (base decoded directly, overlay pasted, ids mapped) equals the cached lazy read."""
    lm = dumbbell_lm
    assert all(d is not None for d in lm.base.direct)  # raw sharded precomputed on disk: the direct reader
    v = lm.at("main")
    out = v.split_body(10, {1: [[4, 8, 5]], 2: [[4, 8, 25]]})
    assert all(lm.at("main")._state().overlay.has(s) for s in range(3))  # overlay blocks at every scale
    v.merge(5, [out.bodies[2]])
    check_read_once(v, 3)
    committed = lm.at(repo.commit(v.uuid, "split and merge").uuid)  # its state is kept by read_once
    check_read_once(committed, 3)
    head = lm.at(repo.new_version(committed.uuid))
    head.merge(5, [10])  # the new head changes; the committed version read before does not
    check_read_once(head, 3)
    np.testing.assert_array_equal(committed.read_once(), committed.read_bodies())
    assert not np.array_equal(committed.read_once(), head.read_once())
    with pytest.raises(ArgumentError, match="outside"):
        v.read_once(Box((0, 0, 0), (9, 16, 32)))


def test_read_once_through_tensorstore_when_no_direct_reader(tmp_path: Path, repo: Repository) -> None:
    """A base TensorStore's own driver reads (zarr3 zstd, uint32) falls back to the store, same values."""
    data = dumbbell().astype(np.uint32)
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "z")},
                     "metadata": {"codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                             {"name": "zstd"}]}},
                    create=True, dtype=ts.uint32, shape=data.shape,
                    chunk_layout=ts.ChunkLayout(chunk_shape=[4, 8, 8])).result()
    store.write(data).result()
    lm = create_labelmap(repo, "z", tmp_path / "z", build_index=False, block=8, agglomeration={30: 10})
    assert lm.base.direct == [None]
    v = lm.at("main")
    v.split_supervoxel(40, [[2, 13, 20], [2, 13, 21]])
    check_read_once(v, 1)
    assert v.read_once(..., bodies=False).dtype == np.uint64


@pytest.mark.parametrize("raw", [b"[1, 2]", b"{", b"[" * 100_000, b"\xff\xfe", b"1" * 5000])
def test_damaged_stored_metadata_is_a_typed_error(raw: bytes) -> None:
    """The agglomeration's and the label index's stored metadata go through the one bounded JSON loader:
    a damaged document is the labelmap's typed error naming the key (deep nesting was a RecursionError)."""
    from napari_shardscope.core.labelmap.agglomeration import open_stored_agglomeration
    from napari_shardscope.core.labelmap.errors import LabelmapStateError
    from napari_shardscope.core.labelmap.label_index import IndexDecodeError, load_index_meta

    def read(keys: Sequence[bytes]) -> list[bytes | None]:
        return [raw for _ in keys]

    with pytest.raises(LabelmapStateError, match="agglomeration/meta"):
        open_stored_agglomeration(read)
    with pytest.raises(IndexDecodeError, match="index/meta"):
        load_index_meta(read)
