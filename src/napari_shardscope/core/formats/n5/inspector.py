"""The N5 side of ``shardscope inspect | locate | ls | validate`` and of the shard browser.

An N5 dataset has no index: each block is its own file (key) named by its grid position, so
"which blocks exist" is a listing of the store and "how big" is a stat. :class:`N5Inspector`
satisfies :class:`napari_shardscope.core.formats.api.DatasetInspector` over a dataset or a multiscale
group (``s0``, ``s1``, …) at the root of a byte store.

Coordinates are N5's own order, the order of ``dimensions`` in ``attributes.json`` (x, y, z: the
fastest-varying axis first); grid positions and block paths use it too. Records name a block
twice: ``block_path`` relative to its dataset (``"0/4/1"``, as the N5 spec writes it) and
``chunk_key``, its key in the store (``"s0/0/4/1"``).

On stores where a size is not a cheap metadata call (remote object stores through TensorStore),
sizes are reported as ``null`` rather than downloading every block to count its bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from napari_shardscope.core.bytestore import ByteStore, join_key
from napari_shardscope.core.errors import ArgumentError, FormatError, NotADatasetError, StoreError
from napari_shardscope.core.formats.n5.attributes import ATTRIBUTES_FILE, DatasetAttributes, ScaleLevel, list_scales
from napari_shardscope.core.formats.n5.block import (
    DecodedBlock,
    decode_block,
    decode_block_header,
    format_block_key,
    format_block_path,
    list_blocks,
    parse_block_path,
    read_block,
    read_block_bytes,
)
from napari_shardscope.core.formats.n5.volume import block_path_test, presented_order, stored_axes, volume_placement
from napari_shardscope.core.formats.problem import Problem, check_files, unreadable_problems
from napari_shardscope.core.progress import Progress


class N5Inspector:
    """Read-only view of an N5 dataset or multiscale group: scales, blocks, sizes, integrity.

    Parameters
    ----------
    store
        The byte store whose root (or ``path``) is the dataset or the multiscale group.
    levels
        Its scales, already parsed (:func:`~.attributes.list_scales`, which
        :class:`~.dataset.N5Dataset` calls once for the viewer and the inspector).
    root
        The decoded ``attributes.json`` at ``path`` (its ``axes`` name the volume's axes).
    path
        Key prefix of the dataset or group inside ``store``.
    """

    format_name = "n5"

    def __init__(self, store: ByteStore, levels: Sequence[ScaleLevel], root: Mapping[str, Any],
                 path: str = "") -> None:
        self.store = store
        self.path = path
        self.levels: list[ScaleLevel] = list(levels)
        self.placement = volume_placement(self.levels, root)
        #: Axis names in N5 order, and each presented axis's N5 axis (the viewer's transpose).
        self.stored_axes = stored_axes(self.levels, root)
        self.presented_order = presented_order(self.levels, root)
        self._other_levels: dict[str, ScaleLevel] = {}

    def __repr__(self) -> str:
        return f"N5Inspector({self.store!r}, scales={self.scale_keys()})"

    @property
    def multiscale(self) -> bool:
        """Whether the root is a multiscale group (rather than a single dataset)."""
        return self.levels[0].key != ""

    def scale_keys(self) -> list[str]:
        """``["s0", "s1", …]`` for a multiscale group, ``[""]`` for a single dataset."""
        return [lvl.key for lvl in self.levels]

    def level(self, scale: str | None = None) -> ScaleLevel:
        """The scale named ``scale`` (``None`` = the finest).

        Besides the group's ``sN`` keys, ``scale`` may be the path of any dataset under the root
        (e.g. ``"setup0/timepoint0/s2"`` in a BigDataViewer container).
        """
        if scale is None:
            return self.levels[0]
        for lvl in self.levels:
            if lvl.key == scale:
                return lvl
        if scale not in self._other_levels:
            try:
                found = list_scales(self.store, join_key(self.path, scale))
            except NotADatasetError:
                found = []
            if len(found) != 1 or found[0].key != "":
                raise ArgumentError(f"no scale {scale!r}; scales are {self.scale_keys()} "
                                    "(or give the path of a dataset under the root)")
            self._other_levels[scale] = replace(found[0], key=scale)
        return self._other_levels[scale]

    def attributes(self, scale: str | None = None) -> DatasetAttributes:
        """The dataset attributes of one scale."""
        return self.level(scale).attributes

    # -- inspect -----------------------------------------------------------------------------
    def inspect(self, scale: str | None = None) -> dict[str, Any]:
        """Per scale: geometry, data type, compression, blocks stored and their bytes.

        Reads the ``attributes.json`` files (at construction) and lists the store; block data is
        never read. Each scale of the dataset or group carries ``volume``: the scale as
        ``open_volume`` presents it (axes, unit, shape, dtype, voxel_size, translate,
        downsampling_factors; z, y, x order, nm when the metadata names length units).
        ``bytes_read`` / ``requests`` count everything read through this inspector's store so far.
        """
        levels = [self.level(scale)] if scale is not None else self.levels
        result: dict[str, Any] = {"format": "n5", "url": self.store.url, "multiscale": self.multiscale,
                                  "scales": [self._inspect_level(lvl) for lvl in levels]}
        result["bytes_read"] = self.store.stats.bytes_read
        result["requests"] = self.store.stats.requests
        return result

    def _inspect_level(self, lvl: ScaleLevel) -> dict[str, Any]:
        attrs = lvl.attributes
        out = lvl.to_json()
        out.update(grid_shape=list(attrs.grid_shape), num_blocks=attrs.num_blocks,
                   axes=None if self.stored_axes is None else list(self.stored_axes),
                   volume=self.placement.level_json(lvl.key))
        try:
            blocks = list(list_blocks(self.store, attrs))
        except StoreError as exc:  # e.g. plain HTTP cannot list
            out.update(blocks_present=None, data_bytes=None, listing_error=str(exc))
            return out
        out["blocks_present"] = len(blocks)
        out["data_bytes"] = sum(self.store.size(key) or 0 for key, _ in blocks) if self.store.cheap_size else None
        return out

    # -- locate / list -----------------------------------------------------------------------
    def locate_format_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """The block holding ``voxel`` (N5 order: x, y, z as ``dimensions`` lists them).

        Returns
        -------
        dict
            ``scale``, ``voxel``, ``grid_position``, ``block_path``, ``chunk_key``, ``present`` and
            ``size`` (stored bytes; ``null`` when absent or when the store cannot stat cheaply).
        """
        lvl = self.level(scale)
        grid = lvl.attributes.grid_position(voxel)
        key = format_block_key(lvl.attributes, grid)
        if self.store.cheap_size:
            size = self.store.size(key)
            present = size is not None
        else:
            size = None
            present = self.store.read_range(key, 0, 0) is not None
        return {**self._record(lvl, grid, key, present, size), "voxel": [int(v) for v in voxel]}

    def list_chunks(self, scale: str | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """One record per stored block of one scale (the finest by default), in key order.

        N5 has no shards or minishards, so no filters apply.
        """
        used = {k: v for k, v in filters.items() if v is not None}
        if used:
            raise ArgumentError(f"N5 datasets have no shards or minishards: {sorted(used)} do not apply")
        lvl = self.level(scale)
        for key, grid in list_blocks(self.store, lvl.attributes):
            size = self.store.size(key) if self.store.cheap_size else None
            yield self._record(lvl, grid, key, True, size)

    def read_block(self, grid_position: Sequence[int], scale: str | None = None) -> DecodedBlock | None:
        """Read and decode one block (``None`` when it is not stored); see :func:`.block.decode_block`."""
        return read_block(self.store, self.level(scale).attributes, grid_position)

    @staticmethod
    def _record(lvl: ScaleLevel, grid: Sequence[int], key: str, present: bool, size: int | None) -> dict[str, Any]:
        return {"scale": lvl.key, "grid_position": [int(g) for g in grid], "block_path": format_block_path(grid),
                "chunk_key": key, "present": present, "size": size}

    # -- validate ----------------------------------------------------------------------------
    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every stored block of one scale (all scales by default); yield each problem.

        Checks: numeric keys that are not block paths of the dataset (wrong depth, leading zeros);
        grid positions outside the block grid; truncated or invalid headers; header dimensions that
        do not match the block's place in the grid (only end blocks may be smaller; TensorStore's
        full-size end blocks are accepted; varlength blocks are held to the same rule); data that does
        not decode or decodes to the wrong size.
        """
        levels = [self.level(scale)] if scale is not None else self.levels
        work: list[tuple[DatasetAttributes, str, str]] = []
        bad: set[str] = set()
        for lvl in levels:
            prefix = f"{lvl.attributes.path}/" if lvl.attributes.path else ""
            # dangling links, link loops, FIFOs, sockets, and directories where a block file should be
            unreadable, found = unreadable_problems(self.store, prefix, block_path_test(lvl.attributes), "block")
            yield from (p for p in unreadable if p.key not in bad)
            bad |= found
            work.extend((lvl.attributes, key, key[len(prefix):]) for key in self.store.list(prefix))
        work = [(a, key, rel) for a, key, rel in work if _looks_numeric(rel) and key not in bad]
        yield from check_files(work, lambda w: w[1], lambda w: self._check_key(*w), progress, what="blocks")

    def _check_key(self, attrs: DatasetAttributes, key: str, rel: str) -> list[Problem]:
        grid = parse_block_path(rel, attrs.ndim)
        if grid is None:
            return [Problem(key, f"{rel!r} is not a block path of this {attrs.ndim}-D dataset "
                                 f"({attrs.ndim} plain decimal grid coordinates)")]
        problems: list[Problem] = []
        in_grid = attrs.contains_grid_position(grid)
        if not in_grid:
            problems.append(Problem(key, f"grid position {grid} is outside the block grid {attrs.grid_shape}"))
        try:
            data = read_block_bytes(self.store, attrs, key)
        except FormatError as exc:
            return [*problems, Problem(key, exc.message, exc.offset)]
        if data is None:
            return [*problems, Problem(key, "listed but could not be read")]
        try:
            header = decode_block_header(data, key=key)
        except FormatError as exc:
            return [*problems, Problem(key, exc.message, exc.offset)]
        if len(header.shape) != attrs.ndim:
            return [*problems, Problem(key, f"header has {len(header.shape)} dimensions, the dataset has "
                                            f"{attrs.ndim}", 2)]
        if in_grid:
            message = check_block_shape(attrs, grid, header.shape)
            if message is not None:
                problems.append(Problem(key, message, 4))
                if any(d > b for d, b in zip(header.shape, attrs.block_size, strict=True)):
                    return problems  # decode_block refuses it for the same reason
        try:
            decode_block(data, attrs, key=key)
        except FormatError as exc:
            problems.append(Problem(key, exc.message, exc.offset))
        return problems


def check_block_shape(attrs: DatasetAttributes, grid_position: Sequence[int], shape: Sequence[int]) -> str | None:
    """Why a block's header dimensions do not fit its grid position, or ``None`` when they do.

    Each dimension must equal the block size, except at the upper end of an axis, where it may be
    anything from the part inside the dataset (Java N5 writes that) up to the block size
    (TensorStore writes that).
    """
    inside = attrs.block_shape(grid_position)
    ok = all(d == b or (c < b and c <= d <= b)
             for d, b, c in zip(shape, attrs.block_size, inside, strict=True))
    if ok:
        return None
    expected = f"{attrs.block_size}" if inside == attrs.block_size else f"{inside} (or up to {attrs.block_size})"
    return f"header dimensions {tuple(shape)} do not fit grid position {tuple(grid_position)}: expected {expected}"


def _looks_numeric(rel: str) -> bool:
    """Whether a key under a dataset looks like a block (all components digits), valid or not."""
    return rel != ATTRIBUTES_FILE and all(p.isascii() and p.isdigit() for p in rel.split("/"))
