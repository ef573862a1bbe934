"""A child Python process a test speaks to a line at a time: the crash tests' fork servers.

``tests/core/versioned/crash_writer.py --serve`` and ``tests/core/export/export_child.py`` load Python and the
package once and fork each round's process from there; the test starts the server with :class:`LineServer`,
waits for its ``ready`` line, then sends one line per request and reads one line per answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

#: The repository's root: the servers run as ``python -m tests...`` from here.
ROOT = Path(__file__).resolve().parents[1]


class LineServer:
    """``python ARGS`` in :data:`ROOT`, its stdin and stdout pipes of text lines; started when it said ``ready``."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], what: str) -> None:
        self.proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=dict(env))
        if self._line() != "ready":
            import pytest  # here: the servers import this module for exit_forked, and need no pytest

            pytest.fail(f"{what} did not start")

    def _line(self) -> str:
        """The server's next line (blocking: each request's answer comes, or the server has died: "")."""
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


def exit_forked(body: Callable[[], int]) -> NoReturn:
    """In a process a server forked: run ``body`` and ``_exit`` with its code (no atexit, no flushing of the
    server's buffers), as the interpreter would exit: ``SystemExit``'s code, or 70 with the traceback shown."""
    code = 70
    try:
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
