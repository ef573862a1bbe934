"""Where a lazy clone's hollow versions get their values: the remote's data objects, kept locally once read.

Registered with the versioned store (:func:`~napari_shardscope.core.versioned.hollow.use_object_source`)
when the remotes package is imported. An object is downloaded the first time a value in it is read,
verified against its name (the SHA-256 the version's node record gives), and written to
``<repository>/remote-objects/ab/cdef…`` (temp + rename); later reads — in this process or another,
online or not — use that copy, checked against its name again, so a damaged copy is downloaded anew
rather than believed. Offline, an object never read is a :class:`~..errors.NotLocalError` naming
the remote and the object's key, after the byte store's bounded retries (never a hang).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.bytestore import write_file_atomic
from napari_shardscope.core.errors import CorruptDataError, ShardscopeError
from napari_shardscope.core.versioned import keys as K
from napari_shardscope.core.versioned.errors import NotLocalError
from napari_shardscope.core.versioned.hollow import is_log_key, use_object_source
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.pack import data_payload, object_key, object_name, value_is_at
from napari_shardscope.core.versioned.remotes.store import RemoteStore

CACHE_DIR = "remote-objects"
#: Data objects downloaded together (each up to 32 MiB of records).
OBJECTS_IN_FLIGHT = 8


def cache_path(repo_path: Path, name: str) -> Path:
    """Where the local copy of object ``name`` lives."""
    return repo_path / CACHE_DIR / name[:2] / name[2:]


class RemoteObjects:
    """The data objects of one remote of one repository (:class:`~..hollow.ObjectSource`)."""

    def __init__(self, repo: Any, remote: str) -> None:
        self.remote = remote
        self.url = C.remote_url(repo, remote)
        self.anonymous = C.is_anonymous(repo, remote)
        self.directory = Path(repo.path) / CACHE_DIR if repo.path is not None else None
        self._store: RemoteStore | None = None

    def _local(self, name: str) -> bytes | None:
        if self.directory is None:
            return None
        path = cache_path(self.directory.parent, name)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if object_name(data) != name:  # damaged on disk: download it again rather than believe it
            path.unlink(missing_ok=True)
            return None
        return data

    def payloads(self, names: Sequence[str]) -> list[bytes]:
        got: dict[str, bytes] = {}
        missing: list[str] = []
        for name in dict.fromkeys(names):
            data = self._local(name)
            if data is None:
                missing.append(name)
            else:
                got[name] = data
        if missing:
            try:
                if self._store is None:
                    self._store = RemoteStore(self.url, anonymous=self.anonymous)
                downloaded = self._store.get_objects(missing, "version data", in_flight=OBJECTS_IN_FLIGHT)
            except CorruptDataError:
                raise  # the remote answered with damage: that is not "offline"
            except ShardscopeError as exc:
                key = object_key(missing[0])
                raise NotLocalError(
                    f"version data {missing[0]} is not in this lazy clone and remote {self.remote!r} could not be "
                    f"read ({exc}); go online, or clone with --prefetch to work offline",
                    remote=self.remote, key=key, path=f"{self.url.rstrip('/')}/{key}") from exc
            for name, data in zip(missing, downloaded, strict=True):
                if self.directory is not None:
                    write_file_atomic(cache_path(self.directory.parent, name), data)
                got[name] = data
        return [data_payload(n, got[n]) for n in names]

    def check_value(self, name: str, payload: bytes, offset: int, length: int, key: bytes) -> None:
        if is_log_key(key):
            seq = K.unpack_u64(key[-8:])
            ok, what = value_is_at(payload, offset, length, seq=seq), f"log record {seq}"
        else:
            tkey = K.decode_data_key(key).tkey
            ok, what = value_is_at(payload, offset, length, tkey=tkey), f"key {tkey!r}"
        if not ok:
            raise CorruptObjectError(
                f"object {name}: the version's key listing puts the value of {what} at bytes "
                f"{offset}…{offset + length}, where the data object holds no such record's value (the listing "
                f"disagrees with the data: `shardscope remote check` names every such range; clone with "
                f"--prefetch to read the data objects themselves)")


use_object_source(RemoteObjects)
