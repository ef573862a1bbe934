"""The npe2 manifest is valid and found through the installed entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def test_npe2_validate() -> None:
    npe2 = shutil.which("npe2") or str(Path(sys.executable).with_name("npe2"))
    proc = subprocess.run([npe2, "validate", "napari-shardscope"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "valid" in proc.stdout


def test_core_imports_without_gui() -> None:
    code = (
        "import sys, napari_shardscope.core.formats.precomputed.inspector; "
        "from napari_shardscope.core.cli.parser import build_parser; build_parser(); "
        # every core verb's module (build_parser imports their declarations; a verb's module loads when it runs)
        "import napari_shardscope.core.cli.inspect, napari_shardscope.core.cli.repo, "
        "napari_shardscope.core.cli.export, napari_shardscope.core.cli.labelmap, "
        "napari_shardscope.core.cli.serve, napari_shardscope.core.cli.remote; "
        "bad = [m for m in sys.modules "
        "       if m.split('.')[0] in ('napari', 'qtpy', 'PyQt5', 'PyQt6', 'PySide6', 'magicgui')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
