"""The action table: every row names a real controller method, and the panels read their words from it."""

from __future__ import annotations

import inspect

import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.proofreading import ACTIONS, ProofreadingController
from napari_shardscope.core.proofreading.actions import ACTION_ROWS, ACTION_TABLE, action_row


def test_every_action_row_is_run_by_a_controller_method() -> None:
    for row in ACTION_ROWS:
        handler = getattr(ProofreadingController, row.handler, None)
        assert inspect.isfunction(handler), f"{row.name}: no controller method {row.handler!r}"
    assert list(ACTIONS) == [row.name for row in ACTION_ROWS]
    assert ACTION_TABLE["merge"].tip == "merge the selected bodies into the first (Shift-M)"


def test_an_unknown_action_is_refused_by_name() -> None:
    with pytest.raises(ArgumentError, match="unknown action 'fly'"):
        action_row("fly")
    with pytest.raises(ArgumentError, match="unknown action 'fly'"):
        ProofreadingController().action("fly")
