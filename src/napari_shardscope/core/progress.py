"""The progress callback every long job takes (validate, export, index builds), whatever runs it."""

from __future__ import annotations

from collections.abc import Callable

#: Called as ``progress(done, total, what)`` while a long job runs.
Progress = Callable[[int, int, str], None]
