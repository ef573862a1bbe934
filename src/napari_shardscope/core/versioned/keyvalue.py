"""The ``keyvalue`` instance type: string keys to bytes, at any version (DVID's keyvalue).

The simplest user of the versioned store — proofreaders' notes, bookmarks, assignments — and the
test bed for the store itself: everything it does is a thin mapping of string keys to the store's
byte keys, so any bug it shows is a bug of the store. Keys are UTF-8 encoded, which preserves
code-point order, so listings come out sorted as Python sorts strings.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UnknownInstanceError
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository

TYPE_NAME = "keyvalue"


def encode_key(key: str) -> bytes:
    """A keyvalue key as store bytes (non-empty UTF-8)."""
    if not isinstance(key, str) or not key:
        raise ArgumentError(f"keyvalue keys must be non-empty strings, got {key!r}")
    return key.encode("utf-8")


def decode_key(raw: bytes) -> str:
    """Inverse of :func:`encode_key`."""
    return raw.decode("utf-8")


class KeyValue:
    """One ``keyvalue`` instance of a repository; every call names the version it reads or writes.

    Parameters
    ----------
    repo
        The repository.
    instance
        The instance (must be of type ``keyvalue``).
    """

    def __init__(self, repo: Repository, instance: Instance) -> None:
        if instance.type != TYPE_NAME:
            raise ArgumentError(f"instance {instance.name!r} is a {instance.type}, not a {TYPE_NAME}")
        self.repo = repo
        self.instance = instance

    @property
    def name(self) -> str:
        """The instance name."""
        return self.instance.name

    def get(self, version: str | Version, key: str) -> bytes | None:
        """The value of ``key`` at ``version`` (None when absent)."""
        with self.repo.read(version) as view:
            return view.get(self.instance, encode_key(key))

    def put(self, version: str | Version, key: str, value: bytes) -> None:
        """Store ``value`` at an open ``version`` (one transaction)."""
        with self.repo.write(version) as w:
            w.put(self.instance, encode_key(key), value)

    def put_many(self, version: str | Version, items: Mapping[str, bytes]) -> int:
        """Store several keys in one transaction; returns how many."""
        with self.repo.write(version) as w:
            return w.put_many(self.instance, [(encode_key(k), v) for k, v in items.items()])

    def delete(self, version: str | Version, key: str) -> bool:
        """Delete ``key`` at an open ``version``; True when it had a value."""
        with self.repo.write(version) as w:
            return w.delete(self.instance, encode_key(key))

    def keys(self, version: str | Version, prefix: str = "") -> list[str]:
        """Keys at ``version`` starting with ``prefix``, sorted."""
        with self.repo.read(version) as view:
            return [decode_key(k) for k in view.keys(self.instance, prefix=prefix.encode("utf-8"))]

    def items(self, version: str | Version, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """``(key, value)`` pairs at ``version`` starting with ``prefix``, sorted (one snapshot)."""
        with self.repo.read(version) as view:
            pairs = list(view.scan(self.instance, prefix=prefix.encode("utf-8")))
        return ((decode_key(k), v) for k, v in pairs)


def open_keyvalue(
    repo: Repository, name: str, *, create: bool = False, write_at: str | Version | None = None
) -> KeyValue:
    """The ``keyvalue`` instance ``name`` of ``repo``, created first when ``create`` and missing.

    ``write_at`` names the version the caller is about to write: a committed one is refused
    (:class:`CommittedVersionError`) before the instance is created, so a refused write leaves
    the repository as it was.
    """
    try:
        inst = repo.instance(name)
    except UnknownInstanceError:
        if not create:
            raise
        if write_at is not None:
            repo.checkout(write_at, write=True)  # raises for a committed version, writes nothing
        inst = repo.create_instance(name, TYPE_NAME)
    return KeyValue(repo, inst)
