"""Export of a labelmap version: read back by TensorStore, CloudVolume and zarr-python, equal at every scale.

The labelmap is edited through its public API (merge, cleave, supervoxel split) and committed; the
export must equal ``read_bodies`` / ``read_supervoxels`` of that version at every scale, pass
``shardscope validate``, and a 2-worker ``LocalCluster`` must write the same bytes as threads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.labelmap import Labelmap, create_labelmap
from napari_shardscope.core.versioned import Repository, create_repository
from napari_shardscope.core.volumes import open_volume
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

FACTORS = ((1, 1, 1), (1, 2, 2), (2, 4, 4))


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Repository, Labelmap, str, str]]:
    """A repository whose committed ``main`` head has a merge, a cleave and a supervoxel split; and an open child."""
    root = tmp_path_factory.mktemp("lm-export")
    base = voronoi_supervoxels((12, 40, 48), 30, seed=3)
    write_precomputed(root / "seg", base, FACTORS, chunk_xyz=(16, 16, 4), sharded=True)
    repo = create_repository(root / "repo")
    lm = create_labelmap(repo, "seg", root / "seg", agglomeration={int(s): int(s) for s in np.unique(base)}, block=8)
    v = lm.at("main")
    svs = [int(s) for s in np.unique(base)]
    v.merge(svs[0], [svs[1], svs[2]])
    v.cleave(svs[0], [svs[2]])
    target = svs[5]
    mask = base == target
    pick = np.argwhere(mask)[: int(mask.sum()) // 2]
    v.split_supervoxel(target, pick)
    committed = repo.commit(v.uuid, "edits")
    child = repo.new_version(committed.uuid)
    lm.at(child.uuid).merge(svs[7], [svs[8]])
    yield repo, lm, committed.uuid, child.uuid
    repo.close()


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("labels", ["bodies", "supervoxels"])
def test_precomputed_export_equals_labelmap_reads(edited: tuple[Repository, Labelmap, str, str], tmp_path: Path,
                                                  labels: str) -> None:
    from cloudvolume import CloudVolume

    repo, lm, uuid, _ = edited
    source = labelmap_source(repo, "seg", uuid, labels=labels)  # type: ignore[arg-type]
    out = tmp_path / "out"
    export_precomputed(source, str(out), chunk_size=(16, 16, 4))
    v = lm.at(uuid)
    for scale in range(len(FACTORS)):
        expected = v.read_bodies(scale=scale) if labels == "bodies" else v.read_supervoxels(scale=scale)
        store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(out)},
                         "scale_index": scale}).result()
        np.testing.assert_array_equal(np.asarray(store[..., 0].read().result()).T, expected)
        cv = CloudVolume(f"file://{out}", mip=scale, progress=False, fill_missing=False)
        np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0].T, expected)
    assert run(["validate", str(out), "--quiet"]) == 0
    if labels == "bodies":  # the edits show: bodies differ from supervoxels
        assert not np.array_equal(v.read_bodies(), v.read_supervoxels())


def test_zarr3_export_equals_labelmap_reads(edited: tuple[Repository, Labelmap, str, str], tmp_path: Path) -> None:
    import zarr

    repo, lm, uuid, _ = edited
    out = tmp_path / "out.zarr"
    export_zarr3(labelmap_source(repo, "seg", uuid), str(out), inner_chunk=(4, 16, 16))
    group = zarr.open_group(str(out), mode="r")
    v = lm.at(uuid)
    for scale in range(len(FACTORS)):
        np.testing.assert_array_equal(np.asarray(group[str(scale)][...]), v.read_bodies(scale=scale))
    assert run(["validate", str(out / "0"), "--quiet"]) == 0
    assert open_volume(str(out)).kind == "segmentation"  # OME-Zarr image-label metadata: labels, not an image


def test_export_into_the_repository_or_the_base_is_refused(edited: tuple[Repository, Labelmap, str, str],
                                                           tmp_path: Path) -> None:
    repo, lm, uuid, _ = edited
    source = labelmap_source(repo, "seg", uuid)
    base = Path(lm.config.base)
    before = digests(base), digests(Path(repo.path))
    for dest in (Path(repo.path), Path(repo.path) / "out", base, base / "out", base.parent):
        with pytest.raises(ArgumentError, match="overlaps the source"):
            export_precomputed(source, str(dest), overwrite=True)
        with pytest.raises(ArgumentError, match="overlaps the source"):
            export_zarr3(source, str(dest), overwrite=True)
    assert (digests(base), digests(Path(repo.path))) == before


def test_open_version_refused_unless_allowed(edited: tuple[Repository, Labelmap, str, str], tmp_path: Path) -> None:
    repo, lm, _, child = edited
    with pytest.raises(ArgumentError, match="open"):
        labelmap_source(repo, "seg", child)
    source = labelmap_source(repo, "seg", child, allow_open=True)
    export_precomputed(source, str(tmp_path / "out"), chunk_size=(16, 16, 4))
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(tmp_path / "out")},
                     "scale_index": 0}).result()
    np.testing.assert_array_equal(np.asarray(store[..., 0].read().result()).T, lm.at(child).read_bodies())


def test_branch_name_is_pinned_to_its_head_now(edited: tuple[Repository, Labelmap, str, str]) -> None:
    repo, _, uuid, _ = edited
    assert labelmap_source(repo, "seg", uuid[:8]).version == uuid


def test_local_cluster_writes_the_same_bytes(edited: tuple[Repository, Labelmap, str, str], tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    repo, _, uuid, _ = edited
    source = labelmap_source(repo, "seg", uuid)
    export_precomputed(source, str(tmp_path / "threads"), chunk_size=(16, 16, 4), shard_bytes=20_000)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        report = export_precomputed(source, str(tmp_path / "cluster"), chunk_size=(16, 16, 4), shard_bytes=20_000,
                                    scheduler=client)
    assert len(report.shards) > 2
    assert digests(tmp_path / "cluster") == digests(tmp_path / "threads")


@pytest.mark.parametrize("shard_bytes", [200_000, 1 << 30], ids=["several-shards", "one-shard-per-scale"])
def test_every_worker_count_writes_the_bytes_one_worker_writes(edited: tuple[Repository, Labelmap, str, str],
                                                              tmp_path: Path, shard_bytes: int) -> None:
    """Guided parts (whole shards first, single chunks last) on 2 and 3 threads, and the plan run in this
    thread, assemble every shard file byte for byte as one worker writes it; TensorStore and CloudVolume
    read the committed version's bodies back from the 2-worker export at every scale."""
    from cloudvolume import CloudVolume

    from napari_shardscope.core.export.precomputed import build_info, plan_parts, plan_shard_tasks

    repo, lm, uuid, _ = edited
    source = labelmap_source(repo, "seg", uuid)
    plan = plan_parts(plan_shard_tasks("unused", build_info(source, chunk_size=(16, 16, 4),
                                                            shard_bytes=shard_bytes)), 2)
    assert any(len(parts) > 1 for _, parts in plan)  # the 2-worker exports below assemble shards from parts
    runs = {"w1": {"num_workers": 1}, "w2": {"num_workers": 2}, "w3": {"num_workers": 3},
            "sync": {"scheduler": "sync"}}
    for name, kwargs in runs.items():
        export_precomputed(source, str(tmp_path / name), chunk_size=(16, 16, 4), shard_bytes=shard_bytes,
                           **kwargs)  # type: ignore[arg-type]
    one = digests(tmp_path / "w1")
    assert all(digests(tmp_path / name) == one for name in runs)
    v = lm.at(uuid)
    for scale in range(len(FACTORS)):
        expected = v.read_bodies(scale=scale)
        store = ts.open({"driver": "neuroglancer_precomputed", "scale_index": scale,
                         "kvstore": {"driver": "file", "path": str(tmp_path / "w2")}}).result()
        np.testing.assert_array_equal(np.asarray(store[..., 0].read().result()).T, expected)
        cv = CloudVolume(f"file://{tmp_path / 'w2'}", mip=scale, progress=False, fill_missing=False)
        np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0].T, expected)


