"""A clone killed with SIGKILL halfway leaves only its hidden ``.DEST.clone-*`` directory; the next
clone to the same DEST removes it and finishes. A clone still running is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.cloning import remove_stale_clones
from tests.core.versioned.remotes.helpers import edit, make_repo

ROOT = Path(__file__).resolve().parents[4]

#: clones, and at its first progress report once the hidden directory exists says so and waits to be killed
STALL = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from napari_shardscope.core.versioned import remotes as R
    dest = Path(sys.argv[2])
    def progress(transfer, what):
        if any((w / "clone-owner").exists() for w in dest.parent.glob(f".{dest.name}.clone-*")):
            print("mid", flush=True)
            time.sleep(600)
    R.clone(sys.argv[1], sys.argv[2], progress=progress)
""")


def test_a_killed_clone_is_cleaned_by_the_next(base: Path, tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(1))
    url = (tmp_path / "remote").as_uri()
    R.add_remote(a, "origin", url)
    R.push(a, "origin", "main")
    dest = tmp_path / "b"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    p = subprocess.Popen([sys.executable, "-c", STALL, url, str(dest)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()  # blocks until the clone is mid-way (or the process ends)
        assert line.strip() == "mid", p.communicate(timeout=60)[1]
        left = list(tmp_path.glob(".b.clone-*"))
        assert len(left) == 1 and not dest.exists()
        assert remove_stale_clones(dest) == []  # its builder still runs: left alone
        p.kill()
    finally:
        p.kill()
        p.communicate(timeout=60)
    assert left[0].exists()  # what a killed clone leaves behind
    path, _ = R.clone(url, dest)
    assert not left[0].exists() and list(tmp_path.glob(".b.clone-*")) == []
    b = open_repository(path)
    assert {v.uuid for v in b.versions()} == {v.uuid for v in a.versions()} and b.verify() == []
    assert not (path / "clone-owner").exists()
    a.close()
    b.close()
