"""Engine names to engines: the one place that knows which storage engines exist.

The repository stores the engine's name in its marker file and asks :func:`open_engine` for it, so
adding an engine means one module implementing :mod:`.protocol` and one entry in :data:`ENGINES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.engines.lmdb import LmdbEngine
from napari_shardscope.core.versioned.engines.memory import MemoryEngine
from napari_shardscope.core.versioned.engines.protocol import OrderedKV
from napari_shardscope.core.versioned.engines.sqlite import SqliteEngine


@dataclass(frozen=True)
class EngineKind:
    """One storage engine: how to open it and whether it keeps files in the repository directory.

    Attributes
    ----------
    name
        The name repositories record (``engine`` in the marker file).
    keeps_files
        False for an engine living in memory only: such a repository has no directory and cannot
        be opened again.
    open
        ``open(directory, create, durable)``; ``directory`` is None only for engines without files.
    """

    name: str
    keeps_files: bool
    open: Callable[[Path | None, bool, bool], OrderedKV]


def _open_lmdb(directory: Path | None, create: bool, durable: bool) -> OrderedKV:
    assert directory is not None
    return LmdbEngine(directory, create=create, durable=durable)


def _open_sqlite(directory: Path | None, create: bool, durable: bool) -> OrderedKV:
    assert directory is not None
    return SqliteEngine(directory, create=create, durable=durable)


def _open_memory(directory: Path | None, create: bool, durable: bool) -> OrderedKV:
    return MemoryEngine()


#: The engines, default first (LMDB: see :mod:`bench.versioned` for the measurement behind it).
ENGINES: Mapping[str, EngineKind] = {
    kind.name: kind
    for kind in (
        EngineKind("lmdb", True, _open_lmdb),
        EngineKind("sqlite", True, _open_sqlite),
        EngineKind("memory", False, _open_memory),
    )
}
#: Engine names accepted by :func:`open_engine`, default first.
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)


def engine_kind(name: str) -> EngineKind:
    """The engine called ``name``; an :class:`ArgumentError` naming the choices otherwise."""
    kind = ENGINES.get(name)
    if kind is None:
        raise ArgumentError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    return kind


def open_engine(name: str, directory: Path | None, *, create: bool, durable: bool = True) -> OrderedKV:
    """Open (or create) the engine ``name`` storing its files in ``directory``.

    Parameters
    ----------
    name
        One of :data:`ENGINE_NAMES`.
    directory
        The repository directory (ignored by the memory engine).
    create
        Create the engine's files; when False they must exist (a missing file is never created
        silently, so a typo in a path is an error rather than a new empty store).
    durable
        Flush to disk at every commit. ``False`` trades crash durability of the last commits (not
        consistency) for bulk-ingest speed.
    """
    kind = engine_kind(name)
    if kind.keeps_files and directory is None:
        raise ArgumentError(f"the {name} engine needs a directory")
    return kind.open(directory, create, durable)
