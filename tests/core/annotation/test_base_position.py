"""A site's position packed as (block fields, offset in block) unpacks to the same voxel, sorts blocks in
the spatial keys' order, and reads the same supervoxel as a read at the voxel, for blocks of any sides
(powers of two or not) and blocks cut by the labelmap's edge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation.base import block_code
from napari_shardscope.core.annotation.base_position import codec_of, supervoxels_of_offsets
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import create_repository
from tests.core.annotation.test_annotation_model import SHAPE, base_volume


@pytest.mark.parametrize(("shape", "block"), [((64, 1024, 1024), (64, 64, 64)), ((8, 20, 24), (4, 8, 8)),
                                             ((7, 23, 31), (3, 5, 7)), ((1 << 24, 1 << 24, 50), (16, 16, 16)),
                                             ((40, 40, 40), (1, 1, 40))])
def test_positions_unpack_to_their_voxels_and_sort_as_the_block_codes(shape: tuple[int, int, int],
                                                                       block: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(1)
    zyx = np.stack([rng.integers(0, s, 5000) for s in shape], axis=1).astype(np.int32)
    zyx[:3] = [[0, 0, 0], [s - 1 for s in shape], [shape[0] - 1, 0, shape[2] - 1]]
    grid = [-(-s // b) for s, b in zip(shape, block, strict=True)]
    codec = codec_of(block, grid)
    lin, off = codec.pack(zyx)
    if np.prod(grid) > 1 << 32:
        assert lin.dtype == np.uint64
    else:
        assert lin.dtype == np.uint32 and off.dtype == np.uint32
    z, y, x = codec.unpack(lin, off)
    assert z.dtype == np.int32
    assert np.array_equal(np.stack([z, y, x], axis=1), zyx)
    cells = zyx // np.asarray(block)
    codes = block_code(cells[:, 0], cells[:, 1], cells[:, 2])
    assert np.array_equal(codec.block_codes(lin), codes)
    assert np.array_equal(np.argsort(lin, kind="stable"), np.argsort(codes, kind="stable"))


@pytest.mark.parametrize("block", [(4, 8, 8), (3, 5, 7)])
def test_supervoxels_read_by_offset_are_those_at_the_voxels(block: tuple[int, int, int], tmp_path: Path) -> None:
    seg, svs = base_volume()
    repo = create_repository(tmp_path / "repo")
    lmv = create_labelmap(repo, "seg", seg, block=block).at("main")
    rng = np.random.default_rng(2)
    zyx = np.stack([rng.integers(0, s, 3000) for s in SHAPE], axis=1).astype(np.int32)
    grid = [-(-s // b) for s, b in zip(SHAPE, block, strict=True)]
    codec = codec_of(block, grid)
    lin, off = codec.pack(zyx)
    order = np.argsort(lin, kind="stable")
    lin, off, zyx = lin[order], off[order], zyx[order]
    starts = np.flatnonzero(np.append(True, lin[1:] != lin[:-1]))
    got = supervoxels_of_offsets(lmv, codec, lin, off, starts)
    assert np.array_equal(got, svs[zyx[:, 0], zyx[:, 1], zyx[:, 2]].astype(np.uint64))
    repo.close()
