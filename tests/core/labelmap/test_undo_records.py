"""Undo records cost the size of the change, not of the records the change touches.

An edit's undo record (``u`` + mutation id) once saved the whole previous value of every key the edit
rewrote: a cleave of one supervoxel on a page of 4,096 explicit assignments saved the whole 68 KB
page, and a long history grew by ~8.5 KB per edit (844 MB of a 1.13 GB migrated store at 10⁵
edits). The record now keeps, for record pages and id sets, only the rows the edit changed with
their old values (plus a digest of the old value, checked when undo rebuilds it); the older layout,
whole previous values, must still undo.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.labelmap import Labelmap, create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.edits import read_saved, read_top
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.keys import undo_prefix
from napari_shardscope.core.labelmap.records import (
    PAGE_DTYPE,
    REDO_TOP_KEY,
    UNDO_TOP_KEY,
    RecordDecodeError,
    explicit_key,
    removed_key,
)
from napari_shardscope.core.labelmap.undo_records import (
    RowDelta,
    decode_undo_record,
    encode_undo_record,
    read_undo_record,
)
from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from tests.core.labelmap.volumes import write_precomputed

SHAPE = (8, 32, 32)
#: Supervoxels 1..4,000 form base body 1 (one explicit page's worth: page 0 holds ids 0..4,095).
BIG = 4000
#: A first cleave fills page 0 with this many explicit rows (and node 1's removed-set with as many ids).
FILL = 3000


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One supervoxel per voxel: 8,192 supervoxels, ids 1..8,192, over two explicit pages."""
    root = tmp_path_factory.mktemp("undo-records")
    svs = (np.arange(int(np.prod(SHAPE)), dtype=np.uint64) + 1).reshape(SHAPE)
    write_precomputed(root / "seg", svs, ((1, 1, 1),))
    return root / "seg"


def _open(path: Path) -> tuple[Repository, Labelmap]:
    repo = open_repository(path)
    return repo, open_labelmap(repo, "seg")


def _last_mutation(repo: Repository, lm: Labelmap, uuid: str, stack: bytes = UNDO_TOP_KEY) -> int:
    """The mutation on top of the version's undo stack (of the redo stack: the last undo)."""
    with repo.read(uuid) as view:
        top = read_top(view, lm.instance, stack)
    assert top is not None
    return top.mutation_id


def _record(repo: Repository, lm: Labelmap, uuid: str, mid: int) -> bytes:
    with repo.read(uuid) as view:
        raw = view.get(lm.instance, undo_prefix(mid))
    assert raw is not None
    return raw


def _map_records(repo: Repository, lm: Labelmap, uuid: str) -> dict[bytes, bytes]:
    """Every body-map record of the version (what undo must restore byte for byte)."""
    with repo.read(uuid) as view:
        return {k: v for k, v in view.scan(lm.instance) if k[:1] in b"epqnrax"}


def _full_page(tmp_path: Path, base: Path) -> tuple[Path, str]:
    """A repository whose page 0 and node 1's removed-set are full (3,000 rows) after one big cleave."""
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", base, agglomeration={sv: 1 for sv in range(2, BIG + 1)}, block=(4, 8, 8))
    uuid = repo.root.uuid
    lm.at(uuid).cleave(1, list(range(2, FILL + 2)))
    with repo.read(uuid) as view:
        page = view.get(lm.instance, explicit_key(0))
        removed = view.get(lm.instance, removed_key(1))
    assert page is not None and len(page) >= FILL * 17
    assert removed is not None and len(removed) >= FILL * 8
    repo.close()
    return tmp_path / "repo", uuid


def test_undo_record_of_a_small_edit_on_full_pages_is_small(tmp_path: Path, base: Path) -> None:
    path, uuid = _full_page(tmp_path, base)
    repo, lm = _open(path)
    before = _map_records(repo, lm, uuid)
    v = lm.at(uuid)
    sizes = {}
    # a cleave of one supervoxel: one row of page 0, one id of node 1's removed set
    new = v.cleave(1, [FILL + 10])
    sizes["cleave"] = len(_record(repo, lm, uuid, _last_mutation(repo, lm, uuid)))
    after_cleave = _map_records(repo, lm, uuid)
    # a merge of two small bodies: the one-supervoxel body the cleave made and base body 5,000
    v.merge(new, [5000])
    sizes["merge"] = len(_record(repo, lm, uuid, _last_mutation(repo, lm, uuid)))
    # bounded by the change (a few rows and small records), not by the 51 KB page or 24 KB id set
    assert sizes["cleave"] <= 600, sizes
    assert sizes["merge"] <= 600, sizes
    repo.close()

    # undo and redo after a restart restore every record exactly
    repo, lm = _open(path)
    lm.at(uuid).undo()
    assert _map_records(repo, lm, uuid) == after_cleave
    repo.close()
    repo, lm = _open(path)
    lm.at(uuid).undo()
    assert _map_records(repo, lm, uuid) == before
    # the undo's own record (what redo restores) is small too
    assert len(_record(repo, lm, uuid, _last_mutation(repo, lm, uuid, REDO_TOP_KEY))) <= 600
    repo.close()
    repo, lm = _open(path)
    lm.at(uuid).redo()
    assert _map_records(repo, lm, uuid) == after_cleave
    assert lm.at(uuid).body_of(FILL + 10) == new
    repo.close()


