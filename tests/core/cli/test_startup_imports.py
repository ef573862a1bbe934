"""A command line imports only what its verb needs: ``--help`` loads no array library, no format, no store.

Run the way a user runs it (``python -X importtime -m napari_shardscope ...``, a fresh process): the
interpreter lists every module it imported on stderr, so these tests see exactly what the command
loaded. They assert which modules, never how long: import time swings with the machine's load, the
set of modules does not (``bench/cli_startup.py`` measures the time).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.cli import GUI_VERB_MODULES
from napari_shardscope.core.cli.parser import LazyRef, build_parser, resolve
from tests.core.cli.test_every_verb import leaf_verbs

#: What no help text, version or usage error may load: the array and task libraries, the GUI, and the
#: library's formats and stores (their imports are what made ``shardscope --help`` take seconds).
HEAVY = ("numpy", "tensorstore", "dask", "napari", "qtpy", "PyQt5", "PyQt6", "vispy",
         "napari_shardscope.core.formats", "napari_shardscope.core.labelmap", "napari_shardscope.core.versioned",
         "napari_shardscope.core.volumes", "napari_shardscope.core.export", "napari_shardscope.core.bytestore")


def imported(argv: list[str], *, cwd: Path | None = None) -> tuple[int, set[str], str]:
    """Exit code, the modules ``shardscope ARGV`` imported, and its stderr without the import lines."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "napari_shardscope", *argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    modules = set()
    other = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[-1].strip()
            if name != "package":  # the header line
                modules.add(name)
        else:
            other.append(line)
    return proc.returncode, modules, "\n".join(other)


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["--version"],
    ["inspect"],  # a usage error: exit 2
    ["inspect", "--help"],
    ["labelmap", "create", "--help"],
    ["body", "--help"],
    ["export", "--help"],
    ["open", "--help"],
    ["clone", "--help"],
    ["serve", "--help"],
    ["repo", "merge", "--policy", "nonsense", "REPO", "A", "B"],  # a bad choice: exit 2
    ["--timeout", "x", "inspect", "PATH"],  # a bad global option: exit 2
], ids=" ".join)
def test_help_version_and_usage_errors_import_no_library(argv: list[str], tmp_path: Path) -> None:
    code, modules, stderr = imported(argv, cwd=tmp_path)
    assert code in (0, 2), stderr
    assert "napari_shardscope.core.cli.parser" in modules  # the command line did run
    assert heavy(modules) == [], f"shardscope {' '.join(argv)} imported {heavy(modules)}"


def test_inspect_imports_neither_the_versioned_store_nor_the_gui(tmp_path: Path) -> None:
    """A plain verb loads its own implementation, not every verb's: ``inspect`` reads a dataset, so the
    formats come in, but not the repository, the labelmap, export, dask or napari."""
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "info").write_text('{"@type": "neuroglancer_multiscale_volume", "type": "image", '
                                 '"data_type": "uint8", "num_channels": 1, "scales": [{"key": "s0", '
                                 '"size": [8, 8, 8], "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0], '
                                 '"chunk_sizes": [[8, 8, 8]], "encoding": "raw"}]}')
    code, modules, stderr = imported(["inspect", str(volume)])
    assert code == 0, stderr
    assert "napari_shardscope.core.formats.precomputed.inspector" in modules  # it did read the dataset
    unwanted = ("napari_shardscope.core.versioned", "napari_shardscope.core.labelmap", "napari_shardscope.core.export",
                "napari_shardscope.core.cli.labelmap", "napari_shardscope.core.cli.remote", "dask", "napari")
    loaded = sorted(m for m in modules if any(m == u or m.startswith(u + ".") for u in unwanted))
    assert loaded == []


def test_every_verb_names_an_implementation_that_exists() -> None:
    """The parser refers to each verb's function by name (``module:function``), imported when the verb runs:
    every such reference (and every ``--json`` error-details hook) must resolve to a function."""
    verbs = leaf_verbs(build_parser(GUI_VERB_MODULES))
    assert len(verbs) > 40
    for name, sub in verbs.items():
        defaults = sub._defaults  # what set_defaults stored for this verb
        for key in ("func", "error_details"):
            ref = defaults.get(key)
            if ref is None:
                continue
            function = resolve(ref)
            assert callable(function), (name, key, ref)
            if isinstance(ref, LazyRef):
                assert ref.module.startswith("napari_shardscope."), (name, ref)
        assert isinstance(sub, argparse.ArgumentParser)


def test_defaults_shown_in_help_are_the_librarys() -> None:
    """:mod:`~napari_shardscope.core.cli.verbs` spells a few library constants as literals (importing the
    library to show them would undo the cheap ``--help``): they must stay what the library uses."""
    from napari_shardscope.core.cli import verbs
    from napari_shardscope.core.encoding import DEFAULT_GZIP_LEVEL
    from napari_shardscope.core.versioned.merge import MERGE_POLICIES
    from napari_shardscope.core.versioned.remotes.config import DEFAULT_REMOTE
    from napari_shardscope.core.versioned.remotes.id_blocks import ID_BLOCK

    assert verbs.MERGE_POLICIES == MERGE_POLICIES
    assert verbs.DEFAULT_REMOTE == DEFAULT_REMOTE
    assert verbs.ID_BLOCK == ID_BLOCK
    assert verbs.DEFAULT_GZIP_LEVEL == DEFAULT_GZIP_LEVEL


def test_status_of_a_local_repository_imports_neither_the_labelmap_nor_tensorstore(tmp_path: Path) -> None:
    """``status`` reads the repository and what the last fetch recorded, nothing remote and no data type: a
    remote verb's module must not load the labelmap (only ``clone``, ``pull`` and ``review`` use it) nor,
    through it, TensorStore. (Each such verb process paid about 0.3 CPU s importing them.)"""
    from napari_shardscope.core.versioned import create_repository

    create_repository(tmp_path / "repo").close()
    code, modules, stderr = imported(["status", str(tmp_path / "repo"), "--json"])
    assert code == 0, stderr
    assert "napari_shardscope.core.versioned.remotes.branch_status" in modules  # the verb did run
    unwanted = ("napari_shardscope.core.labelmap", "napari_shardscope.core.annotation", "tensorstore", "dask",
                "napari")
    assert sorted(m for m in modules if any(m == u or m.startswith(u + ".") for u in unwanted)) == []
