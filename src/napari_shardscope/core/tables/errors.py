"""The errors of sorted tables, in the groups of :mod:`napari_shardscope.core.errors`.

A table read page by page can only be trusted as far as it is checked: a page directory that
claims a key range its page does not hold would send lookups to the wrong page and answer "not
listed" for a supervoxel that is. Every check names the file or key and, where it is known, the
byte offset, so a user can tell *which* file of a pipeline's output is broken.
"""

from __future__ import annotations

from napari_shardscope.core.errors import ArgumentError, FormatError, NotFoundError


class TableError(FormatError):
    """A stored sorted table breaks its own rules (names the file or key and the byte offset)."""


class UnsortedTableError(TableError):
    """Stored keys are not in ascending order (inside a page, or from one page to the next)."""


class PageDirectoryError(TableError):
    """The page directory disagrees with itself or with a page it describes (first/last key, row count)."""


class TableDtypeError(TableError):
    """A stored column has a data type a sorted table cannot use (a float or negative key, a string value)."""


class TruncatedPageError(TableError):
    """A page's bytes end before the rows its directory promises."""


class UnsortedKeysError(ArgumentError):
    """Rows handed to a writer are not sorted by key (names the page and row), or repeat a unique key."""


class NotATableError(NotFoundError):
    """Nothing at a path or URL is a sorted table of a format this package reads."""
