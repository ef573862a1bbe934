"""The connectome over an imported base: the bulk synapse index equals the per-row count, and
``connections(body)`` equals a full recount under random labelmap and synapse edits.

The import builds the base's synapse index with array operations (one ordering of the ids, one
sort of packed codes); each bulk step is compared here with the per-row computation it replaces,
on random inputs with duplicate ids, empty tables and supervoxels without synapses. The model
machine of ``test_connectome_model`` then runs over an instance that starts from a base.
"""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.annotation import connectome as C
from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.core.annotation.base import block_code
from napari_shardscope.core.annotation.base_import import build_base
from napari_shardscope.core.annotation.base_order import (
    aggregate_by_lexsort,
    block_order,
    dense_ranks,
    id_order,
    index_order,
    key_order,
    order_by,
    synapse_aggregates,
)
from napari_shardscope.core.annotation.connectome import _connections_from, recount_connectivity
from napari_shardscope.core.annotation.errors import AnnotationTableError
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import create_repository
from tests.core.annotation.test_annotation_model import SHAPE, base_volume
from tests.core.annotation.test_connectome_model import ConnectomeMachine
from tests.hypothesis_depth import examples

sv_arrays = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=60)


def _per_row(pairs: list[tuple[int, int]]) -> Counter[tuple[int, int, int]]:
    """The per-row reference: one count per (supervoxel, direction, partner) for each synapse end."""
    c: Counter[tuple[int, int, int]] = Counter()
    for p, q in pairs:
        c[(p, 0, q)] += 1
        c[(q, 1, p)] += 1
    return c


@given(pairs=sv_arrays, big=st.booleans(), wide=st.booleans())
@settings(max_examples=200, deadline=None)
def test_synapse_aggregates_equal_the_per_row_count(pairs: list[tuple[int, int]], big: bool, wide: bool) -> None:
    shift = np.uint64(2**63) if big else np.uint64(0)  # supervoxel ids near 2⁶⁴ pack the same way
    # wide: ids spanning 2⁴⁴ do not pack as they are (numbered densely first); narrow ones pack directly
    scale = np.uint64(2**40 if wide else 1)
    pre = np.asarray([p for p, _ in pairs], dtype=np.uint64) * scale + shift
    post = np.asarray([q for _, q in pairs], dtype=np.uint64) * scale + shift
    want = _per_row([(int(a), int(b)) for a, b in zip(pre, post, strict=True)])
    for fn in (synapse_aggregates, aggregate_by_lexsort):
        sv, partner, d, n = fn(pre, post)
        got = {(int(a), int(x), int(b)): int(k) for a, b, x, k in zip(sv, partner, d, n, strict=True)}
        assert got == dict(want), fn.__name__
        rows = list(zip(sv.tolist(), d.tolist(), partner.tolist(), strict=True))
        assert rows == sorted(rows)  # the table is keyed by supervoxel, then direction, then partner
        assert n.dtype == np.uint32 and (n > 0).all()


@given(ids=st.lists(st.integers(0, 2**40), max_size=50), dense=st.booleans())
@settings(max_examples=200, deadline=None)
def test_id_order_sorts_like_argsort_and_keeps_duplicates_adjacent(ids: list[int], dense: bool) -> None:
    a = np.asarray([i % 64 for i in ids] if dense else ids, dtype=np.uint64)
    order = id_order(a)
    got = a if order is None else a[order]
    assert got.tolist() == sorted(a.tolist())
    if order is not None:
        assert sorted(order.tolist()) == list(range(a.size))  # a permutation: no row lost or repeated


wide_u64 = st.lists(st.integers(0, 2**64 - 1), max_size=50)


@given(a=wide_u64, b=wide_u64, narrow=st.booleans())
@settings(max_examples=200, deadline=None)
def test_packed_orders_are_the_stable_lexicographic_orders(a: list[int], b: list[int], narrow: bool) -> None:
    """key_order, order_by and index_order give numpy's stable order, packed (narrow keys) or not (wide)."""
    n = min(len(a), len(b))
    x = np.asarray([v % 7 if narrow else v for v in a[:n]], dtype=np.uint64)
    y = np.asarray([v % 5 if narrow else v for v in b[:n]], dtype=np.uint64)
    assert key_order(x).tolist() == np.argsort(x, kind="stable").tolist()
    assert order_by(x, y).tolist() == np.lexsort((np.arange(n), y, x)).tolist()
    d = (y % np.uint64(2)).astype(np.uint8)
    assert index_order(x, d, y).tolist() == np.lexsort((np.arange(n), y, d, x)).tolist()
    uniq, ranks = dense_ranks(x)
    assert uniq.tolist() == sorted(set(x.tolist()))
    assert uniq[ranks.astype(np.intp)].tolist() == x.tolist()


