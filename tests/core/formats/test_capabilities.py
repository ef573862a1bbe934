"""Capabilities only some formats have are methods of every dataset, never ``isinstance`` checks.

``Dataset.mesh_source()``, ``skeleton_source()``, ``locate_chunk_id()``, ``locate_segment()`` and
``annotations()``: a precomputed
dataset answers them (``None`` when its ``info`` names no such directory), every other format raises
:class:`~napari_shardscope.core.errors.FormatCapabilityError` naming the format. The data here is written by
CloudVolume (a segmentation with legacy meshes and skeletons) and by the shared format cases.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import (
    ArgumentError,
    FormatCapabilityError,
    UnsupportedError,
    exit_code_for,
)
from napari_shardscope.core.formats import open_dataset
from tests.volume_cases import FormatCase, format_cases  # noqa: F401  (fixture)

cloudvolume = pytest.importorskip("cloudvolume")

SRC = Path(__file__).resolve().parents[3] / "src" / "napari_shardscope"
CAPABILITIES = ("mesh_source", "skeleton_source", "locate_chunk_id", "locate_segment", "annotations")


@pytest.fixture(scope="module")
def segmentation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A precomputed segmentation whose ``info`` names a legacy mesh and a skeleton directory (CloudVolume's)."""
    from cloudvolume import Skeleton
    from cloudvolume.mesh import Mesh

    root = tmp_path_factory.mktemp("capabilities") / "seg"
    labels = np.zeros((40, 30, 20), dtype=np.uint32)  # x, y, z
    labels[5:20, 5:25, 3:15] = 7
    info = cloudvolume.CloudVolume.create_new_info(1, "segmentation", "uint32", "raw", [4, 4, 40], [0, 0, 0],
                                                   list(labels.shape), mesh="mesh", skeletons="skeletons",
                                                   chunk_size=[20, 15, 10])
    cv = cloudvolume.CloudVolume(f"file://{root}", info=info, progress=False)
    cv.commit_info()
    cv[:, :, :] = labels
    cube = np.array([[0, 0, 0], [80, 0, 0], [0, 80, 0], [0, 0, 400]], dtype=np.float32)
    cv.mesh.put([Mesh(cube, np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], np.uint32), segid=7)])
    (root / "mesh" / "info").write_text('{"@type": "neuroglancer_legacy_mesh"}')  # CloudVolume writes none
    cv.skeleton.meta.commit_info()
    cv.skeleton.upload([Skeleton(cube, np.array([[0, 1], [1, 2], [2, 3]], np.uint32), segid=7)])
    return root


def test_precomputed_dataset_answers_every_capability(segmentation: Path) -> None:
    ds = open_dataset(segmentation)
    mesh = ds.mesh_source()
    assert mesh is not None and mesh.segment_ids() == [7]
    got = mesh.mesh(7)
    assert got is not None and len(got.vertices) == 4 and len(got.faces) == 4
    skeletons = ds.skeleton_source()
    assert skeletons is not None
    skeleton = skeletons.skeleton(7)
    assert skeleton is not None and len(skeleton.vertices) == 4 and len(skeleton.edges) == 3
    assert skeletons.skeleton(8) is None
    # The same records the inspector gives, through the dataset.
    assert ds.locate_chunk_id(1) == ds.inspector().locate_chunk_id(1)
    kinds = sorted(record["kind"] for record in ds.locate_segment(7))
    assert kinds == sorted(record["kind"] for record in ds.inspector().locate_segment(7)) and len(kinds) == 2


def test_segment_directories_are_their_own_sources(segmentation: Path) -> None:
    """A mesh directory is its own mesh source and has no skeletons (and the other way round): ``None``,
    not a metadata error about a volume ``info`` it never claimed to be."""
    meshes = open_dataset(segmentation / "mesh")
    source = meshes.mesh_source()
    assert source is not None and source.segment_ids() == [7]
    assert meshes.skeleton_source() is None
    skeletons = open_dataset(segmentation / "skeletons")
    skel = skeletons.skeleton_source()
    assert skel is not None and skel.skeleton(7) is not None
    assert skeletons.mesh_source() is None


