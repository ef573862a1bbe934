"""Node transfer: a committed version as self-contained content, and adopting one received from elsewhere.

What the remotes move (push, fetch, pull, clone): :meth:`NodeTransfer.read_node` names a version's
data, logs and notes without local ids; :meth:`NodeTransfer.adopt_node` adds a received version under
a fresh local id, its values local or — a lazy clone — stubs into the remote's data objects read on
first use (:mod:`.hollow`). Only the remotes call it, so it lives apart from what every user calls.
Split out of the repository module (issue 30), unchanged: :class:`~.repository.Repository` inherits it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.dagindex import DagReader
from napari_shardscope.core.versioned.engines import WriteTxn
from napari_shardscope.core.versioned.errors import (
    BranchExistsError,
    InstanceExistsError,
    StoreCorruptError,
    UncommittedVersionError,
    UnknownInstanceError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.handle import RepositoryHandle, _Pending
from napari_shardscope.core.versioned.hollow import HOLLOW_FLAG_KEY, HollowRef, hollow_key
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.node import NodeContent, NodeEntry, NodeLog, NodeNote
from napari_shardscope.core.versioned.tracking import check_not_tracking_name


class NodeTransfer(RepositoryHandle):
    """The node transfer part of :class:`~.repository.Repository` (what remotes call)."""

    # -- nodes (what remotes move) --------------------------------------------------------------

    def read_node(self, ref: str | Version) -> NodeContent:
        """A committed version with everything it itself stored, named without local ids (one snapshot)."""
        v = self.version(ref)
        if not v.locked or v.committed is None:
            raise UncommittedVersionError(f"version {v.short} (branch {v.branch!r}) is open; only committed "
                                          f"versions can be sent to a remote")
        with self._state:
            names = {i.iid: i.name for i in self._instances.values()}
        entries: list[NodeEntry] = []
        logs: list[NodeLog] = []
        notes: list[NodeNote] = []
        with self._engine.read() as txn:
            lo = K.change_prefix(v.vid)
            for ckey in txn.scan_keys(lo, K.next_prefix(lo)):
                stem = K.stem_of_change_key(ckey)
                iid = K.unpack_u32(stem[:4])
                value = txn.get(K.entry_key(stem, v.vid, False))
                if value is None and txn.get(K.entry_key(stem, v.vid, True)) is None:
                    raise StoreCorruptError(f"version {v.uuid}: change index names a key with no entry")
                entries.append(NodeEntry(instance=names[iid], key=K.tkey_of_stem(stem), value=value))
            for iid, name in sorted(names.items()):
                lp = K.log_prefix(iid, v.vid)
                for key, data in txn.scan(lp, K.next_prefix(lp)):
                    logs.append(NodeLog(instance=name, seq=K.unpack_u64(key[-8:]), data=data))
            np_ = K.NOTE_PREFIX + K.pack_u32(v.vid)
            for key, value in txn.scan(np_, K.next_prefix(np_)):
                r = json.loads(value)
                notes.append(NodeNote(seq=K.unpack_u64(key[-8:]), time=float(r["time"]), text=str(r["text"])))
        entries.sort(key=lambda e: (e.instance, e.key))
        logs.sort(key=lambda g: (g.instance, g.seq))
        return NodeContent(uuid=v.uuid, parents=v.parents, branch=v.branch, message=v.message, created=v.created,
                           committed=v.committed, entries=tuple(entries), logs=tuple(logs), notes=tuple(notes))

    def branch_fits(self, parents: tuple[str, ...], branch: str) -> bool:
        """Whether a new version with these parents may carry ``branch`` in this DAG.

        It may continue the branch of a parent on it (the first parent for versions made here; any
        parent for an adopted merge version) when that parent has no continuing child yet, or start
        ``branch`` when no version carries the name and it is not a remote-tracking name.
        """
        with self._snapshot() as dag:
            return self._branch_fits(dag, parents, branch)

    def _branch_fits(self, dag: DagReader, parents: tuple[str, ...], branch: str) -> bool:
        for p in parents:
            parent = dag.by_uuid(p)
            if parent.branch == branch:
                return dag.continuing_child(parent) is None
        if dag.has_branch(branch):
            return False
        try:
            check_not_tracking_name(self.path, branch)
        except ArgumentError:
            return False
        return True

    def adopt_node(self, node: NodeContent, branch: str | None = None, *, timeout: float | None = None,
                   hollow: HollowRef | None = None) -> Version:
        """Add a committed version received from elsewhere, under a fresh local id, in one transaction.

        ``branch`` (default: the node's own) is the local branch name; it must fit the DAG
        (:meth:`branch_fits`). The parents must be here and committed; every instance the node
        names must exist. Adopting a version already present returns it unchanged.

        ``hollow`` (a lazy clone): the node's values and log entries are stubs
        (:func:`~.hollow.encode_stub`) into the remote's data objects it names; they are read on demand.
        """
        with self._writing(timeout) as p:
            return self._adopt_node_in(p, node, branch, hollow)

    def _adopt_nodes_in(self, p: _Pending,
                        nodes: Iterable[tuple[NodeContent, str | None, HollowRef | None]]) -> list[Version]:
        """Adopt many received versions (parents first) in transaction ``p``, their records written in bulk.

        Each ``(node, branch, hollow)`` is checked and adopted as :meth:`adopt_node` does, in order (a
        later one may name an earlier one as its parent); the DAG records of all of them are built in
        memory (:meth:`~.dagindex.DagWriter.bulk`), and their data, then their hollow records, go to
        the engine in one bulk put each. The store ends as it would after adopting them one by one in
        this transaction, byte for byte; what a clone or a fetch of a long history calls per batch.
        """
        data: list[tuple[bytes, bytes]] = []
        marks: list[tuple[bytes, bytes]] = []
        out: list[Version] = []
        try:
            with p.dag.bulk():
                for node, branch, hollow in nodes:
                    out.append(self._adopt_node_in(p, node, branch, hollow, into=(data, marks)))
        finally:  # after an error too: the versions adopted before it are whole, as one by one
            if data:
                p.txn.put_many(data)  # before the hollow records: the rewrite guard lets a version's data in
            if marks:
                p.txn.put_many(marks)
        return out

    def _adopt_node_in(self, p: _Pending, node: NodeContent, branch: str | None,
                       hollow: HollowRef | None = None,
                       into: tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]] | None = None) -> Version:
        name = node.branch if branch is None else branch
        dag = p.dag
        if dag.contains(node.uuid):
            return dag.by_uuid(node.uuid)
        parents = []
        for par in node.parents:
            if not dag.contains(par):
                raise UnknownVersionError(f"version {node.uuid}: parent {par} is not in this repository")
            parents.append(dag.by_uuid(par))
            if not parents[-1].locked:
                raise UncommittedVersionError(f"version {node.uuid}: parent {par} is open here")
        on_branch = [par for par in parents if par.branch == name]
        if on_branch:
            child = dag.continuing_child(on_branch[0])
            if child is not None:
                raise BranchExistsError(f"version {on_branch[0].short} already has child {child.short} "
                                        f"continuing branch {name!r}")
        else:
            self._check_new_branch(dag, name)
        if not node.parents:
            raise StoreCorruptError(f"version {node.uuid} has no parents but this repository has a root")
        with self._state:
            iids = self._node_instances(node)
        v = Version(uuid=node.uuid, vid=dag.max_vid() + 1, parents=node.parents, branch=name,
                    locked=True, message=node.message, created=node.created, committed=node.committed)
        dag.add(v, known_new=True)  # looked up above
        p.touched()
        if into is None:
            self._put_node_data(p.txn, node, v.vid, iids)
            if hollow is not None:
                self._mark_hollow(p, v.vid, hollow)
        else:
            into[0].extend(self._node_data(node, v.vid, iids))
            if hollow is not None:
                self._mark_hollow(p, v.vid, hollow, into[1])
        return v

    def _mark_hollow(self, p: _Pending, vid: int, hollow: HollowRef,
                     into: list[tuple[bytes, bytes]] | None = None) -> None:
        """Record that ``vid``'s values are stubs into ``hollow``'s objects (after its data: the rewrite guard).

        ``into``: append the records there instead (bulk adoption puts them after every version's data).
        """
        marks = [(hollow_key(vid), hollow.encode())]
        if not p.marked_hollow:  # once per transaction, not per version (a clone adopts 1,000 per transaction)
            marks.append((HOLLOW_FLAG_KEY, b"1"))
            p.after(self._enable_hollow)
            p.marked_hollow = True
        if into is not None:
            into.extend(marks)
        else:
            for key, value in marks:
                p.txn.put(key, value)

    def _node_instances(self, node: NodeContent) -> dict[str, int]:
        iids: dict[str, int] = {}
        for inst_name in node.instances:
            inst = self._instances.get(inst_name)
            if inst is None:
                raise UnknownInstanceError(f"version {node.uuid} holds data of instance {inst_name!r}, "
                                           f"which this repository lacks")
            iids[inst_name] = inst.iid
        return iids

    @classmethod
    def _put_node_data(cls, txn: WriteTxn, node: NodeContent, vid: int, iids: Mapping[str, int]) -> None:
        # one bulk put: the engine loops natively, and a lazy clone's rewrite guard looks the version
        # up once instead of once per key (HollowTxn.put_many)
        items = cls._node_data(node, vid, iids)
        if items:
            txn.put_many(items)

    @staticmethod
    def _node_data(node: NodeContent, vid: int, iids: Mapping[str, int]) -> list[tuple[bytes, bytes]]:
        """The engine records of a node's data at local id ``vid``: entries, change index, logs, notes."""
        items: list[tuple[bytes, bytes]] = []
        for e in node.entries:
            stem = K.key_stem(iids[e.instance], e.key)
            items.append((K.entry_key(stem, vid, e.value is None), b"" if e.value is None else e.value))
            items.append((K.change_key(vid, stem), b""))
        for g in node.logs:
            items.append((K.log_key(iids[g.instance], vid, g.seq), g.data))
        for n in node.notes:
            items.append((K.note_key(vid, n.seq), json.dumps({"time": n.time, "text": n.text}).encode()))
        return items

    def fill_root(self, node: NodeContent, *, timeout: float | None = None, hollow: HollowRef | None = None) -> Version:
        """Write a received root's data into this repository's root (a clone's first step).

        The repository must have been created with ``root=node`` (same UUID, committed, empty).
        """
        with self._writing(timeout) as p:
            root = p.dag.by_uuid(self._root_uuid)
            if root.uuid != node.uuid or node.parents:
                raise ArgumentError(f"{node.uuid} is not this repository's root ({root.uuid})")
            lo = K.change_prefix(root.vid)
            if next(p.txn.scan_keys(lo, K.next_prefix(lo)), None) is not None:
                return root
            with self._state:
                iids = self._node_instances(node)
            self._put_node_data(p.txn, node, root.vid, iids)
            if hollow is not None:
                self._mark_hollow(p, root.vid, hollow)
        return root

    def adopt_instance(self, name: str, type_name: str, config: Mapping[str, Any], *,
                       timeout: float | None = None) -> Instance:
        """Add an instance received from another repository (its type need not be imported here).

        An instance of that name must not exist with another type or configuration.
        """
        hit = self._instances.get(name)
        if hit is None:
            self._sync()
            hit = self._instances.get(name)
        if hit is not None:
            return _same_instance(hit, type_name, config)
        blob = json.dumps({"name": name, "type": type_name, "config": dict(config)}).encode()
        with self._writing(timeout) as p:
            existing = self._instances.get(name)
            if existing is not None:
                # made by another thread or process since the look-up above: judged like a hit there,
                # or data received for one configuration would be stored under another
                return _same_instance(existing, type_name, config)
            iid = max((i.iid for i in self._instances.values()), default=0) + 1
            inst = Instance(name=name, type=type_name, iid=iid, config=dict(config))
            p.txn.put(K.instance_record_key(iid), blob)
            p.after(lambda: self._instances.__setitem__(name, inst))
        return inst


def _same_instance(inst: Instance, type_name: str, config: Mapping[str, Any]) -> Instance:
    """``inst``, if it has this type and configuration (what adopting an existing instance requires)."""
    if inst.type != type_name or dict(inst.config) != dict(config):
        raise InstanceExistsError(f"instance {inst.name!r} exists here with another type or configuration")
    return inst
