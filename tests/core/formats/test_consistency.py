"""One door per format, proved: every consumer reports the same volumes.

For every dataset in ``../shared/realdata`` (written by Java, Rust, C++, TensorStore, zarr-python,
webKnossos, CloudVolume/igneous, neuroglancer-scripts — see its README) and every volume of the
project's own test data, the levels (keys), shapes, voxel sizes, translations, axes, dtype and
downsampling factors must be identical as reported by

* ``open_volume`` (TensorStore opens the arrays; shapes and dtypes are TensorStore's),
* ``shardscope inspect --json`` (run in-process; each scale's ``volume`` record, and the format's
  own fields — precomputed ``size``/``resolution``/``voxel_offset``, zarr v3 ``shape``/
  ``data_type``, N5 ``dimensions``/``downsamplingFactors`` — converted to the same order),
* the shard browser's tree (``open_layout(url)`` and ``tree.geometry(scale)``, with and without
  the opened volume), and
* export's source (``VolumeSource(url).describe()``: shapes, resolutions and voxel offsets).

Nothing is skipped silently: a directory under ``realdata`` that holds metadata is either checked,
or listed below with the reason it is not a volume the project opens (and the test checks that it
really does not open), or listed with the one consumer that cannot read it and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import (
    ArgumentError,
    IndexDecodeError,
    MetadataError,
    NotADatasetError,
    ShardscopeError,
)
from napari_shardscope.core.export.source import VolumeSource
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.units import nm_per_unit
from napari_shardscope.core.formats.volume_spec import VolumeSpec
from napari_shardscope.core.layout import open_layout
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import Volume, open_volumes
from tests.cli_batch import run_commands
from tests.realdata import REALDATA, realdata_dirs
from tests.volume_cases import FormatCase, format_cases, sample  # noqa: F401  (fixtures)

METADATA_DOCUMENTS = ("info", "zarr.json", "attributes.json", ".zarray", ".zgroup")

_MESH = "a segment-keyed mesh directory (neuroglancer_multilod_draco): meshes by segment id, no voxels"
_N5_CONTAINER = "an N5 container root: a group of datasets without s0, not a multiscale volume; open a dataset in it"
_ZARR_GROUP = "a plain zarr v3 group (no OME-Zarr multiscales or labels): its arrays are the volumes"
_BOOL_FILL_0 = ("a bool array whose fill_value is 0, which zarr v3 forbids for bool (TensorStore refuses it too); "
                "zarrita wrote it before the spec settled")

#: Directories with metadata that hold no volume the project opens: ``{dir: (error, reason)}``.
NOT_VOLUMES: dict[str, tuple[type[ShardscopeError], str]] = {
    "crantb_mesh_sharded": (MetadataError, _MESH),
    "crantb_mesh_unsharded": (MetadataError, _MESH),
    "igneous_pinky_sharded/mesh_mip_0_err_40.0": (MetadataError, _MESH),
    "noduli_seg_head/mesh": (MetadataError, _MESH),
    "noduli_seg_negoffset/mesh": (MetadataError, _MESH),
    "igneous_pinky_sharded/skeletons_mip_0": (MetadataError,
                                              "a skeleton directory (neuroglancer_skeletons): no voxels"),
    "cv_annotation": (MetadataError, "precomputed annotations (neuroglancer_annotations_v1): points, no voxels; "
                      "inspect, ls, locate and validate read it (ANNOTATION_COLLECTIONS)"),
    "n5java_backward/data-1.5.0.n5": (NotADatasetError, _N5_CONTAINER),
    "n5java_backward/data-2.5.1.n5": (NotADatasetError, _N5_CONTAINER),
    "n5java_backward/data-3.1.3.n5": (NotADatasetError, _N5_CONTAINER),
    "n5java_zi/n5-java.n5": (NotADatasetError, _N5_CONTAINER),
    "z5py_n5_zi/z5py.n5": (NotADatasetError, _N5_CONTAINER),
    "zarrpy_n5_zi/zarr.n5": (NotADatasetError, _N5_CONTAINER),
    "ng_ome_zarr/simple_0.5/scale0": (NotADatasetError, _ZARR_GROUP),
    "ng_ome_zarr/simple_0.5/scale1": (NotADatasetError, _ZARR_GROUP),
    "ng_ome_zarr/simple_0.5/scale2": (NotADatasetError, _ZARR_GROUP),
    "ng_zarrita_v3/data.zarr": (NotADatasetError, _ZARR_GROUP),
    "wk_zarr3_sharded": (NotADatasetError, _ZARR_GROUP),
    "zarrs_rust/array_write_read.zarr": (NotADatasetError, _ZARR_GROUP),
    "zarrs_rust/array_write_read.zarr/group": (NotADatasetError, _ZARR_GROUP),
    "zarrs_rust/sharded_array_write_read.zarr/group": (NotADatasetError, _ZARR_GROUP),
    "ng_zarrita_v3/data.zarr/1d.contiguous.b1": (MetadataError, _BOOL_FILL_0),
    "ng_zarrita_v3/data.zarr/1d.contiguous.compressed.sharded.b1": (MetadataError, _BOOL_FILL_0),
}

#: Volumes one consumer cannot read yet: ``{dir: (consumer, error, reason)}``; every other consumer is checked.
#: ``"voxels"`` is open_volume and export (both read through TensorStore); ``"inspect"`` is inspect and the tree.
PARTIAL: dict[str, tuple[str, type[ShardscopeError], str]] = {
    "ngscripts_sharded/zlib_as_gzip": ("inspect", IndexDecodeError, "non-conformant: zlib streams where the "
                                       "sharded spec says gzip, so its minishard indexes do not decode"),
}


#: Every directory under ``realdata`` that holds a metadata document (a placeholder when the data is absent).
DIRS = realdata_dirs(METADATA_DOCUMENTS)


# -- what each consumer reports, as one comparable record per level ------------------------------------
Record = dict[str, Any]


def spec_records(spec: VolumeSpec) -> list[Record]:
    return [{"key": lv.key, "shape": tuple(lv.shape), "dtype": lv.dtype, "voxel_size": tuple(lv.voxel_size),
             "translate": tuple(lv.translate), "downsampling_factors": tuple(lv.downsampling_factors),
             "axes": spec.axes, "unit": spec.unit} for lv in spec.levels]


def volume_records(vol: Volume) -> list[Record]:
    return [{"key": lv.key, "shape": lv.shape, "dtype": np.dtype(lv.array.dtype).name,
             "voxel_size": lv.voxel_size, "translate": lv.translate,
             "downsampling_factors": lv.downsampling_factors, "axes": vol.axes, "unit": vol.unit}
            for lv in vol.levels]


def inspect_json(url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert run(["inspect", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, dict)
    return out


def inspect_records(report: dict[str, Any]) -> list[Record]:
    out = []
    for sc in report["scales"]:
        vol = sc["volume"]
        out.append({"key": sc["key"], "shape": tuple(vol["shape"]), "dtype": vol["dtype"],
                    "voxel_size": tuple(vol["voxel_size"]), "translate": tuple(vol["translate"]),
                    "downsampling_factors": tuple(vol["downsampling_factors"]), "axes": tuple(vol["axes"]),
                    "unit": vol["unit"]})
    return out


def presented(names: list[str] | None, values: list[Any]) -> tuple[Any, ...]:
    """Stored order -> the reader's order, as the README states it: axes other than x, y, z first, as
    written, then z, y, x (only when both x and y are named)."""
    if names is None or not {"x", "y"} <= {n.lower() for n in names}:
        return tuple(values)
    lowered = [n.lower() for n in names]
    order = [i for i, n in enumerate(lowered) if n not in ("x", "y", "z")]
    order += [lowered.index(n) for n in ("z", "y", "x") if n in lowered]
    return tuple(values[i] for i in order)


def check_native_inspect_fields(report: dict[str, Any], expected: list[Record]) -> None:
    """The format's own fields in ``inspect --json``, brought to z, y, x order, say the same."""
    for sc, want in zip(report["scales"], expected, strict=True):
        n = 3
        if report["format"] == "precomputed":
            assert tuple(reversed(sc["size"])) == want["shape"][-n:]
            assert tuple(reversed(sc["resolution"])) == pytest.approx(want["voxel_size"][-n:])
            offset = [o * r for o, r in zip(sc["voxel_offset"], sc["resolution"], strict=True)]
            assert tuple(reversed(offset)) == pytest.approx(want["translate"][-n:])
            assert report["data_type"] == want["dtype"]
        elif report["format"] == "zarr3":
            names = sc["dimension_names"]
            named = names is not None and all(isinstance(a, str) for a in names)
            assert presented(names if named else None, sc["shape"]) == want["shape"]
            assert np.dtype(sc["data_type"]).name == want["dtype"]
            if named:
                assert presented(names, names) == want["axes"]
        elif report["format"] == "zarr2":
            assert tuple(sc["shape"]) == want["shape"]
            assert np.dtype(sc["dtype"]).name == want["dtype"]
        else:
            assert report["format"] == "n5"
            names = sc["axes"]  # N5 order, fastest first; without names the order is reversed
            def n5_presented(values: list[Any], names: list[str] | None = names) -> tuple[Any, ...]:
                return presented(names, values) if names is not None else tuple(reversed(values))
            assert n5_presented(sc["dimensions"]) == want["shape"]
            assert tuple(float(f) for f in n5_presented(sc["downsamplingFactors"])) == want["downsampling_factors"]
            assert sc["dataType"] == want["dtype"]
            resolution = sc["resolution"] or [1.0] * len(sc["dimensions"])
            if want["unit"] == "nm":
                resolution = [r * (nm_per_unit(u) or 0.0) for r, u in zip(resolution, sc["units"], strict=True)]
            assert n5_presented(resolution) == pytest.approx(want["voxel_size"])


