"""``put_new_rows`` (keys as byte rows of an array, sorted as an array) stores exactly what ``put_new`` (a list of
``(key, value)`` tuples, sorted as tuples) stores: the same values, the same change index, tombstones replaced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.core.versioned.key_rows import row_bytes, sorted_rows


@pytest.mark.parametrize("width", [1, 9, 26])
def test_sorted_rows_is_byte_order_and_row_bytes_are_the_rows(width: int) -> None:
    rng = np.random.default_rng(width)
    k = (rng.integers(0, 3, (400, width)) * rng.integers(0, 256, (400, width)) % 256).astype(np.uint8)
    rows = row_bytes(k)
    assert rows == [bytes(r) for r in k]
    assert [rows[i] for i in sorted_rows(k)] == sorted(rows)


@pytest.mark.parametrize("engine", ["lmdb", "sqlite", "memory"])
@pytest.mark.parametrize("fresh", [True, False])
def test_put_new_rows_stores_what_put_new_stores(engine: str, fresh: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    keys = np.unique(rng.integers(0, 4, (300, 9)).astype(np.uint8), axis=0)  # many zero bytes: escaped
    keys = keys[rng.permutation(len(keys))]
    values = [bytes(rng.integers(0, 256, int(rng.integers(0, 12))).astype(np.uint8)) for _ in range(len(keys))]
    stores = []
    for how in ("tuples", "rows"):
        repo = create_repository(None if engine == "memory" else tmp_path / f"{engine}-{how}", engine=engine)
        repo.create_instance("kv", "keyvalue")
        uuid = repo.root.uuid
        if not fresh:  # a key written and deleted before: the path that looks for tombstones to remove
            with repo.write(uuid) as w:
                w.put("kv", bytes(keys[0]), b"old")
                w.delete("kv", bytes(keys[0]))
        with repo.write(uuid) as w:
            if how == "tuples":
                w.put_new("kv", [(bytes(k), v) for k, v in zip(keys, values, strict=True)], fresh=fresh)
            else:
                assert w.put_new_rows("kv", keys, values, fresh=fresh) == len(keys)
        with repo.read(uuid) as r:
            stores.append((list(r.scan("kv")), sorted((c.key, c.deleted) for c in r.changes("kv"))))
        repo.close()
    assert stores[0] == stores[1]
    assert len(stores[0][0]) == len(keys) and dict(stores[0][0])[bytes(keys[3])] == values[3]


def test_put_new_rows_refuses_keys_that_are_not_rows(tmp_path: Path) -> None:
    repo = create_repository(None, engine="memory")
    repo.create_instance("kv", "keyvalue")
    with repo.write(repo.root.uuid) as w:
        with pytest.raises(ArgumentError, match="non-empty byte rows"):
            w.put_new_rows("kv", np.zeros((3, 0), np.uint8), None)
        with pytest.raises(ArgumentError, match="2 values for 3 keys"):
            w.put_new_rows("kv", np.ones((3, 2), np.uint8), [b"", b""])
