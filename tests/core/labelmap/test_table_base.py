"""A labelmap whose base agglomeration is a sorted table (core/tables) reads it in place, never whole.

The proof that nothing reads the whole table: after the labelmap is created, the table's pages that
hold only supervoxels the volume does not show are deleted; opening, reading planes, merging,
cleaving, undoing and reading sizes must not need them (a read of a missing page is a typed
``TableError``). Every answer is checked against the same labelmap created from the same rows as a
dict (copied into the repository, the small case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.tables import open_sorted_table, write_reverse_table, write_sorted_table
from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from tests.cli_batch import run_commands
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

PAGE_ROWS = 256
#: Rows the table lists beyond the volume's supervoxels (ids above the volume's): whole pages of them.
EXTRA = 40 * PAGE_ROWS
EXTRA_FROM = 100_000


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("tablebase") / "seg"
    data = voronoi_supervoxels((8, 24, 24), 40, seed=5)
    write_precomputed(path, data, ((1, 1, 1), (1, 2, 2)))
    return path, data


def rows_of(data: np.ndarray) -> dict[int, int]:
    """The agglomeration: the volume's supervoxels in bodies of three (by id order), and the extra rows
    (ids the volume does not show) in bodies of their own range."""
    svs = [int(s) for s in np.unique(data)]
    mapping = {sv: svs[i - i % 3] for i, sv in enumerate(svs)}
    for i in range(EXTRA):
        mapping[EXTRA_FROM + i] = 60_000 + i // 5
    return mapping


def write_table(where: Path, mapping: dict[int, int], fmt: str) -> Path:
    keys = np.fromiter(mapping, dtype=np.uint64)
    bodies = np.fromiter(mapping.values(), dtype=np.uint64)
    url = where / {"zarr3": "fwd.zarr", "parquet": "fwd.parquet", "precomputed": "fwd"}[fmt]
    options: dict[str, object] = {"page_rows": PAGE_ROWS}
    if fmt == "zarr3":
        options["shard_pages"] = 0  # one file per page: the pages the test deletes
    write_sorted_table(url, keys, {"body": bodies}, key="supervoxel", format=fmt, **options)  # type: ignore[arg-type]
    return url


def delete_extra_pages(url: Path) -> int:
    """Delete the zarr table's pages holding only rows the volume does not show; how many were deleted."""
    table = open_sorted_table(url)
    first = np.asarray(table.directory.first)
    doomed = [i for i, k in enumerate(first.tolist()) if k >= EXTRA_FROM]
    for column in ("supervoxel", "body"):
        for i in doomed:
            (url / column / "c" / str(i)).unlink()
    return len(doomed)


def cli(*argv: str) -> dict[str, object]:
    """Run a verb as a user does (a subprocess, progress on, --json read from the pipe)."""
    proc = subprocess.run([sys.executable, "-m", "napari_shardscope", *argv, "--json"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "SHARDSCOPE_USER": "ana"})
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def cli_batch(*commands: list[str]) -> list[dict[str, object]]:
    """Several verbs in one child process, in order (``tests/cli_batch.py``: real pipes, --json each).

    One child per edit and the read that checks it, not one per command line: each child spent about a
    second of CPU starting. The next edit runs in a fresh process, so each edit is read back from the store.
    """
    done = run_commands([[*c, "--json"] for c in commands], env={**os.environ, "SHARDSCOPE_USER": "ana"},
                        timeout=300)
    for proc in done:
        assert proc.returncode == 0, (proc.args, proc.stderr)
    return [json.loads(proc.stdout) for proc in done]


@pytest.fixture
def repos(tmp_path: Path) -> Iterator[tuple[Repository, Repository]]:
    a = create_repository(tmp_path / "table.repo")
    b = create_repository(tmp_path / "dict.repo")
    yield a, b
    a.close()
    b.close()


