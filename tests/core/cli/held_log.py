"""``shardscope`` with ``repo log`` held after its first version until the test says go.

``python -m tests.core.cli.held_log FIFO ARGS...`` runs ``shardscope ARGS`` with the DAG walk
(:meth:`DagReader.log`) pausing after it has handed out its first version, until the test opens
``FIFO`` for writing and closes it. A verb that flushes each record has printed the first one by
then; one that buffers has printed nothing, and the test sees it while the verb is still running.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import napari_shardscope.core.versioned.dagindex as dagindex
from napari_shardscope.cli import main

_real_log = dagindex.DagReader.log


def held_log(self: dagindex.DagReader, *args: Any, **kwargs: Any) -> Iterator[Any]:
    walk = _real_log(self, *args, **kwargs)
    first = next(walk, None)
    if first is None:
        return
    yield first
    with open(sys.argv[1], "rb") as fifo:  # blocks until the test opens the other end
        fifo.read()
    yield from walk


if __name__ == "__main__":
    dagindex.DagReader.log = held_log  # type: ignore[method-assign]
    sys.exit(main(sys.argv[2:]))
