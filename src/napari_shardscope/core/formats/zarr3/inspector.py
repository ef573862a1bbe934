"""The Zarr v3 :class:`~napari_shardscope.core.formats.api.DatasetInspector`.

Opens either a single array (its ``zarr.json`` at the store root; one scale named ``""``) or a
group whose ``zarr.json`` lists arrays: the dataset paths of an OME-Zarr ``multiscales`` attribute
(finest first, as OME-Zarr orders them) or, failing that, the arrays of inline consolidated
metadata. Records are JSON-ready dicts shared by the CLI (``--json``) and the shard browser.

Voxel coordinates are in the array's own index order, the order of ``shape`` in ``zarr.json``
(for OME-Zarr usually ``t, c, z, y, x``), not x, y, z.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import ByteStore, join_key
from napari_shardscope.core.errors import (
    ArgumentError,
    MetadataError,
    NotADatasetError,
    ShardscopeError,
    UnsupportedFeatureError,
)
from napari_shardscope.core.formats.api import DatasetInspector
from napari_shardscope.core.formats.ome import OmeMultiscale, ome_level_placement
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.volume_spec import LevelPlacement, VolumePlacement
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, GroupMetadata
from napari_shardscope.core.formats.zarr3.reader import InnerChunkLocation, Zarr3ArrayReader, read_array_metadata
from napari_shardscope.core.formats.zarr3.validate import validate_array
from napari_shardscope.core.formats.zarr3.volume import array_placement
from napari_shardscope.core.progress import Progress


class Zarr3Inspector:
    """Layout inspection of a Zarr v3 array or OME-Zarr group.

    Parameters
    ----------
    store
        The byte store whose root holds ``zarr.json``.
    node
        The root ``zarr.json``, parsed (what :class:`~.dataset.Zarr3Dataset` passes).
    load_array
        ``load_array(path)``: the parsed ``zarr.json`` of the array at ``path`` under the root.
        The dataset passes its own (cached) loader so a scale's metadata is parsed once for the
        viewer and the inspector; by default it is read from ``store`` when first needed.

    Raises
    ------
    NotADatasetError
        When the root is a group that lists no arrays.
    """

    format_name = "zarr3"

    def __init__(self, store: ByteStore, node: ArrayMetadata | GroupMetadata,
                 load_array: Callable[[str], ArrayMetadata] | None = None) -> None:
        self.store = store
        self.root = node
        self._load_array = load_array if load_array is not None else partial(read_array_metadata, store)
        self._readers: dict[str, Zarr3ArrayReader] = {}
        if isinstance(node, ArrayMetadata):
            self._scales: list[str] = [""]
            self._readers[""] = Zarr3ArrayReader(store, "", node)
        else:
            paths = node.multiscale_paths or node.consolidated_array_paths
            if not paths:
                raise NotADatasetError(
                    f"{store.url}: zarr.json is a group without OME-Zarr multiscales or consolidated "
                    f"metadata; open one of its arrays directly"
                )
            self._scales = list(paths)

    # -- scales ----------------------------------------------------------------------------------
    def scale_keys(self) -> list[str]:
        """Array paths, finest first; ``[""]`` for an array at the store root."""
        return list(self._scales)

    def reader(self, scale: str | None = None) -> Zarr3ArrayReader:
        """The array reader of ``scale`` (default: the first, finest scale)."""
        key = self._resolve(scale)
        if key not in self._readers:
            self._readers[key] = Zarr3ArrayReader(self.store, key, self._load_array(key))
        return self._readers[key]

    def placement(self, scale: str | None = None) -> LevelPlacement:
        """How ``open_volume`` presents ``scale``: its OME-Zarr placement, or a lone array's.

        Arrays listed by consolidated metadata are not one volume; each gets a lone array's placement.
        """
        key = self._resolve(scale)
        meta = self.reader(key).metadata
        if isinstance(self.root, GroupMetadata) and self.root.multiscale_paths:
            ms = self._multiscale()
            return ome_level_placement(ms, ms.paths.index(key), meta, key=self.root.key)
        return array_placement(meta, key).levels[0]

    def _volume_json(self, scale: str) -> dict[str, Any]:
        level = self.placement(scale)
        if isinstance(self.root, GroupMetadata) and self.root.multiscale_paths:
            ms = self._multiscale()
            axes, unit = ms.presented_axes, ms.nm_factors()[1]
        else:
            axes, unit = array_placement(self.reader(scale).metadata).axes, None
        return VolumePlacement(axes, unit, (level,)).level_json(scale) or {}

    def _multiscale(self) -> OmeMultiscale:
        assert isinstance(self.root, GroupMetadata)
        return self.root.multiscale

    def _resolve(self, scale: str | None) -> str:
        if scale is None:
            return self._scales[0]
        key = scale.strip("/")
        if key not in self._scales:
            raise ArgumentError(f"scale {scale!r} not found; scales are {self._scales}")
        return key

    def _selected(self, scale: str | None) -> list[str]:
        return list(self._scales) if scale is None else [self._resolve(scale)]

    # -- DatasetInspector --------------------------------------------------------------------
    def inspect(self, scale: str | None = None) -> dict[str, Any]:
        """Layout summary of one scale (or all when ``scale`` is ``None``), from index bytes only.

        Field names shared with the other formats: per scale ``key``, ``shards_present``,
        ``num_shards``, ``chunks`` (stored inner chunks), ``data_bytes``, ``shards``; per shard
        ``shard`` (grid position), ``file``, ``file_size``, ``chunks``, ``data_bytes``,
        ``index_bytes``; ``volume``: the scale as ``open_volume`` presents it (axes, unit, shape,
        dtype, voxel_size, translate, downsampling_factors). ``bytes_read``/``requests`` count
        everything the store returned since it was opened (``zarr.json`` files included), so a fresh
        inspector reports exactly what one ``inspect`` costs. A shard whose index cannot be read
        gets an ``error`` field instead of counts. An unsharded array is described in chunk words, as
        unsharded precomputed is: ``chunk_shape``, ``grid_shape``, ``num_chunks``, ``chunk_files``.
        """
        scales = [self._inspect_scale(key) for key in self._selected(scale)]
        return {
            "format": self.format_name,
            "url": self.store.url,
            "node_type": "array" if isinstance(self.root, ArrayMetadata) else "group",
            "scales": scales,
            "bytes_read": self.store.stats.bytes_read,
            "requests": self.store.stats.requests,
        }

    def _inspect_scale(self, key: str) -> dict[str, Any]:
        reader = self.reader(key)
        meta = reader.metadata
        config = reader.sharding
        out: dict[str, Any] = {
            "key": key,
            "metadata_key": reader.metadata_key,
            "shape": list(meta.shape),
            "data_type": meta.data_type,
            "dimension_names": list(meta.dimension_names) if meta.dimension_names is not None else None,
            "fill_value": meta.fill_value,
            "chunk_key_encoding": meta.chunk_key_encoding.to_json(),
            "codecs": [c.to_json() for c in meta.codecs],
            "sharded": config is not None,
        }
        if config is None:
            return self._inspect_unsharded(reader, out)
        out.update({
            "shard_shape": list(reader.shard_shape),
            "inner_chunk_shape": list(reader.inner_chunk_shape),
            "chunks_per_shard": list(reader.chunks_per_shard),
            "shard_grid_shape": list(reader.shard_grid_shape),
            "inner_chunk_grid_shape": list(reader.inner_grid_shape),
            "inner_codecs": config.to_json()["codecs"],
            "index_codecs": [c.to_json() for c in config.index_codecs],
            "index_location": config.index_location,
            "index_size": config.index_size,
        })
        self._add_volume(out, key)
        files = [(shard_key, pos) for shard_key, pos in reader.list_shard_files() if reader.in_grid(pos)]
        shards: list[dict[str, Any]] = []
        step = max(1, reader.index_cache_capacity // 2)
        for first in range(0, len(files), step):
            batch = files[first : first + step]
            reader.prefetch_shard_indexes([pos for _, pos in batch])  # remote: requests in flight together
            shards.extend(self._inspect_shard(reader, shard_key, pos) for shard_key, pos in batch)
        ok = [s for s in shards if "error" not in s]
        out.update(
            shards_present=len(shards),
            num_shards=math.prod(reader.shard_grid_shape),
            chunks=sum(s["chunks"] for s in ok),
            data_bytes=sum(s["data_bytes"] for s in ok),
            shards=shards,
        )
        return out

    def _add_volume(self, out: dict[str, Any], key: str) -> None:
        try:
            out["volume"] = self._volume_json(key)
        except (MetadataError, UnsupportedFeatureError) as exc:  # the layout is still worth showing
            out.update(volume=None, volume_error=str(exc))

    def _inspect_unsharded(self, reader: Zarr3ArrayReader, out: dict[str, Any]) -> dict[str, Any]:
        """An array without ``sharding_indexed``: chunks, each a file of its own, in the words the other
        unsharded formats use (``chunk_shape``, ``num_chunks``, ``chunk_files``), never shard words."""
        out.update(chunk_shape=list(reader.inner_chunk_shape), grid_shape=list(reader.inner_grid_shape))
        self._add_volume(out, out["key"])
        sizes = [reader.store.size(k) for k, pos in reader.list_shard_files() if reader.in_grid(pos)]
        out.update(num_chunks=math.prod(reader.inner_grid_shape), chunk_files=len(sizes),
                   chunks=sum(1 for n in sizes if n is not None),
                   data_bytes=sum(n for n in sizes if n is not None))
        return out

    def _inspect_shard(self, reader: Zarr3ArrayReader, key: str, shard: tuple[int, ...]) -> dict[str, Any]:
        record: dict[str, Any] = {"shard": list(shard), "file": key}
        assert reader.sharding is not None
        index_bytes = reader.sharding.index_size
        try:
            loaded = reader.read_shard_index(shard)
        except ShardscopeError as exc:
            size = reader.store.size(key) if reader.store.cheap_size else None
            record.update(file_size=size, index_bytes=index_bytes, error=str(exc))
            return record
        if loaded is None:  # removed since listing
            record.update(file_size=None, chunks=0, data_bytes=0, index_bytes=0)
            return record
        record.update(
            file_size=loaded.file_size,
            chunks=int(loaded.index.present.sum()),
            data_bytes=loaded.index.stored_bytes(),
            index_bytes=index_bytes,
        )
        return record

    def locate_format_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """Where the inner chunk holding ``voxel`` (zarr.json ``shape`` order) is stored.

        Fields: ``scale``, ``voxel``, ``shard_key``, ``shard`` (shard grid position),
        ``inner_chunk`` (position in the array's inner-chunk grid), ``inner_chunk_in_shard``,
        ``byte_range`` ``[start, end)`` or ``null``, ``nbytes``, ``present``.
        """
        key = self._resolve(scale)
        reader = self.reader(key)
        location = reader.locate_voxel(voxel)  # checks the voxel first (count, integers, inside)
        return {"scale": key, "voxel": [int(v) for v in voxel], **_record(reader, location)}

    def list_chunks(self, scale: str | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """One record per stored inner chunk (fields as :meth:`locate_format_voxel`, without ``voxel``).

        Filters: ``shard`` — a shard key (``"c/1/2/3"``, relative to the array or the store
        root), a grid position (sequence of ints or ``"1,2,3"``), or a shard number (C order over
        the shard grid). ``None`` values are ignored; other filters (``minishard``) are errors.
        """
        shard_filter = filters.pop("shard", None)
        unknown = {k: v for k, v in filters.items() if v is not None}
        if unknown:
            raise ArgumentError(f"zarr3 list_chunks has no filter(s) {sorted(unknown)}; use shard=")
        for key in self._selected(scale):
            reader = self.reader(key)
            shard = None if shard_filter is None else parse_shard_filter(reader, shard_filter)
            for location in reader.list_inner_chunks(shard):
                yield {"scale": key, **_record(reader, location)}

    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every shard file of one scale (or all); yield each problem with file and offset."""
        for key in self._selected(scale):
            try:
                reader = self.reader(key)
            except MetadataError as exc:
                yield Problem(exc.key or join_key(key, "zarr.json"), exc.message, exc.offset)
                continue
            except UnsupportedFeatureError as exc:
                yield Problem(exc.key or join_key(key, "zarr.json"), f"{exc.feature} is not supported")
                continue
            yield from validate_array(reader, progress)


def _record(reader: Zarr3ArrayReader, location: InnerChunkLocation) -> dict[str, Any]:
    """A locate / ls record: a sharded array's inner chunk in its shard, or an unsharded array's chunk file in
    the words zarr v2's records use (``chunk_key``, ``grid_position``): an unsharded array has no shards."""
    record = location.to_json()
    if reader.sharding is not None:
        return record
    return {"chunk_key": record["shard_key"], "grid_position": record["inner_chunk"],
            "byte_range": record["byte_range"], "nbytes": record["nbytes"], "present": record["present"]}


def parse_shard_filter(reader: Zarr3ArrayReader, value: Any) -> tuple[int, ...]:
    """A shard given as a chunk key, a grid position (sequence or ``"1,2,3"``), or a shard number.

    A single integer ``N`` (``--shard N``, as for precomputed) is the ``N``-th shard of the shard
    grid in C order; for a 1-d array that is also its grid position.
    """
    if isinstance(value, str):
        text = value.strip()
        for candidate in (text, join_key(reader.path, text)):
            pos = reader.shard_position(candidate)
            if pos is not None:
                return pos
        try:
            parts = tuple(int(p) for p in text.split(",")) if text else ()
        except ValueError:
            raise ArgumentError(f"shard {value!r} is neither a chunk key nor comma-separated integers") from None
        if len(parts) == 1 and "," not in text:
            return shard_from_number(reader, parts[0])
        return parts
    if isinstance(value, int) and not isinstance(value, bool):
        return shard_from_number(reader, value)
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ArgumentError(f"shard {value!r} is not a shard grid position") from None


def shard_from_number(reader: Zarr3ArrayReader, number: int) -> tuple[int, ...]:
    """The grid position of the ``number``-th shard (C order over the shard grid)."""
    grid = reader.shard_grid_shape
    total = math.prod(grid)
    if not 0 <= number < total:
        raise ArgumentError(f"shard number {number} is outside the shard grid {list(grid)} ({total} shards)")
    position = []
    for n in reversed(grid):  # C order, in Python ints: numpy refuses grids of more than 2**63 shards
        number, i = divmod(number, n)
        position.append(i)
    return tuple(reversed(position))


if TYPE_CHECKING:  # Zarr3Inspector must satisfy the protocol the CLI and the GUI program against
    _conforms: type[DatasetInspector] = Zarr3Inspector
