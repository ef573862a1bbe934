"""``import napari_shardscope as ss``: one lazily loaded namespace, the same objects as the old import paths.

What a user relies on: importing the package costs nothing heavy (no TensorStore, NumPy, napari or
typing until a name is used, checked in a fresh interpreter: what ``sys.modules`` holds, not a time);
each name is the very object its module defines (old paths keep working); the names static tools
read (the ``TYPE_CHECKING`` imports, ``__all__``) are the ones the lazy table serves; ``dir()`` and a
mistyped name behave as for any module.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import napari_shardscope as ss
from napari_shardscope import gui

SRC = Path(ss.__file__).resolve().parent
#: Modules a bare ``import napari_shardscope`` (or ``… .gui``) must not load.
HEAVY = ("numpy", "tensorstore", "dask", "napari", "qtpy", "PyQt5", "PyQt6", "typing", "napari_shardscope.core")


def _modules_after(code: str) -> set[str]:
    """``sys.modules`` of a fresh interpreter after running ``code``."""
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def _loaded(modules: set[str], name: str) -> bool:
    return name in modules or any(m.startswith(f"{name}.") for m in modules)


@pytest.mark.parametrize("code", ["import napari_shardscope", "from napari_shardscope import gui",
                                  "import napari_shardscope as ss; ss.__version__; dir(ss)"])
def test_importing_the_namespaces_loads_nothing_heavy(code: str) -> None:
    modules = _modules_after(code)
    assert [name for name in HEAVY if _loaded(modules, name)] == []
    assert {m for m in modules if m.startswith("napari_shardscope")} <= {"napari_shardscope", "napari_shardscope._lazy",
                                                                        "napari_shardscope.gui"}


def test_a_name_loads_only_what_it_needs() -> None:
    """An error group is one small module; the volumes bring NumPy; neither brings napari or Qt."""
    errors_only = _modules_after("import napari_shardscope as ss\nss.ShardscopeError")
    assert "napari_shardscope.core.errors" in errors_only
    assert not _loaded(errors_only, "numpy") and not _loaded(errors_only, "napari_shardscope.core.volumes")
    volumes = _modules_after("import napari_shardscope as ss\nss.open_volume")
    assert "napari_shardscope.core.volumes" in volumes and _loaded(volumes, "numpy")
    assert not _loaded(volumes, "napari") and not _loaded(volumes, "qtpy")


def test_star_import_gives_the_library_without_napari() -> None:
    modules = _modules_after("from napari_shardscope import *\nassert open_volume and export and ShardscopeError")
    assert not _loaded(modules, "napari") and not _loaded(modules, "qtpy")


@pytest.mark.parametrize("namespace", [ss, gui], ids=["napari_shardscope", "gui"])
def test_every_public_name_is_the_object_its_module_defines(namespace: object) -> None:
    table: dict[str, str] = namespace._PUBLIC  # type: ignore[attr-defined]
    for name, target in table.items():
        module_name, colon, attribute = target.partition(":")
        module = importlib.import_module(module_name)
        expected = module if colon and not attribute else getattr(module, attribute or name)
        assert getattr(namespace, name) is expected, name
    assert ss.init_repository is ss.create_repository  # the git / CLI word, and the old name
    assert ss.shardscope(["--version"]) == 0


def _type_checking_imports(path: Path) -> dict[str, str]:
    """``{public name: "module:original"}`` of the ``if TYPE_CHECKING:`` imports of a module's source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module and imp.module.startswith("napari_shardscope"):
                    for alias in imp.names:
                        found[alias.asname or alias.name] = f"{imp.module}:{alias.name}"
    return found


@pytest.mark.parametrize("namespace,path", [(ss, SRC / "__init__.py"), (gui, SRC / "gui.py")],
                         ids=["napari_shardscope", "gui"])
def test_static_tools_see_the_names_the_namespace_serves(namespace: object, path: Path) -> None:
    """mypy and the API reference (griffe) read ``__all__`` and the ``TYPE_CHECKING`` imports, never run
    ``__getattr__``: both must name what the lazy table does, from the same modules."""
    table: dict[str, str] = namespace._PUBLIC  # type: ignore[attr-defined]
    static = _type_checking_imports(path)
    for name, target in table.items():
        module_name, colon, attribute = target.partition(":")
        assert name in static, f"{name} is missing from the TYPE_CHECKING imports of {path.name}"
        imported_module, _, original = static[name].partition(":")
        if colon and not attribute:  # a module: `from package import module`
            assert f"{imported_module}.{original}" == module_name, name
        else:
            assert getattr(importlib.import_module(imported_module), original) is getattr(
                importlib.import_module(module_name), attribute or name), name
    defined_here = {n for n in namespace.__all__ if n not in table}  # type: ignore[attr-defined]
    assert defined_here <= {"__version__", "controller_for"}
    assert sorted(namespace.__all__) == list(namespace.__all__)  # type: ignore[attr-defined]


def test_dir_and_unknown_names_behave_like_a_module() -> None:
    assert set(ss.__all__) <= set(dir(ss)) and "gui" in dir(ss) and "TYPE_CHECKING" not in dir(ss)
    assert set(gui.__all__) <= set(dir(gui))
    with pytest.raises(AttributeError, match="module 'napari_shardscope' has no attribute 'open_volme'"):
        ss.open_volme  # noqa: B018
    with pytest.raises(AttributeError, match=r"napari_shardscope\.gui"):
        gui.no_such_helper  # noqa: B018
    assert ss.gui is gui


def test_one_version_source() -> None:
    """``__version__`` is the one written; the installed metadata (hatch reads it) and the CLI agree."""
    from importlib.metadata import version

    assert ss.__version__ == version("napari-shardscope")
    pyproject = (SRC.parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject
