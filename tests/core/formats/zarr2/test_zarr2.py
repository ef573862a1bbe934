"""zarr v2 and OME-Zarr 0.4: written by zarr-python (and the ``ome-zarr`` package) at test time, read by us.

Every array is read back through every consumer — the viewer's lazy arrays (TensorStore's ``zarr``
driver), ``inspect``/``locate``/``ls``/``validate`` (our own chunk decoding) and the shard browser's
tree — and compared with zarr-python's own read. Damaged chunks are found by ``validate`` and
become typed errors in the viewer; valid features we do not read are refused by name.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import BZ2, LZ4, LZMA, Blosc, GZip, Zlib, Zstd

from napari_shardscope.core.cli import run
from napari_shardscope.core.encoding import COMPRESSORS, decompress
from napari_shardscope.core.errors import (
    ChunkDecodeError,
    MetadataError,
    ShardscopeError,
    UnsupportedFeatureError,
    exit_code_for,
)
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.zarr2.metadata import parse_zarray
from napari_shardscope.core.layout import open_layout
from napari_shardscope.core.volumes import open_volume
from tests.realdata import realdata_path

CODECS: dict[str, Any] = {"raw": None, "blosc": Blosc(cname="lz4", shuffle=Blosc.BITSHUFFLE), "gzip": GZip(5),
                          "zlib": Zlib(), "bz2": BZ2(), "zstd": Zstd(3), "lz4": LZ4(), "lzma": LZMA()}


def write(path: Path, data: np.ndarray, *, chunks: tuple[int, ...], compressor: Any = None, order: str = "C",
          separator: str = ".", fill_value: Any = 0) -> Path:
    z = zarr.create(shape=data.shape, chunks=chunks, dtype=data.dtype, compressor=compressor, order=order,
                    dimension_separator=separator, fill_value=fill_value, store=str(path), zarr_format=2)
    z[...] = data
    return path


def stored_chunks(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize(("order", "separator"), [("C", "."), ("F", "/")])
def test_every_compressor_reads_the_writers_data(tmp_path: Path, codec: str, order: str, separator: str) -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 5000, size=(13, 37, 22), dtype="<u2")
    path = write(tmp_path / "a.zarr", data, chunks=(4, 16, 8), compressor=CODECS[codec], order=order,
                 separator=separator)
    ins = open_dataset(path).inspector()
    (scale,) = ins.inspect()["scales"]
    assert scale["chunks_present"] == len(stored_chunks(path)) == 4 * 3 * 3
    assert scale["data_bytes"] == sum(os.path.getsize(path / c) for c in stored_chunks(path))
    assert list(ins.validate()) == []
    where = ins.locate_format_voxel([9, 20, 21])
    assert where["grid_position"] == [2, 1, 2] and where["present"]
    assert where["chunk_key"] == separator.join(["2", "1", "2"])
    assert len(list(ins.list_chunks())) == 36
    vol = open_volume(path)  # lz4 and lzma through our own decoder (TensorStore's zarr driver lacks them)
    assert (vol.format, vol.kind, vol.axes, vol.unit) == ("zarr2", "image", ("z", "y", "x"), None)
    np.testing.assert_array_equal(vol.levels[0].array[2:11, 5:30, :].read(), data[2:11, 5:30, :])
    np.testing.assert_array_equal(vol.levels[0].array[..., 21].read(), data[..., 21])  # a strided view


def test_a_damaged_chunk_read_through_our_decoder_names_its_key(tmp_path: Path) -> None:
    data = np.arange(8 * 8, dtype="<u4").reshape(8, 8)
    path = write(tmp_path / "l.zarr", data, chunks=(4, 4), compressor=LZ4())
    (path / "1.0").write_bytes((path / "1.0").read_bytes()[:-3])
    vol = open_volume(path)
    np.testing.assert_array_equal(vol.levels[0].array[:4].read(), data[:4])
    with pytest.raises(ChunkDecodeError, match=r"l\.zarr/1\.0"):
        vol.levels[0].array[4:].read()


@pytest.mark.parametrize("dtype", ["|b1", "|u1", "<i2", ">u2", "<u8", "<i8", "<f4", ">f8", "<c8"])
def test_data_types_and_byte_orders(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(2)
    data = (rng.random((6, 9, 10)) * 100).astype(dtype)
    path = write(tmp_path / "d.zarr", data, chunks=(4, 4, 4), compressor=Zstd())
    np.testing.assert_array_equal(open_volume(path).levels[0].array.read(), data)
    assert list(open_dataset(path).inspector().validate()) == []


@pytest.mark.parametrize("shape", [(50,), (20, 30), (3, 8, 20, 24), (2, 3, 5, 12, 10)])
def test_other_ranks_and_dimension_names(tmp_path: Path, shape: tuple[int, ...]) -> None:
    data = np.arange(int(np.prod(shape)), dtype="<u4").reshape(shape)
    path = write(tmp_path / "r.zarr", data, chunks=tuple(min(s, 7) for s in shape), compressor=GZip())
    names = ["t", "c", "z", "y", "x"][-len(shape):]
    z = zarr.open(str(path), mode="r+")
    z.attrs["_ARRAY_DIMENSIONS"] = names
    vol = open_volume(path, kind="image")
    assert vol.axes == tuple(names)
    assert vol.channel_axis == (names.index("c") if "c" in names else None)
    np.testing.assert_array_equal(vol.levels[0].array.read(), data)
    tree = open_layout(path)
    (root,) = tree.roots()
    assert tree.geometry(root.scale).axes == tuple(names)
    assert sum(len(tree.expand(slab).children) for slab in tree.expand(root).children) == len(stored_chunks(path))


def test_fill_value_where_no_chunk_is_stored(tmp_path: Path) -> None:
    data = np.full((10, 10), 7, dtype="<i4")
    path = write(tmp_path / "f.zarr", data, chunks=(5, 5), compressor=Blosc(), fill_value=7)
    assert stored_chunks(path) == []  # zarr-python does not store chunks equal to the fill value
    np.testing.assert_array_equal(open_volume(path).levels[0].array.read(), data)
    assert open_dataset(path).inspector().locate_format_voxel([1, 1])["present"] is False


def test_ome_zarr_04_written_by_ome_zarr(tmp_path: Path) -> None:
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader
    from ome_zarr.writer import write_image, write_labels

    group = zarr.open_group(str(tmp_path / "img.zarr"), mode="w", zarr_format=2)
    rng = np.random.default_rng(3)
    image = rng.integers(0, 255, size=(2, 6, 64, 64), dtype="u1")  # c, z, y, x
    labels = rng.integers(0, 9, size=(6, 64, 64), dtype="u4")
    write_image(image=image, group=group, axes="czyx", fmt=FormatV04(), scale_factors=(2,))
    write_labels(labels=labels, group=group, name="nuclei", axes="zyx", fmt=FormatV04(), scale_factors=(2,))

    nodes = list(Reader(parse_url(str(tmp_path / "img.zarr")))())
    theirs = nodes[0].metadata["coordinateTransformations"]
    vol_image, vol_labels = (open_volume(tmp_path / "img.zarr"), open_volume(tmp_path / "img.zarr" / "labels"))
    assert vol_image.format == "ome-zarr" and vol_image.axes == ("c", "z", "y", "x") and vol_image.channel_axis == 0
    assert [lv.voxel_size for lv in vol_image.levels] == [tuple(t[0]["scale"]) for t in theirs]
    for level, data in zip(vol_image.levels, nodes[0].data, strict=True):
        np.testing.assert_array_equal(level.array.read(), np.asarray(data))
    assert vol_labels.kind == "segmentation" and vol_labels.name == "nuclei"
    np.testing.assert_array_equal(vol_labels.levels[0].array.read(), labels)
    ins = open_dataset(tmp_path / "img.zarr").inspector()
    assert ins.scale_keys() == [d["path"] for d in json.loads((tmp_path / "img.zarr" / ".zattrs").read_text())
                                ["multiscales"][0]["datasets"]]
    assert list(ins.validate()) == []


@pytest.mark.realdata
def test_v2_metadata_beside_v3_reads_the_same_chunks() -> None:
    """zarrs' test data holds ``.zarray`` and ``zarr.json`` over the same chunk files (v2 key encoding)."""
    base = realdata_path("zarrs_v3_zarrpython")
    for name in ("array_blosc.zarr", "array_blosc_transpose.zarr", "array_gzip.zarr", "array_zstd.zarr",
                 "array_none.zarr", "array_none_transpose.zarr"):
        v2 = open_volume(f"zarr2://{base / name}")
        v3 = open_volume(f"zarr3://{base / name}")
        assert v2.format == "zarr2" and v3.format == "zarr3"
        ours = v2.levels[0].array.read()
        np.testing.assert_array_equal(ours, v3.levels[0].array.read())
        np.testing.assert_array_equal(ours, zarr.open_array(str(base / name), mode="r", zarr_format=2)[:])
        assert list(open_dataset(f"zarr2://{base / name}").inspector().validate()) == []


