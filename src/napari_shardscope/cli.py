"""Entry point of the ``shardscope`` console script.

Runs the core command line (:mod:`napari_shardscope.core.cli`) with the GUI verbs (``open``,
``demo``) of :mod:`napari_shardscope.napari_plugin.cli` added. Lives outside ``core`` so that ``core``
never imports napari; the GUI module imports napari only when its verb runs, so the library and
the other verbs work without Qt installed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from napari_shardscope.core.cli import run

GUI_VERB_MODULES: tuple[str, ...] = ("napari_shardscope.napari_plugin.cli",)


def main(argv: Sequence[str] | None = None) -> int:
    """``shardscope ARGS``: the exit code (the console script passes it to ``sys.exit``)."""
    return run(argv, extra_modules=GUI_VERB_MODULES)


if __name__ == "__main__":
    sys.exit(main())
