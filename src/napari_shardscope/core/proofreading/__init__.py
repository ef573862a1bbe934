"""Proofreading without a GUI: the session (repository, labelmap, checked-out version) and the controller.

The napari panels, the notebook and the tests drive the same objects:

>>> from napari_shardscope.core.proofreading import ProofreadingController
>>> from napari_shardscope.core.sample_data import ensure_sample_dataset
>>> sample = ensure_sample_dataset()
>>> c = ProofreadingController()
>>> version = c.create("proofread.repo", str(sample.segmentation), agglomeration=sample.bodies)  # or c.connect(path)
>>> c.select(19273), c.add_to_selection(70268)              # a click and a Shift-click
((19273,), (19273, 70268))
>>> c.state.actions["merge"]                                # a frozen snapshot: actions and why not, status …
ActionState(enabled=True, reason='')
>>> mutation = c.merge()
>>> c.status.text
'merged body 70268 into 19273'
>>> c.commit("merged two bodies").locked                    # committed: read-only, and the panels say why
True
>>> c.branch("alt").branch                                  # a new open version on branch alt
'alt'
"""

from napari_shardscope.core.proofreading.actions import ACTIONS
from napari_shardscope.core.proofreading.controller import MAX_SEED_VOXELS, ProofreadingController
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
