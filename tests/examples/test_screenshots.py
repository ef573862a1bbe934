"""``scripts/screenshots.py`` renders every panel's README picture, in its own process, as a user runs it.

The script drives each panel through its public methods with the sample data; running it here keeps
the README's pictures reproducible (a panel change that breaks the script fails this test). The
child process inherits the virtual display pytest-xvfb started.

Every panel is rendered once, in the ``small`` window (960 x 600): the script's other default size is
napari's first-start window, about as large on this display (at least 1000 x 600), and the panel functions
are the same at either size, so a second round at it exercised nothing new for 5 more viewers (half the
test's time). The sample comes from the session's cache (``tests/volume_cases.sample``); its generation on
first use is tested in ``tests/core/test_sample_data.py``.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from napari_shardscope.core.sample_data import SampleDataset
from tests.volume_cases import sample  # noqa: F401  (fixture: the session's sample, read only)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "screenshots.py"


def panels() -> list[str]:
    """The panel names the script knows (its PANELS table), read from the script itself: its top level imports
    only the standard library (napari and the panels are imported inside ``render``), so running it here as a
    module, not as ``__main__``, costs nothing and renders nothing (a child interpreter for this cost 0.35 CPU-s)."""
    return list(runpy.run_path(str(SCRIPT))["PANELS"])


@pytest.mark.qt_binding_lane
def test_screenshots_script_renders_every_panel(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    names = panels()
    assert "shard_browser" in names
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, SHARDSCOPE_CACHE_DIR=str(sample.root.parent), TMPDIR=str(scratch))  # QT_API: conftest
    done = subprocess.run([sys.executable, str(SCRIPT), "--window", "small", "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    # the panels' repositories and settings went with the script; Qt 5 keeps its per-user runtime directory
    # there (``runtime-<user>``, made when XDG_RUNTIME_DIR is unset, and found again by the next Qt process)
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("runtime-")] == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{n}-small.png" for n in names)
    for name in names:
        png = tmp_path / "out" / f"{name}-small.png"
        with Image.open(png) as img:
            rgb = img.convert("RGB")
            assert rgb.size[0] >= 900 and rgb.size[1] >= 560, (png.name, rgb.size)  # the whole 960 x 600 window
            # a real window: many distinct colours (panel widgets, EM image, labels), not a blank frame
            assert len(rgb.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 50, png.name
