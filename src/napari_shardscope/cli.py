"""Entry point of the ``shardscope`` console script.

Assembles the core commands (:mod:`napari_shardscope.core.cli`) with the GUI ones (``open``,
``demo``) from :mod:`napari_shardscope.napari_plugin`. Lives outside ``core`` so that ``core`` never
imports napari; the GUI modules import napari only when their command runs, so the library and
the inspection commands work without Qt installed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from napari_shardscope.core.cli import run

GUI_COMMAND_MODULES: tuple[str, ...] = ("napari_shardscope.napari_plugin.cli",)


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv, extra_modules=GUI_COMMAND_MODULES)


if __name__ == "__main__":
    sys.exit(main())
