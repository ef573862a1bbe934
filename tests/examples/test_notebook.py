"""The example notebook runs from top to bottom in a real Jupyter kernel under Xvfb.

``examples/proofreading.ipynb`` is the tour a user follows (open, inspect shards, merge, cleave,
split, commit, branch, merge branches, export); its cells assert on what they did, so executing it
is a test of the whole workflow through the public API. It runs in a fresh kernel process (as in
Jupyter), which inherits the virtual display pytest-xvfb started.

``NAPARI_APPLICATION_IPY_INTERACTIVE=0``: without it the kernel can hang after the viewer is made
(see NAPARI-NOTES.md). Each cell has a timeout, so a hang fails the test instead of stalling CI.

The sample comes from the session's cache (``tests/volume_cases.sample``), as on a user's second run: its
generation on first use is tested in ``tests/core/test_sample_data.py``, and here it cost 6 CPU seconds.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from napari_shardscope.core.sample_data import SampleDataset
from tests.volume_cases import sample  # noqa: F401  (fixture: the session's sample, read only)

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "proofreading.ipynb"
CELL_TIMEOUT = 600
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_proofreading_notebook_runs_headless(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = dict(os.environ)  # with QT_API, set by tests/conftest.py to this environment's binding
    env.update({
        "NAPARI_APPLICATION_IPY_INTERACTIVE": "0",
        "SHARDSCOPE_NOTEBOOK_DIR": str(tmp_path / "work"),
        "SHARDSCOPE_CACHE_DIR": str(sample.root.parent),
    })
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)  # raises CellExecutionError, naming the cell, when a cell fails

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), "every code cell ran"
    screenshots = [o for c in code for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(screenshots) >= 4, "the nbscreenshot cells rendered images"
    for out in screenshots:
        png = base64.b64decode(out["data"]["image/png"])
        assert png.startswith(PNG_MAGIC) and len(png) > 10_000, "a real picture, not an empty canvas"
    # The export the notebook made is a dataset on disk.
    assert (tmp_path / "work" / "bodies-export" / "info").is_file()
