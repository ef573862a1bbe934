"""A fetch and a push of one repository at once must not lose what either records of the remote.

Both load the remote state (``remote-state/<name>.json``), work, and save it. The test forces the
interleaving that lost a push's record: the fetch has loaded the state and is adopting a version
(a hook on the repository's real engine, after the adoption commits) when a push of another branch
runs in a second thread; the fetch then saves what it loaded before. With the state held from load
to save, the push waits for the fetch instead (the test sees it blocked there, then lets the fetch go
on). Either way, afterwards the pushed branch is tracked and ``status`` does not call it ahead.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.keyvalue import open_keyvalue
from napari_shardscope.core.versioned.remotes import config as C
from tests.core.versioned.engine_hooks import HookedEngine


def waiting_for_the_state(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside :func:`holding_state`, waiting for the lock another holds."""
    held = getattr(C, "holding_state", None)  # (absent before the fix: the push then never waits)
    code = held.__wrapped__.__code__ if held is not None else None
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def commit_on(repo: Repository, parent: str, branch: str | None, value: bytes) -> str:
    v = repo.new_version(parent, branch)
    open_keyvalue(repo, "kv").put(v, "k", value)
    return repo.commit(v, value.decode()).uuid


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_a_push_during_a_fetch_stays_recorded(tmp_path: Path, engine: str) -> None:
    url = str(tmp_path / "remote")
    a = create_repository(tmp_path / "a", engine=engine)
    open_keyvalue(a, "kv", create=True)
    a.commit(a.root, "base")
    main = commit_on(a, a.root.uuid, None, b"main 1")
    alt = commit_on(a, a.root.uuid, "alt", b"alt 1")
    R.add_remote(a, "origin", url)
    R.push(a, "origin", "main")
    b = open_repository(R.clone(url, tmp_path / "b")[0])
    theirs = commit_on(b, main, None, b"main 2")  # the remote's main moves on: a's fetch adopts it
    R.push(b, "origin", "main")
    b.close()

    pushed: list[R.PushResult] = []
    errors: list[BaseException] = []

    def push_alt() -> None:
        try:
            pushed.append(R.push(a, "origin", "alt"))
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    pusher = threading.Thread(target=push_alt)

    def meanwhile() -> None:  # in the fetch, its state loaded, the adopted version committed
        pusher.start()
        while pusher.is_alive() and not waiting_for_the_state(pusher):
            pusher.join(0.005)

    hooked = HookedEngine(a._engine)
    a._engine = hooked  # the real engine, one hook
    hooked.after_write = meanwhile
    fetched = R.fetch(a, "origin")
    pusher.join(60)
    assert not pusher.is_alive() and not errors, errors
    a._engine = hooked.engine
    assert fetched.adopted == (theirs,) and pushed[0].head == alt and pushed[0].sent == (alt,)
    state = C.load_state(a, "origin")
    assert state.tracking["alt"].node == alt and state.tracking["main"].node == theirs
    assert alt in state.objects and theirs in state.objects
    status = {s.branch: s for s in R.status(a, "origin")}
    assert status["alt"].ahead == 0 and status["alt"].remote == alt
    again = R.push(a, "origin", "alt")
    assert again.up_to_date and again.transfer.objects_sent == 0
    assert a.verify() == []
    a.close()
