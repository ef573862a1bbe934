"""``shardscope export-meshes``: changed bodies as sharded multilod Draco meshes, read back by CloudVolume
(its mesh API) and TensorStore (its ``neuroglancer_uint64_sharded`` kvstore + DracoPy) to the same geometry."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.cli import run
from napari_shardscope.core.formats.precomputed.meshes import decode_manifest, open_mesh_source
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.versioned import create_repository, open_repository
from tests.realdata import REALDATA, realdata_path

PINKY = REALDATA / "igneous_pinky_sharded"


@pytest.fixture
def edited(tmp_path: Path) -> tuple[Path, int, int, int]:
    """A repository over pinky where two bodies were merged and a third had a supervoxel split."""
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", realdata_path("igneous_pinky_sharded"))
    source = lm.mesher().source
    a, b, c = sorted(source.segment_ids(), key=lambda i: -len(source.mesh(i).faces))[:3]
    v = lm.at("main")
    v.merge(a, [b])
    box = v.bbox(c)
    where = np.argwhere(v.read_supervoxels(box) == c) + np.asarray(box.lo)
    v.split_supervoxel(c, where[where[:, 2] < np.median(where[:, 2])])
    repo.close()
    return tmp_path / "repo", a, b, c


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = run([*argv, "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def volume_dir(tmp_path: Path) -> Path:
    """A precomputed segmentation directory (pinky's info) that the exported meshes go into."""
    vol = tmp_path / "exported"
    vol.mkdir()
    (vol / "info").write_text((PINKY / "info").read_text())
    return vol


def test_export_reads_back_in_cloudvolume_and_tensorstore(edited: tuple[Path, int, int, int], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    repo_path, a, _b, c = edited
    vol = volume_dir(tmp_path)
    report = cli_json(capsys, "export-meshes", str(repo_path), str(vol / "edited_mesh"))
    assert report["bodies"] == sorted([a, c])  # b was merged away; the split changed c's body
    assert report["linked_info"] == str(vol / "info")
    assert json.loads((vol / "info").read_text())["mesh"] == "edited_mesh"

    repo = open_repository(repo_path)
    lm = open_labelmap(repo, "seg")
    expected = {body: lm.mesh(body, "main") for body in (a, c)}
    repo.close()

    # our reader
    ours = open_mesh_source(open_store(vol), "edited_mesh")
    assert ours.segment_ids() == sorted([a, c])
    for body, want in expected.items():
        got = ours.mesh(body)
        assert got is not None
        extent = want.vertices.max(0) - want.vertices.min(0)
        np.testing.assert_allclose(got.vertices, want.vertices, atol=float(extent.max()) / 65535 + 1e-3)
        np.testing.assert_array_equal(got.faces, want.faces)

    # CloudVolume's mesh API
    cloudvolume = pytest.importorskip("cloudvolume")
    cv = cloudvolume.CloudVolume(f"file://{vol}", progress=False)
    for body, want in expected.items():
        got = cv.mesh.get(body, lod=0)
        got = got[body] if isinstance(got, dict) else got
        extent = want.vertices.max(0) - want.vertices.min(0)
        assert len(got.faces) == len(want.faces)
        np.testing.assert_allclose(np.sort(got.vertices, axis=0), np.sort(want.vertices, axis=0),
                                   atol=float(extent.max()) / 65535 + 1e-3)

    # TensorStore's sharded kvstore finds each manifest; the fragment bytes sit just before it
    import DracoPy
    import tensorstore as ts

    info = json.loads((vol / "edited_mesh" / "info").read_text())
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{vol / 'edited_mesh'}/",
                          "metadata": info["sharding"]}).result()
    shard_bytes = b"".join((vol / "edited_mesh" / name).read_bytes()
                           for name in sorted(p.name for p in (vol / "edited_mesh").glob("*.shard")))
    for body, want in expected.items():
        manifest_bytes = kv.read(struct.pack(">Q", body)).result().value
        manifest = decode_manifest(bytes(manifest_bytes), key=str(body))
        at = shard_bytes.find(bytes(manifest_bytes))
        fragment = shard_bytes[at - manifest.data_bytes:at]
        mesh = DracoPy.decode(fragment)
        q = np.asarray(mesh.points, dtype=np.float64)
        vertices = manifest.grid_origin + manifest.chunk_shape * (q / 65535.0)
        extent = want.vertices.max(0) - want.vertices.min(0)
        np.testing.assert_allclose(vertices, want.vertices, atol=float(extent.max()) / 65535 + 1e-3)
        np.testing.assert_array_equal(np.asarray(mesh.faces).reshape(-1, 3), want.faces)


def test_export_refuses_to_overwrite_and_replaces_with_overwrite(edited: tuple[Path, int, int, int], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    repo_path, a, _b, _c = edited
    dest = tmp_path / "meshes"
    cli_json(capsys, "export-meshes", str(repo_path), str(dest), "--bodies", str(a))
    code = run(["export-meshes", str(repo_path), str(dest), "--quiet"])
    _, err = capsys.readouterr()
    assert code != 0 and "exists" in err
    report = cli_json(capsys, "export-meshes", str(repo_path), str(dest), "--overwrite")
    assert len(report["bodies"]) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".meshes")]  # no temporary left behind
    code = run(["export-meshes", str(repo_path), str(tmp_path / "m2"), "--bodies", "999999999", "--quiet"])
    _, err = capsys.readouterr()
    assert code != 0 and "999999999" in err and not (tmp_path / "m2").exists()
