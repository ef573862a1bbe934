"""count_block (runs of one label, or np.unique for noisy blocks) equals np.unique's labels and counts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_shardscope.core.labelmap.label_index import count_block

LABELS = st.sampled_from([0, 1, 5, 2**32, 2**63, 2**64 - 1])


@settings(max_examples=200, deadline=None)
@given(
    data=hnp.arrays(np.uint64, hnp.array_shapes(min_dims=3, max_dims=3, min_side=0, max_side=8), elements=LABELS),
    runs=st.booleans(),
)
def test_count_block_matches_unique(data: np.ndarray, runs: bool) -> None:
    if runs and data.size:  # spatially coherent: long runs along x (the run path, not the noisy one)
        data = np.repeat(data[..., :1], data.shape[-1], axis=-1)
    coord, labels, counts = count_block((1, 2, 3), data)
    want_labels, want_counts = np.unique(data.reshape(-1), return_counts=True)
    keep = want_labels != 0
    assert tuple(coord) == (1, 2, 3)
    np.testing.assert_array_equal(labels, want_labels[keep])
    np.testing.assert_array_equal(counts, want_counts[keep])
    assert labels.dtype == np.uint64 and counts.dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(
    data=hnp.arrays(np.uint64, hnp.array_shapes(min_dims=3, max_dims=3, min_side=0, max_side=8), elements=LABELS),
    runs=st.booleans(),
)
def test_count_block_boxes_are_each_labels_voxel_box(data: np.ndarray, runs: bool) -> None:
    """The per-label box (runs cut at row ends, reduced per label) is the box of its voxels; counts as np.unique."""
    from napari_shardscope.core.labelmap.label_index import count_block_boxes

    if runs and data.size:
        data = np.repeat(data[..., :1], data.shape[-1], axis=-1)
    _, labels, counts, boxes = count_block_boxes((0, 0, 0), data)
    want_labels, want_counts = np.unique(data.reshape(-1), return_counts=True)
    keep = want_labels != 0
    np.testing.assert_array_equal(labels, want_labels[keep])
    np.testing.assert_array_equal(counts, want_counts[keep])
    for label, box in zip(labels, boxes, strict=True):
        where = np.argwhere(data == label)
        assert box.tolist() == [*where.min(axis=0).tolist(), *(where.max(axis=0) + 1).tolist()]
