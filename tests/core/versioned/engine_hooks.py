"""The repository's real engine with a hook in the window between a transaction's end and the caller's next step.

Races between threads of one process land there: a write has committed but the writer has not yet
applied its in-memory change; a read snapshot has closed but the reader has not acted on it yet.
Tests force such an interleaving by running another thread's (or handle's) work in the hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class HookedEngine:
    """``engine`` itself, plus ``after_write`` / ``after_read`` hooks.

    A hook set on the attribute runs once (the next time), unless ``keep`` is true, in which case it
    runs after every write or read.
    """

    def __init__(self, engine: Any, *, after_write: Callable[[], None] | None = None,
                 after_read: Callable[[], None] | None = None, keep: bool = False) -> None:
        self.engine = engine
        self.after_write, self.after_read, self.keep = after_write, after_read, keep

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    @contextmanager
    def write(self) -> Iterator[Any]:
        with self.engine.write() as txn:
            yield txn
        self._run("after_write")

    @contextmanager
    def read(self) -> Iterator[Any]:
        with self.engine.read() as txn:
            yield txn
        self._run("after_read")

    def _run(self, name: str) -> None:
        hook = getattr(self, name)
        if not self.keep:
            setattr(self, name, None)
        if hook is not None:
            hook()
