"""The remote's object encodings: round trips (Hypothesis), determinism, and damaged objects refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.versioned.node import NodeContent, NodeEntry, NodeLog, NodeNote
from napari_shardscope.core.versioned.remotes import pack as P
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.store import NodeRef, Refs, RemoteInstance

HEX = st.text("0123456789abcdef", min_size=32, max_size=32)
NAMES = st.sampled_from(["seg", "notes", "bookmarks"])


@st.composite
def nodes(draw: st.DrawFn) -> NodeContent:
    entries = draw(st.dictionaries(st.tuples(NAMES, st.binary(min_size=1, max_size=40)),
                                   st.none() | st.binary(max_size=300), max_size=20))
    logs = draw(st.dictionaries(st.tuples(NAMES, st.integers(0, 2**63)), st.binary(max_size=200), max_size=10))
    notes = draw(st.lists(st.text(max_size=30), max_size=3))
    parents = draw(st.lists(HEX, max_size=2, unique=True))
    return NodeContent(
        uuid=draw(HEX), parents=tuple(parents), branch=draw(st.sampled_from(["main", "alice", "origin/main"])),
        message=draw(st.text(max_size=40)), created=draw(st.floats(0, 2e9)), committed=draw(st.floats(0, 2e9)),
        entries=tuple(sorted((NodeEntry(i, k, v) for (i, k), v in entries.items()), key=lambda e: (e.instance, e.key))),
        logs=tuple(sorted((NodeLog(i, s, d) for (i, s), d in logs.items()), key=lambda g: (g.instance, g.seq))),
        notes=tuple(NodeNote(n, 1.5 * n, t) for n, t in enumerate(notes)))


@settings(max_examples=200)
@given(nodes())
def test_node_round_trip_and_determinism(node: NodeContent) -> None:
    datas, instances = P.encode_data(node)
    names = [P.object_name(d) for d in datas]
    parents = {p: P.object_name(p.encode()) for p in node.parents}
    blob = P.encode_node(node, parents, names, instances)
    assert blob == P.encode_node(node, parents, names, instances)
    assert P.encode_data(node)[0] == datas  # the same node always makes the same objects (resumable pushes)
    header = P.decode_node(P.object_name(blob), P.verify(P.object_name(blob), blob))
    records = [r for n, d in zip(names, datas, strict=True) for r in P.decode_data(n, d, header.instances)]
    assert P.node_content(header, records) == node
    assert header.parents == tuple((p, parents[p]) for p in node.parents)


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=20), st.binary(max_size=50)), max_size=30,
                unique_by=lambda kv: kv[0]))
def test_unversioned_round_trip(pairs: list[tuple[bytes, bytes]]) -> None:
    blob = P.encode_pairs(pairs)
    assert P.decode_pairs(P.object_name(blob), blob) == sorted(pairs)


def test_refs_round_trip() -> None:
    refs = Refs(seq=3, writer="w", root=NodeRef("a" * 32, "b" * 64),
                branches={"main": NodeRef("c" * 32, "d" * 64)},
                instances={"seg": RemoteInstance("labelmap", {"base": "x"}, "e" * 64, 5)},
                regions={"main": [[0, 8], [0, 8], [0, 8]]})
    assert Refs.from_bytes(refs.to_bytes(), "refs") == refs
    nxt = refs.bumped("v")
    assert nxt.seq == 4 and nxt.writer == "v" and nxt.to_bytes() != refs.to_bytes()


def test_damaged_objects_are_refused() -> None:
    node = NodeContent("a" * 32, (), "main", "", 1.0, 2.0, (NodeEntry("seg", b"k", b"v"),), (), ())
    datas, instances = P.encode_data(node)
    name = P.object_name(datas[0])
    with pytest.raises(CorruptObjectError, match="does not match its hash"):
        P.verify(name, datas[0][:-1] + bytes([datas[0][-1] ^ 1]))
    truncated = P.DATA_MAGIC + __import__("zlib").compress(b"E\x00\x00\x00\x00\x00\x09k")
    with pytest.raises(CorruptObjectError, match="bad record"):
        list(P.decode_data(P.object_name(truncated), truncated, instances))
    with pytest.raises(CorruptObjectError, match="not a SSNODE1"):
        P.decode_node(name, datas[0])
    with pytest.raises(CorruptObjectError, match="unreadable refs"):
        Refs.from_bytes(b"{}", "refs.json")


@settings(max_examples=60)
@given(nodes())
def test_objects_stay_readable_across_the_compressor_change(node: NodeContent) -> None:
    """Objects are zlib streams whoever compressed them: CPython's zlib before, libdeflate now.

    An object an earlier version pushed (``zlib.compress(body, 1)``) decodes here, and what we frame
    now is a plain zlib stream an earlier version's reader (``zlib``) decodes.
    """
    import zlib

    datas, instances = P.encode_data(node)
    names = [P.object_name(d) for d in datas]
    blob = P.encode_node(node, {p: P.object_name(p.encode()) for p in node.parents}, names, instances)
    for magic, obj in [(P.NODE_MAGIC, blob), *((P.DATA_MAGIC, d) for d in datas)]:
        body = zlib.decompress(obj[len(magic):])  # an older reader
        old = magic + zlib.compress(body, 1)  # an older writer
        if magic == P.NODE_MAGIC:
            assert P.decode_node(P.object_name(old), old) == P.decode_node(P.object_name(blob), blob)
        else:
            assert list(P.decode_data(P.object_name(old), old, instances)) == \
                list(P.decode_data(P.object_name(obj), obj, instances))


def test_damaged_frames_are_typed_and_name_the_object() -> None:
    import zlib

    body = b"E" + bytes(200)
    good = P.DATA_MAGIC + zlib.compress(body, 1)
    cases = [good[:-3], good[:12] + bytes(len(good) - 12), good + b"tail", P.DATA_MAGIC + b"\x78\x9c"]
    for bad in cases:
        name = P.object_name(bad)
        with pytest.raises(CorruptObjectError, match=name):
            list(P.decode_data(name, bad, ("seg",)))


@pytest.mark.slow
def test_an_object_inflating_past_the_limit_is_refused() -> None:
    """A hostile remote's object of a few hundred KB claiming more than MAX_OBJECT_BYTES: typed, bounded."""
    from napari_shardscope.core.encoding import zlib_compress

    bomb = P.DATA_MAGIC + zlib_compress(bytes(P.MAX_OBJECT_BYTES + 1), 1)
    name = P.object_name(bomb)
    with pytest.raises(CorruptObjectError, match=f"more than {P.MAX_OBJECT_BYTES} bytes"):
        list(P.decode_data(name, bomb, ("seg",)))


