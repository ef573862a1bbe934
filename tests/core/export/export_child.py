"""``shardscope export`` in child processes for the export crash test: one per export, forked ready-made.

Run as ``python -m tests.core.export.export_child``: it imports the command line and everything an export
loads (TensorStore, Dask, the formats, the labelmap), prints ``ready`` (flushed), and then serves rounds
on its stdin, one line each:

* a JSON list ``EXPORT-ARGS``: it forks; the forked process runs ``shardscope export EXPORT-ARGS...``
  exactly as the console script does (stdout to ``/dev/null``, stderr to the file named by the environment
  variable ``EXPORT_CHILD_STDERR`` of the server, or inherited) and exits with its code; the server
  answers ``started PID``;
* then ``kill`` or ``wait``: ``kill`` SIGKILLs the export if it has not ended (the server is its parent and
  has not reaped it, so the PID cannot belong to another process), ``wait`` waits; either way the server
  answers ``exit CODE`` (``-9`` when killed).

Why a fork server: each killed export is still a process of its own, killed with SIGKILL with no chance to
clean up, at a random moment of the export itself; only the interpreter's start-up and imports (over a CPU
second, the bulk of a round's cost) are paid once per test module instead of once per round. Nothing has run
in the server before a fork (no TensorStore context, no Dask pool), so each export starts as fresh as in a
new process.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import dask.threaded  # noqa: F401  (loaded before ``ready``: the export's own work starts after it)
import tensorstore  # noqa: F401

import napari_shardscope.core.export.precomputed
import napari_shardscope.core.export.source
import napari_shardscope.core.export.zarr3  # noqa: F401
from napari_shardscope.cli import main
from tests.line_server import exit_forked


def _run_export(args: list[str], stderr: str | None) -> None:
    """In the forked process: the export, then ``_exit`` (:func:`~tests.line_server.exit_forked`)."""

    def export() -> int:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        if stderr:
            os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        sys.stdin.close()
        return main(["export", *args])  # main maps every error to an exit code

    exit_forked(export)


def serve() -> None:
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        args = json.loads(line)
        out.flush()
        pid = os.fork()
        if pid == 0:
            _run_export(args, os.environ.get("EXPORT_CHILD_STDERR"))
        out.write(f"started {pid}\n")
        out.flush()
        command = sys.stdin.readline().strip()
        if command == "kill":
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
        else:
            _, status = os.waitpid(pid, 0)
        out.write(f"exit {os.waitstatus_to_exitcode(status)}\n")
        out.flush()


if __name__ == "__main__":
    serve()
