"""``remote check`` reads every object a clone or a fetch reads, and faults what they would refuse.

Found by the hostile-remotes campaign (2026-12-05, seed 5400026): a flipped byte in the root version's key
listing made every lazy clone fail (``CorruptObjectError``, the listing does not match its hash) while
``remote check`` said every object the refs reach was present and verified: it walked node, data and
unversioned objects, but neither key listings (what a lazy clone and fetch read instead of the data) nor the
history packs (what a fetch walks). A user checking a remote before cloning was told it was sound.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.pack import decode_node, object_key
from napari_shardscope.core.versioned.remotes.store import RemoteStore
from tests.core.versioned.remotes.helpers import edit, make_repo


def _check(url: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", "remote", "check", str(url)],
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def _flip_last_byte(remote: Path, name: str) -> None:
    path = remote / object_key(name)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("what", ["root key listing", "history pack"])
def test_remote_check_faults_an_object_that_clone_refuses(base: Path, tmp_path: Path, what: str) -> None:
    remote = tmp_path / "remote"
    repo = make_repo(tmp_path / "a", base)
    edit(repo, "merge", np.random.default_rng(5))
    R.add_remote(repo, "origin", str(remote))
    R.push(repo)
    repo.close()
    sound = _check(remote)
    assert sound.returncode == 0 and "present and verified" in sound.stdout, sound.stdout + sound.stderr
    store = RemoteStore(str(remote))
    refs, _ = store.require_refs()
    if what == "root key listing":
        keys = decode_node(refs.root.object, store.get_object(refs.root.object)).keys
        assert keys is not None  # pushed by this library: every version has a listing
        damaged = [keys]
    else:
        damaged = [p.name for p in refs.packs]
        assert damaged
    for name in damaged:
        _flip_last_byte(remote, name)
    with pytest.raises(CorruptObjectError, match="does not match its hash"):
        R.clone(str(remote), tmp_path / "b")
    checked = _check(remote)
    assert checked.returncode == 1, checked.stdout + checked.stderr  # check failed: problems listed
    assert damaged[0] in checked.stdout and "does not match its hash" in checked.stdout, checked.stdout
