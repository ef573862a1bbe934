"""``shardscope annotation import`` as a user runs it: a subprocess, its ``--json`` read from the pipe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from napari_shardscope.core.annotation import open_annotation_instance
from napari_shardscope.core.cli import run
from napari_shardscope.core.versioned import open_repository
from tests.core.cli.test_labelmap import dumbbell
from tests.core.labelmap.volumes import write_precomputed


def shardscope(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *argv], capture_output=True, text=True,
                          timeout=300, check=False)


def test_annotation_import_of_a_neuprint_csv(tmp_path: Path) -> None:
    write_precomputed(tmp_path / "seg", dumbbell(), ((1, 1, 1), (1, 2, 2)))
    repo = str(tmp_path / "repo")
    assert run(["repo", "init", repo]) == 0
    assert run(["labelmap", "create", repo, "seg", str(tmp_path / "seg"), "--block", "8", "--quiet"]) == 0
    (tmp_path / "syn.csv").write_text("x_pre,y_pre,z_pre,x_post,y_post,z_post,confidence_pre,confidence_post\n"
                                      "5,14,4,25,8,4,0.9,0.8\n2,13,2,3,13,2,0.5,0.4\n")
    done = shardscope("annotation", "import", repo, "syn", str(tmp_path / "syn.csv"), "--labelmap", "seg", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["annotations"] == 4 and info["max_id"] == 4
    assert [p["name"] for p in info["properties"]] == ["confidence", "confidence"]
    with open_repository(repo) as r:
        v = open_annotation_instance(r, "syn").at("main")
        pre = v.get(1)
        assert pre.kind == "pre" and pre.point == (4, 14, 5) and pre.properties == {"confidence": 0.9}
        assert v.get(2).properties == {"confidence": 0.8} and v.get(2).relationships[0].to == 1
    # text output, and a hostile table: exit 4 (bad data) with the file, column and row named
    (tmp_path / "bad.csv").write_text("x_pre,y_pre,z_pre,x_post,y_post,z_post\n5,14,4,25,8,4\n5,14,400,1,1,1\n")
    bad = shardscope("annotation", "import", repo, "bad", str(tmp_path / "bad.csv"), "--labelmap", "seg")
    assert bad.returncode == 4
    assert "bad.csv" in bad.stderr and "row 1" in bad.stderr and "outside the labelmap" in bad.stderr
    named = shardscope("annotation", "import", repo, "named", str(tmp_path / "syn.csv"), "--labelmap", "seg",
                       "--pre", "x_pre,y_pre,z_pre", "--properties", "confidence_post")
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith("imported 2 annotations") and "properties: confidence_post" in named.stdout
