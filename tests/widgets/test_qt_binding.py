"""One Qt binding per environment, the same for qtpy, pytest-qt and napari; none pinned by the package.

CI runs every Qt test in ``.venv`` (napari's default PyQt6, ``[test]``) and the ``qt_binding_lane`` tests again in
``.venv-pyqt5`` (PyQt5, ``[test-pyqt5]``): these binding checks and one end-to-end test of every file that makes a
viewer or uses qtbot. These tests say which binding a run really used, that the extras keep the two apart, that CI
really runs both lanes, and that no Qt test file is left out of the PyQt5 lane.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

# The binding checks are what the PyQt5 lane is for: all of them run there (.ci/run, -m qt_binding_lane).
pytestmark = pytest.mark.qt_binding_lane

ROOT = Path(__file__).resolve().parents[2]
BINDINGS = {"PyQt5": "pyqt5", "PyQt6": "pyqt6", "PySide2": "pyside2", "PySide6": "pyside6"}
# A requirement that brings a binding: the binding itself, or napari/superqt with a binding extra.
BINDING_REQUIREMENT = re.compile(r"^(pyqt[56]|pyside[26])\b|\[[^\]]*\b(pyqt[56]?|pyside[26]?|qt|all)\b[^\]]*\]",
                                 re.IGNORECASE)


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"<runtime>": project["dependencies"], **project["optional-dependencies"]}


def _bindings_of(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The binding requirements ``extra`` brings, following its ``napari-shardscope[...]`` references."""
    found: set[str] = set()
    for req in extras[extra]:
        own = re.match(r"^napari-shardscope\[([^\]]+)\]", req)
        if own:
            for name in own.group(1).split(","):
                found |= _bindings_of(name.strip(), extras)
        elif BINDING_REQUIREMENT.search(req):
            found.add(req)
    return found


def test_qtpy_pytest_qt_and_napari_use_the_one_installed_binding(qtbot: object) -> None:
    import qtpy
    from pytestqt.qt_compat import qt_api

    installed = [name for name in BINDINGS if importlib.util.find_spec(name) is not None]
    assert len(installed) == 1, f"one Qt binding per environment, found {installed}"
    api = BINDINGS[installed[0]]
    assert qtpy.API_NAME.lower() == api
    assert qt_api.pytest_qt_api == api
    assert os.environ["QT_API"].lower() == api  # what child processes (examples, `shardscope demo`) load
    loaded = {name for name in BINDINGS if name in sys.modules}
    assert loaded == {installed[0]}


def test_no_extra_installs_two_bindings_and_the_runtime_names_none() -> None:
    extras = _extras()
    assert _bindings_of("<runtime>", extras) == set()
    assert _bindings_of("gui", extras) == set() and _bindings_of("test-tools", extras) == set()
    for extra in extras:
        assert len(_bindings_of(extra, extras)) <= 1, (extra, _bindings_of(extra, extras))
    # [all] is napari's default binding (napari 0.9: PyQt6), [pyqt5] the other one
    assert _bindings_of("all", extras) == _bindings_of("test", extras) == {"napari[pyqt6]>=0.5"}
    assert _bindings_of("pyqt6", extras) == {"napari[pyqt6]>=0.5"}
    assert _bindings_of("pyqt5", extras) == _bindings_of("test-pyqt5", extras) == {"napari[pyqt5]>=0.5"}
    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "qt_api" not in pytest_config  # the run follows its environment (tests/conftest.py)


def test_ci_runs_the_qt_tests_under_both_bindings() -> None:
    """``.ci/run``: the main lane installs ``[test]`` (PyQt6) in ``.venv`` and runs everything; the second lane
    installs ``[test-pyqt5]`` in ``.venv-pyqt5`` and runs the ``qt_binding_lane`` tests with ``QT_API=pyqt5``."""
    ci = (ROOT / ".ci" / "run").read_text()
    install = (ROOT / "scripts" / "install.sh").read_text()
    assert "bash scripts/install.sh test\n" in ci
    assert "\n.venv/bin/python -m pytest --durations=30 || tests_rc=$?\n" in ci
    assert '[ "$tests_rc" -eq 0 ] ||' in ci  # a failed test run still fails CI
    assert "bash scripts/install.sh test-pyqt5" in ci
    start = ci.index("\nQT_API=pyqt5 ")
    lane = ci[start:ci.index("\necho", start)].replace("\\\n", " ").split()
    assert lane[:8] == ["QT_API=pyqt5", ".venv-pyqt5/bin/python", "-m", "pytest", "--durations=30", "-m",
                        "qt_binding_lane", "tests/widgets"]
    demo = "tests/core/test_sample_data.py::test_demo_screenshot"
    assert {"tests/napari_plugin", "tests/examples", demo} <= set(lane)
    assert "pyqt5|test-pyqt5) venv=.venv-pyqt5" in install
    extras = _extras()
    assert _bindings_of("test", extras) != _bindings_of("test-pyqt5", extras)  # two lanes, two bindings


def test_every_qt_test_file_has_a_test_in_the_pyqt5_lane() -> None:
    """A file that makes a napari viewer or uses qtbot has at least one test marked ``qt_binding_lane``, so the
    PyQt5 lane drives every widget module and the plugin's viewer paths; the marker is registered in pyproject."""
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("qt_binding_lane:") for m in markers)
    qt_files = [path for folder in ("widgets", "napari_plugin", "examples")
                for path in sorted((ROOT / "tests" / folder).glob("test_*.py"))
                if re.search(r"\b(make_napari_viewer|qtbot)\b", path.read_text())]
    assert len(qt_files) >= 15
    left_out = [path.name for path in qt_files if "pytest.mark.qt_binding_lane" not in path.read_text()]
    assert left_out == []
