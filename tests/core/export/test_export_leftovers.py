"""What an interrupted export leaves behind never leaks into the next export to the same destination.

An export killed part-way leaves shard files without metadata (and, killed inside a write, a
``.shardscope-tmp-*`` file). The next export there must not build on them: OME-Zarr reads a missing
shard as zeros, so a stale shard of the other dataset where the new one is all zero would show the old
voxels under the new metadata. Such leftovers are refused without ``overwrite`` and removed with it;
temporary files, never data, are removed either way. (``test_export_crash`` finds the same by killing
the real command line; these reproduce it deterministically.)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import RefusedDestinationError
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ArraySource
from napari_shardscope.core.export.zarr3 import export_zarr3
from tests.core.export.test_export_precomputed import _FailingSource  # dies at its fifth read, as a killed export

RES = ((4.0, 4.0, 40.0),)
EXPORTS = {  # one 16³ chunk per shard file: an export dying at its fifth read has written some shards
    "precomputed": lambda source, dest, **kw: export_precomputed(source, dest, chunk_size=(16, 16, 16),
                                                                 shard_bytes=1 << 14, **kw),
    "zarr3": lambda source, dest, **kw: export_zarr3(source, dest, inner_chunk=(16, 16, 16),
                                                     shard_shape=(16, 16, 16), **kw),
}


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _volumes() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    old = rng.integers(1, 100, size=(32, 32, 32), dtype=np.uint32)
    new = np.zeros((32, 32, 32), dtype=np.uint32)  # 7 of its 8 shards are all zero: OME-Zarr does not write them
    new[:16, :16, :16] = rng.integers(1, 100, size=(16, 16, 16), dtype=np.uint32)
    return old, new


@pytest.mark.parametrize("fmt", sorted(EXPORTS))
def test_files_of_an_unfinished_export_are_refused_then_replaced(tmp_path: Path, fmt: str) -> None:
    old, new = _volumes()
    export = EXPORTS[fmt]
    dest = tmp_path / "dest"
    with pytest.raises(OSError, match="simulated"):
        export(_FailingSource((old,), RES), str(dest), scheduler="sync")
    leftovers = _digests(dest)
    assert leftovers and "info" not in leftovers and "zarr.json" not in leftovers

    with pytest.raises(RefusedDestinationError, match=r"unfinished export.*overwrite"):
        export(ArraySource((new,), RES), str(dest))
    assert _digests(dest) == leftovers  # refused before anything was written or deleted

    export(ArraySource((new,), RES), str(dest), overwrite=True)
    export(ArraySource((new,), RES), str(tmp_path / "fresh"))
    assert _digests(dest) == _digests(tmp_path / "fresh")  # no shard of the unfinished export survives


@pytest.mark.parametrize("fmt", sorted(EXPORTS))
def test_temporary_files_of_killed_writes_are_removed(tmp_path: Path, fmt: str) -> None:
    _, new = _volumes()
    dest = tmp_path / "dest"
    planted = [dest / ".shardscope-tmp-a1b2c3", dest / "4_4_40" / ".shardscope-tmp-d4e5f6",
               dest / "0" / "c" / "1" / ".shardscope-tmp-g7h8i9"]
    for path in planted:  # what a process killed between creating and renaming its temporary file leaves
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a shard")
    (dest / "notes.txt").write_bytes(b"kept")
    EXPORTS[fmt](ArraySource((new,), RES), str(dest))
    EXPORTS[fmt](ArraySource((new,), RES), str(tmp_path / "fresh"))
    left = _digests(dest)
    assert not [name for name in left if ".shardscope-tmp-" in name]
    assert (dest / "notes.txt").read_bytes() == b"kept"
    del left["notes.txt"]
    assert left == _digests(tmp_path / "fresh")