@given(cells=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 5)), max_size=60))
@settings(max_examples=200, deadline=None)
def test_block_order_is_the_stable_order_of_block_codes(cells: list[tuple[int, int, int]]) -> None:
    c = np.asarray(cells, dtype=np.int64).reshape(-1, 3)
    order, codes = block_order(c, (4, 5, 6))
    want = np.argsort(block_code(c[:, 0], c[:, 1], c[:, 2]), kind="stable")
    assert order.tolist() == want.tolist()
    assert codes.tolist() == block_code(c[want, 0], c[want, 1], c[want, 2]).tolist()


def _table(path: Path, n: int, seed: int, ids: np.ndarray | None = None) -> Path:
    rng = np.random.default_rng(seed)
    hi = [SHAPE[2], SHAPE[1], SHAPE[0]]
    sid = rng.permutation(np.arange(3 * n + 1))[:n] if ids is None else ids
    pq.write_table(pa.table({"id": np.asarray(sid, dtype=np.int64),
                             "pre_pt_position": pa.array(rng.integers(0, hi, size=(n, 3)).tolist(),
                                                         pa.list_(pa.int64())),
                             "post_pt_position": pa.array(rng.integers(0, hi, size=(n, 3)).tolist(),
                                                          pa.list_(pa.int64())),
                             "score": rng.random(n)}), path)
    return path


def _based(tmp: Path, n: int, seed: int = 0) -> tuple[Any, Any, Any]:
    seg, _ = base_volume()
    repo = create_repository(None, engine="memory")
    lm = create_labelmap(repo, "seg", seg, block=(4, 8, 8))
    inst = create_annotation_instance(repo, "syn", labelmap=lm, base=_table(tmp / "syn.parquet", n, seed),
                                      base_dir=tmp / "base")
    return repo, lm, inst


def test_connections_over_a_base_after_merges_read_the_index_not_a_recount(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _repo, lm, inst = _based(tmp_path, 300)
    assert inst.base is not None and inst.base.indexed
    v = inst.at("main")
    lmv = lm.at("main")
    bodies = sorted(int(b) for b in np.unique(lmv.read_bodies()) if b)
    for step in range(3):
        truth = recount_connectivity(v).as_dict()
        want = {b: _connections_from(truth, b) for b in bodies}
        with monkeypatch.context() as m:  # the indexed path must not fall back to counting every synapse
            m.setattr(C, "recount_connectivity", lambda _v: pytest.fail("recounted"))
            for b in bodies:
                assert v.connections(b) == want[b], (step, b)
        assert sum(c.out_total for c in want.values()) > 0
        lmv.merge(bodies[0], [bodies[-1]])
        bodies = bodies[:-1]


def test_connectivity_over_a_base_reads_the_index_of_the_bodies_asked_and_streams_the_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``connectivity(bodies)`` reads the index rows of those bodies' supervoxels only, in one read, and
    ``connectivity()`` streams the index instead of recounting every synapse (which does not fit in
    memory at 10⁷ synapses); both equal the recount, after merges too."""
    _repo, lm, inst = _based(tmp_path, 300, seed=5)
    v = inst.at("main")
    lmv = lm.at("main")
    bodies = sorted(int(b) for b in np.unique(lmv.read_bodies()) if b)
    lmv.merge(bodies[0], [bodies[1]])
    bodies = sorted(int(b) for b in np.unique(lmv.read_bodies()) if b)
    truth = recount_connectivity(v).as_dict()
    base = inst.base
    assert base is not None
    asked: list[list[int]] = []
    real = base.synapse_rows

    def rows(svs: Any) -> Any:
        asked.append(np.asarray(svs, dtype=np.uint64).tolist())
        return real(svs)

    monkeypatch.setattr(base, "synapse_rows", rows)
    monkeypatch.setattr(C, "recount_connectivity", lambda _v: pytest.fail("recounted"))
    assert v.connectivity().as_dict() == truth
    some = bodies[:3]
    asked.clear()
    want = {k: n for k, n in truth.items() if k[0] in some or k[1] in some}
    assert v.connectivity(some).as_dict() == want and want
    members = sorted(int(s) for b in some for s in lmv.supervoxels(b))
    assert [a for a in asked if a] == [members]  # one read of exactly the bodies' supervoxels' rows


def test_a_labelmap_edit_does_not_make_the_next_query_read_the_whole_labelmap_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every merge or undo is a new labelmap state; the supervoxels splits retired were derived from the
    whole mutation log of the version's ancestry once per state, so each query after an edit cost the
    whole history. Now the log is read once per version and then only its new records."""
    from napari_shardscope.core.versioned.view import VersionView

    _repo, lm, inst = _based(tmp_path, 200, seed=2)
    v = inst.at("main")
    lmv = lm.at("main")
    bodies = sorted(int(b) for b in np.unique(lmv.read_bodies()) if b)
    a, b = bodies[0], bodies[-1]
    v.connections(a)
    scans: list[bool] = []
    real = VersionView.read_log

    def counting(self: Any, instance: Any, *, own: bool = False) -> Any:
        scans.append(own)
        return real(self, instance, own=own)

    got = []
    with monkeypatch.context() as m:
        m.setattr(VersionView, "read_log", counting)
        for step in range(4):
            if step % 2 == 0:
                lmv.merge(a, [b])
            else:
                lmv.undo()
            got.append((v.connections(a), v.connectivity([a]).as_dict()))
    assert scans == []  # no scan of the log: the new records only, read directly
    lmv.merge(a, [b])
    truth = recount_connectivity(v).as_dict()
    assert got[2] == (_connections_from(truth, a), {k: n for k, n in truth.items() if a in k})


def test_a_base_imported_without_the_index_is_still_counted(tmp_path: Path) -> None:
    """A base written before the synapse index existed (no ``sv`` column, no synapses table) is recounted."""
    _repo, _lm, inst = _based(tmp_path, 50, seed=3)
    v = inst.at("main")
    old = build_base(_table(tmp_path / "old.parquet", 50, 3), tmp_path / "old-base", shape=SHAPE, block=(4, 8, 8))
    assert old.synapses is None and not old.supervoxels
    doc = old.to_json()
    assert "synapses" not in doc and "supervoxels" not in doc  # what the previous code wrote
    repo2 = create_repository(None, engine="memory")
    seg, _ = base_volume()
    lm2 = create_labelmap(repo2, "seg", seg, block=(4, 8, 8))
    cfg = {"format": 2, "labelmap": "seg", "base": doc}
    from napari_shardscope.core.annotation.instance import TYPE_NAME, AnnotationInstance

    inst2 = AnnotationInstance(repo2, repo2.create_instance("syn", TYPE_NAME, cfg), lm2)
    assert inst2.base is not None and not inst2.base.indexed
    v2 = inst2.at("main")
    for b in sorted(int(x) for x in np.unique(lm2.at("main").read_bodies()) if x):
        assert v2.connections(b) == v.connections(b)


def test_empty_table_and_duplicate_ids(tmp_path: Path) -> None:
    repo, lm, inst = _based(tmp_path, 0)
    v = inst.at("main")
    for b in sorted(int(x) for x in np.unique(lm.at("main").read_bodies()) if x):
        c = v.connections(b)
        assert c.outgoing == () and c.incoming == ()
    dup = _table(tmp_path / "dup.parquet", 5, 1, ids=np.asarray([7, 3, 9, 3, 1]))
    with pytest.raises(AnnotationTableError, match="rows 1 and 3 have the same id 3"):
        create_annotation_instance(repo, "dup", labelmap=lm, base=dup, base_dir=tmp_path / "dup-base")


_dirs = itertools.count()


class BasedConnectomeMachine(ConnectomeMachine):
    """The connectome model machine over an instance whose synapses start in an imported base."""

    def __init__(self) -> None:
        super().__init__()
        root = Path(tempfile.mkdtemp(prefix="connectome-base-"))
        k = next(_dirs)
        self.inst = create_annotation_instance(self.repo, f"based{k}", labelmap=self.lm,
                                               base=_table(root / "syn.parquet", 12, k),
                                               base_dir=root / "base")


TestBasedConnectomeModel = BasedConnectomeMachine.TestCase
# Examples bounded for the default run (tests/hypothesis_depth.py): each step's invariant recounts the whole
# connectome and queries it a dozen ways, and each example imports a base, so the cost is examples x steps; the
# default run keeps every step of a long sequence (20 examples before, 6 now) and ``--hypothesis-profile long``
# searches twenty times as many.
TestBasedConnectomeModel.settings = settings(max_examples=examples(6), stateful_step_count=20, deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow])


