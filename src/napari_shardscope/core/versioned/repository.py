"""A versioned repository on local disk, on DVID's model (paper §2.2–2.3): embedded, no server — the door.

A repository is a directory holding a marker file, the engine's files and ``writer.lock``; the DAG,
the data instances, notes, logs and the data live in one ordered key-value engine, so every change
is one engine transaction (:mod:`.handle` says how handles share it). This module is where callers
import it from; the code lives in one module per concept (issue 30: it was one 1,400-line module):

===================  ==========================================================================
:mod:`.handle`       a handle's state caught up with other handles, its transactions, references
:mod:`.history`      versions, branches, the log, commits, new versions, notes
:mod:`.counters`     id counters and the id blocks a clone reserves from its remote
:mod:`.unversioned`  unversioned data (shared by every version)
:mod:`.transfer`     node transfer: reading and adopting whole versions (what remotes move)
:mod:`.fsck`         ``verify``: the whole store checked
:mod:`.access`       :class:`Repository` assembled; read/write/checkout/merge/batch/rewriting
:mod:`.opening`      :func:`create_repository`, :func:`open_repository`, the marker file
===================  ==========================================================================
"""

from __future__ import annotations

from napari_shardscope.core.versioned.access import Batch, Checkout, Repository, Rewriter
from napari_shardscope.core.versioned.handle import FORMAT_NAME
from napari_shardscope.core.versioned.opening import (
    DEFAULT_ENGINE,
    MARKER_FILE,
    create_repository,
    open_repository,
)

__all__ = [
    "DEFAULT_ENGINE",
    "FORMAT_NAME",
    "MARKER_FILE",
    "Batch",
    "Checkout",
    "Repository",
    "Rewriter",
    "create_repository",
    "open_repository",
]