# -- damage -----------------------------------------------------------------------------------------------
@pytest.fixture
def blosc_array(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = np.arange(16 * 16 * 16, dtype="<u4").reshape(16, 16, 16)
    return write(tmp_path / "b.zarr", data, chunks=(8, 8, 8), compressor=Blosc()), data


def problems(path: Path) -> list[str]:
    return [str(p) for p in open_dataset(path).inspector().validate()]


def test_validate_finds_each_damage_and_reads_fail_typed(blosc_array: tuple[Path, np.ndarray]) -> None:
    path, _ = blosc_array
    (path / "0.0.0").write_bytes((path / "0.0.0").read_bytes()[:-5])  # truncated
    flipped = bytearray((path / "0.0.1").read_bytes())
    flipped[20] ^= 0xFF
    (path / "0.0.1").write_bytes(bytes(flipped))  # bit flip in the blosc payload
    (path / "0.1.0").write_bytes(b"\0" * 3 + (path / "0.1.0").read_bytes())  # prepended bytes
    (path / "0.1.1").unlink()
    (path / "0.1.1").mkdir()  # a directory where the chunk should be
    (path / "0.1.1" / "x").write_bytes(b"1")
    (path / "5.0.0").write_bytes((path / "1.0.0").read_bytes())  # outside the grid
    (path / "1.01.0").write_bytes((path / "1.0.0").read_bytes())  # not a chunk key (leading zero)
    found = problems(path)
    assert any(p.startswith("0.0.0: ") for p in found)
    assert any(p.startswith("0.1.0: ") and "blosc" in p for p in found)
    assert any(p.startswith("0.1.1: is a directory, not a chunk file") for p in found)
    assert any(p.startswith("5.0.0: grid position (5, 0, 0) is outside") for p in found)
    assert any(p.startswith("1.01.0: ") and "not a chunk key" in p for p in found)
    assert len([p for p in found if p.startswith("0.0.1")]) <= 1  # a flip may or may not break blosc's checks
    with pytest.raises(ShardscopeError) as info:  # the directory at 0.1.1 is refused when the volume opens
        open_volume(path).levels[0].array[0:8, 0:8, 0:8].read()
    assert exit_code_for(info.value) == 4 and "0.1.1" in str(info.value)
    shutil.rmtree(path / "0.1.1")  # without it, the read stops at the truncated chunk
    with pytest.raises(ShardscopeError) as info:
        open_volume(path).levels[0].array[0:8, 0:8, 0:8].read()
    assert exit_code_for(info.value) in (4, 8) and "0.0.0" in str(info.value)


def test_a_raw_chunk_of_the_wrong_size_is_reported(tmp_path: Path) -> None:
    data = np.arange(64, dtype="<u2").reshape(8, 8)
    path = write(tmp_path / "raw.zarr", data, chunks=(4, 4))
    (path / "1.1").write_bytes((path / "1.1").read_bytes() + b"\1\2")
    (found,) = problems(path)
    assert found == "1.1: chunk stored raw 34 bytes, expected 32 (4x4 x 2 bytes) at byte 0"


def test_a_compression_bomb_costs_one_chunk(tmp_path: Path) -> None:
    data = np.zeros((4, 4), dtype="u1")
    path = write(tmp_path / "bomb.zarr", data + 1, chunks=(4, 4), compressor=GZip())
    (path / "0.0").write_bytes(GZip(9).encode(b"\0" * (64 << 20)))  # 64 MiB from ~65 KB
    (found,) = problems(path)
    assert "decodes to more than 16 bytes" in found


# -- metadata -------------------------------------------------------------------------------------------
GOOD = {"zarr_format": 2, "shape": [10, 10], "chunks": [5, 5], "dtype": "<u2", "compressor": None,
        "fill_value": 0, "order": "C", "filters": None}


@pytest.mark.parametrize(("change", "error", "words"), [
    ({"filters": [{"id": "delta", "dtype": "<u2"}]}, UnsupportedFeatureError, "zarr v2 with the 'delta' filter"),
    ({"dtype": "|O"}, UnsupportedFeatureError, "zarr v2 data type '|O'"),
    ({"dtype": [["a", "<u2"], ["b", "<f4"]]}, UnsupportedFeatureError, "structured data type"),
    ({"compressor": {"id": "snappy"}}, UnsupportedFeatureError, "compressor 'snappy'"),
    ({"zarr_format": 3}, MetadataError, "'zarr_format' must be 2"),
    ({"chunks": [5]}, MetadataError, "one entry per axis"),
    ({"chunks": [0, 5]}, MetadataError, "positive integers"),
    ({"shape": [-1, 10]}, MetadataError, "non-negative"),
    ({"chunks": [1 << 20, 1 << 20]}, MetadataError, "memory budget"),
    ({"order": "X"}, MetadataError, "'order'"),
    ({"dimension_separator": "-"}, MetadataError, "'dimension_separator'"),
    ({"dtype": "u2"}, MetadataError, "NumPy type string"),
    ({"fill_value": "zero"}, MetadataError, "'fill_value'"),
])
def test_metadata_errors_name_the_field(tmp_path: Path, change: dict[str, Any], error: type[Exception],
                                        words: str) -> None:
    path = tmp_path / "m.zarr"
    path.mkdir()
    (path / ".zarray").write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(error, match=words) as info:
        open_volume(path)
    assert ".zarray" in str(info.value)
    assert exit_code_for(info.value) == (5 if error is UnsupportedFeatureError else 4)
    assert run(["inspect", str(path)]) == exit_code_for(info.value)


def test_parse_zarray_accepts_what_the_spec_allows() -> None:
    meta = parse_zarray({**GOOD, "dtype": ">f8", "fill_value": "NaN", "dimension_separator": "/", "filters": []},
                        key="k")
    assert meta.dtype == np.dtype(">f8") and np.isnan(meta.fill_value) and meta.chunk_key((1, 0)) == "1/0"
    assert meta.parse_chunk_key("1/0") == (1, 0) and meta.parse_chunk_key("1.0") is None


def test_a_group_without_multiscales_says_so(tmp_path: Path) -> None:
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=2)
    with pytest.raises(ShardscopeError, match="zarr v2 group without OME-Zarr"):
        open_volume(tmp_path / "g.zarr")


# -- the bounded decompressors -------------------------------------------------------------------------------
ENCODERS = {"gzip": GZip(), "zlib": Zlib(), "bz2": BZ2(), "lzma": LZMA(), "zstd": Zstd(), "blosc": Blosc(),
            "lz4": LZ4()}


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(COMPRESSORS), payload=st.binary(max_size=300), cap=st.integers(0, 400))
def test_decompress_round_trips_within_the_cap_and_refuses_past_it(codec: str, payload: bytes, cap: int) -> None:
    encoded = ENCODERS[codec].encode(payload)
    if len(payload) <= cap:
        assert decompress(codec, bytes(encoded), max_size=cap, key="k") == payload
    else:
        with pytest.raises(ChunkDecodeError, match="k"):
            decompress(codec, bytes(encoded), max_size=cap, key="k")


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(COMPRESSORS), junk=st.binary(max_size=200))
def test_decompress_of_junk_is_a_typed_error_or_bounded_bytes(codec: str, junk: bytes) -> None:
    try:
        out = decompress(codec, junk, max_size=1000, key="k")
    except ChunkDecodeError:
        return
    assert len(out) <= 1000

