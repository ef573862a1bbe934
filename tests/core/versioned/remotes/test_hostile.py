"""A remote is hostile input: damaged or crafted refs, node, data and unversioned objects.

Every decoder must end in a typed :class:`CorruptObjectError` (never a ``KeyError``,
``RecursionError`` or ``AttributeError``), and no name read from the remote may turn into a path
outside the remote or a local branch/instance name the local grammar refuses.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.dag import check_branch_name
from napari_shardscope.core.versioned.instance import check_instance_name
from napari_shardscope.core.versioned.remotes import pack as P
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.store import REFS_KEY, NodeRef, Refs, RemoteInstance
from tests.core.versioned.remotes.helpers import edit, make_repo

HOSTILE_NAMES = ["../../outside", "/etc/passwd", "..", "a/../../b", "", "x" * 300, "objects/../refs.json",
                 "A" * 64, "ab/" + "c" * 61, "\x00" * 64, "c:\\windows", 7, None, ["a"], {"a": 1}]


def good_refs_doc() -> dict[str, Any]:
    refs = Refs(seq=3, writer="w", root=NodeRef("a" * 32, "b" * 64),
                branches={"main": NodeRef("c" * 32, "d" * 64)},
                instances={"seg": RemoteInstance("labelmap", {"base": "x"}, "e" * 64, 5)})
    doc: dict[str, Any] = json.loads(refs.to_bytes())
    return doc


def good_node_doc() -> dict[str, Any]:
    return {"uuid": "a" * 32, "parents": [["b" * 32, "c" * 64]], "branch": "main", "message": "m",
            "created": 1.0, "committed": 2.0, "notes": [[1, 1.0, "n"]], "instances": ["seg"],
            "data": ["d" * 64], "entries": 1, "logs": 0}


# (path into the document, replacement) pairs a hostile remote could write
def _places(doc: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                out.append(((*path, k), "value"))
                out.append(((*path, k), "key"))
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                out.append(((*path, i), "value"))
                walk(v, (*path, i))

    walk(doc, ())
    return out


def _mutate(doc: Any, path: tuple[Any, ...], how: str, bad: Any) -> None:
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if how == "key" and isinstance(parent, dict) and isinstance(bad, str):
        parent[bad] = parent.pop(last)
    else:
        parent[last] = bad


def _names_ok(refs: Refs) -> None:
    """What a decoded refs object may hold: only names the local grammars accept."""
    for r in [refs.root, *refs.branches.values()]:
        assert len(r.node) == 32 and all(c in "0123456789abcdef" for c in r.node)
        assert P.object_key(r.object).startswith("objects/")
    for b in [*refs.branches, *refs.regions]:
        assert check_branch_name(b) == b
    for n, i in refs.instances.items():
        assert check_instance_name(n) == n
        assert i.unversioned is None or P.object_key(i.unversioned).startswith("objects/")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@seed(20261126)
@given(st.data())
def test_hostile_refs_give_only_typed_errors(data: st.DataObject) -> None:
    doc = good_refs_doc()
    places = _places(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        path, how = data.draw(st.sampled_from(places))
        bad = data.draw(st.one_of(st.sampled_from(HOSTILE_NAMES), st.integers(-2**70, 2**70), st.floats(),
                                  st.text(max_size=20)))
        try:
            _mutate(doc, path, how, bad)
        except (KeyError, IndexError, TypeError):
            break  # an earlier mutation replaced the container this path goes through
    try:
        raw = json.dumps(doc).encode()
    except ValueError:
        return
    try:
        refs = Refs.from_bytes(raw, "refs.json")
    except CorruptObjectError:
        return
    _names_ok(refs)


@settings(max_examples=300, deadline=None)
@seed(20261126)
@given(st.data())
def test_hostile_node_objects_give_only_typed_errors(data: st.DataObject) -> None:
    doc = good_node_doc()
    places = _places(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        path, how = data.draw(st.sampled_from(places))
        bad = data.draw(st.one_of(st.sampled_from(HOSTILE_NAMES), st.integers(-2**70, 2**70), st.text(max_size=9)))
        try:
            _mutate(doc, path, how, bad)
        except (KeyError, IndexError, TypeError):
            break
    obj = P.NODE_MAGIC + zlib.compress(json.dumps(doc).encode())
    try:
        header = P.decode_node(P.object_name(obj), obj)
    except CorruptObjectError:
        return
    for name in [*header.data, *(o for _, o in header.parents)]:
        assert P.object_key(name).startswith("objects/") and ".." not in name


@settings(max_examples=300, deadline=None)
@seed(20261126)
@given(st.binary(max_size=200), st.sampled_from([P.NODE_MAGIC, P.DATA_MAGIC, P.KV_MAGIC, b""]), st.booleans())
def test_random_object_bytes_give_only_typed_errors(body: bytes, magic: bytes, compress: bool) -> None:
    obj = magic + (zlib.compress(body) if compress else body)
    name = P.object_name(obj)
    for decode in (lambda: P.decode_node(name, obj), lambda: list(P.decode_data(name, obj, ("seg",))),
                   lambda: P.decode_pairs(name, obj)):
        with contextlib.suppress(CorruptObjectError):
            decode()


def test_deep_or_huge_json_is_refused_typed() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(CorruptObjectError, match="nested deeper"):
        Refs.from_bytes(deep, "refs.json")
    obj = P.NODE_MAGIC + zlib.compress(deep)
    with pytest.raises(CorruptObjectError, match="nested deeper"):
        P.decode_node(P.object_name(obj), obj)
    with pytest.raises(CorruptObjectError, match=r"refs\.json"):
        Refs.from_bytes(b'{"format": 1', "refs.json")


@pytest.mark.parametrize("bad", ["../../outside", "a/../../../b", "/abs/path", "..", "main\n"])
def test_traversal_names_in_refs_are_refused(bad: str) -> None:
    for mutate in (lambda d: d["branches"].__setitem__(bad, d["branches"]["main"]),
                   lambda d: d["instances"].__setitem__(bad, d["instances"]["seg"]),
                   lambda d: d["root"].__setitem__("object", bad),
                   lambda d: d["branches"]["main"].__setitem__("node", bad),
                   lambda d: d["instances"]["seg"].__setitem__("unversioned", bad)):
        doc = good_refs_doc()
        mutate(doc)
        if bad in ("../../outside", "a/../../../b") and bad in doc["branches"]:
            # the local branch grammar allows '/' and '.'; such a name is refused only if it fails it
            continue
        with pytest.raises(CorruptObjectError, match=r"refs\.json"):
            Refs.from_bytes(json.dumps(doc).encode(), "refs.json")


def _tree(root: Path) -> dict[str, int]:
    return {os.path.relpath(p, root): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_clone_of_a_crafted_remote_touches_nothing_outside(base: Path, tmp_path: Path) -> None:
    """A remote whose refs point an object name outside ``objects/``: the clone fails typed, reads
    and writes nothing outside the remote and the clone's own work directory."""
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(1))
    remote = tmp_path / "space" / "remote"
    R.add_remote(a, "origin", str(remote))
    R.push(a, "origin", "main")
    a.close()
    secret = tmp_path / "space" / "secret"
    secret.write_bytes(b"not for the remote")
    doc = json.loads((remote / REFS_KEY).read_bytes())
    for bad_object in ["../../secret", "../secret"]:
        doc["branches"]["main"]["object"] = bad_object
        (remote / REFS_KEY).write_bytes(json.dumps(doc).encode())
        before = _tree(tmp_path / "space")
        with pytest.raises(CorruptObjectError, match="not an object name"):
            R.clone(str(remote), tmp_path / "space" / "b")
        assert _tree(tmp_path / "space") == before
        assert not (tmp_path / "space" / "b").exists()
        assert not any(p.name.startswith(".b.clone-") for p in (tmp_path / "space").iterdir())
    doc["branches"]["main"]["object"] = "0" * 64
    doc["branches"]["../../evil"] = doc["branches"].pop("main")
    (remote / REFS_KEY).write_bytes(json.dumps(doc).encode())
    with pytest.raises(CorruptObjectError):
        R.clone(str(remote), tmp_path / "space" / "b")
    assert not (tmp_path / "space" / "b").exists()


