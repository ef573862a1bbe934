"""One integrity problem ``validate`` found, in the same shape for every format, and the concurrent
check of formats whose chunks are files of their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from napari_shardscope.core.bytestore import ByteStore, list_unreadable
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


def unreadable_problems(store: ByteStore, prefix: str, is_data_key: Callable[[str], bool] | None = None,
                        what: str = "data") -> tuple[list[Problem], set[str]]:
    """A problem for each entry below ``prefix`` that is there but cannot be read, and their keys.

    A dangling link, a link loop, a link out of the dataset, a FIFO, socket or device anywhere in a
    level, and a directory where ``is_data_key`` (given the key below ``prefix``) expects a ``what``
    file (chunk, shard, block): each is a finding, never an absent key read as fill. Nothing is
    opened (a FIFO would block). The keys let the format's own checks skip what was reported here.
    """
    problems = []
    for entry in list_unreadable(store, prefix, is_data_key):
        if entry.kind == "directory":
            message = f"is a directory, not a {what} file"
        elif is_data_key is not None and is_data_key(entry.key[len(prefix):]):
            message = f"{entry.message} (where a {what} file should be)"
        else:
            message = entry.message
        problems.append(Problem(entry.key, message))
    return problems, {p.key for p in problems}


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
