"""The zarr v2 side of ``shardscope inspect | locate | ls | validate`` and of the shard browser.

A v2 array has no shards and no index: each chunk is its own key, named by its grid position
with the array's ``dimension_separator`` (``"0.3.1"`` or ``"0/3/1"``), so "which chunks exist" is
a listing of the store and "how big" is a stat. Scales are ``[""]`` for a lone array and the
``datasets`` paths of an OME-Zarr 0.4 image. Coordinates are the array's own axis order (the
order of ``shape``), which is also the order the viewer presents.

On stores where a size is not a cheap metadata call (remote object stores through TensorStore),
sizes are reported as ``null`` rather than downloading every chunk to count its bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.errors import ArgumentError, FormatError, MetadataError, StoreError, UnsupportedError
from napari_shardscope.core.formats.ome import OmeMultiscale, ome_level_placement
from napari_shardscope.core.formats.problem import Problem, check_files, unreadable_problems
from napari_shardscope.core.formats.volume_spec import LevelPlacement, VolumePlacement
from napari_shardscope.core.formats.zarr2.chunk import (
    chunk_store_key,
    decode_chunk,
    list_chunks,
    looks_like_chunk,
    read_chunk_bytes,
)
from napari_shardscope.core.formats.zarr2.metadata import ARRAY_FILE, Zarr2ArrayMetadata
from napari_shardscope.core.formats.zarr2.volume import array_placement, chunk_key_test
from napari_shardscope.core.progress import Progress


class Zarr2Node(Protocol):
    """What the inspector asks of a v2 node (:class:`~.dataset.Zarr2Dataset` is one): metadata parsed once."""

    is_array: bool

    @property
    def store(self) -> ByteStore: ...

    @property
    def metadata_url(self) -> str: ...

    @property
    def multiscale(self) -> OmeMultiscale | None: ...

    def array_metadata(self, path: str = "") -> Zarr2ArrayMetadata: ...

    def scale_paths(self) -> list[str]: ...



class Zarr2Inspector:
    """Read-only view of a zarr v2 array or OME-Zarr 0.4 image: scales, chunks, sizes, integrity."""

    format_name = "zarr2"

    def __init__(self, dataset: Zarr2Node) -> None:
        self.dataset = dataset
        self.store: ByteStore = dataset.store
        self._scales = dataset.scale_paths()

    def __repr__(self) -> str:
        return f"Zarr2Inspector({self.store!r}, scales={self._scales})"

    # -- scales ------------------------------------------------------------------------------
    def scale_keys(self) -> list[str]:
        """Array paths, finest first; ``[""]`` for an array at the store root."""
        return list(self._scales)

    def resolve(self, scale: str | None) -> str:
        if scale is None:
            return self._scales[0]
        key = scale.strip("/")
        if key not in self._scales:
            raise ArgumentError(f"scale {scale!r} not found; scales are {self._scales}")
        return key

    def metadata(self, scale: str | None = None) -> Zarr2ArrayMetadata:
        """The parsed ``.zarray`` of one scale (the finest by default)."""
        return self.dataset.array_metadata(self.resolve(scale))

    def placement(self, scale: str | None = None) -> LevelPlacement:
        """How ``open_volume`` presents ``scale``: its OME-Zarr placement, or a lone array's."""
        key = self.resolve(scale)
        ms = self.dataset.multiscale
        if ms is not None:
            return ome_level_placement(ms, ms.paths.index(key), self.metadata(key), key=self.dataset.metadata_url)
        return array_placement(self.metadata(key), key).levels[0]

    def _volume_json(self, scale: str) -> dict[str, Any] | None:
        ms = self.dataset.multiscale
        axes, unit = ((ms.presented_axes, ms.nm_factors()[1]) if ms is not None
                      else (array_placement(self.metadata(scale)).axes, None))
        return VolumePlacement(axes, unit, (self.placement(scale),)).level_json(scale)

    def _selected(self, scale: str | None) -> list[str]:
        return list(self._scales) if scale is None else [self.resolve(scale)]

    # -- inspect -----------------------------------------------------------------------------
    def inspect(self, scale: str | None = None) -> dict[str, Any]:
        """Per scale: geometry, data type, compressor, chunks stored and their bytes (one listing each).

        Chunk data is never read. Each scale carries ``volume``: the scale as ``open_volume``
        presents it. ``bytes_read`` / ``requests`` count everything read through the store so far.
        """
        return {"format": self.format_name, "url": self.store.url,
                "node_type": "array" if self.dataset.is_array else "group",
                "scales": [self._inspect_scale(key) for key in self._selected(scale)],
                "bytes_read": self.store.stats.bytes_read, "requests": self.store.stats.requests}

    def _inspect_scale(self, key: str) -> dict[str, Any]:
        meta = self.metadata(key)
        out: dict[str, Any] = {"key": key, "metadata_key": f"{key}/{ARRAY_FILE}" if key else ARRAY_FILE,
                               **meta.to_json(), "chunk_shape": list(meta.chunks), "grid_shape": list(meta.grid_shape),
                               "num_chunks": meta.num_chunks}
        try:
            out["volume"] = self._volume_json(key)
        except (MetadataError, UnsupportedError) as exc:  # the layout is still worth showing
            out.update(volume=None, volume_error=str(exc))
        try:
            chunks = [k for k, grid in list_chunks(self.store, key, meta) if meta.contains_grid_position(grid)]
        except StoreError as exc:  # e.g. plain HTTP cannot list
            out.update(chunks_present=None, chunk_files=None, data_bytes=None, listing_error=str(exc))
            return out
        out["chunks_present"] = out["chunk_files"] = len(chunks)  # chunk_files: the word every unsharded format uses
        out["data_bytes"] = sum(self.store.size(k) or 0 for k in chunks) if self.store.cheap_size else None
        return out

    # -- locate / list -----------------------------------------------------------------------
    def locate_format_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """The chunk holding ``voxel`` (array order): ``grid_position``, ``chunk_key``, ``present``, ``size``."""
        key = self.resolve(scale)
        meta = self.metadata(key)
        grid = meta.grid_position(voxel)
        chunk_key = chunk_store_key(key, meta, grid)
        if self.store.cheap_size:
            size = self.store.size(chunk_key)
            present = size is not None
        else:
            size = None
            present = self.store.read_range(chunk_key, 0, 0) is not None
        return {**self._record(key, grid, chunk_key, present, size), "voxel": [int(v) for v in voxel]}

    def list_chunks(self, scale: str | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """One record per stored chunk of one scale (the finest by default), in key order."""
        used = {k: v for k, v in filters.items() if v is not None}
        if used:
            raise ArgumentError(f"zarr v2 arrays have no shards or minishards: {sorted(used)} do not apply")
        key = self.resolve(scale)
        meta = self.metadata(key)
        for chunk_key, grid in list_chunks(self.store, key, meta):
            if meta.contains_grid_position(grid):
                size = self.store.size(chunk_key) if self.store.cheap_size else None
                yield self._record(key, grid, chunk_key, True, size)

    @staticmethod
    def _record(scale: str, grid: Sequence[int], key: str, present: bool, size: int | None) -> dict[str, Any]:
        return {"scale": scale, "grid_position": [int(g) for g in grid], "chunk_key": key, "present": present,
                "size": size}

    # -- validate ----------------------------------------------------------------------------
    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every stored chunk of one scale (all scales by default); yield each problem.

        Checks: chunk-like keys that are not chunk keys of the array (wrong separator or rank,
        leading zeros), grid positions outside the chunk grid, a directory or special file where a
        chunk should be, and data that does not decompress or decodes to other than one full chunk.
        """
        work: list[tuple[Zarr2ArrayMetadata, str, str]] = []
        early: list[Problem] = []
        bad: set[str] = set()
        for key in self._selected(scale):
            meta = self.metadata(key)
            prefix = f"{key}/" if key else ""
            nested = [s for s in self._scales if s and s != key and s.startswith(prefix)]
            # dangling links, link loops, FIFOs, sockets, and directories where a chunk file should be
            unreadable, found = unreadable_problems(self.store, prefix, chunk_key_test(meta), "chunk")
            early.extend(p for p in unreadable
                         if p.key not in bad and not any(p.key.startswith(f"{n}/") for n in nested))
            bad |= found
            for stored in self.store.list(prefix):
                rel = stored[len(prefix):]
                if any(stored.startswith(f"{n}/") for n in nested) or stored in bad:
                    continue
                if looks_like_chunk(rel):
                    work.append((meta, stored, rel))
        yield from early
        yield from check_files(work, lambda w: w[1], lambda w: self._check_chunk(*w), progress, what="chunks")

    def _check_chunk(self, meta: Zarr2ArrayMetadata, key: str, rel: str) -> list[Problem]:
        grid = meta.parse_chunk_key(rel)
        if grid is None:
            return [Problem(key, f"{rel!r} is not a chunk key of this {meta.ndim}-D array "
                                 f"({meta.ndim} decimal grid coordinates joined by {meta.dimension_separator!r})")]
        if not meta.contains_grid_position(grid):
            return [Problem(key, f"grid position {grid} is outside the chunk grid {meta.grid_shape}")]
        try:
            data = read_chunk_bytes(self.store, meta, key)
        except FormatError as exc:  # a directory or special file where the chunk should be, or too large
            return [Problem(key, exc.message, exc.offset)]
        if data is None:
            return [Problem(key, "listed but could not be read")]
        try:
            decode_chunk(data, meta, key=key)
        except FormatError as exc:
            return [Problem(key, exc.message, exc.offset)]
        return []
