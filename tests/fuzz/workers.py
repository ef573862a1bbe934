"""The fuzzers' worker processes: forked from a server process that imported what a case runs, once.

A spawned worker (a fresh interpreter) paid ~0.7 CPU s of imports before its first case, per worker and,
for the remotes fuzzer, per case. ``forkserver`` workers are forks of a small server process started for the
purpose (not of the test process: none of its memory, threads or open stores), which imports
:data:`PRELOAD` once; each worker then starts with the modules loaded and its CPU clock at zero. The
server holds no TensorStore context, store or thread of ours, which is what the fuzzers kept spawn for.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext

#: Imported by the worker server before it forks a worker: everything the dataset and remote cases run.
PRELOAD = ["tests.fuzz.runner", "tests.fuzz.remotes", "napari_shardscope.cli",
           "napari_shardscope.core.versioned.remotes.verify", "napari_shardscope.core.labelmap"]


def worker_context() -> ForkServerContext:
    """The multiprocessing context the fuzzers start workers with (one server per process, preloaded)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