@given(pts=st.lists(st.tuples(st.integers(0, SHAPE[0] - 1), st.integers(0, SHAPE[1] - 1),
                              st.integers(0, SHAPE[2] - 1)), max_size=40))
@settings(max_examples=40, deadline=None)
def test_supervoxels_of_block_runs_equal_the_per_point_read(pts: list[tuple[int, int, int]]) -> None:
    """The import's read of runs of points sorted by block gives each point what the general read gives it."""
    from napari_shardscope.core.annotation import points as P

    lmv = _labelmap_root()
    p = np.asarray(pts, dtype=np.int32).reshape(-1, 3)
    block = (4, 8, 8)
    c = p.astype(np.int64) // np.asarray(block)
    order, codes = block_order(c, [-(-s // b) for s, b in zip(SHAPE, block, strict=True)])
    starts = np.flatnonzero(np.append(True, codes[1:] != codes[:-1])) if p.size else np.zeros(0, np.int64)
    got = P.supervoxels_of_block_runs(lmv, p[order], starts, block)
    assert got.tolist() == P.supervoxels_at(lmv, p[order], block).tolist()
    once = P.supervoxels_of_block_runs(lmv, p[order], starts, block, once=True)  # past the caches: same values
    assert once.tolist() == got.tolist()


_lm_cache: list[Any] = []


def _labelmap_root() -> Any:
    if not _lm_cache:
        seg, _ = base_volume()
        repo = create_repository(None, engine="memory")
        _lm_cache.append(create_labelmap(repo, "seg", seg, block=(4, 8, 8)).at("main"))
    return _lm_cache[0]
