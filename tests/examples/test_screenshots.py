"""``scripts/screenshots.py`` renders every panel's README picture, in its own process, as a user runs it.

The script drives each panel through its public methods with the sample data; running it here keeps
the README's pictures reproducible (a panel change that breaks the script fails this test). The
child process inherits the virtual display pytest-xvfb started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "screenshots.py"


def panels() -> list[str]:
    """The panel names the script knows (its PANELS table), asked from the script itself."""
    code = f"import runpy; m = runpy.run_path({str(SCRIPT)!r}); print(' '.join(m['PANELS']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.qt_binding_lane
def test_screenshots_script_renders_every_panel(tmp_path: Path) -> None:
    names = panels()
    assert "shard_browser" in names
    env = dict(os.environ, SHARDSCOPE_CACHE_DIR=str(tmp_path / "cache"))  # QT_API: tests/conftest.py
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in names:
        for suffix, least in (("", (1000, 600)), ("-small", (900, 560))):  # napari's default window; a small one
            png = tmp_path / "out" / f"{name}{suffix}.png"
            assert png.is_file(), png.name
            with Image.open(png) as img:
                rgb = img.convert("RGB")
                assert rgb.size[0] >= least[0] and rgb.size[1] >= least[1], (png.name, rgb.size)
                # a real window: many distinct colours (panel widgets, EM image, labels), not a blank frame
                assert len(rgb.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 50, png.name