def test_the_cli_proofreads_over_a_table_read_in_place(base: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    seg, data = base
    mapping = rows_of(data)
    fwd = write_table(tmp_path, mapping, "zarr3")
    write_reverse_table(open_sorted_table(fwd), tmp_path / "rev.zarr")
    repo = tmp_path / "table.repo"
    _, info = cli_batch(["repo", "init", str(repo)],
                        ["labelmap", "create", str(repo), "seg", str(seg), "--agglomeration", str(fwd),
                         "--agglomeration-reverse", str(tmp_path / "rev.zarr"), "--block", "8"])
    table = info["agglomeration_table"]
    assert isinstance(table, dict) and table["forward"] == str(fwd) and table["rows"] == len(mapping)
    assert info["id_start"] == max(max(mapping), max(mapping.values())) + 1
    assert delete_extra_pages(fwd) >= EXTRA // PAGE_ROWS - 1

    with create_repository(tmp_path / "dict.repo") as ref_repo:  # the same rows as a dict: copied, the small case
        ref = create_labelmap(ref_repo, "seg", seg, agglomeration=mapping, block=8).at("main")
        svs = [int(s) for s in np.unique(data)]
        voxel = [int(c) for c in np.argwhere(data == svs[4])[0]]
        got = cli("label", str(repo), "main", "seg", *map(str, voxel))
        assert (got["supervoxel"], got["body"]) == (svs[4], ref.body_of(svs[4])) == (svs[4], svs[3])

        target, other = svs[0], svs[6]
        _, got = cli_batch(["body", "merge", str(repo), "main", "seg", str(target), str(other)],
                           ["body", "size", str(repo), "main", "seg", str(target)])
        ref.merge(target, [other])
        assert got["supervoxels"] == ref.supervoxels(target) and len(ref.supervoxels(target)) == 6
        assert got["voxels"] == ref.size(target) == int(np.isin(data, svs[0:3] + svs[6:9]).sum())

        cleaved, got = cli_batch(["body", "cleave", str(repo), "main", "seg", str(target), str(svs[7])],
                                 ["body", "size", str(repo), "main", "seg", str(target)])
        new = ref.cleave(target, [svs[7]])
        assert cleaved["new_body"] == new
        assert got["supervoxels"] == ref.supervoxels(target)
        _, got = cli_batch(["undo", str(repo), "main", "seg"], ["body", "size", str(repo), "main", "seg", str(target)])
        ref.undo()
        assert got["supervoxels"] == ref.supervoxels(target) and len(ref.supervoxels(target)) == 6

        # a version read through the library: every voxel's body as the dict labelmap reads it
        with open_repository(repo) as r:
            v = open_labelmap(r, "seg").at("main")
            np.testing.assert_array_equal(v.read_bodies(), ref.read_bodies())
            np.testing.assert_array_equal(np.asarray(v.body_arrays()[1]), np.asarray(ref.body_arrays()[1]))
            stored = [k for k, _ in r.scan_unversioned("seg", b"agglomeration/")]
            assert stored == []  # both tables read in place: nothing of them copied


@pytest.mark.parametrize("fmt", ["zarr3", "parquet", "precomputed"])
def test_a_table_without_a_reverse_keeps_only_the_body_sorted_rows(
        base: tuple[Path, np.ndarray], tmp_path: Path, repos: tuple[Repository, Repository], fmt: str) -> None:
    seg, data = base
    mapping = rows_of(data)
    fwd = write_table(tmp_path, mapping, fmt)
    mine, theirs = repos
    create_labelmap(mine, "seg", seg, agglomeration=str(fwd), block=8)
    ref = create_labelmap(theirs, "seg", seg, agglomeration=mapping, block=8).at("main")
    if fmt == "zarr3":
        delete_extra_pages(fwd)
    v = open_labelmap(mine, "seg").at("main")
    svs = [int(s) for s in np.unique(data)]
    np.testing.assert_array_equal(v.bodies_of(svs), ref.bodies_of(svs))
    assert v.supervoxels(svs[9]) == ref.supervoxels(svs[9]) == svs[9:12]
    v.merge(svs[9], [svs[12], svs[15]])
    ref.merge(svs[9], [svs[12], svs[15]])
    new = v.cleave(svs[9], [svs[13], svs[16]])
    assert new == ref.cleave(svs[9], [svs[13], svs[16]])
    for body in (svs[9], new):
        assert v.supervoxels(body) == ref.supervoxels(body) and v.size(body) == ref.size(body)
    assert v.supervoxels(new) == [svs[13], svs[16]]
    np.testing.assert_array_equal(v.read_bodies(), ref.read_bodies())
    keys = {k.split(b"/")[1] for k, _ in mine.scan_unversioned("seg", b"agglomeration/")}
    assert b"fwd" not in keys and b"rev" in keys  # the forward table is read where it lives


def test_a_changed_table_is_refused_at_open(base: tuple[Path, np.ndarray], tmp_path: Path,
                                            repos: tuple[Repository, Repository]) -> None:
    seg, data = base
    mapping = rows_of(data)
    fwd = write_table(tmp_path, mapping, "parquet")
    mine, _ = repos
    create_labelmap(mine, "seg", seg, agglomeration=fwd, block=8)
    fewer = dict(list(mapping.items())[:-PAGE_ROWS])
    keys = np.fromiter(fewer, dtype=np.uint64)
    write_sorted_table(fwd, keys, {"body": np.fromiter(fewer.values(), dtype=np.uint64)}, key="supervoxel",
                       overwrite=True)
    with pytest.raises(LabelmapStateError, match="must not change"):
        open_labelmap(mine, "seg")


def test_a_bodies_json_is_still_copied(base: tuple[Path, np.ndarray], tmp_path: Path,
                                       repos: tuple[Repository, Repository]) -> None:
    seg, data = base
    svs = [int(s) for s in np.unique(data)]
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps({"format": "napari-shardscope/bodies", "version": 1, "segmentation": "seg",
                                  "bodies": [{"id": svs[0], "supervoxels": svs[:2]}]}))
    mine, _ = repos
    lm = create_labelmap(mine, "seg", seg, agglomeration=bodies, block=8)
    assert lm.config.table is None and lm.at("main").supervoxels(svs[0]) == svs[:2]
