"""A fetch's verified objects on local disk, between checking every one and adopting any."""

from __future__ import annotations

import shutil
from pathlib import Path

from napari_shardscope.core.bytestore.oserrors import storage_fault


class Spool:
    """A fetch's verified objects, kept on disk between checking all of them and adopting any.

    A fetch downloads, hash-checks and decodes every object first (one at a time in memory) and
    writes nothing to the repository until all passed, so a damaged or hostile object (a zlib bomb,
    a bad record) refuses the whole fetch with nothing adopted; the objects wait here meanwhile.
    The directory is per remote, used under the remote's state lock, emptied at the start of
    every fetch (one killed midway leaves it behind) and removed at the end.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise storage_fault(exc, directory) from exc

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def put(self, name: str, data: bytes) -> None:
        try:
            (self.directory / name).write_bytes(data)
        except OSError as exc:
            raise storage_fault(exc, self.directory / name) from exc

    def get(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()
