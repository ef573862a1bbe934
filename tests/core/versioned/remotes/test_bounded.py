"""A remote cannot make a clone or a fetch allocate what it likes (issue 27, items 2, 5 and 6a).

* A huge ``refs.json``, ``ids.json`` or object — a 5 GiB sparse file on a directory remote costs
  nothing on disk — is refused typed before its bytes are read (it aborted the process allocating
  5 GiB). On S3 (moto) a lowered limit proves the read stops at the limit: the server sends
  a byte of the value, not the value.
* A zlib bomb with a valid hash is refused within a bound known before inflating (a few times its
  stored size, not 256 MiB per object), and a fetch that meets it adopts nothing: the repository,
  its branches and its remote-tracking state are as they were.
* Messages join the remote's URL and the key with one ``/`` (``…/remote/refs.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tensorstore as ts

from napari_shardscope.core.bytestore import parse_url
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes import pack as P
from napari_shardscope.core.versioned.remotes import store as S
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.store import REFS_KEY, NodeRef, RemoteStore
from tests.cli_batch import run_commands
from tests.core.versioned.remotes.helpers import make_repo
from tests.moto_s3 import SERVED

HUGE = 5 << 30  # a sparse file: no disk, no time


def _peak(fn: Callable[[], Any]) -> int:
    """The peak of Python allocations while ``fn`` runs (it must raise a CorruptObjectError)."""
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObjectError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _pushed(tmp_path: Path, base: Path, url: str) -> None:
    repo = make_repo(tmp_path / "a", base)
    R.add_remote(repo, "origin", url)
    R.push(repo)
    repo.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *args], capture_output=True, text=True,
                          timeout=240, stdin=subprocess.DEVNULL)


HUGE_KEYS = ("refs.json", "ids.json", "object")


@pytest.fixture(scope="module")
def huge_remotes(base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[Any]]]:
    """Per key of :data:`HUGE_KEYS`, a directory remote whose file (or every object) is a 5 GiB sparse file, and
    what ``clone --prefetch`` and ``remote check`` of it did: the six command lines ran in one child process
    (tests/cli_batch.py, real pipes), a start-up instead of three; each command line reads only its own remote.
    """
    made: dict[str, Path] = {}
    for key in HUGE_KEYS:
        work = tmp_path_factory.mktemp(f"huge-{key}")
        remote = work / "remote"
        _pushed(work, base, str(remote))
        # every object (history packs, nodes, data): which one a clone reads first depends on the hashes, and a
        # node read from a pack is never read on its own; sparse files cost no disk
        targets = [p for p in sorted((remote / "objects").rglob("*")) if p.is_file()] if key == "object" \
            else [remote / key]
        if key == "ids.json":
            RemoteStore(str(remote)).reserve_ids("test", 10, 0, "w")  # a counter, as a clone that cleaved makes
        for target in targets:
            os.truncate(target, HUGE)
        made[key] = remote
    done = run_commands([cmd for remote in made.values()
                         for cmd in (["clone", str(remote), str(remote.parent / "c"), "--prefetch"],
                                     ["remote", "check", str(remote)])], timeout=240 * 2 * len(made))
    return {key: (remote, done[2 * i:2 * i + 2]) for i, (key, remote) in enumerate(made.items())}


@pytest.mark.parametrize("key", HUGE_KEYS)
def test_huge_remote_files_are_refused_before_reading(huge_remotes: dict[str, tuple[Path, list[Any]]],
                                                      tmp_path: Path, key: str) -> None:
    remote, (done, checked) = huge_remotes[key]
    # --prefetch: every object is read now (a lazy clone reads a data object only when a value in it is read)
    peak = _peak(lambda: R.clone(str(remote), tmp_path / "b", prefetch=True))
    assert peak < 16 << 20, peak  # refused from its size: nothing near 5 GiB (nor the limit) was read
    assert not (tmp_path / "b").exists()
    # the same through the CLI: exit 4 (corrupt data), one line naming the file with its '/'; and remote check
    assert done.returncode == 4, done.stderr
    assert not (remote.parent / "c").exists()
    where = f"{remote}/{key}" if key != "object" else f"{remote}/objects/"
    assert where in done.stderr and "remoterefs" not in done.stderr, done.stderr
    assert checked.returncode in (1, 4) and str(remote) in checked.stdout + checked.stderr


def test_messages_join_the_remote_and_the_key_with_a_slash(base: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    _pushed(tmp_path, base, str(remote))
    (remote / REFS_KEY).write_text("{not json")
    with pytest.raises(CorruptObjectError) as caught:
        R.clone(str(remote), tmp_path / "b")
    assert f"{remote}/{REFS_KEY}" in str(caught.value), caught.value
    (remote / "ids.json").write_text("[1]")
    with pytest.raises(CorruptObjectError, match=f"{remote}/ids.json"):
        RemoteStore(str(remote)).counter_names()


@pytest.mark.parametrize("key", ["refs.json", "ids.json", "object"])
def test_a_large_value_on_s3_is_not_downloaded(base: Path, tmp_path: Path, s3: Any,
                                               monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """With the limits lowered to 1 MiB, a larger value on S3 is refused having been sent less than the limit."""
    url = s3.url("team/repo")
    _pushed(tmp_path, base, url)
    monkeypatch.setattr(S, "MAX_REFS_BYTES", 1 << 20)
    monkeypatch.setattr(S, "MAX_OBJECT_BYTES", 1 << 20)
    kv = ts.KvStore.open(parse_url(url.rstrip("/") + "/").kvstore).result()
    if key == "object":  # every object: which one a clone reads first depends on the hashes (and on packs)
        big = b" " * (4 << 20)
        names = [n for n in (k.decode() if isinstance(k, bytes) else k for k in kv.list().result())
                 if n.startswith("objects/")]
        for name in names:
            kv.write(name, big).result()
    else:
        big = b" " * (48 << 20)
        kv.write(key, big).result()
    del big
    before = SERVED.bytes
    with pytest.raises(CorruptObjectError, match="more than 1048576 bytes"):
        R.clone(url, tmp_path / "b", prefetch=True)  # every object read now, not on first use
    assert SERVED.bytes - before < 1 << 20, SERVED.bytes - before  # not the large value, nor the limit


# -- zlib bombs ----------------------------------------------------------------------------------

BOMB_BYTES = 200 << 20  # inflated: under the 256 MiB object cap, so only the ratio bound stops it early


def _bomb(magic: bytes) -> bytes:
    """``magic`` + a zlib stream of BOMB_BYTES zeros, made without holding them (about 200 KB)."""
    packer = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    parts = [packer.compress(zeros) for _ in range(BOMB_BYTES >> 20)]
    return magic + b"".join(parts) + packer.flush()


def _swap_main(url: str, node: bytes, uuid: str) -> None:
    """Point the remote's ``main`` at a crafted node object (stored under its hash)."""
    store = RemoteStore(url)
    name = store.put_object(node)
    refs, gen = store.require_refs()
    assert store.swap_refs(refs.bumped("attacker", branches={**refs.branches, "main": NodeRef(uuid, name)}), gen)