def test_precomputed_volume_without_meshes_has_none(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    ds = open_dataset(format_cases["precomputed"].path)
    assert ds.mesh_source() is None and ds.skeleton_source() is None
    with pytest.raises(ArgumentError, match="no segment-keyed data") as caught:  # the format has them, this one not
        ds.locate_segment(7)
    assert not isinstance(caught.value, FormatCapabilityError)


@pytest.mark.parametrize("case", ["zarr3", "zarr2", "n5", "ome-zarr"])
@pytest.mark.parametrize("capability", CAPABILITIES)
def test_formats_without_the_capability_raise_a_typed_error(format_cases: dict[str, FormatCase],  # noqa: F811
                                                            case: str, capability: str) -> None:
    ds = open_dataset(format_cases[case].path)
    args = {"locate_chunk_id": (0,), "locate_segment": (7,)}.get(capability, ())
    with pytest.raises(FormatCapabilityError) as caught:
        getattr(ds, capability)(*args)
    exc = caught.value
    assert exc.format_name == ds.format_name and exc.format_name in str(exc) and str(ds.url) in str(exc)
    assert isinstance(exc, UnsupportedError) and isinstance(exc, ArgumentError)
    assert exit_code_for(exc) == 5
    again = pickle.loads(pickle.dumps(exc))  # Dask workers send errors back pickled
    assert type(again) is FormatCapabilityError and str(again) == str(exc) and again.capability == exc.capability


def test_open_annotations_asks_the_dataset(tmp_path: Path, format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    """``ss.open_annotations`` is the dataset's ``annotations()``: a collection opens, a zarr array is refused
    as a format without annotations (exit 5), a precomputed volume as metadata that is not a collection's."""
    import napari_shardscope as ss
    from napari_shardscope.core.errors import MetadataError
    from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations
    from tests.core.formats.precomputed.annotations.cases import random_batch
    from tests.core.formats.precomputed.annotations.test_writer import SYNAPSES

    batch = random_batch(SYNAPSES, 40, 3)
    write_annotations(tmp_path / "syn", batch)
    source = ss.open_annotations(tmp_path / "syn")
    assert sorted(source.ids().tolist()) == sorted(batch.ids.tolist())
    assert open_dataset(tmp_path / "syn").annotations().ids().tolist() == source.ids().tolist()
    with pytest.raises(FormatCapabilityError, match="zarr3 datasets have no annotations") as caught:
        ss.open_annotations(format_cases["zarr3"].path)
    assert exit_code_for(caught.value) == 5
    with pytest.raises(MetadataError, match="not a precomputed annotation collection"):
        ss.open_annotations(format_cases["precomputed"].path)


def test_locate_chunk_id_of_a_zarr_array_is_refused_by_the_cli(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    done = subprocess.run([sys.executable, "-m", "napari_shardscope", "locate", str(format_cases["zarr3"].path),
                           "--chunk-id", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 5, done.stderr
    assert "zarr3 datasets have no chunk ids" in done.stderr


def test_layout_tree_of_a_zarr_array_refuses_chunk_ids_alike(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    from napari_shardscope.core.layout import open_layout

    tree = open_layout(str(format_cases["zarr3"].path))
    with pytest.raises(FormatCapabilityError, match="zarr3 datasets have no chunk ids"):
        tree.locate_chunk(0)
    with pytest.raises(FormatCapabilityError, match="zarr3 datasets have no segment"):
        tree.locate_segment(7)


#: The classes of one format that a caller outside its package must not dispatch on.
_FORMAT_CLASSES = {"PrecomputedDataset", "Zarr3Dataset", "Zarr2Dataset", "N5Dataset", "PrecomputedInspector",
                   "Zarr3Inspector", "Zarr2Inspector", "N5Inspector"}


def test_no_code_outside_a_format_package_checks_a_dataset_class() -> None:
    """The class of defect: a capability found by ``isinstance(dataset, PrecomputedDataset)``."""
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("core/formats/precomputed/", "core/formats/zarr3/", "core/formats/zarr2/",
                           "core/formats/n5/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if names & _FORMAT_CLASSES:
                    offenders.append(f"{rel}:{node.lineno}")
    assert offenders == [], f"ask the dataset (mesh_source(), locate_chunk_id() …) instead: {offenders}"