def test_clone_refuses_a_root_object_of_another_version(base: Path, tmp_path: Path) -> None:
    """refs.json's root must name the version its object holds (as every other ref is checked)."""
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(3))
    remote = tmp_path / "remote"
    R.add_remote(a, "origin", str(remote))
    R.push(a, "origin", "main")
    a.close()
    doc = json.loads((remote / REFS_KEY).read_bytes())
    doc["root"]["object"] = doc["branches"]["main"]["object"]  # a real object, of the head version
    (remote / REFS_KEY).write_bytes(json.dumps(doc).encode())
    with pytest.raises(CorruptObjectError, match="not the root"):
        R.clone(str(remote), tmp_path / "b")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("counters", ['{"counters": {"labels": 18446744073709551600}}', '{"counters": {"labels": "x"}}',
                                      '{"counters": [1]}', '[' * 200 + ']' * 200])
def test_hostile_id_counters_are_refused_typed(base: Path, tmp_path: Path, counters: str) -> None:
    """ids.json is remote input too: a counter near 2**64 (ids would overflow uint64), a non-number,
    or a deep document is a CorruptObjectError, never a block of unusable ids."""
    from napari_shardscope.core.versioned.remotes.store import IDS_KEY, RemoteStore

    a = make_repo(tmp_path / "a", base)
    remote = tmp_path / "remote"
    R.add_remote(a, "origin", str(remote))
    R.push(a, "origin", "main")
    a.close()
    (remote / IDS_KEY).write_text(counters)
    store = RemoteStore(str(remote))
    with pytest.raises(CorruptObjectError, match=r"ids\.json"):
        store.reserve_ids("labels", 100, 0, "w")
    if not counters.startswith('{"counters": {'):
        with pytest.raises(CorruptObjectError, match=r"ids\.json"):
            store.counter_names()
