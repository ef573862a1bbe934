"""A versioned key-value store on DVID's model: a DAG of versions over an embedded ordered engine.

Public API (the labelmap, the Versions widget and the CLI use these)::

    repo = create_repository(path, engine="lmdb")      # or open_repository(path)
    inst = repo.create_instance("bookmarks", "keyvalue")
    with repo.write(repo.root) as w:                   # one atomic transaction
        w.put(inst, b"key", b"value")
    repo.commit(repo.root, "ingest")
    child = repo.new_version(repo.root)                # continues branch "main"
    trial = repo.new_version(repo.root, "training")    # starts a new branch
    with repo.read("main") as view:                    # any version, one snapshot
        view.get(inst, b"key")
    repo.merge(a, b, policy="ours")
    for v in repo.log("main", limit=20):            # newest first, reads only what it yields
        print(v.short, v.message)
    with repo.batch() as b:                         # many changes, one transaction
        v = b.new_version(repo.root, "import")

Modules: :mod:`.engines` (the ordered key-value protocol; memory, LMDB and SQLite engines),
:mod:`.keys` (key layout), :mod:`.dag` (versions, branches; the whole DAG in memory, for checks),
:mod:`.dagindex` (the DAG as records read on demand), :mod:`.ancestry` (compact ancestor sets),
:mod:`.upgrade` (format versions), :mod:`.migrate` (``repo migrate`` steps), :mod:`.instance`,
:mod:`.view` (reads and writes at a version), :mod:`.merge`, :mod:`.writer_lock`, :mod:`.repository`
(transactions, create/open), :mod:`.keyvalue` (the ``keyvalue`` type), :mod:`.node` (a version in portable form),
:mod:`.remotes` (push, fetch, pull, clone through a bucket or a directory). Its command line is
:mod:`napari_shardscope.core.cli.repo`. They import each other
without cycles and never take a name from this ``__init__``, so any of them can be imported first.
"""

from napari_shardscope.core.versioned.dag import Branch, Note, Version
from napari_shardscope.core.versioned.errors import (
    AmbiguousVersionError,
    BranchExistsError,
    CommittedVersionError,
    IdsExhaustedError,
    InstanceExistsError,
    LockTimeoutError,
    MergeConflict,
    MergeConflictError,
    NestedTransactionError,
    NotARepositoryError,
    OpenParentError,
    RepositoryFormatError,
    StoreCorruptError,
    UncommittedVersionError,
    UnknownBranchError,
    UnknownInstanceError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.instance import Instance, register_instance_type
from napari_shardscope.core.versioned.keyvalue import KeyValue, open_keyvalue
from napari_shardscope.core.versioned.merge import MergeResult
from napari_shardscope.core.versioned.repository import (
    DEFAULT_ENGINE,
    Batch,
    Checkout,
    Repository,
    create_repository,
    open_repository,
)
from napari_shardscope.core.versioned.view import Change, LogEntry, VersionView, VersionWriter

__all__ = [
    "DEFAULT_ENGINE",
    "AmbiguousVersionError",
    "Batch",
    "Branch",
    "BranchExistsError",
    "Change",
    "Checkout",
    "CommittedVersionError",
    "IdsExhaustedError",
    "Instance",
    "InstanceExistsError",
    "KeyValue",
    "LockTimeoutError",
    "LogEntry",
    "MergeConflict",
    "MergeConflictError",
    "MergeResult",
    "NestedTransactionError",
    "NotARepositoryError",
    "Note",
    "OpenParentError",
    "Repository",
    "RepositoryFormatError",
    "StoreCorruptError",
    "UncommittedVersionError",
    "UnknownBranchError",
    "UnknownInstanceError",
    "UnknownVersionError",
    "Version",
    "VersionView",
    "VersionWriter",
    "create_repository",
    "open_keyvalue",
    "open_repository",
    "register_instance_type",
]
