"""remap_labels (runs of one id, or fastremap for noisy tiles) equals mapping each voxel on its own."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_shardscope.core.labelmap.bodymap import remap_labels


@settings(max_examples=200, deadline=None)
@given(
    svs=hnp.arrays(np.uint64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9),
                   elements=st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1])),
    table=st.dictionaries(st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1)),
)
def test_remap_labels_matches_voxelwise_lookup(svs: np.ndarray, table: dict[int, int]) -> None:
    def lookup(uniq: np.ndarray) -> np.ndarray:
        return np.array([table.get(int(u), int(u)) for u in uniq], dtype=np.uint64)

    before = svs.copy()
    got = remap_labels(svs, lookup)
    expected = np.array([table.get(int(v), int(v)) for v in svs.reshape(-1)], dtype=np.uint64).reshape(svs.shape)
    assert got.shape == svs.shape and got.dtype == np.uint64
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(svs, before)  # the input is never remapped in place
    assert not np.shares_memory(got, svs)
