"""``shardscope export`` in a child process that says ``ready`` first, for the export crash test.

Run as ``python -m tests.core.export.export_child EXPORT-ARGS...``: it imports the command line and
everything an export loads (TensorStore, Dask, the formats, the labelmap), prints ``ready`` (flushed),
then runs ``shardscope export EXPORT-ARGS...`` exactly as the console script does and exits with its
code. The test SIGKILLs it at a random moment after ``ready``, so the kills spread over the export
itself rather than over Python's start-up.
"""

from __future__ import annotations

import sys

import dask.threaded  # noqa: F401  (loaded before ``ready``: the export's own work starts after it)
import tensorstore  # noqa: F401

import napari_shardscope.core.export.precomputed
import napari_shardscope.core.export.source
import napari_shardscope.core.export.zarr3  # noqa: F401
from napari_shardscope.cli import main

if __name__ == "__main__":
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.exit(main(["export", *sys.argv[1:]]))
