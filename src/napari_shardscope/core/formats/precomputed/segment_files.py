"""A directory of per-segment files, sharded or one file per id: what mesh and skeleton sources share.

Neuroglancer's precomputed mesh and skeleton directories store one object per segment id, either as
files named for the id (CloudVolume's local layout adds ``.gz``) or as the chunk of that id in a
sharded directory. The reading — the shard reader built once from the ``info``'s ``sharding``, gzip-
aware whole-file reads bounded before allocation, and listing every stored id — is the same for
both, so it lives here once; each source says only how a file name maps to an id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_bounded
from napari_shardscope.core.encoding import gunzip
from napari_shardscope.core.errors import ChunkDecodeError, FormatError
from napari_shardscope.core.formats.precomputed.chunk_encoding import GZIP_SUFFIX
from napari_shardscope.core.formats.precomputed.shard_reader import DecodeBounds, ShardedReader
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec

#: Most bytes one mesh or skeleton file, manifest or a segment's fragment data may take (a whole
#: neuron's finest level is tens of MB; a damaged index claiming more is refused before the read).
MAX_SEGMENT_FILE_BYTES = 1 << 30


class ShardedInfo(Protocol):
    """The part of a mesh or skeleton ``info`` this module reads."""

    @property
    def sharding(self) -> ShardingSpec | None: ...


InfoT = TypeVar("InfoT", bound=ShardedInfo)


@dataclass
class SegmentFiles(Generic[InfoT]):
    """Per-segment files under ``prefix`` of ``store``; ``reader`` is set when the directory is sharded."""

    #: What one file holds, for error messages ("a mesh file", "a skeleton file").
    file_kind: ClassVar[str] = "a segment file"

    store: ByteStore
    prefix: str
    info: InfoT
    reader: ShardedReader | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.info.sharding is not None:
            self.reader = ShardedReader(self.store, self.prefix, self.info.sharding,
                                        bounds=DecodeBounds(max_chunk_bytes=MAX_SEGMENT_FILE_BYTES))

    def where(self, name: str) -> str:
        """The URL of file ``name``, for error messages."""
        return f"{self.store.url.rstrip('/')}/{join_key(self.prefix, name)}"

    def read_file(self, name: str, limit: int) -> tuple[bytes, str] | None:
        """A file's bytes and where they came from, gunzipped when stored as ``NAME.gz``."""
        key = join_key(self.prefix, name)
        data = read_bounded(self.store, key + GZIP_SUFFIX, limit, self.file_kind, ChunkDecodeError)
        if data is not None:
            where = self.where(name + GZIP_SUFFIX)
            return gunzip(data, key=where, offset=0, max_size=limit), where
        data = read_bounded(self.store, key, limit, self.file_kind, ChunkDecodeError)
        return None if data is None else (data, self.where(name))

    def segment_ids(self) -> list[int]:
        """Every segment id stored (listing the directory, or every shard's minishard indexes)."""
        if self.reader is not None:
            ids: set[int] = set()
            for shard in self.reader.existing_shards():
                ids.update(loc.chunk_id for loc in self.reader.iter_chunks(shard))
            return sorted(ids)
        prefix = f"{self.prefix}/" if self.prefix else ""
        out: set[int] = set()
        for key in self.store.list(prefix):
            found = self.id_of_name(key[len(prefix):])
            if found is not None:
                out.add(found)
        return sorted(out)

    def id_of_name(self, name: str) -> int | None:
        """The segment id a file of an unsharded directory holds, ``None`` for other files."""
        stem = name.removesuffix(GZIP_SUFFIX)
        return int(stem) if stem.isdigit() else None


@dataclass
class FieldReader:
    """Little-endian arrays read one after another from one file's bytes (a manifest, a skeleton).

    Both binary layouts are a run of counted fields; running out of bytes, or bytes left over, is
    ``error`` naming the key and the byte offset in the file (``offset`` is where ``data`` starts).
    """

    data: bytes
    key: str
    offset: int
    what: str
    error: type[FormatError]
    pos: int = 0

    def take(self, count: int, dtype: str, field: str) -> npt.NDArray[Any]:
        """The next ``count`` values of ``dtype``; a typed error when the bytes end first."""
        size = count * np.dtype(dtype).itemsize
        if self.pos + size > len(self.data):
            raise self.error(f"{self.what} truncated in {field}: needs {self.pos + size} bytes, has {len(self.data)}",
                             key=self.key, offset=self.offset + self.pos)
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.pos)
        self.pos += size
        return out

    def check_end(self, last: str) -> None:
        """Refuse bytes after the last field (``last`` names it in the message)."""
        if self.pos != len(self.data):
            raise self.error(f"{self.what} has {len(self.data) - self.pos} bytes after its last {last}",
                             key=self.key, offset=self.offset + self.pos)
