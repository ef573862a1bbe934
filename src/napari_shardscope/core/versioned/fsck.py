"""Checking a whole repository: every record read and compared with what the others say.

``shardscope repo verify`` and the tests' crash loops call :meth:`RepositoryCheck.verify`, which
reads everything (O(store)) and never what the handle caches: the DAG is rebuilt from every version
record and the on-demand records are checked against it, then the data keys, the change index, notes,
logs and unversioned keys against the versions and instances. Split out of the repository module
(issue 30), unchanged: :class:`~.repository.Repository` inherits it.
"""

from __future__ import annotations

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.dag import Dag
from napari_shardscope.core.versioned.dagcheck import check_index
from napari_shardscope.core.versioned.dagindex import DagReader
from napari_shardscope.core.versioned.errors import StoreCorruptError
from napari_shardscope.core.versioned.handle import RepositoryHandle


class RepositoryCheck(RepositoryHandle):
    """The consistency check of :class:`~.repository.Repository`."""

    # -- consistency ----------------------------------------------------------------------------

    def verify(self) -> list[str]:
        """Check the whole store; returns problems (empty when consistent). Reads everything.

        The DAG is rebuilt in memory from every version record (:class:`~.dag.Dag`) and the records
        that answer look-ups on demand — UUID index, branch records, child index, ancestor sets — are
        checked against it (:func:`~.dagcheck.check_index`).
        """
        problems: list[str] = []
        with self._engine.read() as txn:
            self._read_format(txn)
            instances = self._read_instances(txn)  # check this snapshot, whatever memory holds
            records = DagReader(self._index, txn, -1, cacheable=False).all_versions()
            try:
                dag = Dag(records)
            except StoreCorruptError as exc:
                return [str(exc)]
            problems.extend(dag.check())
            problems.extend(check_index(txn, dag))
            vids = {v.vid for v in dag}
            iids = {i.iid for i in instances.values()}
            # the data keys and the change index are compared by looking each one up in the other (two
            # passes, no sets): memory stays flat whatever the store holds (10⁷ keys made 3 GB of sets)
            missing = 0
            # whether a key is there, never its value: a lazy clone's hollow values stay on the remote
            present = getattr(txn, "inner_txn", txn)
            last: tuple[bytes, int] | None = None
            last_meta = K.next_prefix(K.META)
            assert last_meta is not None
            for key in txn.scan_keys(last_meta, None):
                if len(key) < 4 + 2 + K.SUFFIX_LEN or key[-K.SUFFIX_LEN - 2:-K.SUFFIX_LEN] != b"\x00\x01":
                    problems.append(f"malformed data key {key!r}")
                    continue
                stem, vid, _ = K.split_entry(key)
                if vid not in vids:
                    problems.append(f"data key {key!r} names unknown version id {vid}")
                if K.unpack_u32(stem[:4]) not in iids:
                    problems.append(f"data key {key!r} names unknown instance id {K.unpack_u32(stem[:4])}")
                if last == (stem, vid):  # a version's value and tombstone of one key sit side by side
                    problems.append(f"data key {key!r}: both a value and a tombstone in one version")
                elif present.get(K.change_key(vid, stem)) is None:
                    missing += 1
                last = (stem, vid)
            extra = 0
            for key in txn.scan_keys(K.CHANGE_PREFIX, K.next_prefix(K.CHANGE_PREFIX)):
                at = len(K.CHANGE_PREFIX)
                vid, stem = K.unpack_u32(key[at:at + 4]), K.stem_of_change_key(key)
                if present.get(K.entry_key(stem, vid, False)) is None \
                        and present.get(K.entry_key(stem, vid, True)) is None:
                    extra += 1
            if extra or missing:
                problems.append(f"change index disagrees with data: {extra} extra, {missing} missing")
            for prefix, what in ((K.NOTE_PREFIX, "note"), (K.LOG_PREFIX, "log entry")):
                for key in txn.scan_keys(prefix, K.next_prefix(prefix)):
                    off = len(prefix) + (4 if prefix == K.LOG_PREFIX else 0)
                    if K.unpack_u32(key[off:off + 4]) not in vids:
                        problems.append(f"{what} {key!r} names an unknown version")
            at = len(K.UNVERSIONED_PREFIX)
            for key in txn.scan_keys(K.UNVERSIONED_PREFIX, K.next_prefix(K.UNVERSIONED_PREFIX)):
                if len(key) <= at + 4 or K.unpack_u32(key[at:at + 4]) not in iids:
                    problems.append(f"unversioned key {key!r} names an unknown instance")
        return problems
