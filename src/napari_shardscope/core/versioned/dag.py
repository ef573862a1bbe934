"""The version DAG, held in memory as DVID does (paper §2.2–2.3).

Each version is a node named by a random RFC 4122 UUID (32 hex characters, unique without
coordination) and, inside this repository only, by a small integer id that keeps data keys short.
Ids are handed out in creation order, and a child is always created after its parents, so *id
order is a topological order of the DAG*. The store relies on that: the value of a key at version
V is the entry of the ancestor of V (V included) with the largest id — for a chain that is the
nearest ancestor; across merges it is well defined because merges write every key whose two
parents disagree (see :mod:`napari_shardscope.core.versioned.repository`).

Branches: every version carries a branch name unique across the DAG; the root is on ``main``. A
committed version may have at most one child continuing its branch and any number of children
starting new branches, so each branch is a chain whose last version is its head. A version made
here continues its first parent's branch; a merge version fetched from a remote may continue the
branch of either parent (another repository merged the other way round, and fetching it is a
fast-forward here).
"""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.errors import (
    AmbiguousVersionError,
    BranchExistsError,
    StoreCorruptError,
    UnknownBranchError,
    UnknownVersionError,
)

ROOT_BRANCH = "main"
_HEX = re.compile(r"[0-9a-f]+")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,127}")
_ANCESTOR_CACHE = 256
#: ``json.dumps(..., separators=(",", ":"))`` builds an encoder per call; one shared gives the same bytes.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


@dataclass(frozen=True)
class Version:
    """One node of the DAG.

    Attributes
    ----------
    uuid
        32 lowercase hex characters; any unique prefix names the version.
    vid
        Repository-local integer id used inside keys (creation order).
    parents
        UUIDs of the parents: none for the root, two for a merge.
    branch
        Branch name; unique across the DAG.
    locked
        True once committed: no more writes, children allowed.
    message
        The commit message (empty until committed).
    created, committed
        Unix times of creation and commit (``committed`` is None while open).
    """

    uuid: str
    vid: int
    parents: tuple[str, ...]
    branch: str
    locked: bool
    message: str
    created: float
    committed: float | None

    @property
    def short(self) -> str:
        """An 8-character prefix for display."""
        return self.uuid[:8]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``--json`` prints)."""
        return {
            "uuid": self.uuid, "parents": list(self.parents), "branch": self.branch,
            "locked": self.locked, "message": self.message, "created": self.created,
            "committed": self.committed,
        }


@dataclass(frozen=True)
class Note:
    """One entry of a version's append-only log of notes."""

    version: str
    seq: int
    time: float
    text: str


@dataclass(frozen=True)
class Branch:
    """A branch: its name, first version and head (last version)."""

    name: str
    base: str
    head: str
    length: int


def new_uuid() -> str:
    """A fresh version 4 UUID as 32 hex characters."""
    return uuidlib.uuid4().hex


def check_branch_name(name: str) -> str:
    """Reject names that would be confusing on a command line or in a path."""
    if not isinstance(name, str) or not _BRANCH.fullmatch(name):
        raise ArgumentError(
            f"bad branch name {name!r}: use 1-128 letters, digits and . _ / + -, starting with a letter or digit"
        )
    return name


def encode_version(version: Version) -> bytes:
    """The stored record of a version (JSON: self-describing and readable with any LMDB/SQLite tool)."""
    record = version.to_json()
    record["vid"] = version.vid
    return _COMPACT.encode(record).encode()


def decode_version(data: bytes) -> Version:
    """Inverse of :func:`encode_version`; a malformed record means a damaged store."""
    return decode_versions([data])[0]


def decode_versions(records: list[bytes]) -> list[Version]:
    """Decode many records with one JSON parse (opening 10⁴ versions: per-call overhead dominates)."""
    try:
        rows = json.loads(b"[" + b",".join(records) + b"]")
        return [_version_from(r) for r in rows]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreCorruptError(f"unreadable version record: {exc}") from exc


def _version_from(r: dict[str, Any]) -> Version:
    committed = r["committed"]
    return Version(uuid=str(r["uuid"]), vid=int(r["vid"]), parents=tuple(map(str, r["parents"])),
                   branch=str(r["branch"]), locked=bool(r["locked"]), message=str(r["message"]),
                   created=float(r["created"]), committed=None if committed is None else float(committed))


