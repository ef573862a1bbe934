"""A repository opened under a memory limit: the error says memory, not damage (issue 27).

LMDB maps its whole map size (1 TiB of address space) when it opens an environment; under an
address-space limit (``ulimit -v``, a batch scheduler, the fuzz workers) the ``mmap`` fails with
``ENOMEM`` and the repository was reported as "not a readable LMDB environment" — sending the user
to repair intact data. Run in a child process under ``RLIMIT_AS``, the way a user's limit applies.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import ResourceLimitError, StorageFaultError, exit_code_for
from napari_shardscope.core.versioned import create_repository

#: The child: the address-space limit first (well below LMDB's 1 TiB map, above what Python needs), then the CLI.
LIMITED_CLI = """
import resource, sys
limit = 3 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from napari_shardscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_lmdb_repository_under_an_address_space_limit_is_a_memory_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    with create_repository(repo, engine="lmdb"):
        pass
    done = subprocess.run([sys.executable, "-c", LIMITED_CLI, "repo", "log", str(repo)], capture_output=True,
                          text=True, timeout=300)
    assert "not a readable LMDB environment" not in done.stderr, done.stderr
    assert done.returncode == exit_code_for(ResourceLimitError("x")), (done.returncode, done.stderr[-2000:])
    assert str(repo) in done.stderr and "memory" in done.stderr, done.stderr
    assert "not damage" in done.stderr or "intact" in done.stderr, done.stderr


def test_out_of_memory_errors_map_to_the_resource_error(tmp_path: Path) -> None:
    import errno

    for exc in (OSError(errno.ENOMEM, "Cannot allocate memory"), MemoryError(),
                Exception("mdb_env_open: Cannot allocate memory")):
        fault = storage_fault(exc, tmp_path / "repo")
        assert isinstance(fault, ResourceLimitError) and isinstance(fault, StorageFaultError), exc
        assert fault.path == str(tmp_path / "repo") and "memory" in fault.message