def test_damaged_frames_name_the_byte_of_the_object_where_the_damage_is() -> None:
    """A user handed a damaged object can look at it: the error names the stored object and a byte of it."""
    import zlib

    body = b"E" + bytes(200)
    stream = zlib.compress(body, 1)
    good = P.DATA_MAGIC + stream
    start = len(P.DATA_MAGIC)
    cases = [(good[:-3], start), (good[:start + 2] + bytes(len(stream) - 2), start), (good + b"tail", len(good))]
    for bad, at in cases:
        name = P.object_name(bad)
        with pytest.raises(CorruptObjectError, match=rf"^object {name}: {P.object_key(name)}: .* at byte {at}$"):
            list(P.decode_data(name, bad, ("seg",)))


def test_small_objects_inflating_past_their_bound_are_refused() -> None:
    """Objects small enough for the in-process inflate (node records, key listings) keep the ratio bound."""
    from napari_shardscope.core.encoding import zlib_compress

    body = bytes(P.INFLATE_FLOOR + 1)
    for magic in (P.NODE_MAGIC, P.KEYS_MAGIC, P.DATA_MAGIC):
        bomb = magic + zlib_compress(body, 9)
        assert len(bomb) <= P.SMALL_OBJECT_BYTES
        name = P.object_name(bomb)
        with pytest.raises(CorruptObjectError, match=f"more than {P.INFLATE_FLOOR} bytes"):
            P._unframe(magic, bomb, name)


def test_node_records_nested_deeper_than_the_loader_allows_are_refused() -> None:
    """The node record's fast JSON path hands anything but a flat record to the bounded loader."""
    import json as _json
    import zlib

    node = NodeContent(uuid="a" * 32, parents=("b" * 32,), branch="main", message="m", created=1.0, committed=2.0,
                       entries=(), logs=(), notes=())
    good = P.encode_node(node, {"b" * 32: "c" * 64}, [], [])
    header = _json.loads(zlib.decompress(good[len(P.NODE_MAGIC):]))
    for field, deep in (("message", [[[[[["x"]]]]]] * 1), ("region", {"a": [[[1]]]})):
        nested: object = deep
        for _ in range(70):
            nested = [nested]
        obj = P.NODE_MAGIC + zlib.compress(_json.dumps({**header, field: nested}).encode())
        with pytest.raises(CorruptObjectError, match="nested deeper"):
            P.decode_node(P.object_name(obj), obj)
    # a region nested a few levels (what a region clone writes) decodes as before
    obj = P.NODE_MAGIC + zlib.compress(_json.dumps({**header, "region": [[0, 4], [0, 8], [0, 8]]}).encode())
    assert P.decode_node(P.object_name(obj), obj).region == [[0, 4], [0, 8], [0, 8]]
    assert P.decode_node(P.object_name(good), good).parents == (("b" * 32, "c" * 64),)
