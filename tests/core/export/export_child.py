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
import traceback

import dask.threaded  # noqa: F401  (loaded before ``ready``: the export's own work starts after it)
import tensorstore  # noqa: F401

import napari_shardscope.core.export.precomputed
import napari_shardscope.core.export.source
import napari_shardscope.core.export.zarr3  # noqa: F401
from napari_shardscope.cli import main


def _run_export(args: list[str], stderr: str | None) -> None:
    """In the forked process: the export, then ``_exit`` (no atexit, no flushing of the server's buffers)."""
    code = 70
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        if stderr:
            os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        sys.stdin.close()
        code = main(["export", *args])
    except SystemExit as exc:  # as the interpreter would exit
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # main maps every error to an exit code; anything else is shown, as Python would
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


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
