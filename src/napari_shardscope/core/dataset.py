"""What every sharded dataset offers the CLI and the shard browser, whatever its format.

Each format module (precomputed, zarr v3, N5) provides an inspector class satisfying
:class:`DatasetInspector`; :func:`open_inspector` detects the format of a store and returns one.
Records are plain JSON-ready dicts so ``--json`` output and the GUI share one shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from napari_shardscope.core.bytestore import ByteStore, open_store
from napari_shardscope.core.errors import NotADatasetError

#: Called as ``progress(done, total, what)`` while a long check runs.
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Problem:
    """One integrity problem found by ``validate``: where it is and what is wrong."""

    key: str
    message: str
    offset: int | None = None

    def __str__(self) -> str:
        where = f" at byte {self.offset}" if self.offset is not None else ""
        return f"{self.key}: {self.message}{where}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "message": self.message, "offset": self.offset}


class DatasetInspector(Protocol):
    """Read-only view of a sharded dataset's layout: scales, shards, chunks, byte ranges."""

    #: ``"precomputed"``, ``"zarr3"`` or ``"n5"``.
    format_name: str
    store: ByteStore

    def scale_keys(self) -> list[str]:
        """Names of the scales/arrays, finest first (a single array has one)."""
        ...

    def inspect(self, scale: str | None = None) -> dict[str, Any]:
        """Summary of the layout (per scale: spec, shard files, chunk counts, bytes)."""
        ...

    def locate_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """Where the chunk holding ``voxel`` is stored (format's own axis order)."""
        ...

    def list_chunks(self, scale: str | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """One record per stored chunk, with the same fields ``locate`` gives."""
        ...

    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every shard/block and yield each problem found (nothing when clean)."""
        ...


def open_inspector(url: str, context: Any = None) -> DatasetInspector:
    """Detect the format at ``url`` and return its inspector.

    Detection reads only metadata: ``info`` (precomputed), ``zarr.json`` (zarr v3),
    ``attributes.json`` (N5).
    """
    store = open_store(url, context=context)
    info = store.read("info")
    if info is not None:
        from napari_shardscope.core.precomputed.inspector import PrecomputedInspector

        return PrecomputedInspector(store, info)
    if store.read("zarr.json") is not None:
        from napari_shardscope.core.zarr3.inspector import Zarr3Inspector

        return Zarr3Inspector(store)
    if store.read("attributes.json") is not None:
        from napari_shardscope.core.n5.inspector import N5Inspector

        return N5Inspector(store)
    raise NotADatasetError(f"{url}: no 'info' (precomputed), 'zarr.json' (zarr v3) or 'attributes.json' (N5) found")
