"""``shardscope labelmap|label|merge|cleave|split-supervoxel|split-body|undo|redo|size|history``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.cli import run
from tests.core.labelmap.test_labelmap import dumbbell
from tests.core.labelmap.volumes import write_precomputed


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "seg"
    write_precomputed(path, dumbbell(), ((1, 1, 1), (1, 2, 2)))
    return path


def call(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, object]:
    code = run(list(argv))
    out = capsys.readouterr()
    text = out.out.strip()
    return code, (json.loads(text) if text.startswith(("{", "[")) else text + out.err)


def test_proofreading_session(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = str(tmp_path / "repo")
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps({"format": "napari-shardscope/bodies", "version": 1, "segmentation": "seg",
                                  "bodies": [{"id": 10, "supervoxels": [10, 30, 40]}]}))
    assert call(capsys, "repo", "init", repo)[0] == 0
    code, info = call(capsys, "labelmap", "create", repo, "seg", str(base), "--agglomeration", str(bodies),
                      "--block", "8", "--json")
    assert code == 0 and isinstance(info, dict)
    assert info["id_start"] == 41 and info["index"]["supervoxels"] == 4 and info["block"] == [8, 8, 8]

    code, got = call(capsys, "label", repo, "main", "seg", "4", "14", "5", "--json")
    assert code == 0 and got == {"voxel": [4, 14, 5], "scale": "4_4_40", "supervoxel": 30, "body": 10}
    code, got = call(capsys, "body", "size", repo, "main", "seg", "10", "--json")
    assert isinstance(got, dict) and got["supervoxels"] == [10, 30, 40]
    assert got["voxels"] == int(np.isin(dumbbell(), [10, 30, 40]).sum())

    code, got = call(capsys, "body", "merge", repo, "main", "seg", "5", "10", "--user", "ana", "--json")
    assert code == 0 and isinstance(got, dict) and got["mutation"]["operation"] == "merge"
    assert got["mutation"]["user"] == "ana" and got["mutation"]["bodies"] == [5, 10]
    code, got = call(capsys, "body", "cleave", repo, "main", "seg", "5", "30", "--json")
    assert isinstance(got, dict) and got["new_body"] == 41
    voxels = tmp_path / "v.json"
    voxels.write_text(json.dumps([[2, 13, 2], [2, 13, 3]]))
    code, got = call(capsys, "body", "split-supervoxel", repo, "main", "seg", "30", str(voxels), "--json")
    assert code == 0 and isinstance(got, dict) and (got["split"], got["remainder"]) == (42, 43)
    assert sorted({b[0] for b in got["mutation"]["blocks"]}) == [0, 1]  # blocks at both scales
    npy = tmp_path / "v.npy"
    np.save(npy, np.array([[4, 8, 25]]))
    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps({"1": [[4, 8, 5]], "2": [[4, 8, 25]]}))
    code, got = call(capsys, "body", "split", repo, "main", "seg", "5", str(seeds), "--json")
    assert code == 0 and isinstance(got, dict) and got["bodies"]["1"] == 5 and list(got["cut"]) == ["10"]
    code, text = call(capsys, "undo", repo, "main", "seg")
    assert code == 0 and str(text).startswith("undid: split of 5 into") and "mutation" not in str(text)
    code, got = call(capsys, "redo", repo, "main", "seg", "--json")
    assert isinstance(got, dict) and got["mutation"]["args"]["mutation"] == 4
    code, got = call(capsys, "body", "history", repo, "main", "seg", "41", "--json")
    assert isinstance(got, list) and [m["operation"] for m in got] == ["merge", "cleave", "split-supervoxel"]
    code, text = call(capsys, "body", "history", repo, "main", "seg", "41")
    assert code == 0 and "cleave of 1 supervoxel off 5 into 41 (by " in str(text) and "mutation" not in str(text)
    code, got = call(capsys, "labelmap", "info", repo, "main", "seg", "--json")
    assert isinstance(got, dict) and got["version"]["own_mutations"] == 6 and got["version"]["can_undo"]

    # edits the mapping does not allow and bad input exit 2, an unknown version 3, an edit of a
    # committed version 6 (errors.exit_code_for), one line on stderr
    code, text = call(capsys, "body", "cleave", repo, "main", "seg", "41", "40")
    assert code == 2 and "not in body 41" in str(text)
    code, text = call(capsys, "body", "split-supervoxel", repo, "main", "seg", "40", str(npy))
    assert code == 2 and "not in supervoxel 40" in str(text)
    assert call(capsys, "body", "size", repo, "main", "seg", "999")[0] == 3  # an unknown label is not found
    assert call(capsys, "body", "merge", repo, "nope", "seg", "5", "41")[0] == 3
    assert call(capsys, "label", repo, "main", "nope", "0", "0", "0")[0] == 3  # no such labelmap
    assert call(capsys, "label", repo, "main", "seg", "99", "0", "0")[0] == 2
    bad = tmp_path / "bad.json"
    bad.write_text("[[1, 2]]")
    assert call(capsys, "body", "split-supervoxel", repo, "main", "seg", "40", str(bad))[0] == 2
    assert call(capsys, "repo", "commit", repo, "main", "-m", "done")[0] == 0
    code, text = call(capsys, "body", "merge", repo, "main", "seg", "5", "41")
    assert code == 6 and "committed" in str(text) and "new_version" not in str(text)
    code, text = call(capsys, "labelmap", "index", repo, "seg")
    assert code == 0 and "4 supervoxels" in str(text)


def test_bad_counts_and_unknown_versions_are_usage_errors(base: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``--workers`` below 1 is a one-line usage error (it was a ValueError traceback from the thread pool);
    an unknown version is "not found" (exit 3) for the branch commands as for the versioned CLI."""
    repo = str(tmp_path / "repo")
    assert call(capsys, "repo", "init", repo)[0] == 0
    assert call(capsys, "labelmap", "create", repo, "seg", str(base), "--block", "8", "--no-index")[0] == 0
    for bad in ("-1", "0", "two"):
        assert run(["labelmap", "index", repo, "seg", "--workers", bad, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "positive integer" in err and "Traceback" not in err
    assert call(capsys, "labelmap", "index", repo, "seg", "--workers", "2", "--quiet")[0] == 0
    assert call(capsys, "repo", "commit", repo, "main", "-m", "base")[0] == 0
    code, text = call(capsys, "branch", "merge", repo, "main", "nosuch", "seg", "--dry-run")
    assert code == 3 and "nosuch" in str(text)
    assert call(capsys, "branch", "merge", repo, "nosuch", "main", "seg")[0] == 3
    assert call(capsys, "diff", repo, "main", "abcdef12", "seg")[0] == 3
    assert call(capsys, "repo", "log", repo, "nosuch")[0] == 3  # what the versioned CLI does


def test_one_coordinate_order_and_xyz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``label`` and the split verbs take z y x as the reader indexes the base (from 0); ``--xyz`` takes
    Neuroglancer's x y z, absolute (the base's voxel_offset 3, 5, 7 included)."""
    from tests.precomputed_data import write_ts_volume

    base = tmp_path / "offset-seg"
    data_xyz = write_ts_volume(base, None, scales=1, size=(20, 18, 12))[0]
    repo = str(tmp_path / "repo")
    assert call(capsys, "repo", "init", repo)[0] == 0
    assert call(capsys, "labelmap", "create", repo, "seg", str(base), "--block", "8")[0] == 0
    sv = int(data_xyz[9, 8, 4])  # x 9, y 8, z 4 from the first voxel
    code, zyx = call(capsys, "label", repo, "main", "seg", "4", "8", "9", "--json")
    assert code == 0 and isinstance(zyx, dict) and zyx["supervoxel"] == sv and zyx["voxel"] == [4, 8, 9]
    code, xyz = call(capsys, "label", repo, "main", "seg", str(9 + 3), str(8 + 5), str(4 + 7), "--xyz", "--json")
    assert code == 0 and xyz == zyx
    assert call(capsys, "label", repo, "main", "seg", "9", "8", "4", "--xyz")[0] == 2  # before the offset: outside
    other = int(data_xyz[10, 8, 4])
    seeds = tmp_path / "seeds.json"  # the same two voxels, typed x, y, z absolute
    seeds.write_text(json.dumps({"1": [[9 + 3, 8 + 5, 4 + 7]], "2": [[10 + 3, 8 + 5, 4 + 7]]}))
    assert call(capsys, "body", "merge", repo, "main", "seg", str(sv), str(other))[0] == 0
    code, got = call(capsys, "body", "split", repo, "main", "seg", str(sv), str(seeds), "--xyz", "--json")
    assert code == 0 and isinstance(got, dict)
    first = call(capsys, "label", repo, "main", "seg", "4", "8", "9", "--json")[1]
    second = call(capsys, "label", repo, "main", "seg", "4", "8", "10", "--json")[1]
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["body"] == got["bodies"]["1"] and second["body"] == got["bodies"]["2"] != first["body"]


def test_old_spellings_warn_and_run(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = str(tmp_path / "repo")
    assert call(capsys, "repo", "init", repo)[0] == 0
    assert call(capsys, "labelmap", "create", repo, "seg", str(base), "--block", "8")[0] == 0
    assert run(["merge", repo, "main", "seg", "10", "30"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "merged body 30 into 10"
    assert err.strip() == "shardscope merge: deprecated spelling, use 'shardscope body merge' (same arguments)"
    assert run(["body", "merge", repo, "main", "seg", "10", "40"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("kind", "content"), [
    ("voxels", [[1, 2], [3, 4], [5, 6]]),      # six numbers are not two voxels
    ("voxels", [[2, 13.7, 2]]),                # 13.7 is not voxel 13
    ("seeds", {"1": [[1, 2], [3, 4], [5, 6]]}),
    ("seeds", {"1": [[4, 8, 5.5]]}),
    ("seeds", {"1": {"z": 1}}),                # was a TypeError escaping the CLI
    ("seeds", {"one": [[4, 8, 5]]}),
    ("seeds", {"1": [[2**70, 8, 5]]}),         # was an OverflowError
])
def test_voxel_files_are_taken_as_typed_or_refused(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   kind: str, content: object) -> None:
    """Voxel and seed files are never reshaped or rounded into coordinates the user did not type."""
    from napari_shardscope.core.errors import ArgumentError, exit_code_for

    repo = str(tmp_path / "repo")
    assert call(capsys, "repo", "init", repo)[0] == 0
    assert call(capsys, "labelmap", "create", repo, "seg", str(base), "--block", "8")[0] == 0
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(content))
    verb = (["body", "split-supervoxel", repo, "main", "seg", "30"] if kind == "voxels"
            else ["body", "split", repo, "main", "seg", "10"])
    code, text = call(capsys, *verb, str(path))
    assert code == exit_code_for(ArgumentError("")) and str(path) in str(text)
