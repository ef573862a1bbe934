"""Where the real datasets written by other software live, and how a test asks for them.

The datasets (Java, Rust, C++, TensorStore, zarr-python, webKnossos, CloudVolume/igneous,
neuroglancer-scripts; see their README) are not part of this repository. They are looked for at
``$SHARDSCOPE_REALDATA``, else at ``shared/realdata`` beside the repository's folder (the layout CI
and the project's machines have). On a fresh clone without them, every test that needs them is
*skipped* with :data:`HOW_TO_GET`; where they must be present (CI sets
``SHARDSCOPE_REALDATA_REQUIRED=1``) such a test *fails* instead, so a lost dataset cannot pass
unnoticed.

A test asks through the ``realdata`` marker or fixture (``tests/conftest.py``), or through
:func:`realdata_path` inside its body. Nothing here reads a dataset at import: module-level code
may only build paths, so collection never depends on the data being there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

#: The folder of real datasets (it may not exist).
REALDATA = Path(os.environ.get("SHARDSCOPE_REALDATA")
                or Path(__file__).resolve().parents[1].parent / "shared" / "realdata")

#: What a skipped test tells the user.
HOW_TO_GET = (f"real datasets not found at {REALDATA}: set SHARDSCOPE_REALDATA to a copy of the project's "
              "shared/realdata folder (datasets written by other software; its README lists each source), "
              "or place it as shared/realdata beside the repository's folder")


def have_realdata() -> bool:
    """True when the datasets folder is there."""
    return REALDATA.is_dir()


def required() -> bool:
    """True when a missing dataset must fail the run (CI), not skip the test."""
    return os.environ.get("SHARDSCOPE_REALDATA_REQUIRED", "") not in ("", "0")


def missing(what: Path | None = None) -> NoReturn:
    """Skip the running test (or fail it, where the data is required) because ``what`` is absent."""
    message = HOW_TO_GET if what is None else f"{what} is missing; {HOW_TO_GET}"
    if required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def realdata_path(*parts: str) -> Path:
    """``REALDATA / parts...``, checked to exist (else :func:`missing`). For use inside a test."""
    path = REALDATA.joinpath(*parts)
    if not path.exists():
        missing(path)
    return path


def realdata_dirs(documents: tuple[str, ...]) -> list[str]:
    """Every directory under :data:`REALDATA` holding one of ``documents``, relative and sorted.

    For parametrising at collection: when the datasets are absent this is ``["<no realdata>"]``, one
    placeholder case that the ``realdata`` marker then skips (or fails, where required) with the
    message, instead of an empty parameter set that would pass unnoticed.
    """
    if not have_realdata():
        return [NO_REALDATA]
    found = {p.parent for name in documents for p in REALDATA.rglob(name)}
    return sorted(str(d.relative_to(REALDATA)) for d in found)


#: The placeholder parameter of :func:`realdata_dirs` when the datasets are absent.
NO_REALDATA = "<no realdata>"
