"""A path one level above a dataset names the datasets below it, for every format, locally and remotely.

``NotADatasetError`` (exit 3) carries ``children`` (relative paths) and its message names each with
its format, kind, dtype and shape; the search is bounded (levels, directories probed, names listed)
and never reads a chunk.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore import parse_url
from napari_shardscope.core.errors import NotADatasetError, exit_code_for
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.discovery import MAX_LISTED, MAX_PROBED, find_openable
from napari_shardscope.core.volumes import open_volumes
from tests.realdata import REALDATA

needs_realdata = pytest.mark.realdata

#: A path above datasets (every format, and a parent of no metadata at all) -> the children it must name.
PARENTS = {
    "wk_simple_n5": ("color/1",),                       # no metadata: N5 two levels down
    "wk_simple_n5/color": ("1",),                       # no metadata: an N5 dataset below
    "n5java_zi/n5-java.n5": ("bzip2", "gzip", "lz4", "raw", "xz"),  # an N5 container root
    "wk_zarr3_sharded": ("color",),                     # a zarr v3 group holding an OME-Zarr image
    "ng_ome_zarr/simple_0.5/scale0": ("image",),        # a zarr v3 group holding an array
    "zarrs_rust/array_write_read.zarr": ("group/array",),  # a group of a group of an array
    "ngscripts_sharded": ("raw", "zlib_as_gzip"),       # precomputed volumes below a plain directory
    "ng_ome_zarr": ("simple_0.5", "zarr3_single_res"),  # OME-Zarr and a zarr v3 array
}


def refused(url: Any) -> NotADatasetError:
    with pytest.raises(NotADatasetError) as err:
        open_volumes(url)
    return err.value


@needs_realdata
@pytest.mark.parametrize("rel", sorted(PARENTS))
def test_a_path_above_datasets_names_them(rel: str) -> None:
    err = refused(REALDATA / rel)
    assert err.children == PARENTS[rel]
    assert exit_code_for(err) == 3
    for child in PARENTS[rel]:
        assert f"{child} (" in str(err)
    # inspect/validate take the same door: the inspector's refusal names them too
    if rel not in ("wk_simple_n5", "wk_simple_n5/color", "ngscripts_sharded", "ng_ome_zarr"):
        with pytest.raises(NotADatasetError) as again:
            open_dataset(REALDATA / rel).inspector()
        assert again.value.children == PARENTS[rel]


@needs_realdata
def test_the_message_says_format_kind_dtype_and_shape() -> None:
    message = str(refused(REALDATA / "wk_simple_n5"))
    assert "color/1 (N5 segmentation uint32 3x24x24x24)" in message
    assert "wk_zarr3_sharded" not in message
    assert "color (OME-Zarr image uint8 3x24x24x24)" in str(refused(REALDATA / "wk_zarr3_sharded"))


def test_zarr_v2_groups_name_their_arrays_and_images(tmp_path: Path) -> None:
    import zarr

    root = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=2)
    root.create_array("raw", shape=(4, 8, 8), chunks=(2, 4, 4), dtype="uint16")
    sub = root.create_group("sub")
    sub.create_array("seg", shape=(4, 8, 8), chunks=(2, 4, 4), dtype="uint64")
    err = refused(tmp_path / "g.zarr")
    assert err.children == ("raw", "sub/seg")
    assert "raw (zarr v2 image uint16 4x8x8)" in str(err) and "sub/seg (zarr v2 segmentation uint64 4x8x8)" in str(err)


def test_the_search_is_bounded(tmp_path: Path) -> None:
    """Hundreds of empty directories, deep nesting: at most MAX_PROBED probes, and the answer says it stopped."""
    for i in range(300):
        (tmp_path / "wide" / f"d{i:03d}" / "deeper" / "still" / "more").mkdir(parents=True)
    calls: list[str] = []

    def probe(location: Any) -> None:
        calls.append(location.url)
        return None

    found = find_openable(parse_url(tmp_path / "wide"), probe)
    assert len(calls) == MAX_PROBED and not found.complete and found.children == ()
    err = refused(tmp_path / "wide")
    assert err.children == () and f"into at most {MAX_PROBED} directories" in str(err)


def test_at_most_max_listed_are_named(tmp_path: Path) -> None:
    import zarr

    for i in range(MAX_LISTED + 5):
        zarr.create(shape=(4, 4), chunks=(4, 4), dtype="uint8", store=str(tmp_path / "many" / f"a{i:02d}.zarr"),
                    zarr_format=2)
    err = refused(tmp_path / "many")
    assert len(err.children) == MAX_LISTED and "there may be more" in str(err)


def test_nothing_below_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    err = refused(tmp_path / "empty")
    assert err.children == () and "no dataset found within 3 levels below it" in str(err)


def test_the_error_pickles_with_its_children() -> None:
    err = NotADatasetError("x: not a dataset", children=("a", "b/c"), url="x")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.children, back.url) == (NotADatasetError, str(err), ("a", "b/c"), "x")


@needs_realdata
def test_remote_groups_name_what_their_metadata_lists(http_root: Any) -> None:
    """Over HTTP nothing can be listed: a group's consolidated metadata names its arrays; a bare parent says so."""
    root, server = http_root
    shutil.copytree(REALDATA / "ng_ome_zarr", root / "ng_ome_zarr")
    shutil.copytree(REALDATA / "wk_simple_n5", root / "wk_simple_n5")
    import json

    simple = root / "ng_ome_zarr" / "simple_0.5"
    doc = json.loads((simple / "zarr.json").read_text())
    doc["attributes"] = {}  # no OME metadata left: a plain group whose consolidated metadata lists the arrays
    (simple / "zarr.json").write_text(json.dumps(doc))
    err = refused(f"{server.url}/ng_ome_zarr/simple_0.5/")
    assert err.children == ("scale0/image", "scale1/image", "scale2/image")
    assert "scale0/image (zarr v3 image uint16 10x10)" in str(err)
    bare = refused(f"{server.url}/wk_simple_n5/")
    assert bare.children == () and "a remote store is not listed" in str(bare)
    assert np.all([not path.endswith(("/0", "/1")) for path, _ in server.requests])  # metadata only, no chunk
