"""Layout inspection of a precomputed dataset: volumes and segment-id-keyed directories.

A precomputed directory is either a multiscale volume (``info`` with ``scales``), or a directory
keyed by segment/annotation id: skeletons (``neuroglancer_skeletons``), multi-resolution meshes
(``neuroglancer_multilod_draco``) and annotations (``neuroglancer_annotations_v1``, whose
``by_id``, ``relationships`` and ``spatial`` indexes may each be sharded). A volume's ``info`` may
point at its ``mesh`` and ``skeletons`` directories; ``locate_segment`` follows those.

Each sharded or unsharded piece is a :class:`Source`; the CLI's ``--scale`` names one. The sources
and what their file names mean are :mod:`.sources`'; the validation of a whole dataset (every byte
read) is :mod:`.dataset_validation`'s. Both names stay importable from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import ByteStore, join_key, read_document
from napari_shardscope.core.encoding import MAX_DECODED_BYTES
from napari_shardscope.core.errors import (
    ArgumentError,
    IndexDecodeError,
    ShardscopeError,
    StoreError,
)
from napari_shardscope.core.formats.precomputed.annotations.info import (
    AnnotationInfo,
    parse_annotation_info,
)
from napari_shardscope.core.formats.precomputed.annotations.reader import AnnotationSource, index_bounds
from napari_shardscope.core.formats.precomputed.annotations.spatial import cell_of_chunk_id
from napari_shardscope.core.formats.precomputed.chunk_encoding import (
    BROTLI_SUFFIX,
    GZIP_SUFFIX,
)
from napari_shardscope.core.formats.precomputed.dataset_validation import validate_dataset
from napari_shardscope.core.formats.precomputed.info import (
    PrecomputedInfo,
    parse_info,
)
from napari_shardscope.core.formats.precomputed.meshes import MULTILOD
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension, decode_morton
from napari_shardscope.core.formats.precomputed.multilod_fragments import fragment_bytes
from napari_shardscope.core.formats.precomputed.shard_index import MinishardIndex, ShardIndex
from napari_shardscope.core.formats.precomputed.shard_reader import (
    ChunkLocation,
    DecodeBounds,
    ShardedReader,
    ShardFile,
)
from napari_shardscope.core.formats.precomputed.sources import (
    ANNOTATION_TYPE,
    SEGMENT_TYPES,
    VOLUME_TYPE,
    Source,
    annotation_file_fields,
    annotation_sources,
    read_segment_sources,
    unsharded_segment_name,
)
from napari_shardscope.core.formats.precomputed.volume import volume_placement
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.volume_spec import VolumePlacement
from napari_shardscope.core.progress import Progress

#: Remote stores cannot list; below this many shards we probe each shard file instead.
MAX_PROBED_SHARDS = 4096
#: Shards ``inspect`` summarises at a time (a quarter of the reader's shard caches).
INSPECT_BATCH = 256

__all__ = [
    "ANNOTATION_TYPE",
    "INSPECT_BATCH",
    "MAX_PROBED_SHARDS",
    "SEGMENT_TYPES",
    "VOLUME_TYPE",
    "PrecomputedInspector",
    "Source",
    "annotation_sources",
    "annotation_summary",
    "read_segment_sources",
]




class PrecomputedInspector:
    """Inspect, locate, list and validate a precomputed dataset through a byte store."""

    format_name = "precomputed"

    def __init__(self, store: ByteStore, info: PrecomputedInfo | AnnotationInfo | Mapping[str, Any]) -> None:
        """Inspect the dataset at ``store`` whose ``info`` is already read.

        ``info`` is the parsed volume or annotation ``info`` (what :class:`~.dataset.PrecomputedDataset`
        passes), or the decoded document of a segment-keyed directory (meshes, skeletons, annotations);
        a volume's or annotation collection's decoded document is parsed here, for callers that hold
        only a store.
        """
        self.store = store
        self.volume: PrecomputedInfo | None = None
        self.annotation_info: AnnotationInfo | None = None
        self._annotations: AnnotationSource | None = None
        if isinstance(info, PrecomputedInfo):
            self.volume = info
        elif isinstance(info, AnnotationInfo):
            self.annotation_info = info
        elif info.get("@type", VOLUME_TYPE) == VOLUME_TYPE:
            self.volume = parse_info(info)
        elif info.get("@type") == ANNOTATION_TYPE:
            self.annotation_info = parse_annotation_info(info)
        self.placement: VolumePlacement | None = None
        if self.annotation_info is not None:
            self.sources = annotation_sources(self.annotation_info, "", "")
        elif self.volume is not None:
            self.sources = [Source(s.key, "volume", s.key, s.sharding, s) for s in self.volume.scales]
            self.placement = volume_placement(self.volume)
        else:
            self.sources = read_segment_sources(store, "", "", info)
            self.placement = None
        self._readers: dict[str, ShardedReader] = {}

    # -- sources -----------------------------------------------------------------------------
    def scale_keys(self) -> list[str]:
        return [s.name for s in self.sources]

    def source(self, scale: str | None) -> Source:
        if scale is None:
            return self.sources[0]
        for s in self.sources:
            if s.name == scale:
                return s
        raise ArgumentError(f"no scale {scale!r}; this dataset has {self.scale_keys()}")

    @property
    def annotations(self) -> AnnotationSource:
        """The annotation collection's reader, sharing this inspector's shard readers (index caches)."""
        info = self.annotation_info
        if info is None:
            raise ArgumentError("this dataset is not a precomputed annotation collection")
        if self._annotations is None:
            readers = {s.prefix: self.reader(s) for s in self.sources if s.sharding is not None}
            self._annotations = AnnotationSource(self.store, info, readers)
        return self._annotations

    def reader(self, source: Source) -> ShardedReader:
        if source.sharding is None:
            raise ArgumentError(f"scale {source.name!r} is not sharded")
        if source.prefix not in self._readers:
            self._readers[source.prefix] = ShardedReader(
                self.store, source.prefix, source.sharding, bounds=self.decode_bounds(source)
            )
        return self._readers[source.prefix]

    def decode_bounds(self, source: Source) -> DecodeBounds:
        """Decoded sizes a volume scale implies: its grid's chunk count and each chunk's bytes.

        A raw chunk must decode to exactly its (edge-clipped) voxels x bytes per voxel; other
        encodings (jpeg, compressed_segmentation, ...) are capped at a generous multiple of that
        (compressed_segmentation's tables can outgrow the raw size a little, never fourfold).
        """
        sc, volume = source.scale, self.volume
        if source.kind.startswith("annotation_"):
            return index_bounds(source.level.num_cells if source.level is not None else None)
        if sc is None or volume is None:
            return DecodeBounds()
        bytes_per_voxel = volume.bytes_per_voxel
        full = math.prod(sc.chunk_size) * bytes_per_voxel
        grid = sc.grid_shape

        def exact(chunk_id: int) -> int | None:
            try:
                pos = decode_morton(np.asarray([chunk_id], dtype=np.uint64), grid)[0]
            except ArgumentError:
                return None  # an id outside the grid: validate reports it
            return int(sc.chunk_voxels(pos)) * bytes_per_voxel

        return DecodeBounds(
            max_chunks=sc.num_chunks,
            max_chunk_bytes=min(MAX_DECODED_BYTES, full if sc.encoding == "raw" else 4 * full + 4096),
            exact_chunk_bytes=exact if sc.encoding == "raw" else None,
        )

    def segment_sources(self) -> list[Source]:
        """Segment-id-keyed sources: this directory's own, or the volume's mesh/skeletons dirs."""
        if self.volume is None:
            return [s for s in self.sources if s.kind in ("segment", "annotation_by_id", "annotation_relationship")]
        out: list[Source] = []
        for name in (self.volume.mesh_dir, self.volume.skeletons_dir):
            if name and read_document(self.store, join_key(name, "info")) is not None:
                out.extend(read_segment_sources(self.store, name, name))
        return out

    def shards_present(self, source: Source) -> list[int]:
        """Shard numbers with a file: listed locally, probed on stores that cannot list."""
        reader = self.reader(source)
        try:
            return reader.existing_shards()
        except StoreError:
            if source.sharding is None or source.sharding.num_shards > MAX_PROBED_SHARDS:
                raise
            found = reader.load_shard_files(range(source.sharding.num_shards))  # probes in flight together
            return [f.shard for f in found if f is not None]

    # -- inspect -----------------------------------------------------------------------------
    def inspect(self, scale: str | None = None) -> dict[str, Any]:
        """Per scale: geometry, sharding spec, and per shard file its minishards, chunks and bytes.

        A volume's scales also carry ``volume``: the scale as ``open_volume`` presents it (axes,
        unit, shape, dtype, voxel_size, translate, downsampling_factors; z, y, x order, nm).

        A sharded ``neuroglancer_multilod_draco`` source's index points at each segment's manifest only; its
        fragments are stored just before it. Its scale and shards also carry ``manifest_bytes`` and
        ``fragment_bytes``, and ``data_bytes`` is their sum (what the entries own), read from the manifests.

        Reads only shard indexes and minishard indexes (and a mesh source's manifests). ``bytes_read`` and
        ``requests`` count everything the store returned since it was opened (``info`` included), so a fresh inspector
        reports exactly what one ``inspect`` costs.
        """
        sources = [self.source(scale)] if scale is not None else self.sources
        result: dict[str, Any] = {"format": "precomputed", "url": self.store.url, "scales": []}
        if self.volume is not None:
            result.update(type=self.volume.type, data_type=self.volume.data_type, num_channels=self.volume.num_channels)
        if self.annotation_info is not None:
            result["annotations"] = annotation_summary(self.annotation_info)
        self._prefetch_sources(sources)
        for source in sources:
            result["scales"].append(self._inspect_source(source))
        result["bytes_read"] = self.store.stats.bytes_read
        result["requests"] = self.store.stats.requests
        return result

    def _prefetch_sources(self, sources: Sequence[Source]) -> None:
        """On a remote store, find every sharded scale's shards and load their indexes in two waves of requests.

        Scale by scale, shard probe then minishard indexes, a 5-scale pyramid would cost ten
        dependent round trips (and a missing shard one more per scale, for the obsolete ``.index``
        probe). Here every scale's probes go out in one wave and every minishard index (with the
        ``.index`` probes) in the next (:meth:`ShardedReader.load_shards_with_minishards`), one
        thread per scale: TensorStore's futures wait without the GIL. Only the first
        :data:`INSPECT_BATCH` shards of a scale get their minishard indexes (the caches' bound); the
        rest load in :meth:`_inspect_source`'s batches. Failures are cached by the readers or read
        again, and :meth:`_inspect_source` raises them with their keys and offsets, as without this.
        """
        if self.store.cheap_size:
            return
        sharded = [s for s in sources if s.sharding is not None]
        readers = [self.reader(s) for s in sharded]  # made here: the threads only use them

        def prefetch(job: tuple[Source, ShardedReader]) -> None:
            source, reader = job
            assert source.sharding is not None
            try:
                try:
                    shards = reader.existing_shards()
                except StoreError:  # a store that cannot list: every possible shard is probed
                    if source.sharding.num_shards > MAX_PROBED_SHARDS:
                        return
                    shards = list(range(source.sharding.num_shards))
                reader.load_shards_with_minishards(shards, prefetch=INSPECT_BATCH)
            except ShardscopeError:
                return  # raised again, the same way, by _inspect_source

        if len(sharded) == 1:
            prefetch((sharded[0], readers[0]))
            return
        with ThreadPoolExecutor(min(len(sharded), 16)) as pool:
            for future in [pool.submit(prefetch, job) for job in zip(sharded, readers, strict=True)]:
                future.result()

    def _inspect_source(self, source: Source) -> dict[str, Any]:
        out: dict[str, Any] = {"key": source.name, "kind": source.kind, "directory": source.prefix}
        if source.level is not None:
            out.update(level=source.level_index, grid_shape=list(source.level.grid_shape),
                       chunk_size=list(source.level.chunk_size), limit=source.level.limit,
                       num_cells=source.level.num_cells)
        if source.relationship is not None:
            out["relationship"] = source.relationship
        if source.scale is not None:
            sc = source.scale
            out.update(
                size=list(sc.size),
                voxel_offset=list(sc.voxel_offset),
                resolution=list(sc.resolution),
                chunk_size=list(sc.chunk_size),
                grid_shape=list(sc.grid_shape),
                encoding=sc.encoding,
                num_chunks=sc.num_chunks,
            )
            if self.placement is not None:
                out["volume"] = self.placement.level_json(sc.key)
        if source.sharding is None:
            out["sharding"] = None
            keys = [k for k in self.store.list(f"{source.prefix}/" if source.prefix else "") if not k.endswith("info")]
            out["chunk_files"] = len(keys)
            return out
        spec = source.sharding
        reader = self.reader(source)
        out["sharding"] = spec.to_json()
        out["num_shards"] = spec.num_shards
        out["minishards_per_shard"] = spec.num_minishards
        shards = self.shards_present(source)

        # Shards go in batches well inside the reader's shard caches (1024 entries), so a batch's shard
        # files and indexes stay cached while its minishard indexes load; totals are taken from the
        # pool's results, never re-read through the LRU caches, which a dataset may outgrow.
        def load(shard: int) -> tuple[ShardFile | None, ShardIndex | None]:
            return reader.shard_file(shard), reader.shard_index(shard)

        def load_batch(batch: list[int]) -> list[tuple[ShardFile | None, ShardIndex | None]]:
            if self.store.cheap_size:
                loaded = list(pool.map(load, batch))
                reader.prefetch_minishards_of(batch)  # each shard file resolved and opened once
                return loaded
            # Remote: the batch's shard files and every minishard index with requests in flight together.
            reader.prefetch_minishards_of(batch)
            return [load(shard) for shard in batch]

        def count(job: tuple[int, int]) -> MinishardIndex:
            return reader.minishard_index(*job)

        per_shard = []
        with ThreadPoolExecutor(8 if self.store.cheap_size else 32) as pool:
            for first in range(0, len(shards), INSPECT_BATCH):
                batch = shards[first : first + INSPECT_BATCH]
                loaded = load_batch(batch)
                jobs = [
                    (shard, int(m))
                    for shard, (_, index) in zip(batch, loaded, strict=True)
                    if index is not None
                    for m in index.nonempty_minishards()
                ]
                totals = {shard: [0, 0] for shard in batch}
                # Local reads and prefetched (remote) indexes cost less than a thread hand-off each.
                counted = map(count, jobs) if self.store.cheap_size or reader.prefetches else pool.map(count, jobs)
                # Summed per shard from the decoded arrays: a few numpy calls a shard, not two a minishard.
                of_shard: dict[int, list[MinishardIndex]] = {}
                for (shard, _), mi in zip(jobs, counted, strict=True):
                    of_shard.setdefault(shard, []).append(mi)
                for shard, mis in of_shard.items():
                    starts = np.concatenate([mi.starts for mi in mis])
                    ends = np.concatenate([mi.ends for mi in mis])
                    totals[shard][0] = int(starts.size)
                    totals[shard][1] = int((ends - starts).sum()) if starts.size else 0
                fragments: dict[int, int] = {}
                if source.info_type == MULTILOD:  # the index points at manifests; fragments lie before them
                    files = {shard: file for shard, (file, _) in zip(batch, loaded, strict=True) if file is not None}
                    manifests = [(files[shard], int(cid), int(a), int(b)) for shard, mis in of_shard.items()
                                 if shard in files for mi in mis
                                 for cid, a, b in zip(mi.chunk_ids, mi.starts, mi.ends, strict=True)]
                    read = (map if self.store.cheap_size else pool.map)(
                        lambda job: fragment_bytes(reader, *job), manifests)
                    for (owner, _, _, _), n in zip(manifests, read, strict=True):
                        fragments[owner.shard] = fragments.get(owner.shard, 0) + n
                for shard, (file, index) in zip(batch, loaded, strict=True):
                    if file is None or index is None:
                        raise IndexDecodeError(
                            f"shard {shard} was listed but has no readable file", key=reader.shard_key(shard)
                        )
                    nonempty = index.nonempty_minishards().tolist()
                    index_bytes = spec.shard_index_size + sum(e - s for s, e in map(index.minishard_range, nonempty))
                    record = {
                        "shard": shard,
                        "file": file.display_key,
                        "file_size": file.size,
                        "minishards": len(nonempty),
                        "chunks": totals[shard][0],
                        "data_bytes": totals[shard][1],
                        "index_bytes": index_bytes,
                    }
                    if source.info_type == MULTILOD:
                        record.update(manifest_bytes=totals[shard][1], fragment_bytes=fragments.get(shard, 0),
                                      data_bytes=totals[shard][1] + fragments.get(shard, 0))
                    per_shard.append(record)
        out["shards_present"] = len(per_shard)
        out["chunks"] = sum(s["chunks"] for s in per_shard)
        out["data_bytes"] = sum(s["data_bytes"] for s in per_shard)
        if source.info_type == MULTILOD:
            out["manifest_bytes"] = sum(s["manifest_bytes"] for s in per_shard)
            out["fragment_bytes"] = sum(s["fragment_bytes"] for s in per_shard)
        out["shards"] = per_shard
        return out

    # -- locate / list -----------------------------------------------------------------------
    def _volume_record(self, source: Source, loc: ChunkLocation) -> dict[str, Any]:
        rec = {"scale": source.name, **loc.to_json()}
        if source.scale is not None:
            try:
                pos = decode_morton(np.asarray([loc.chunk_id], dtype=np.uint64), source.scale.grid_shape)[0]
                rec["grid_position"] = [int(p) for p in pos]
            except ArgumentError:
                rec["grid_position"] = None  # an id outside the grid (reported by validate)
        return rec

    def locate_format_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """The chunk holding voxel ``(x, y, z)`` (absolute coordinates, voxel_offset included)."""
        source = self.source(scale)
        if source.scale is None:
            raise ArgumentError(f"{source.name or 'this directory'} is keyed by id, not by voxel; use --segment")
        grid = source.scale.grid_position(voxel)
        chunk_id = source.scale.chunk_id(grid)
        if source.sharding is None:
            return self._locate_unsharded(source, grid, chunk_id)
        rec = self._volume_record(source, self.reader(source).locate(chunk_id))
        rec["voxel"] = [int(v) for v in voxel]
        return rec

    def _locate_unsharded(self, source: Source, grid: Sequence[int], chunk_id: int) -> dict[str, Any]:
        if source.scale is None:
            raise ArgumentError(f"{source.name or 'this directory'} is keyed by id, not by chunk position")
        key = source.scale.unsharded_chunk_key(grid)
        size = self.store.size(key) if self.store.cheap_size else None
        present = size is not None if self.store.cheap_size else self.store.read_range(key, 0, 0) is not None
        stored = next((key + x for x in (GZIP_SUFFIX, BROTLI_SUFFIX)
                       if not present and self.store.cheap_size and self.store.size(key + x) is not None), None)
        if stored is not None:  # CloudVolume's local layout
            key, size, present = stored, self.store.size(stored), True
        return {
            "scale": source.name,
            "chunk_id": chunk_id,
            "grid_position": list(grid),
            "chunk_key": key,
            "present": present,
            "size": size,
            "sharded": False,
        }

    def locate_chunk_id(self, chunk_id: int, scale: str | None = None) -> dict[str, Any]:
        """Where chunk ``chunk_id`` (a compressed Morton code, or an id in an id-keyed dir) is stored."""
        source = self.source(scale)
        if source.kind.startswith("annotation_"):
            return self._locate_annotation_key(source, chunk_id)
        if source.sharding is None:
            if source.scale is None:
                raise ArgumentError(f"{source.name!r} is not sharded")
            grid = decode_morton(np.asarray([chunk_id], dtype=np.uint64), source.scale.grid_shape)[0]
            return self._locate_unsharded(source, [int(g) for g in grid], chunk_id)
        return self._volume_record(source, self.reader(source).locate(chunk_id))

    # -- annotations ---------------------------------------------------------------------------
    def _locate_annotation_key(self, source: Source, key: int) -> dict[str, Any]:
        """An annotation index's key: an annotation id (by_id), a segment id (relationships), a cell's Morton code."""
        ann = self.annotations
        if source.level is not None and source.level_index is not None:
            try:
                cell = cell_of_chunk_id(source.level, key)
            except ArgumentError as exc:
                raise ArgumentError(f"chunk id {key} is not a cell of {source.name}: {exc}") from None
            return ann.locate_cell(source.level_index, cell)
        if source.relationship is not None:
            return ann.locate_related(source.relationship, key)
        return ann.locate_annotation(key)

    def locate_annotation(self, annotation_id: int) -> dict[str, Any]:
        """Where ``by_id`` stores an annotation (file, or shard, minishard and byte range)."""
        return self.annotations.locate_annotation(annotation_id)

    def locate_cell(self, cell: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """Where a spatial level (``--scale spatial/<key>``; default the finest) stores a cell."""
        source = self._spatial_source(scale)
        assert source.level_index is not None
        return self.annotations.locate_cell(source.level_index, cell)

    def locate_point(self, point: Sequence[float], scale: str | None = None) -> list[dict[str, Any]]:
        """Where the cell holding ``point`` (the collection's coordinates) is stored, at every level or one."""
        found = self.annotations.locate_point(point)
        if scale is None:
            return found
        source = self._spatial_source(scale)
        return [r for r in found if r["level"] == source.level_index]

    def _spatial_source(self, scale: str | None) -> Source:
        levels = [s for s in self.sources if s.level is not None]
        if self.annotation_info is None or not levels:
            raise ArgumentError("--cell and --point locate the spatial index of a precomputed annotation collection; "
                                "this dataset has none")
        if scale is None:
            return levels[-1]
        source = self.source(scale)
        if source.level is None:
            raise ArgumentError(f"{scale!r} is not a spatial index level; the levels are {[s.name for s in levels]}")
        return source

    def locate_segment(self, segment_id: int) -> list[dict[str, Any]]:
        """Where segment ``segment_id``'s mesh, skeleton or annotations are stored."""
        out = []
        for source in self.segment_sources():
            if source.sharding is None:
                key = join_key(source.prefix, unsharded_segment_name(source, segment_id))
                present = self.store.read_range(key, 0, 0) is not None
                if not present and self.store.read_range(key + GZIP_SUFFIX, 0, 0) is not None:
                    key, present = key + GZIP_SUFFIX, True  # CloudVolume's local layout
                out.append(
                    {
                        "source": source.name,
                        "kind": source.kind,
                        "segment": segment_id,
                        "key": key,
                        "present": present,
                        "sharded": False,
                    }
                )
                continue
            loc = self.reader(source).locate(segment_id)
            out.append({"source": source.name, "kind": source.kind, "segment": segment_id, **loc.to_json()})
        if not out:
            raise ArgumentError("this dataset has no segment-keyed data (no mesh, skeletons or annotations info)")
        return out

    def list_chunks(self, scale: str | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """One record per stored chunk; ``shard=`` and ``minishard=`` narrow the listing."""
        source = self.source(scale)
        shard, minishard = filters.get("shard"), filters.get("minishard")
        if source.sharding is None:
            if shard is not None or minishard is not None:
                raise ArgumentError(f"scale {source.name!r} is not sharded: --shard/--minishard do not apply")
            prefix = f"{source.prefix}/" if source.prefix else ""
            for key in self.store.list(prefix):
                if key.endswith("info"):
                    continue
                # Remote stores have no stat: a size there is a download of the chunk (null instead).
                size = self.store.size(key) if self.store.cheap_size else None
                yield {"scale": source.name, "chunk_key": key, "size": size, "sharded": False,
                       **annotation_file_fields(source, key[len(prefix):])}
            return
        if minishard is not None and shard is None:
            raise ArgumentError("--minishard needs --shard")
        sharding = source.sharding
        for name, value, count in (("shard", shard, sharding.num_shards),
                                   ("minishard", minishard, sharding.num_minishards)):
            if value is not None and not 0 <= int(value) < count:
                raise ArgumentError(f"--{name} {value}: scale {source.name!r} has {name}s 0 to {count - 1} "
                                    f"({name}_bits={count.bit_length() - 1})")
        reader = self.reader(source)
        if shard is None:
            # Remote: the shard probes in one wave and the minishard indexes (of the first batch) in the next,
            # instead of two dependent round trips per shard (see _prefetch_sources); later batches below.
            self._prefetch_sources([source])
        shards = [int(shard)] if shard is not None else self.shards_present(source)
        for first in range(0, len(shards), INSPECT_BATCH):
            batch = shards[first : first + INSPECT_BATCH]
            if shard is None and reader.prefetches:
                reader.prefetch_minishards_of(batch)  # a batch's indexes in flight together (cached ones skipped)
            for s in batch:
                locs = list(reader.iter_chunks(s, None if minishard is None else int(minishard)))
                for loc, pos in zip(locs, self._grid_positions(source, locs), strict=True):
                    yield {"scale": source.name, **loc.to_json(), **({} if pos is False else {"grid_position": pos}),
                           **annotation_file_fields(source, str(loc.chunk_id), sharded=True)}

    def _grid_positions(self, source: Source, locs: list[ChunkLocation]) -> list[list[int] | bool | None]:
        """Each chunk's grid position (``None`` off the grid; ``False`` for id-keyed data), decoded in one pass.

        An annotation spatial level's chunks are cells of its grid (their ids are the cells' Morton codes).
        """
        if source.scale is None and source.level is None:
            return [False] * len(locs)
        grid = source.scale.grid_shape if source.scale is not None else source.level.grid_shape  # type: ignore[union-attr]
        ids = np.asarray([loc.chunk_id for loc in locs], dtype=np.uint64)
        pos = decode_morton(ids, grid, check=False)
        bits = sum(bits_per_dimension(grid))
        off = np.any(pos >= np.asarray(grid, dtype=np.int64), axis=1) if ids.size else np.zeros(0, dtype=bool)
        if bits < 64:
            off |= (ids >> np.uint64(bits)) != 0
        return [None if o else p for o, p in zip(off.tolist(), pos.tolist(), strict=True)]

    # -- validate ----------------------------------------------------------------------------
    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every shard file of one scale (or all): see :mod:`.validate` for the checks.

        An annotation collection decodes every record of every index and, checked whole, cross-checks
        its indexes (:mod:`.annotations.validate`). The walk is :mod:`.dataset_validation`'s.
        """
        yield from validate_dataset(self, scale, progress)



def annotation_summary(info: AnnotationInfo) -> dict[str, Any]:
    """What ``inspect`` says about an annotation collection as a whole (its schema and bounds)."""
    schema = info.schema
    return {
        "annotation_type": schema.annotation_type.upper(),
        "rank": schema.rank,
        "dimensions": schema.dimensions_json(),
        "lower_bound": list(info.lower_bound),
        "upper_bound": list(info.upper_bound),
        "properties": [p.to_json() for p in schema.properties],
        "relationships": list(schema.relationships),
        "spatial_levels": len(info.spatial),
    }