class Dag:
    """The in-memory DAG: lookups by id, UUID prefix and branch; ancestry; branch heads.

    Ancestor sets are computed on demand and cached (bounded), so opening a repository with many
    versions only parses records, and a read at a version costs a set lookup per stored entry
    whatever the depth of the version.
    """

    def __init__(self, versions: Iterable[Version] = ()) -> None:
        self._by_vid: dict[int, Version] = {}
        self._by_uuid: dict[str, Version] = {}
        self._children: dict[int, list[int]] = {}
        self._sorted_uuids: list[str] = []
        self._branch_members: dict[str, list[int]] = {}
        self._max_vid = 0
        self._root_vid: int | None = None
        self._ancestors: OrderedDict[int, frozenset[int]] = OrderedDict()
        batch = sorted(versions, key=lambda v: v.vid)
        for v in batch:
            self._index(v)
        self._sorted_uuids = sorted(self._by_uuid)

    def _index(self, v: Version) -> None:
        self._by_vid[v.vid] = v
        self._by_uuid[v.uuid] = v
        self._children.setdefault(v.vid, [])
        for p in v.parents:
            parent = self._by_uuid.get(p)
            if parent is None:
                raise StoreCorruptError(f"version {v.uuid} names a parent {p} that is not in the DAG")
            self._children[parent.vid].append(v.vid)
        self._branch_members.setdefault(v.branch, []).append(v.vid)  # ids arrive ascending: last = head
        self._max_vid = max(self._max_vid, v.vid)
        if not v.parents and self._root_vid is None:
            self._root_vid = v.vid

    # -- growth ---------------------------------------------------------------------------------

    def add(self, v: Version) -> None:
        """Insert a newly created version (its parents must be present)."""
        if v.uuid in self._by_uuid or v.vid <= self._max_vid:
            raise StoreCorruptError(f"version {v.uuid} (id {v.vid}) is already in the DAG or not the newest")
        self._index(v)
        i = bisect_left(self._sorted_uuids, v.uuid)
        self._sorted_uuids.insert(i, v.uuid)

    def update(self, v: Version) -> None:
        """Replace a version's mutable fields (locked, message, committed) after a commit."""
        old = self._by_vid[v.vid]
        if (old.uuid, old.parents, old.branch) != (v.uuid, v.parents, v.branch):
            raise StoreCorruptError(f"version {v.uuid}: identity fields changed")
        self._by_vid[v.vid] = v
        self._by_uuid[v.uuid] = v

    # -- lookups --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_vid)

    def __iter__(self) -> Iterator[Version]:
        """Versions in creation (topological) order."""
        return iter(sorted(self._by_vid.values(), key=lambda v: v.vid))

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._by_uuid

    @property
    def root(self) -> Version:
        """The first version."""
        if self._root_vid is None:
            raise StoreCorruptError("the DAG has no root version")
        return self._by_vid[self._root_vid]

    @property
    def max_vid(self) -> int:
        """The largest id in use (0 when empty)."""
        return self._max_vid

    def by_vid(self, vid: int) -> Version:
        """The version with id ``vid``."""
        return self._by_vid[vid]

    def by_uuid(self, uuid: str) -> Version:
        """The version with this full UUID."""
        try:
            return self._by_uuid[uuid]
        except KeyError:
            raise UnknownVersionError(f"no version {uuid}") from None

    def has_branch(self, name: str) -> bool:
        """True when some version is on branch ``name``."""
        return name in self._branch_members

    def resolve_prefix(self, prefix: str) -> Version:
        """The one version whose UUID starts with ``prefix`` (as DVID resolves UUID prefixes)."""
        text = prefix.strip().lower()
        if not text or not _HEX.fullmatch(text):
            raise UnknownVersionError(f"{prefix!r} is neither a branch name nor a UUID prefix (hex)")
        i = bisect_left(self._sorted_uuids, text)
        hits: list[str] = []
        while i < len(self._sorted_uuids) and self._sorted_uuids[i].startswith(text) and len(hits) < 6:
            hits.append(self._sorted_uuids[i])
            i += 1
        if not hits:
            raise UnknownVersionError(f"no version UUID starts with {text!r}")
        if len(hits) > 1:
            shown = ", ".join(h[: max(len(text) + 4, 8)] for h in hits[:5])
            raise AmbiguousVersionError(f"UUID prefix {text!r} matches several versions: {shown}…")
        return self._by_uuid[hits[0]]

    def resolve(self, ref: str | Version) -> Version:
        """A version from a branch name (its head), a UUID prefix or a :class:`Version`.

        Branch names win over UUID prefixes when a text is both.
        """
        if isinstance(ref, Version):
            if ref.uuid not in self._by_uuid:
                raise UnknownVersionError(f"no version {ref.uuid}")
            return self._by_uuid[ref.uuid]
        if not isinstance(ref, str):
            raise ArgumentError(f"a version reference must be a string, got {type(ref).__name__}")
        if ref in self._branch_members:
            return self.head(ref)
        return self.resolve_prefix(ref)

    def children(self, v: Version) -> list[Version]:
        """Children of ``v`` in creation order."""
        return [self._by_vid[c] for c in self._children[v.vid]]

    def continuing_child(self, v: Version) -> Version | None:
        """The child of ``v`` on ``v``'s branch, if any (there is at most one)."""
        for c in self._children[v.vid]:
            child = self._by_vid[c]
            if child.branch == v.branch:
                return child
        return None

    def head(self, branch: str) -> Version:
        """The last version of a branch."""
        members = self._branch_members.get(branch)
        if not members:
            raise UnknownBranchError(f"no branch named {branch!r}")
        return self._by_vid[members[-1]]

    def branches(self) -> list[Branch]:
        """Every branch with its base and head, in order of creation."""
        out = []
        for name, members in self._branch_members.items():
            out.append(Branch(name=name, base=self._by_vid[members[0]].uuid,
                              head=self._by_vid[members[-1]].uuid, length=len(members)))
        return sorted(out, key=lambda b: self._by_uuid[b.base].vid)

    def check_new_branch(self, name: str) -> None:
        """Raise when ``name`` is malformed or already names a branch."""
        check_branch_name(name)
        if name in self._branch_members:
            raise BranchExistsError(f"branch {name!r} already exists (head {self.head(name).uuid})")

    def ancestors(self, v: Version) -> frozenset[int]:
        """Ids of ``v`` and all its ancestors (cached; O(ancestors) on a miss)."""
        hit = self._ancestors.get(v.vid)
        if hit is not None:
            self._ancestors.move_to_end(v.vid)
            return hit
        seen: set[int] = set()
        stack = [v.vid]
        while stack:
            vid = stack.pop()
            if vid in seen:
                continue
            cached = self._ancestors.get(vid)
            if cached is not None:
                seen |= cached
                continue
            seen.add(vid)
            stack.extend(self._by_uuid[p].vid for p in self._by_vid[vid].parents)
        result = frozenset(seen)
        self._ancestors[v.vid] = result
        if len(self._ancestors) > _ANCESTOR_CACHE:
            self._ancestors.popitem(last=False)
        return result

    def ancestry(self, v: Version) -> list[Version]:
        """``v`` and its ancestors, newest first (for a chain: nearest first)."""
        return [self._by_vid[i] for i in sorted(self.ancestors(v), reverse=True)]

    def merge_base(self, a: Version, b: Version) -> Version:
        """The common ancestor of ``a`` and ``b`` with the largest id.

        No other common ancestor descends from it (a descendant would have a larger id), so it is
        a lowest common ancestor, and the choice is deterministic when there are several.
        """
        common = self.ancestors(a) & self.ancestors(b)
        if not common:
            raise StoreCorruptError(f"versions {a.uuid} and {b.uuid} share no ancestor")
        return self._by_vid[max(common)]

    def with_commit(self, v: Version, message: str, when: float) -> Version:
        """The committed form of ``v``."""
        return replace(v, locked=True, message=message, committed=when)

    def check(self) -> list[str]:
        """Structural problems (empty when consistent): used after crashes and by ``verify``."""
        problems: list[str] = []
        roots = [v for v in self._by_vid.values() if not v.parents]
        if len(roots) != 1:
            problems.append(f"expected one root, found {len(roots)}")
        for v in self._by_vid.values():
            if len(v.parents) > 2 or len(set(v.parents)) != len(v.parents):
                problems.append(f"{v.uuid}: bad parents {v.parents}")
            for p in v.parents:
                parent = self._by_uuid.get(p)
                if parent is None:
                    problems.append(f"{v.uuid}: missing parent {p}")
                    continue
                if parent.vid >= v.vid:
                    problems.append(f"{v.uuid}: parent {p} was created later")
                if not parent.locked:
                    problems.append(f"{v.uuid}: parent {p} is not committed")
            if not _HEX.fullmatch(v.uuid) or len(v.uuid) != 32:
                problems.append(f"{v.uuid}: malformed UUID")
            if v.locked != (v.committed is not None):
                problems.append(f"{v.uuid}: locked flag and commit time disagree")
            continuing = [c for c in self._children[v.vid] if self._by_vid[c].branch == v.branch]
            if len(continuing) > 1:
                problems.append(f"{v.uuid}: {len(continuing)} children continue branch {v.branch!r}")
        for name, members in self._branch_members.items():
            first = self._by_vid[min(members)]
            if any(self._by_uuid[p].branch == name for p in first.parents if p in self._by_uuid):
                problems.append(f"branch {name!r}: base continues its own branch")
            for vid in members:
                v = self._by_vid[vid]
                # A version continues its branch through a parent on it: the first parent for versions
                # made here, any parent for merge versions adopted from a remote (a fast-forward there).
                if vid != first.vid and not any(self._by_uuid[p].branch == name for p in v.parents
                                                 if p in self._by_uuid):
                    problems.append(f"branch {name!r}: {v.uuid} is not a continuation (branch names must be unique)")
        return problems
