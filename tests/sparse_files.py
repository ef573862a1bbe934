"""A scratch directory for sparse files whose holes a test reads: in RAM (``/dev/shm``) where the system has one.

Why: on a disk file system (ext4) the first read of a hole allocates and zeroes a page-cache page, so a
test that streams a 3 GiB sparse file whole spends about 6 CPU seconds in the kernel making zeros (and
pushes 3 GiB of other files out of the page cache) before the code under test does anything. tmpfs reads
a hole as the shared zero page: the same bytes through the same ``open``/``pread`` calls, no memory used,
a tenth of a second. Where there is no writable tmpfs ``/dev/shm`` (macOS) it is the system's temporary
directory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.scratch import ram_filesystem


@contextmanager
def sparse_scratch(prefix: str) -> Iterator[Path]:
    """A new empty directory (removed afterwards) where reading a sparse file's holes costs no page-cache fill.

    In RAM whatever its free space: a sparse file's holes take none."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=ram_filesystem(min_free=0)) as scratch:
        yield Path(scratch)