def _node(parent: NodeRef, data: list[str], entries: int) -> bytes:
    header = {"uuid": "f" * 32, "parents": [[parent.node, parent.object]], "branch": "main", "message": "bomb",
              "created": 1.0, "committed": 2.0, "notes": [], "instances": ["seg"], "data": data,
              "entries": entries, "logs": 0}
    return P.NODE_MAGIC + zlib.compress(json.dumps(header).encode())


@pytest.mark.parametrize("where", ["data", "node"])
def test_a_zlib_bomb_is_refused_within_its_bound_and_adopts_nothing(base: Path, tmp_path: Path,
                                                                    where: str) -> None:
    remote = str(tmp_path / "remote")
    _pushed(tmp_path, base, remote)
    path_b, _ = R.clone(remote, tmp_path / "b")
    store = RemoteStore(remote)
    refs, _ = store.require_refs()
    main = refs.branches["main"]
    # a good version first, then the bomb on top of it: the fetch must adopt neither
    with open_repository(tmp_path / "a") as a:
        v = a.new_version(a.head("main"))
        with a.write(v) as w:
            w.put(a.instance("notes"), b"about", b"a good edit before the bomb")
        a.commit(v, "good")
        R.push(a)
    good = RemoteStore(remote).require_refs()[0].branches["main"]
    if where == "data":
        bomb = RemoteStore(remote).put_object(_bomb(P.DATA_MAGIC))
        _swap_main(remote, _node(good, [bomb], 1), "f" * 32)
    else:
        _swap_main(remote, _bomb(P.NODE_MAGIC), "f" * 32)
    with open_repository(path_b) as b:
        before = ([v.uuid for v in b.versions()], b.branches(), R.load_state(b, "origin").to_json())
        peak = _peak(lambda: R.fetch(b, "origin"))
        assert peak < 96 << 20, peak  # the bound (100x ~200 KB, twice at most), not the 200 MiB it inflates to
        after = ([v.uuid for v in b.versions()], b.branches(), R.load_state(b, "origin").to_json())
        assert after == before  # nothing adopted, tracking unchanged: not even the good version
        assert not any(p.name.endswith(".incoming") for p in (path_b / "remote-state").iterdir())
        assert main.node in before[0]
    done = _cli("clone", remote, str(tmp_path / "c"))
    assert done.returncode == 4 and "object" in done.stderr, done.stderr
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".c.clone-*"))


def test_a_highly_compressible_object_is_stored_so_readers_accept_it() -> None:
    """An honest object that would pass the ratio bound (16 MiB of zeros) is framed uncompressed."""
    from napari_shardscope.core.versioned.node import NodeContent, NodeEntry

    node = NodeContent(uuid="a" * 32, parents=(), branch="main", message="", created=1.0, committed=2.0,
                       entries=(NodeEntry("kv", b"k", bytes(16 << 20)),), logs=(), notes=())
    (data,), instances = P.encode_data(node)
    assert len(data) > 16 << 20  # stored, not deflated
    records = list(P.decode_data(P.object_name(data), data, instances))
    assert records == [NodeEntry("kv", b"k", bytes(16 << 20))]
