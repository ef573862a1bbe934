"""``scripts/install.sh`` modes are wired to ``pyproject.toml`` extras, and the ``notebook`` mode gives what the
README's Jupyter section and ``test_notebook.py`` need (without running an install: ``INSTALL_DRY_RUN=1``)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "install.sh"


def extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"]["optional-dependencies"])


def names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings (``"nbconvert>=7"`` → ``nbconvert``; own extras kept whole)."""
    return {re.split(r"[<>=!~ ;]", r, maxsplit=1)[0] for r in requirements}


def modes() -> list[str]:
    m = re.search(r'^modes="([^"]+)"', INSTALL.read_text(), re.MULTILINE)
    assert m, "install.sh lists its modes"
    return m.group(1).split()


def dry_run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(INSTALL), mode], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "INSTALL_DRY_RUN": "1"}, stdin=subprocess.DEVNULL)


def test_every_mode_is_an_extra() -> None:
    assert set(modes()) <= set(extras())
    assert "notebook" in modes()
    for mode in modes():
        done = dry_run(mode)
        venv = ".venv-pyqt5" if "pyqt5" in mode else ".venv"
        assert done.returncode == 0 and f"would install -e .[{mode}] into {venv}" in done.stdout, done.stderr


def test_the_notebook_mode_has_jupyter_nbconvert_a_kernel_and_napari_with_its_binding() -> None:
    notebook = extras()["notebook"]
    got = names(notebook)
    # what test_notebook.py imports and runs (nbformat, nbclient, the python3 kernel), what the README's
    # Jupyter section runs (JupyterLab, `jupyter nbconvert --execute`), and napari with a Qt binding ([all])
    assert {"jupyterlab", "nbconvert", "nbclient", "nbformat", "ipykernel"} <= got
    assert any(r.startswith("napari-shardscope[") and "all" in r for r in notebook)
    assert any(r.startswith("napari[pyqt6]") for r in extras()["all"])
    source = (ROOT / "tests" / "examples" / "test_notebook.py").read_text()
    for module in re.findall(r'importorskip\("(\w+)"\)', source):
        assert module in got, f"test_notebook.py needs {module}, which the notebook extra lacks"


def test_an_unknown_mode_lists_the_modes() -> None:
    done = dry_run("notebooks")
    assert done.returncode == 2 and "unknown mode 'notebooks'" in done.stderr and "notebook" in done.stderr


def test_every_mode_the_script_branches_on_is_a_mode_and_the_header_lists_each() -> None:
    """A ``case`` arm naming a mode that is not in ``modes`` is dead (``test-pyqt6`` was, after the PyQt6 lane
    became ``test``); a mode missing from the header's usage lines is one a user cannot find."""
    text = INSTALL.read_text()
    arms = re.findall(r"^\s+([a-z0-9|-]+)\)", text, re.MULTILINE)
    named = {m for arm in arms for m in arm.split("|")}
    assert named and named <= set(modes()), named - set(modes())
    usage = set(re.findall(r"^#   bash scripts/install\.sh +([a-z0-9-]+)", text, re.MULTILINE))
    assert set(modes()) - {"all"} <= usage, set(modes()) - {"all"} - usage
    for mode in modes():
        done = dry_run(mode)
        assert ("chromium" in done.stdout) == (mode == "test"), (mode, done.stdout)