def tree_records(url: str, volume: Volume | None = None) -> list[Record]:
    """The tree's scales with voxels and their geometry, in array order (the format's last axes)."""
    tree = open_layout(url, volume)
    out = []
    for node in tree.roots():
        try:
            geo = tree.geometry(node.scale)
        except ArgumentError:  # a segment-keyed directory (meshes, skeletons) beside the volume
            continue
        out.append({"key": node.scale, "shape": geo.to_array_order(geo.shape), "voxel_size": geo.voxel_size,
                    "translate": geo.translate, "axes": geo.array_axes, "unit": geo.unit})
    return out


def export_records(url: str) -> list[Record]:
    desc = VolumeSource(url).describe()
    base = desc.levels[0].resolution
    return [{"shape": lv.shape, "dtype": desc.dtype, "voxel_size": tuple(reversed(lv.resolution)),
             "translate": tuple(float(o) * r for o, r in zip(reversed(lv.voxel_offset), reversed(lv.resolution),
                                                             strict=True)),
             "downsampling_factors": tuple(r / b for r, b in zip(reversed(lv.resolution), reversed(base),
                                                                 strict=True))}
            for lv in desc.levels]


def only(records: list[Record], fields: tuple[str, ...], last: int | None = None) -> list[Record]:
    """The records restricted to ``fields`` (per-axis values cut to their ``last`` axes)."""
    out = []
    for rec in records:
        row = {}
        for f in fields:
            value = rec[f]
            row[f] = value[-last:] if last is not None and isinstance(value, tuple) and f != "key" else value
        out.append(row)
    return out