def test_cli_exports_a_version(edited: tuple[Repository, Labelmap, str, str], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    repo, lm, uuid, child = edited
    out = tmp_path / "cli"
    assert run(["export", str(repo.path), str(out), "--labelmap", "seg", "--version", uuid[:8],
                "--chunk", "4,16,16", "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["source"] == {"repository": str(repo.path), "labelmap": "seg", "version": uuid, "labels": "bodies"}
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(out)},
                     "scale_index": 1}).result()
    np.testing.assert_array_equal(np.asarray(store[..., 0].read().result()).T, lm.at(uuid).read_bodies(scale=1))
    # an open version, named or (without --labelmap and --version) the only labelmap at main's open head:
    # exit 2, one line on stderr in the command line's words, nothing written
    assert run(["export", str(repo.path), str(tmp_path / "x"), "--labelmap", "seg", "--version", child]) == 2
    assert run(["export", str(repo.path), str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("commit it first" in e and "pass --allow-open" in e for e in err)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_two_repositories_at_one_relative_path_export_each_its_own_version(
        edited: tuple[Repository, Labelmap, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook exports ``repo`` from one directory, then ``repo`` from another (or a repository deleted and
    made again at the same path): each export reads its own repository. The labelmap a process opens for an
    export used to be kept under the path as given, so the second export read the first repository and
    failed with UnknownVersionError (found running every docs page in one interpreter)."""
    repo, _, uuid, _ = edited
    first = Path(str(repo.path))
    other = tmp_path / "other"
    other.mkdir()
    base = voronoi_supervoxels((12, 40, 48), 30, seed=3)
    repo2 = create_repository(other / "repo")
    lm2 = create_labelmap(repo2, "seg", first.parent / "seg", agglomeration={int(s): int(s) for s in np.unique(base)},
                          block=8)
    svs = [int(s) for s in np.unique(base)]
    v2 = lm2.at("main")
    v2.merge(svs[3], [svs[4]])
    uuid2 = repo2.commit(v2.uuid, "another repository's merge").uuid
    monkeypatch.chdir(first.parent)
    export_precomputed(labelmap_source("repo", "seg", uuid), str(tmp_path / "out1"), chunk_size=(16, 16, 4))
    monkeypatch.chdir(other)
    export_precomputed(labelmap_source("repo", "seg", uuid2), str(tmp_path / "out2"), chunk_size=(16, 16, 4))
    out2 = {"driver": "file", "path": str(tmp_path / "out2")}
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": out2, "scale_index": 0}).result()
    np.testing.assert_array_equal(np.asarray(store[..., 0].read().result()).T, lm2.at(uuid2).read_bodies())
    repo2.close()
