"""One integrity problem ``validate`` found, in the same shape for every format, and the concurrent
check of formats whose chunks are files of their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from napari_shardscope.core.progress import Progress

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    """One integrity problem found by ``validate``: where it is and what is wrong."""

    key: str
    message: str
    offset: int | None = None

    def __str__(self) -> str:
        where = f" at byte {self.offset}" if self.offset is not None else ""
        return f"{self.key}: {self.message}{where}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "message": self.message, "offset": self.offset}


#: Files checked at once by :func:`check_files` (reads overlap on remote stores).
CHECK_THREADS = 4
#: Files handed out per round, so problems stream out in key order while later files are read.
CHECK_BATCH = 64


def check_files(work: Sequence[T], key_of: Callable[[T], str], check: Callable[[T], list[Problem]],
                progress: Progress | None = None, *, what: str = "files") -> Iterator[Problem]:
    """Run ``check`` over every item of ``work`` (one stored file each) a few at a time; yield the problems in order.

    The validation of formats whose chunks are files of their own (N5 blocks, zarr v2 chunks):
    each file is read and decoded independently, so they are checked concurrently, in batches so
    a huge listing never has every file in flight, and ``progress(done, total, key)`` is called
    after each one.
    """
    total = len(work)
    if progress is not None and total == 0:
        progress(0, 0, f"no {what}")
    done = 0
    with ThreadPoolExecutor(CHECK_THREADS) as pool:
        for start in range(0, total, CHECK_BATCH):
            batch = work[start: start + CHECK_BATCH]
            for item, problems in zip(batch, pool.map(check, batch), strict=True):
                yield from problems
                done += 1
                if progress is not None:
                    progress(done, total, key_of(item))