ALL = ("key", "shape", "dtype", "voxel_size", "translate", "downsampling_factors", "axes", "unit")


# -- the check -------------------------------------------------------------------------------------------
def check_dataset(url: str, capsys: pytest.CaptureFixture[str], *, skip: str | None = None) -> Iterator[str]:
    """Compare every consumer on every volume at ``url``; yields what was compared (for the summary)."""
    specs = open_dataset(url).volume_specs()
    assert specs, url
    volumes = open_volumes(url) if skip != "voxels" else None
    if volumes is not None:
        assert len(volumes) == len(specs)
    for i, spec in enumerate(specs):
        expected = spec_records(spec)
        if volumes is not None:
            assert volume_records(volumes[i]) == expected, f"open_volume disagrees with the spec at {spec.url}"
            yield "open_volume"
        if skip != "inspect":
            report = inspect_json(spec.url, capsys)
            assert inspect_records(report) == expected, f"inspect --json disagrees at {spec.url}"
            check_native_inspect_fields(report, expected)
            yield "inspect"
            # the tree shows the format's spatial axes (a precomputed channel is not a tree axis)
            fields = ("key", "shape", "voxel_size", "translate", "axes", "unit")
            for vol in (None, volumes[i] if volumes is not None else None):
                got = tree_records(spec.url, vol)
                n = len(got[0]["shape"])
                assert got == only(expected, fields, n), f"the shard browser's tree disagrees at {spec.url}"
            yield "tree"
        if skip != "voxels":
            if spec.channel_axis is not None or len(spec.axes) != 3:
                with pytest.raises(ArgumentError, match="single-channel z,y,x"):
                    VolumeSource(spec.url).describe()
            else:
                fields = ("shape", "dtype", "voxel_size", "downsampling_factors")
                got = export_records(spec.url)
                assert only(got, fields) == only(expected, fields), f"export's source disagrees at {spec.url}"
                for g, e in zip(got, expected, strict=True):
                    # Export writes precomputed, whose voxel_offset is whole voxels: a translation that
                    # is not a whole number of voxels (OME-Zarr allows it) is rounded to the nearest one.
                    whole = tuple(round(t / v) * v for t, v in zip(e["translate"], e["voxel_size"], strict=True))
                    assert g["translate"] == pytest.approx(whole), spec.url
            yield "export"


