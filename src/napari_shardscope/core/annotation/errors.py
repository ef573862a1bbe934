"""The annotation type's errors, each a subclass of the package's tree.

A proofreading tool must tell "no such annotation" from "this edit makes no sense" (an id already
used, a synapse relationship from a post-synaptic point) from "the store's annotation data is
damaged" without parsing messages; the CLI maps each branch to its exit code.
"""

from __future__ import annotations

from napari_shardscope.core.errors import (
    ArgumentError,
    ConflictError,
    FormatError,
    NotFoundError,
    RefusedWriteError,
    ShardscopeError,
)


class AnnotationError(ShardscopeError):
    """Root of the annotation type's own errors."""


class AnnotationArgumentError(AnnotationError, ArgumentError):
    """An edit or query the annotations at this version do not allow (bad point, tag, relationship)."""


class UnknownAnnotationError(AnnotationError, NotFoundError):
    """No annotation with that id exists at the version (never did, or was deleted)."""


class AnnotationExistsError(AnnotationError, ConflictError):
    """An add names an id that an annotation already has at this version."""


class NothingToUndoError(AnnotationError, RefusedWriteError):
    """Undo (or redo) asked for, but the open version has no annotation edit left to undo (or redo)."""


class AnnotationRecordError(AnnotationError, FormatError):
    """An annotation record or mutation-log entry cannot be decoded (a damaged store or a newer format)."""


class AnnotationTableError(AnnotationError, FormatError):
    """A synapse table or annotation source being imported breaks what a base needs (names the file, column, row)."""
