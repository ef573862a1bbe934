"""Where a table's pages go: the format sinks' seam, what a write produced, and atomic destinations.

Split from :mod:`.writing` (the driver that cuts rows into pages) so that every format's sink
can use :class:`Destination` and :class:`TableSummary` without importing the driver that picks
the sink.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, Location, open_store, parse_url
from napari_shardscope.core.errors import RefusedDestinationError
from napari_shardscope.core.tables.directory import Columns, PageDirectory, TableSchema

U64 = npt.NDArray[np.uint64]
#: The name prefix of the hidden directory or file a table is written into before it is renamed into place.
TEMP_PREFIX = ".shardscope-tmp-"


@dataclass(frozen=True)
class TableSummary:
    """What a writer wrote: the schema, the directory and per value column its largest value."""

    url: str
    format: str
    schema: TableSchema
    directory: PageDirectory
    page_rows: int
    value_max: Mapping[str, float | int | None] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return self.directory.num_rows

    def metadata(self) -> dict[str, Any]:
        """The JSON object every format stores about the table (``shardscope_sorted_table``)."""
        return {"format": 1, **self.schema.to_json(), "num_rows": self.num_rows, "page_rows": self.page_rows,
                "pages": self.directory.pages, "value_max": dict(self.value_max)}


class PageSink(Protocol):
    """A format's writer: pages in order, then :meth:`finish` (metadata and directory, the commit point)."""

    def write_page(self, number: int, keys: U64, values: Columns) -> None:
        ...

    def finish(self, summary: TableSummary) -> None:
        ...

    def abort(self) -> None:
        """Forget what was written (a failed write): temporary files and directories go."""
        ...


# -- destinations -------------------------------------------------------------------------------------------
class Destination:
    """Where a multi-file table is written, and how it is put in place when complete (module docstring).

    ``commit_key`` is the metadata document whose presence makes a table (refused when present
    unless ``overwrite``).
    """

    def __init__(self, url: str | os.PathLike[str], commit_key: str, *, overwrite: bool,
                 context: Any = None) -> None:
        self.location: Location = parse_url(url)
        self.url = self.location.url
        self.commit_key = commit_key
        self.overwrite = overwrite
        self._temp: Path | None = None
        if self.location.is_local:
            self.target = Path(self.location.kvstore["path"].rstrip("/") or "/")
            if self.target.exists() and not self.target.is_dir():
                raise RefusedDestinationError(f"{self.target} exists and is not a directory")
            if self.target.is_dir() and any(self.target.iterdir()) and not overwrite:
                raise RefusedDestinationError(f"{self.target} is not empty (pass overwrite=True to replace a table)")
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self._temp = self.target.parent / f"{TEMP_PREFIX}{self.target.name}-{uuid.uuid4().hex[:12]}"
            self._temp.mkdir()
            self.store: ByteStore = open_store(self._temp)
        else:
            from napari_shardscope.core.bytestore.context import shared_context

            self.store = open_store(self.location, context if context is not None else shared_context())
            if self.store.read_range(commit_key, 0, 0) is not None:
                if not overwrite:
                    raise RefusedDestinationError(f"{self.url} already holds a table ({commit_key}); pass "
                                                  "overwrite=True to replace it")
                self.store.delete(commit_key)  # readers now see no table until the new one is complete

    @property
    def temp_dir(self) -> Path | None:
        """The local directory being filled (``None`` on a remote store, or once committed)."""
        return self._temp

    def commit(self) -> None:
        """Put the finished table in place (local: rename; remote: the metadata was written last)."""
        if self._temp is None:
            return
        old: Path | None = None
        if self.target.exists():
            if not self.overwrite and any(self.target.iterdir()):
                raise RefusedDestinationError(f"{self.target} was filled by someone else while the table was written")
            old = self.target.parent / f"{TEMP_PREFIX}old-{self.target.name}-{uuid.uuid4().hex[:12]}"
            os.replace(self.target, old)
        os.replace(self._temp, self.target)
        self._temp = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None


