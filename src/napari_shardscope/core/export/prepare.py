"""What every export does before it writes a shard: check its arguments and make room at the destination.

Shared by the precomputed and the OME-Zarr writers, so both refuse the same inputs with the same words:

* a chunk or shard shape must be three positive integers (a zero divides by zero when the grid is laid out);
* the destination must not overlap the source: an export onto its own source (or into or around it)
  deletes or overwrites the voxels it is about to read;
* an existing dataset is replaced only when the caller says so, and then *cleared* first. Writing over it
  would leave the old dataset's shards wherever the new export writes none (another sharding, an all-zero
  shard), and the old metadata document over a mix of old and new shards if the export fails;
* the files an unfinished (killed, failed) export left where this one writes — shards without metadata —
  are the same danger: refused without ``overwrite``, deleted with it. The temporary files of writes killed
  before their rename are never data and are always removed;
* every metadata document goes before any shard, so an export killed while clearing never leaves a document
  standing over a dataset with shards missing (OME-Zarr would read them as zeros).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Sequence
from pathlib import Path

from napari_shardscope.core.bytestore import ByteStore, LocalByteStore
from napari_shardscope.core.bytestore.url import parse_url
from napari_shardscope.core.errors import OVERWRITE, ArgumentError, RefusedDestinationError
from napari_shardscope.core.export.source import ExportSource


def positive_shape(name: str, value: Sequence[int]) -> tuple[int, int, int]:
    """``value`` as three positive integers, for a chunk or shard shape.

    Raises
    ------
    ArgumentError
        Naming ``name`` and the value, when it is not three positive integers.
    """
    try:
        shape = tuple(operator.index(v) for v in value)
    except TypeError:
        shape = ()
    if len(shape) != 3 or min(shape) <= 0:
        raise ArgumentError(f"{name} must be 3 positive integers, got {value!r}")
    return shape[0], shape[1], shape[2]


def claim_destination(source: ExportSource, dest: str, store: ByteStore, metadata_key: str, fmt: str,
                      overwrite: bool) -> bool:
    """Check that ``source`` may be exported to ``dest``; whether ``dest`` holds a dataset to replace.

    Call before planning; then call :func:`make_room` with what this returns, once planning has checked
    everything else, so that a refused export never deletes the old dataset.

    Raises
    ------
    RefusedDestinationError
        When ``dest`` is, contains or lies inside a location of ``source``, or when it already holds a
        dataset (``metadata_key`` exists) and ``overwrite`` is false.
    """
    for location in source.locations():
        if _overlap(location, dest):
            raise RefusedDestinationError(f"dest {dest} overlaps the source {location}: an export cannot write "
                                          "where it reads; choose a destination outside the source")
    exists = store.read(metadata_key) is not None
    if exists and not overwrite:
        raise RefusedDestinationError(
            f"{dest} already holds a {fmt} dataset ({metadata_key} exists); pass {OVERWRITE} to replace it"
        ).suggesting(OVERWRITE)
    return exists


def make_room(store: ByteStore, dest: str, metadata_name: str, prefixes: Sequence[str], *, replacing: bool,
              overwrite: bool) -> None:
    """Clear the destination for the export about to write under ``prefixes``, metadata documents first.

    Call once planning has checked everything else, so that a refused export never deletes anything.
    ``replacing`` (from :func:`claim_destination`) clears the whole old dataset. Otherwise the keys an
    unfinished export left under ``prefixes`` (the scales or arrays this export writes) are refused without
    ``overwrite`` and deleted with it. Either way every key named ``metadata_name`` goes first (the group's
    and each array's ``zarr.json``), and a local destination loses the temporary files of killed writes.

    Raises
    ------
    RefusedDestinationError
        When files of an unfinished export are in the way and ``overwrite`` is false.
    StoreError
        When the store refuses a deletion (a read-only store, missing permissions).
    """
    if replacing:
        for key in _metadata_first(store.list(), metadata_name, only_metadata=True):
            store.delete(key)
        store.clear()
        return
    leftovers = [key for prefix in prefixes for key in store.list(prefix)]
    if leftovers and not overwrite:
        raise RefusedDestinationError(
            f"{dest} holds {len(leftovers)} files of an unfinished export ({leftovers[0]}, …) but no "
            f"{metadata_name}; pass {OVERWRITE} to replace them"
        ).suggesting(OVERWRITE)
    for key in _metadata_first(leftovers, metadata_name):
        store.delete(key)
    if isinstance(store, LocalByteStore):
        store.remove_temporaries()


def _metadata_first(keys: Iterable[str], metadata_name: str, *, only_metadata: bool = False) -> list[str]:
    """``keys`` in a safe order of deletion: the metadata documents (outermost first), then the rest.

    No reader ever finds a document standing over an array or dataset whose files are partly deleted.
    """
    def is_metadata(key: str) -> bool:
        return key.rsplit("/", 1)[-1] == metadata_name

    chosen = [k for k in keys if is_metadata(k) or not only_metadata]
    return sorted(chosen, key=lambda k: (not is_metadata(k), k.count("/")))


def _overlap(a: str, b: str) -> bool:
    """Whether the locations ``a`` and ``b`` are the same, or one lies inside the other."""
    root_a, parts_a = _place(a)
    root_b, parts_b = _place(b)
    n = min(len(parts_a), len(parts_b))
    return root_a == root_b and parts_a[:n] == parts_b[:n]


def _place(url: str) -> tuple[str, tuple[str, ...]]:
    """A store identity (the kvstore spec without its path) and the path's components.

    Local paths are resolved (symbolic links, ``..``), so two spellings of one directory compare equal.
    """
    spec = dict(parse_url(url).kvstore)
    path = str(spec.pop("path", ""))
    if spec.get("driver") == "file":
        return "file", Path(path).resolve().parts
    return json.dumps(spec, sort_keys=True), tuple(p for p in path.split("/") if p)
