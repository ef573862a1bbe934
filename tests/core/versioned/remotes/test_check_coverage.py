"""``remote check`` reads every object a clone or a fetch reads, and faults what they would refuse.

Found by the hostile-remotes campaign (2026-12-05, seed 5400026): a flipped byte in the root version's key
listing made every lazy clone fail (``CorruptObjectError``, the listing does not match its hash) while
``remote check`` said every object the refs reach was present and verified: it walked node, data and
unversioned objects, but neither key listings (what a lazy clone and fetch read instead of the data) nor the
history packs (what a fetch walks). A user checking a remote before cloning was told it was sound.

A key listing that points elsewhere than its data (written by another writer, or a bug) passes every hash:
a lazy clone, which slices data objects at the listed ranges, used to read other bytes than an eager one,
silently, and ``remote check`` called the remote sound. Now check compares every listed range with the data,
and a lazy read checks the record head before a range names the same key and length.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.pack import decode_node, object_key
from napari_shardscope.core.versioned.remotes.store import RemoteStore
from tests.core.versioned.remotes.helpers import pushed_with_a_merge, shift_head_listing


def _check(url: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", "remote", "check", str(url)],
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def sound_remote(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``a`` (a repository with one merge) and ``remote`` (where it was pushed), which
    ``remote check`` calls sound: built and checked once, copied by each test (each damages its copy)."""
    root = tmp_path_factory.mktemp("sound")
    pushed_with_a_merge(root / "a", base, root / "remote").close()
    sound = _check(root / "remote")
    assert sound.returncode == 0 and "present and verified" in sound.stdout, sound.stdout + sound.stderr
    return root


def _pushed(tmp_path: Path, sound_remote: Path) -> Path:
    """A copy of the sound remote (and of the repository ``a`` pushed to it) in ``tmp_path``; the remote's path."""
    for name in ("a", "remote"):
        shutil.copytree(sound_remote / name, tmp_path / name)
    return tmp_path / "remote"


def _values(path: Path) -> dict[tuple[str, bytes], bytes | None]:
    repo = open_repository(path)
    try:
        with repo.read("main") as view:
            return {(name, k): view.get(name, k) for name in ("seg", "notes") for k in view.keys(name)}
    finally:
        repo.close()


def _flip_last_byte(remote: Path, name: str) -> None:
    path = remote / object_key(name)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("what", ["root key listing", "history pack"])
def test_remote_check_faults_an_object_that_clone_refuses(sound_remote: Path, tmp_path: Path, what: str) -> None:
    remote = _pushed(tmp_path, sound_remote)
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


def test_remote_check_faults_a_key_listing_that_points_elsewhere_than_the_data(sound_remote: Path,
                                                                              tmp_path: Path) -> None:
    """The head's listing re-written one byte off after its first value (hash, node object and refs made
    consistent): the eager clone reads what was pushed, the lazy one refuses the first shifted range it reads,
    and check names the version, the listing and the ranges."""
    remote = _pushed(tmp_path, sound_remote)
    pushed = _values(tmp_path / "a")
    version = shift_head_listing(str(remote))
    R.clone(str(remote), tmp_path / "eager", prefetch=True)
    R.clone(str(remote), tmp_path / "lazy")
    assert _values(tmp_path / "eager") == pushed
    with pytest.raises(CorruptObjectError, match=r"key listing puts the value of (key|log record) .* at bytes"):
        _values(tmp_path / "lazy")
    checked = _check(remote)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"version {version}: key listing" in checked.stdout and "disagrees with its data objects" in checked.stdout
    assert "is listed at data object 0 bytes" in checked.stdout and "more)" in checked.stdout, checked.stdout