def _old_layout(previous: dict[bytes, bytes | None]) -> bytes:
    """An undo record as the previous writer laid it out: ``SSUP``, count, then per key its length, the key,
    and the whole previous value (``\\x00`` absent, ``\\x01`` + value) behind its length."""
    parts = [b"SSUP", struct.pack("<I", len(previous))]
    for key, value in previous.items():
        saved = b"\x00" if value is None else b"\x01" + value
        parts += [struct.pack("<H", len(key)), key, struct.pack("<I", len(saved)), saved]
    return b"".join(parts)


def test_an_undo_record_of_the_old_layout_still_undoes(tmp_path: Path, base: Path) -> None:
    path, uuid = _full_page(tmp_path, base)
    repo, lm = _open(path)
    before = _map_records(repo, lm, uuid)
    lm.at(uuid).cleave(1, [FILL + 10])
    mid = _last_mutation(repo, lm, uuid)
    with repo.read(uuid) as view:
        previous = read_saved(view, lm.instance, mid)
    assert previous[explicit_key(0)] == before[explicit_key(0)]
    old = _old_layout(previous)
    assert len(old) > FILL * 17  # the old layout holds the whole page
    with repo.write(uuid) as w:
        w.put(lm.instance, undo_prefix(mid), old)
    repo.close()
    repo, lm = _open(path)
    lm.at(uuid).undo()
    assert _map_records(repo, lm, uuid) == before
    lm.at(uuid).redo()
    lm.at(uuid).undo()
    assert _map_records(repo, lm, uuid) == before
    repo.close()


def _page(rows: dict[int, tuple[int, int]]) -> bytes:
    out = np.zeros(len(rows), dtype=PAGE_DTYPE)
    for i, sv in enumerate(sorted(rows)):
        out[i] = (sv, *rows[sv])
    return out.tobytes()


page_rows = st.dictionaries(st.integers(0, 4095), st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 1)),
                            max_size=60)


@given(old=page_rows, new=page_rows)
@settings(max_examples=200, deadline=None)
def test_a_page_rebuilds_from_what_replaced_it(old: dict[int, tuple[int, int]],
                                               new: dict[int, tuple[int, int]]) -> None:
    """Whatever an edit did to a page (rows added, dropped, changed), its record rebuilds the old page exactly."""
    a, b = _page(old), _page(new)
    key = explicit_key(0)
    record = encode_undo_record({key: a or None}, {key: b or None})
    assert read_undo_record(record, lambda keys: [b or None for _ in keys], where="test") == {key: a or None}
    assert decode_undo_record(record, where="test").keys() == {key}


def test_a_row_delta_is_the_change_and_checks_what_it_applies_to() -> None:
    old = _page({sv: (sv + 10_000, 0) for sv in range(0, 4000)})
    new = _page({**{sv: (sv + 10_000, 0) for sv in range(0, 4000)}, 17: (9, 0), 4001: (5, 1)})
    key = explicit_key(0)
    record = encode_undo_record({key: old}, {key: new})
    # one changed row (its old 17 bytes), one added key (8 bytes), a digest and the framing
    assert len(record) < 80
    entry = decode_undo_record(record, where="test")[key]
    assert isinstance(entry, RowDelta) and len(entry.old_rows) == PAGE_DTYPE.itemsize and len(entry.added) == 8
    # applied to a page a later write changed elsewhere: a typed error, never a wrong page
    other = _page({**{sv: (sv + 10_000, 0) for sv in range(0, 4000)}, 17: (9, 0), 4001: (5, 1), 30: (1, 1)})
    with pytest.raises(LabelmapStateError, match="no longer holds what the mutation wrote"):
        read_undo_record(record, lambda keys: [other for _ in keys], where="undo record of mutation 7")
    with pytest.raises(LabelmapStateError):
        read_undo_record(record, lambda keys: [None for _ in keys], where="undo record of mutation 7")
    # unsorted or odd-sized values are kept whole
    odd = old + b"\x00"
    assert decode_undo_record(encode_undo_record({key: odd}, {key: new}), where="t")[key] == odd


@pytest.mark.parametrize("cut", [3, 9, 20, 40])
def test_a_damaged_undo_record_is_a_typed_error(cut: int) -> None:
    key = explicit_key(0)
    old = _page({sv: (sv, 0) for sv in range(100)})
    record = encode_undo_record({key: old, b"r" + bytes(8): None}, {key: old[17:], b"r" + bytes(8): b"x"})
    with pytest.raises(RecordDecodeError, match="undo record"):
        decode_undo_record(record[:cut], where="undo record of mutation 3")
    with pytest.raises(RecordDecodeError, match="trailing"):
        decode_undo_record(record + b"\x00", where="undo record of mutation 3")