@pytest.mark.realdata
@pytest.mark.parametrize("rel", [d for d in DIRS if d not in NOT_VOLUMES])
def test_real_dataset_consumers_agree(rel: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(REALDATA / rel)
    partial = PARTIAL.get(rel)
    if partial is None:
        assert set(check_dataset(url, capsys)) == {"open_volume", "inspect", "tree", "export"}
        return
    consumer, error, _reason = partial
    checked = set(check_dataset(url, capsys, skip=consumer))
    assert checked == ({"inspect", "tree"} if consumer == "voxels" else {"open_volume", "export"})
    # the consumer left out really cannot read it (move the entry out of PARTIAL once it can)
    with pytest.raises(error):
        if consumer == "voxels":
            open_volumes(url)
        else:
            open_dataset(url).inspector().inspect()


@pytest.mark.realdata
@pytest.mark.parametrize("rel", sorted(NOT_VOLUMES))
def test_real_directories_that_are_not_volumes_say_why(rel: str) -> None:
    error, _reason = NOT_VOLUMES[rel]
    assert rel in DIRS, f"{rel} is listed but has no metadata document under {REALDATA}"
    with pytest.raises(error):
        open_volumes(REALDATA / rel)


@pytest.mark.realdata
def test_every_real_dataset_is_accounted_for() -> None:
    assert set(PARTIAL) <= set(DIRS) - set(NOT_VOLUMES)
    assert set(NOT_VOLUMES) <= set(DIRS)


@pytest.mark.realdata
@pytest.mark.parametrize("rel", sorted(d for d, (error, _) in NOT_VOLUMES.items() if error is MetadataError
                                       and "no voxels" in NOT_VOLUMES[d][1]))
def test_segment_keyed_directories_agree_between_inspect_and_tree(rel: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # No volume, but inspect and the shard browser still list the same sources.
    url = str(REALDATA / rel)
    report = inspect_json(url, capsys)
    assert [sc["key"] for sc in report["scales"]] == [n.scale for n in open_layout(url).roots()]


#: Precomputed annotation collections among them, with what ``validate`` must report. CloudVolume's H01 sample
#: is cut down: its spatial cell lists 10043 points, by_id keeps one annotation (not in the cell) and the
#: relationship index one skeleton's four; so the indexes disagree and validate says where.
ANNOTATION_COLLECTIONS: dict[str, tuple[str, ...]] = {
    "cv_annotation": ("spatial0/0_0_0.gz: annotation 2959571531 (spatial level 0) has no by_id entry",
                      "skeleton_id/243895108.gz: annotation 3816437483 (related to segment 243895108 by "
                      "'skeleton_id') has no by_id entry",
                      "by_id/3867588737.gz: annotation 3867588737 is in by_id but in no spatial cell"),
}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *args], capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.realdata
@pytest.mark.parametrize("rel", sorted(ANNOTATION_COLLECTIONS))
def test_annotation_collections_inspect_list_locate_and_validate(rel: str) -> None:
    # Not a volume (open_volume refuses it, above), but every inspection verb reads it.
    url = str(REALDATA / rel)
    # inspect, ls and validate in one child process (tests/cli_batch.py: each prints and returns as on its own)
    inspect, listed, checked = run_commands([["inspect", url, "--json"], ["ls", url, "--json"],
                                             ["validate", url, "--json"]], timeout=300)
    assert inspect.returncode == 0, inspect.stderr
    report = json.loads(inspect.stdout)
    assert report["annotations"]["annotation_type"] in ("POINT", "LINE", "AXIS_ALIGNED_BOUNDING_BOX", "ELLIPSOID",
                                                        "POLYLINE")
    assert listed.returncode == 0, listed.stderr
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {r["scale"] for r in records} <= {sc["key"] for sc in report["scales"]}
    first = report["scales"][0]["key"]
    one = next(r for r in records if r["scale"] == first)
    located = _cli("locate", url, "--annotation", str(one["annotation_id"]) if "annotation_id" in one
                   else str(one["chunk_id"]), "--json")
    assert located.returncode == 0 and json.loads(located.stdout)["present"], located.stderr
    messages = [f"{p['key']}: {p['message']}" for p in json.loads(checked.stdout)["problems"]]
    expected = ANNOTATION_COLLECTIONS[rel]
    assert checked.returncode == (1 if expected else 0)
    for want in expected:
        assert any(m.startswith(want) for m in messages), (want, messages[:20])


# -- the project's own test data ---------------------------------------------------------------------------
OWN_CASES = ["precomputed", "precomputed-channels", "zarr3", "ome-zarr", "ome-zarr-labels", "n5", "n5-multiscale",
             "n5-bdv", "zarr2", "ome-zarr-0.4", "ome-zarr-0.4-labels"]


@pytest.mark.parametrize("name", OWN_CASES)
def test_own_test_data_consumers_agree(name: str, format_cases: dict[str, FormatCase],  # noqa: F811
                                       capsys: pytest.CaptureFixture[str]) -> None:
    case = format_cases[name]
    assert set(check_dataset(str(case.path), capsys)) == {"open_volume", "inspect", "tree", "export"}


@pytest.mark.parametrize("which", ["image", "segmentation"])
def test_sample_data_consumers_agree(which: str, sample: SampleDataset,  # noqa: F811
                                     capsys: pytest.CaptureFixture[str]) -> None:
    url = str(getattr(sample, which))
    assert set(check_dataset(url, capsys)) == {"open_volume", "inspect", "tree", "export"}
