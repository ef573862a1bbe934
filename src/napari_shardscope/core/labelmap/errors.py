"""The labelmap's errors, each a subclass of the package's tree.

A proofreading tool must tell "this edit makes no sense here" (a supervoxel that is not in the
body, an empty split) from "no such label" from "the store's labelmap data is inconsistent"
without parsing messages: the widgets show the first two to the proofreader and report the last
as a bug. Edits refused on a committed version raise the store's own
:class:`~napari_shardscope.core.versioned.errors.CommittedVersionError`.
"""

from __future__ import annotations

from napari_shardscope.core.errors import (
    ArgumentError,
    CorruptDataError,
    NotFoundError,
    RefusedWriteError,
    ShardscopeError,
    UnsupportedError,
)


class LabelmapError(ShardscopeError):
    """Root of the labelmap's own errors."""


class MappingError(LabelmapError, ArgumentError):
    """An edit the current mapping does not allow (supervoxel not in the body, body merged away…)."""


class UnknownLabelError(MappingError, NotFoundError):
    """No body or supervoxel with that id exists at the version (never did, or was split/merged away)."""


class SplitError(MappingError):
    """A split that would leave an empty part: no voxel selected, or every voxel selected (dvid#289)."""


class NothingToUndoError(LabelmapError, RefusedWriteError):
    """Undo (or redo) asked for, but the open version has no edit left to undo (or redo)."""


class LabelmapStateError(LabelmapError, CorruptDataError):
    """The store's labelmap data cannot be used: interrupted creation, or a store merge whose two
    sides both edited the labelmap (a key merge of two body maps is no body map)."""


class IndexNotBuiltError(LabelmapError, UnsupportedError):
    """A query needs the base label index, which was never built and is too large to build on the spot.

    Built by the Dask job ``shardscope index REPO NAME`` (a cluster with ``--scheduler``).
    """


class LabelmapFormatError(LabelmapError, UnsupportedError):
    """The labelmap was written in an older format (its body map a replay of its log): migrate it first,
    with ``shardscope repo migrate REPO`` (:func:`~napari_shardscope.core.labelmap.migrate.migrate_repository`)."""
