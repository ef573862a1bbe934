"""The DAG read on demand (format 2) against a brute-force in-memory model, through two handles.

Random sequences of new versions, branches, commits, merges and batches (some rolled back), each
made through one of two handles on the same repository, so every step is also "another handle
wrote": after each step both handles must answer every DAG question exactly as the model does —
versions and their state, branch heads, children, ancestry, ``is_ancestor``, merge bases, UUID
prefixes and ``log`` in every mode (all parents, first parent, limit, since a version). The model
is a list of versions with parent indices, and computes everything by walking it; it knows nothing of
records, caches, journals or ancestor pages.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from napari_shardscope.core.versioned import (
    BranchExistsError,
    Repository,
    UncommittedVersionError,
    Version,
    create_repository,
    open_repository,
)
from napari_shardscope.core.versioned.dag import Dag
from tests.hypothesis_depth import examples


@dataclass
class Node:
    uuid: str
    parents: tuple[int, ...]  # model indices; index i is version id i + 1
    branch: str
    locked: bool = False
    message: str = ""


class Rollback(Exception):
    """Raised inside a batch to discard it."""


class DagMachine(RuleBasedStateMachine):
    engine = "lmdb"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="dagmodel-")
        path = f"{self.tmp}/repo"
        self.handles: list[Repository] = [create_repository(path, engine=self.engine)]
        self.handles.append(open_repository(path))
        self.path = path
        self.nodes = [Node(self.handles[0].root.uuid, (), "main")]
        self.branch_count = 0

    def teardown(self) -> None:
        for h in self.handles:
            h.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the model ----------------------------------------------------------------------------------

    def ancestors(self, i: int) -> set[int]:
        out, stack = set(), [i]
        while stack:
            j = stack.pop()
            if j not in out:
                out.add(j)
                stack.extend(self.nodes[j].parents)
        return out

    def head(self, branch: str) -> int:
        return max(i for i, n in enumerate(self.nodes) if n.branch == branch)

    def may_continue(self, parent: int) -> bool:
        return self.head(self.nodes[parent].branch) == parent

    def committed(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.locked]

    def open_ones(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if not n.locked]

    def new_branch(self) -> str:
        self.branch_count += 1
        return f"b{self.branch_count}"

    def expect_log(self, i: int, *, first_parent: bool = False, since: int | None = None) -> list[int]:
        if first_parent:
            chain = [i]
            while self.nodes[chain[-1]].parents:
                chain.append(self.nodes[chain[-1]].parents[0])
            return [j for j in chain if since is None or j not in self.ancestors(since)]
        keep = self.ancestors(i) - (self.ancestors(since) if since is not None else set())
        return sorted(keep, reverse=True)

    # -- rules ----------------------------------------------------------------------------------------

    @precondition(lambda self: self.open_ones())
    @rule(data=st.data(), h=st.integers(0, 1))
    def commit(self, data: st.DataObject, h: int) -> None:
        i = data.draw(st.sampled_from(self.open_ones()))
        done = self.handles[h].commit(self.nodes[i].uuid, f"commit {i}")
        assert done.locked and done.message == f"commit {i}"
        self.nodes[i].locked, self.nodes[i].message = True, f"commit {i}"

    @precondition(lambda self: self.committed())
    @rule(data=st.data(), h=st.integers(0, 1), branch=st.booleans())
    def new_version(self, data: st.DataObject, h: int, branch: bool) -> None:
        p = data.draw(st.sampled_from(self.committed()))
        name = self.new_branch() if branch else None
        if name is None and not self.may_continue(p):
            with pytest.raises(BranchExistsError):
                self.handles[h].new_version(self.nodes[p].uuid)
            return
        v = self.handles[h].new_version(self.nodes[p].uuid, name)
        assert v.vid == len(self.nodes) + 1
        self.nodes.append(Node(v.uuid, (p,), name or self.nodes[p].branch))

    @precondition(lambda self: self.open_ones())
    @rule(data=st.data(), h=st.integers(0, 1))
    def child_of_open_version_is_refused(self, data: st.DataObject, h: int) -> None:
        i = data.draw(st.sampled_from(self.open_ones()))
        with pytest.raises(UncommittedVersionError):
            self.handles[h].new_version(self.nodes[i].uuid, self.new_branch())

    @precondition(lambda self: len(self.committed()) >= 2)
    @rule(data=st.data(), h=st.integers(0, 1), branch=st.booleans())
    def merge(self, data: st.DataObject, h: int, branch: bool) -> None:
        a = data.draw(st.sampled_from(self.committed()))
        b = data.draw(st.sampled_from([i for i in self.committed() if i != a]))
        name = self.new_branch() if branch else None
        if name is None and not self.may_continue(a):
            with pytest.raises(BranchExistsError):
                self.handles[h].merge(self.nodes[a].uuid, self.nodes[b].uuid, policy="ours")
            return
        result = self.handles[h].merge(self.nodes[a].uuid, self.nodes[b].uuid, policy="ours", branch=name)
        base = max(self.ancestors(a) & self.ancestors(b))
        assert result.base == self.nodes[base].uuid
        self.nodes.append(Node(result.version.uuid, (a, b), name or self.nodes[a].branch))

    @precondition(lambda self: self.committed())
    @rule(data=st.data(), h=st.integers(0, 1), n=st.integers(1, 4), rollback=st.booleans())
    def batch(self, data: st.DataObject, h: int, n: int, rollback: bool) -> None:
        """A chain of new committed versions on a new branch in one transaction (or none of it)."""
        p = data.draw(st.sampled_from(self.committed()))
        name = self.new_branch()
        made: list[Node] = []
        try:
            with self.handles[h].batch() as b:
                parent = b.version(self.nodes[p].uuid)
                for k in range(n):
                    v = b.new_version(parent, name if k == 0 else None)
                    parent = b.commit(v, f"batch {k}")
                    assert b.version(v.uuid).locked  # the batch sees its own writes
                    made.append(Node(v.uuid, (p if k == 0 else len(self.nodes) + k - 1,), name, True, f"batch {k}"))
                if rollback:
                    raise Rollback
        except Rollback:
            return
        self.nodes += made

    @rule(h=st.integers(0, 1))
    def reopen(self, h: int) -> None:
        self.handles[h].close()
        self.handles[h] = open_repository(self.path)

    # -- invariants -----------------------------------------------------------------------------------

    @invariant()
    def both_handles_agree_with_the_model(self) -> None:
        for repo in self.handles:
            self.check(repo)

    def check(self, repo: Repository) -> None:
        nodes = self.nodes
        vs = repo.versions()
        assert [(v.uuid, v.vid, v.branch, v.locked, v.message) for v in vs] == [
            (n.uuid, i + 1, n.branch, n.locked, n.message) for i, n in enumerate(nodes)]
        assert all(v.parents == tuple(nodes[p].uuid for p in n.parents) for v, n in zip(vs, nodes, strict=True))
        assert repo.version_count() == len(nodes)
        # the previous, whole-DAG-in-memory implementation as a second reference for branches
        assert repo.branches() == Dag(vs).branches()
        names = {n.branch for n in nodes}
        for name in names:
            assert repo.head(name).uuid == nodes[self.head(name)].uuid
        for i, n in enumerate(nodes):
            v = repo.version(n.uuid[:10])
            assert (v.uuid, v.locked, v.message) == (n.uuid, n.locked, n.message)  # fresh after others' commits
            assert repo.version(Version(n.uuid, i + 1, v.parents, v.branch, False, "", 0.0, None)).locked == n.locked
            kids = [j for j, m in enumerate(nodes) if i in m.parents]
            assert [c.uuid for c in repo.children(n.uuid)] == [nodes[j].uuid for j in kids]
            assert [a.uuid for a in repo.ancestry(n.uuid)] == [nodes[j].uuid for j in self.expect_log(i)]
            assert [a.uuid for a in repo.log(n.uuid)] == [nodes[j].uuid for j in self.expect_log(i)]
            assert [a.uuid for a in repo.log(n.uuid, first_parent=True)] == [
                nodes[j].uuid for j in self.expect_log(i, first_parent=True)]
            assert [a.uuid for a in repo.log(n.uuid, limit=2)] == [nodes[j].uuid for j in self.expect_log(i)[:2]]
        for i in range(len(nodes)):  # pairs: bounded, a sliding sample
            for j in range(max(0, i - 6), len(nodes), max(1, len(nodes) // 5)):
                a, b = nodes[i].uuid, nodes[j].uuid
                assert repo.is_ancestor(b, a) == (j in self.ancestors(i))
                assert repo.merge_base(a, b).uuid == nodes[max(self.ancestors(i) & self.ancestors(j))].uuid
                assert [x.uuid for x in repo.log(a, since=b)] == [nodes[k].uuid for k in self.expect_log(i, since=j)]
                assert [x.uuid for x in repo.log(a, since=b, first_parent=True)] == [
                    nodes[k].uuid for k in self.expect_log(i, first_parent=True, since=j)]

    @invariant()
    def newest_first_listing(self) -> None:
        repo = self.handles[len(self.nodes) % 2]
        assert [v.uuid for v in repo.newest(3)] == [n.uuid for n in self.nodes[::-1][:3]]


# Each step's invariants walk every version and a sliding sample of pairs, so the cost is examples x steps^2: the
# default run keeps every step of a long sequence (50 examples before, 12 now) and ``--hypothesis-profile long``
# searches twenty times deeper (tests/hypothesis_depth.py).
DagMachine.TestCase.settings = settings(max_examples=examples(12), stateful_step_count=30, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
TestDagModel = DagMachine.TestCase


class SqliteDagMachine(DagMachine):
    engine = "sqlite"


SqliteDagMachine.TestCase.settings = settings(max_examples=examples(8), stateful_step_count=15, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestSqliteDagModel = SqliteDagMachine.TestCase


def test_verify_after_a_random_history_is_clean() -> None:
    """The ``verify`` check of the on-demand records (UUID index, branches, children, ancestor pages)
    accepts what the machine's operations write, across page boundaries (ids past 4096)."""
    tmp = tempfile.mkdtemp(prefix="dagverify-")
    try:
        with create_repository(f"{tmp}/repo") as repo:
            repo.commit("main", "root")
            with repo.batch() as b:
                heads = {"main": b.version("main")}
                for k in range(4200):  # three busy branches interleaving ids, merging now and then
                    name = ("main", "x", "y")[k % 3]
                    parent = heads.get(name) or heads["main"]
                    if k % 97 == 0 and name != "main" and name in heads:
                        v = b.merge(heads["main"], heads[name], policy="ours").version
                        name = "main"
                    else:
                        v = b.new_version(parent, None if name in heads else name)
                    heads[name] = b.commit(v, str(k))
            assert repo.verify() == []
            assert repo.version_count() == 4201
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
