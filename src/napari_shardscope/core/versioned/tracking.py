"""Remote-tracking names: ``<remote>/<branch>`` names the head last fetched from (or pushed to) a remote.

As in git, ``origin/main`` is not a local branch: it is a read-only name for what the repository
last saw of ``main`` on the remote ``origin``, kept in ``remote-state/origin.json`` beside the
engine's files (written by :mod:`~napari_shardscope.core.versioned.remotes.config`). Every place a
version is named by text resolves it through :meth:`Repository.version`, which asks this module
first, so ``review REPO origin/main``, ``diff``, ``log``, ``export --version`` and the panels all
see the same head that ``pull`` merges. For the same reason a local branch may not be created with
a name that starts with a configured remote's name and ``/`` (:func:`check_not_tracking_name`).

This module sits below the repository (it only reads two small JSON files), so the repository can
resolve names without importing the remotes package that writes them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from napari_shardscope.core.errors import ArgumentError, MetadataError
from napari_shardscope.core.json_document import MAX_JSON_BYTES, load_json
from napari_shardscope.core.versioned.errors import StoreCorruptError, UnknownVersionError

CONFIG_FILE = "remotes.json"
STATE_DIR = "remote-state"


def read_json_file(path: Path, *, remedy: str = "") -> dict[str, Any]:
    """A small JSON state file of the repository as a dict (empty when absent).

    A damaged file is a :class:`StoreCorruptError` naming it (and ``remedy``, what the user can do),
    never "absent": acting as if it were missing would fail later, far from the cause. Parsed by the
    one JSON loader (size and depth limited), since a cloned repository's files came from a remote.
    """
    try:
        raw = _read_small_file(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreCorruptError(f"{path}: unreadable ({exc}){remedy}") from exc
    if raw is None:
        raise StoreCorruptError(f"{path}: not a regular file of at most {MAX_JSON_BYTES} bytes{remedy}")
    try:
        data = load_json(raw, key=str(path))
    except MetadataError as exc:
        raise StoreCorruptError(f"{exc}{remedy}") from exc
    if not isinstance(data, dict):
        raise StoreCorruptError(f"{path}: not a JSON object{remedy}")
    return data


def _read_small_file(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most :data:`MAX_JSON_BYTES` (else None),
    sized before a byte is read (a FIFO would block a plain read; a sparse terabyte would exhaust memory)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_JSON_BYTES:
            return None
        data = os.pread(fd, min(st.st_size, MAX_JSON_BYTES) + 1, 0)  # +1: a file grown since fstat is seen
    finally:
        os.close(fd)
    return None if len(data) > MAX_JSON_BYTES else data


def state_path(directory: Path, remote: str) -> Path:
    """Where the tracking state of ``remote`` lives (``remote`` is a checked remote name)."""
    return directory / STATE_DIR / f"{remote}.json"


def remote_names(directory: Path | None) -> list[str]:
    """The remotes configured in the repository at ``directory`` (none for an in-memory repository)."""
    if directory is None:
        return []
    remotes = read_json_file(directory / CONFIG_FILE).get("remotes", {})
    return sorted(str(n) for n in remotes) if isinstance(remotes, dict) else []


def split_tracking_name(directory: Path | None, name: str) -> tuple[str, str] | None:
    """``(remote, branch)`` when ``name`` is ``<configured remote>/<branch>``, else None.

    Remote names hold no ``/``, so the first ``/`` separates them; a name whose first part is not
    a configured remote is an ordinary branch name (``alice/fix``).
    """
    if "/" not in name:
        return None
    remote, _, branch = name.partition("/")
    if not branch or remote not in remote_names(directory):
        return None
    return remote, branch


def tracking_head(directory: Path, remote: str, branch: str) -> str | None:
    """The UUID of ``branch``'s head on ``remote`` as last fetched or pushed here (None: never seen)."""
    doc = read_json_file(state_path(directory, remote),
                         remedy=f"; delete it and fetch {remote} again")
    ref = doc.get("tracking", {}).get(branch) if isinstance(doc.get("tracking"), dict) else None
    if ref is None:
        return None
    node = ref.get("node") if isinstance(ref, dict) else None
    if not isinstance(node, str):
        raise StoreCorruptError(f"{state_path(directory, remote)}: unreadable remote-tracking head of {branch!r}; "
                                f"delete it and fetch {remote} again")
    return node


def tracking_names(directory: Path | None) -> list[str]:
    """Every remote-tracking name of the repository (``origin/main`` …), as last fetched or pushed."""
    names: list[str] = []
    for remote in remote_names(directory):
        assert directory is not None  # remote_names is empty without one
        tracking = read_json_file(state_path(directory, remote)).get("tracking")
        names += [f"{remote}/{branch}" for branch in sorted(tracking)] if isinstance(tracking, dict) else []
    return names


def resolve_tracking_name(directory: Path | None, name: str) -> str | None:
    """The version UUID ``name`` names when it is a remote-tracking name (None: it is not one).

    Raises :class:`UnknownVersionError` when ``name`` is ``<remote>/<branch>`` for a configured
    remote that has no such branch as last fetched: it never falls back to a local branch.
    """
    parts = split_tracking_name(directory, name)
    if parts is None or directory is None:
        return None
    remote, branch = parts
    node = tracking_head(directory, remote, branch)
    if node is None:
        raise UnknownVersionError(f"{name!r}: no branch {branch!r} of remote {remote!r} as last fetched "
                                  f"(`shardscope fetch REPO {remote}` first)")
    return node


def check_not_tracking_name(directory: Path | None, name: str) -> None:
    """Refuse a new local branch named like a remote-tracking head (``origin/…`` while ``origin`` is a remote)."""
    parts = split_tracking_name(directory, name)
    if parts is not None:
        raise ArgumentError(f"bad branch name {name!r}: names starting with {parts[0] + '/'!r} are the "
                            f"remote-tracking heads of remote {parts[0]!r} (what a fetch last saw); "
                            f"choose another name")
