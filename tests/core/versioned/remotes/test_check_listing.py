"""A key listing that points elsewhere than its data: ``remote check`` names it, a lazy read refuses it.

A lazy clone reads a value by slicing a data object at the range the version's key listing gives; an eager
clone reads the data objects themselves. A listing that points elsewhere (written by another writer, or a
bug) passes every hash: the lazy clone used to read other bytes than the eager one, silently, and ``remote
check`` called the remote sound. Here one version's listing is re-written with every range after the first
value shifted by one byte (its hash, its node object and the refs made consistent, as a writer would make
them): the eager clone reads the pushed values, the lazy one refuses the first shifted range it reads
(the record head before a range must name the same key and length), and ``remote check`` names the version,
the listing and the ranges.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from tests.core.versioned.remotes.helpers import edit, make_repo, shift_head_listing


def _check(url: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", "remote", "check", str(url)],
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def _values(path: Path) -> dict[tuple[str, bytes], bytes | None]:
    repo = open_repository(path)
    try:
        with repo.read("main") as view:
            return {(name, k): view.get(name, k) for name in ("seg", "notes") for k in view.keys(name)}
    finally:
        repo.close()


def test_remote_check_faults_a_key_listing_that_points_elsewhere_than_the_data(base: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    repo = make_repo(tmp_path / "a", base)
    edit(repo, "merge", np.random.default_rng(5))
    R.add_remote(repo, "origin", str(remote))
    R.push(repo)
    repo.close()
    pushed = _values(tmp_path / "a")
    sound = _check(remote)
    assert sound.returncode == 0 and "present and verified" in sound.stdout, sound.stdout + sound.stderr

    version = shift_head_listing(str(remote))
    R.clone(str(remote), tmp_path / "eager", prefetch=True)
    R.clone(str(remote), tmp_path / "lazy")
    assert _values(tmp_path / "eager") == pushed
    # read through the listing, a range whose record head names another key or length is refused
    with pytest.raises(CorruptObjectError, match=r"key listing puts the value of (key|log record) .* at bytes"):
        _values(tmp_path / "lazy")
    checked = _check(remote)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"version {version}: key listing" in checked.stdout and "disagrees with its data objects" in checked.stdout
    assert "is listed at data object 0 bytes" in checked.stdout and "more)" in checked.stdout, checked.stdout
