"""Run each documentation page's examples in a fresh process of its own, forked from one that imported the
third-party libraries they use: ``python tests/docs/page_runner.py SPEC.json``.

A page's examples run as a reader pastes them into a new interpreter: top to bottom, as ``__main__``, in a
working directory of their own, with their own stdout and stderr. Started one interpreter per page, each
page paid numpy's and TensorStore's import (about 0.25 CPU-s of its 0.3-1.7) before its first line. Here
one process imports those once and forks a child per page: the child starts from a process that has run
nothing of the project (``napari_shardscope`` and its submodules are imported by the page itself, so an
import a page forgets, such as the one that registers a migration step, still fails it), and nothing one
page does reaches the next (each is its own process, forked from the same untouched parent).

The spec lists ``{"script": PATH, "cwd": DIR}`` pages and a ``results`` file; each child writes its output
to ``DIR/stdout.txt`` and ``DIR/stderr.txt``; the exit codes (as ``subprocess`` reports them: ``-N`` for
a signal) go to the results file, one per page.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

#: Modules imported before the pages fork: third-party only (none of the project's, see above).
PRELOAD = ("numpy", "tensorstore")
#: Seconds a page may run before its process is ended (SIGALRM): a bound, not a timing check.
PAGE_TIMEOUT = 600


def run_page(script: str, cwd: str) -> None:
    """In the forked child: the page's script as ``python SCRIPT`` runs it; never returns."""
    import runpy
    import traceback

    code = 0
    with open(os.path.join(cwd, "stdout.txt"), "wb") as out, open(os.path.join(cwd, "stderr.txt"), "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    os.chdir(cwd)
    signal.alarm(PAGE_TIMEOUT)
    sys.argv = [script]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` has it (main removed ours)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # what an uncaught exception does to `python SCRIPT`: a traceback, exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)  # the interpreter's own exit: atexit handlers and finalisation, as at the end of a script


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    for name in PRELOAD:
        __import__(name)
    codes: list[int] = []
    for page in spec["pages"]:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_page(page["script"], page["cwd"])  # exits (SystemExit), in the child only
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
        Path(spec["results"]).write_text(json.dumps(codes), encoding="utf-8")
    return 0


if __name__ == "__main__":
    del sys.path[0]  # tests/docs itself: nothing there may shadow what the pages import
    sys.exit(main(sys.argv[1]))
