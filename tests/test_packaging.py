"""What the wheel ships, built in-process with the project's own build backend (hatchling, offline).

A type checker uses the package's annotations only when ``py.typed`` is installed with it (PEP 561);
napari finds the plugin through ``napari.yaml``; the version in the metadata is ``__version__`` (the one
place it is written). The editable install of the test environment must see ``py.typed`` too.
"""

from __future__ import annotations

import zipfile
from importlib.resources import files
from pathlib import Path

import pytest

import napari_shardscope

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "napari_shardscope"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    from hatchling.builders.wheel import WheelBuilder

    out = tmp_path_factory.mktemp("wheel")
    (path,) = WheelBuilder(str(ROOT)).build(directory=str(out), versions=["standard"])
    return zipfile.ZipFile(path)


def test_wheel_ships_py_typed_the_manifest_and_every_module(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {"napari_shardscope/py.typed", "napari_shardscope/napari.yaml"} <= names
    modules = {f"napari_shardscope/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]


def test_wheel_version_is_the_package_version(wheel: zipfile.ZipFile) -> None:
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    fields = dict(line.split(": ", 1) for line in wheel.read(metadata).decode().splitlines()[:5] if ": " in line)
    assert fields["Version"] == napari_shardscope.__version__
    assert metadata == f"napari_shardscope-{napari_shardscope.__version__}.dist-info/METADATA"


def test_installed_package_is_marked_typed() -> None:
    assert files("napari_shardscope").joinpath("py.typed").is_file()
