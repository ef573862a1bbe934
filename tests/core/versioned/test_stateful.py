"""Random sequences of put/delete/commit/new_version/merge against a small pure-Python model.

The model keeps a full dict per version (copy on branch) and knows nothing of keys, tombstones,
change indexes or ancestor sets; after every step every key and every scan at every version of the
store must equal the model. Merges in the model are plain three-way merges of dicts against the
common ancestor created last, the same definition the store documents.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from napari_shardscope.core.versioned import (
    BranchExistsError,
    CommittedVersionError,
    MergeConflictError,
    UncommittedVersionError,
    create_repository,
    open_keyvalue,
)

KEYS = ["a", "a\x00", "a\x00b", "ab", "b", "\x00", "\xff"]
# A few values recur often, so both sides of a merge often agree (no conflict) or both restore the base.
VALUES = st.sampled_from([b"", b"x", b"y", b"\x00z"]) | st.binary(max_size=4)
EDITS = st.lists(st.tuples(st.sampled_from(KEYS), st.none() | VALUES), max_size=5)


@dataclass
class ModelVersion:
    index: int
    uuid: str
    parents: tuple[int, ...]
    branch: str
    locked: bool = False
    data: dict[str, bytes] = field(default_factory=dict)


class VersionedStoreMachine(RuleBasedStateMachine):
    engine = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = None if self.engine == "memory" else tempfile.mkdtemp(prefix="vstate-")
        self.repo = create_repository(None if self.tmp is None else f"{self.tmp}/repo", engine=self.engine)
        self.kv = open_keyvalue(self.repo, "kv", create=True)
        self.model = [ModelVersion(0, self.repo.root.uuid, (), "main")]
        self.branch_count = 0

    def teardown(self) -> None:
        self.repo.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------------

    def open_versions(self) -> list[ModelVersion]:
        return [v for v in self.model if not v.locked]

    def committed(self) -> list[ModelVersion]:
        return [v for v in self.model if v.locked]

    def ancestors(self, i: int) -> set[int]:
        out, stack = set(), [i]
        while stack:
            j = stack.pop()
            if j not in out:
                out.add(j)
                stack.extend(self.model[j].parents)
        return out

    def child_branch(self, parent: ModelVersion, new_branch: bool) -> tuple[str, bool]:
        """(branch name, allowed) per the DAG rules."""
        if new_branch:
            self.branch_count += 1
            return f"b{self.branch_count}", True
        continuing = any(v.branch == parent.branch and v.parents[:1] == (parent.index,) for v in self.model)
        return parent.branch, not continuing

    # -- rules ----------------------------------------------------------------------------------

    @initialize(edits=EDITS, commit=st.booleans())
    def fill_root(self, edits: list[tuple[str, bytes | None]], commit: bool) -> None:
        root = self.model[0]
        for key, value in edits:
            if value is not None:
                self.kv.put(root.uuid, key, value)
                root.data[key] = value
        if commit:
            self.repo.commit(root.uuid, "ingest")
            root.locked = True

    @precondition(lambda self: self.open_versions())
    @rule(data=st.data(), key=st.sampled_from(KEYS), value=VALUES)
    def put(self, data: st.DataObject, key: str, value: bytes) -> None:
        v = data.draw(st.sampled_from(self.open_versions()))
        self.kv.put(v.uuid, key, value)
        v.data[key] = value

    @precondition(lambda self: self.open_versions())
    @rule(data=st.data(), key=st.sampled_from(KEYS))
    def delete(self, data: st.DataObject, key: str) -> None:
        v = data.draw(st.sampled_from(self.open_versions()))
        existed = self.kv.delete(v.uuid, key)
        assert existed == (key in v.data)
        v.data.pop(key, None)

    @precondition(lambda self: self.open_versions())
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from(self.open_versions()))
        done = self.repo.commit(v.uuid, f"commit {v.index}")
        assert done.locked
        v.locked = True

    @precondition(lambda self: self.committed())
    @rule(data=st.data(), key=st.sampled_from(KEYS), value=VALUES)
    def write_to_committed_fails(self, data: st.DataObject, key: str, value: bytes) -> None:
        v = data.draw(st.sampled_from(self.committed()))
        with pytest.raises(CommittedVersionError):
            self.kv.put(v.uuid, key, value)
        with pytest.raises(CommittedVersionError):
            self.kv.delete(v.uuid, key)

    @precondition(lambda self: self.open_versions())
    @rule(data=st.data())
    def child_of_open_fails(self, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from(self.open_versions()))
        with pytest.raises(UncommittedVersionError):
            self.repo.new_version(v.uuid, "never")

    @precondition(lambda self: self.committed())
    @rule(data=st.data(), new_branch=st.booleans(), edits=EDITS, commit=st.booleans())
    def edit_child(self, data: st.DataObject, new_branch: bool, edits: list[tuple[str, bytes | None]],
                   commit: bool) -> None:
        """New child, several edits in one transaction, maybe commit: reaches merge conflicts quickly."""
        parent = data.draw(st.sampled_from(self.committed()))
        name, allowed = self.child_branch(parent, new_branch)
        if not allowed:
            return
        v = self.repo.new_version(parent.uuid, name if new_branch else None)
        m = ModelVersion(len(self.model), v.uuid, (parent.index,), name, data=dict(parent.data))
        self.model.append(m)
        with self.repo.write(v.uuid) as w:
            for key, value in edits:
                if value is None:
                    assert w.delete("kv", key.encode()) == (key in m.data)
                    m.data.pop(key, None)
                else:
                    w.put("kv", key.encode(), value)
                    m.data[key] = value
        if commit:
            self.repo.commit(v.uuid, "edited")
            m.locked = True

    @precondition(lambda self: self.committed())
    @rule(data=st.data(), left=EDITS, right=EDITS, policy=st.sampled_from(["fail", "ours", "theirs"]))
    def diverge_and_merge(self, data: st.DataObject, left: list[tuple[str, bytes | None]],
                          right: list[tuple[str, bytes | None]], policy: str) -> None:
        """Two edited sibling branches merged at once: the shape that produces conflicts."""
        self.edit_child(data, True, left, True)
        self.edit_child(data, True, right, True)
        a, b = self.model[-2], self.model[-1]
        self.merge_pair(a, b, policy, new_branch=data.draw(st.booleans()))

    @precondition(lambda self: self.committed())
    @rule(data=st.data(), new_branch=st.booleans())
    def new_version(self, data: st.DataObject, new_branch: bool) -> None:
        parent = data.draw(st.sampled_from(self.committed()))
        name, allowed = self.child_branch(parent, new_branch)
        if not allowed:
            with pytest.raises(BranchExistsError):
                self.repo.new_version(parent.uuid)
            return
        v = self.repo.new_version(parent.uuid, name if new_branch else None)
        assert v.branch == name
        self.model.append(ModelVersion(len(self.model), v.uuid, (parent.index,), name, data=dict(parent.data)))

    @precondition(lambda self: len(self.committed()) >= 2)
    @rule(data=st.data(), policy=st.sampled_from(["fail", "ours", "theirs"]), new_branch=st.booleans())
    def merge(self, data: st.DataObject, policy: str, new_branch: bool) -> None:
        ours, theirs = data.draw(st.lists(st.sampled_from(self.committed()), min_size=2, max_size=2,
                                          unique_by=lambda v: v.index))
        self.merge_pair(ours, theirs, policy, new_branch)

    def merge_pair(self, ours: ModelVersion, theirs: ModelVersion, policy: str, new_branch: bool) -> None:
        base = self.model[max(self.ancestors(ours.index) & self.ancestors(theirs.index))]
        merged: dict[str, bytes] = {}
        conflicts: set[str] = set()
        for key in set(ours.data) | set(theirs.data) | set(base.data):
            a, b, o = ours.data.get(key), theirs.data.get(key), base.data.get(key)
            if a == b or b == o:  # agreement, or only ours changed
                pick = a
            elif a == o:
                pick = b
            else:
                conflicts.add(key)
                pick = a if policy == "ours" else b
            if pick is not None:
                merged[key] = pick
        name, allowed = self.child_branch(ours, new_branch)
        event(f"merge: {'refused' if not allowed else 'conflicts' if conflicts else 'clean'} ({policy})")
        if not allowed:
            with pytest.raises(BranchExistsError):
                self.repo.merge(ours.uuid, theirs.uuid, policy=policy)  # type: ignore[arg-type]
            return
        if conflicts and policy == "fail":
            with pytest.raises(MergeConflictError) as info:
                self.repo.merge(ours.uuid, theirs.uuid, policy="fail", branch=name if new_branch else None)
            assert {c.key.decode() for c in info.value.conflicts} == conflicts
            return
        result = self.repo.merge(ours.uuid, theirs.uuid, policy=policy,  # type: ignore[arg-type]
                                 branch=name if new_branch else None)
        assert {c.key.decode() for c in result.conflicts} == conflicts
        assert result.base == base.uuid
        assert result.version.branch == name
        self.model.append(ModelVersion(len(self.model), result.version.uuid, (ours.index, theirs.index), name,
                                       data=merged))

    # -- checks ---------------------------------------------------------------------------------

    @invariant()
    def every_read_at_every_version(self) -> None:
        for v in self.model:
            with self.repo.read(v.uuid) as view:
                got = {k: view.get("kv", k.encode()) for k in KEYS}
                assert got == {k: v.data.get(k) for k in KEYS}, f"version {v.index}"
                assert [(k.decode(), val) for k, val in view.scan("kv")] == sorted(v.data.items())
                with_a = sorted(k for k in v.data if k.startswith("a"))
                assert [k.decode() for k in view.keys("kv", prefix=b"a")] == with_a
                assert [k.decode() for k in view.keys("kv", start=b"a\x00", stop=b"b")] == sorted(
                    k for k in v.data if "a\x00" <= k < "b")
                assert view.get_many("kv", [k.encode() for k in KEYS]) == [v.data.get(k) for k in KEYS]

    @invariant()
    def dag_matches(self) -> None:
        versions = {v.uuid: v for v in self.repo.versions()}
        assert len(versions) == len(self.model)
        for m in self.model:
            v = versions[m.uuid]
            assert v.locked == m.locked and v.branch == m.branch
            assert v.parents == tuple(self.model[p].uuid for p in m.parents)


class LmdbStoreMachine(VersionedStoreMachine):
    engine = "lmdb"


class SqliteStoreMachine(VersionedStoreMachine):
    engine = "sqlite"


_quick = settings(max_examples=60, stateful_step_count=30, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
_disk = settings(max_examples=12, stateful_step_count=25, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TestMemoryStore = VersionedStoreMachine.TestCase
TestMemoryStore.settings = _quick
TestLmdbStore = LmdbStoreMachine.TestCase
TestLmdbStore.settings = _disk
TestSqliteStore = SqliteStoreMachine.TestCase
TestSqliteStore.settings = _disk
