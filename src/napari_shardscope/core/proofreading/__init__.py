"""Proofreading without a GUI: the session (repository, labelmap, checked-out version) and the controller.

The napari panels, the notebook and the tests drive the same objects::

    from napari_shardscope.core.proofreading import ProofreadingController

    c = ProofreadingController()
    c.connect("proofread.repo")               # or c.create(path, base_url, agglomeration=...)
    c.select(a); c.add_to_selection(b); c.merge()
    c.commit("merged a and b"); c.branch("alt")
    c.state                                    # a frozen snapshot: selection, actions and why not, status
"""

from napari_shardscope.core.proofreading.controller import ACTIONS, MAX_SEED_VOXELS, ProofreadingController
from napari_shardscope.core.proofreading.jobs import Job
from napari_shardscope.core.proofreading.session import (
    ProofreadingSession,
    SessionEvent,
    VersionRow,
    create_labelmap_repository,
)
from napari_shardscope.core.proofreading.state import (
    MODES,
    ActionState,
    BodyInfo,
    ControllerState,
    MergePlanState,
    PendingSplit,
    Status,
)

__all__ = [
    "ACTIONS",
    "MAX_SEED_VOXELS",
    "MODES",
    "ActionState",
    "BodyInfo",
    "ControllerState",
    "Job",
    "MergePlanState",
    "PendingSplit",
    "ProofreadingController",
    "ProofreadingSession",
    "SessionEvent",
    "Status",
    "VersionRow",
    "create_labelmap_repository",
]
