"""The seam between a labelmap and its version handles: what a handle asks of the labelmap it reads.

A :class:`~napari_shardscope.core.labelmap.version.LabelmapVersion` (and the mesher) reach shared
state, the label index and the edit transaction through this Protocol rather than the
:class:`~napari_shardscope.core.labelmap.labelmap.Labelmap` class, because the labelmap hands out
the handles (:meth:`Labelmap.at`) and so imports them: naming the class back would be a cycle.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.edits import Planner
from napari_shardscope.core.labelmap.label_index import BaseIndexReader, IndexSummary, SvIndex
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import BaseSource
from napari_shardscope.core.labelmap.recordmap import MapReader, MapTxn
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.view import VersionWriter

T = TypeVar("T")

class LabelmapBackend(Protocol):
    """What a version handle asks of its labelmap: shared state, the label index and the edit transaction.

    :class:`~napari_shardscope.core.labelmap.labelmap.Labelmap` is the one implementation. The handle
    names it by this Protocol because the labelmap hands out handles (:meth:`Labelmap.at`), so this
    module cannot import it back.
    """

    @property
    def name(self) -> str: ...

    @property
    def repo(self) -> Repository: ...

    @property
    def instance(self) -> Instance: ...

    @property
    def config(self) -> LabelmapConfig: ...

    @property
    def base(self) -> BaseSource: ...

    def state(self, ref: str | Version) -> VersionState:
        """The current in-memory state of a version."""
        ...

    def reader(self, state: VersionState) -> MapReader:
        """Reads of a version's body map (hold ``state.lock``)."""
        ...

    def txn(self, state: VersionState) -> MapTxn:
        """A planning transaction over a version's body map."""
        ...

    def base_index(self, progress: Progress | None = None) -> BaseIndexReader:
        """The base label index, read page by page."""
        ...

    def index_summary(self, progress: Progress | None = None) -> IndexSummary:
        """The base index summary (every base supervoxel and its voxel count)."""
        ...

    def entry(self, state: VersionState, sv: int) -> SvIndex | None:
        """Where supervoxel ``sv`` is at a version (None: it does not exist there)."""
        ...

    def exists(self, state: VersionState, svs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``svs`` exist at a version."""
        ...

    def edit(self, version: str | Version, planner: Planner[T], user: str | None = None) -> tuple[Mutation, T]:
        """Plan and write one edit at an open version as one transaction."""
        ...

    def new_ids(self, w: VersionWriter, count: int) -> range:
        """``count`` new body/supervoxel ids reserved in ``w``'s transaction."""
        ...

    def holding_edits(self) -> AbstractContextManager[None]:
        """A context in which edits of the labelmap wait."""
        ...

    def mesher(self, lod: int = 0) -> Any:
        """The labelmap's :class:`~napari_shardscope.core.labelmap.meshes.BodyMesher` for ``lod``."""
        ...
