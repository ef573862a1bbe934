"""History packs: every pushed version's node object and key listing in O(log versions) objects.

A node object names its parents' node objects, so a fetch can walk a history from a branch head
with reads alone — but one dependent read per version: 10⁵ versions at 20 ms a request is over half
an hour. So each push also writes one *pack* (:func:`~.pack.encode_pack`) of the node objects and key
listings it sent, and the refs list the packs, oldest and largest first. A push merges its pack with
the newest ones while they are not more than twice its size (a binary counter's carry), so sizes fall
geometrically along the list: a history of N versions is O(log N) packs, every version is re-sent
O(log N) times over the whole history, and a fetch of k new versions reads the newest packs only
(about 2k versions' records) before its walk finds versions it already has.

Packs are an index, never the authority: every object in one is checked against the hash its
parent or the refs name (a pack is keyed by the hashes of what it holds), and a version no pack
holds (pushed by an older library, or by a push killed between its objects and its refs) is read
on its own as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from napari_shardscope.core.versioned.remotes.pack import decode_pack, encode_pack
from napari_shardscope.core.versioned.remotes.store import PackRef, RemoteStore

#: A merged pack stops growing at about this many bytes (the next push starts a new one beside it).
PACK_MAX_BYTES = 64 * 1024 * 1024


def extend_packs(store: RemoteStore, packs: Sequence[PackRef], objects: Sequence[bytes],
                 count: int) -> tuple[PackRef, ...]:
    """``packs`` with a new pack of ``objects`` (``count`` versions) merged into the newest ones it outgrows."""
    if count == 0:
        return tuple(packs)
    if sum(len(o) for o in objects) > PACK_MAX_BYTES:  # a huge push: packs of its own, merged with nothing
        out, part, part_size = list(packs), [], 0
        for o in objects:
            part.append(o)
            part_size += len(o)
            if part_size >= PACK_MAX_BYTES:
                out.append(PackRef(store.put_object(encode_pack(part), "history pack"), 0))
                part, part_size = [], 0
        if part:
            out.append(PackRef(store.put_object(encode_pack(part), "history pack"), 0))
        out[-1] = PackRef(out[-1].name, count)  # the versions are counted once, on the newest part
        return tuple(out)
    kept = list(packs)
    merged: dict[str, bytes] = {}
    size = sum(len(o) for o in objects)
    while kept and kept[-1].count <= 2 * count:
        older = decode_pack(kept[-1].name, store.get_object(kept[-1].name, "history pack"))
        extra = sum(len(o) for o in older.values())
        if size + extra > PACK_MAX_BYTES:
            break
        count += kept.pop().count
        merged = {**older, **merged}
        size += extra
    body = list(merged.values()) + list(objects)
    name = store.put_object(encode_pack(body), "history pack")
    return (*kept, PackRef(name, count))


class PackedHistory:
    """Objects of a remote's history, read from its packs newest first, then one by one."""

    def __init__(self, store: RemoteStore, packs: Sequence[PackRef]) -> None:
        self._store = store
        self._pending = list(packs)
        self._objects: dict[str, bytes] = {}
        self.packs_read = 0

    @property
    def url(self) -> str:
        return self._store.url

    def _load_next(self) -> bool:
        if not self._pending:
            return False
        ref = self._pending.pop()
        self._objects.update(decode_pack(ref.name, self._store.get_object(ref.name, "history pack")))
        self.packs_read += 1
        return True

    def get(self, name: str, what: str) -> bytes:
        """Object ``name`` (verified: a pack's objects are keyed by their hash)."""
        while name not in self._objects:
            if not self._load_next():
                return self._store.get_object(name, what)
        self._store.transfer.objects_received += 1
        return self._objects[name]

    def get_many(self, names: Sequence[str], what: str) -> list[bytes]:
        """Objects ``names``: those in the packs read so far, the rest downloaded together."""
        missing = [n for n in dict.fromkeys(names) if n not in self._objects]
        if missing:
            for n, data in zip(missing, self._store.get_objects(missing, what), strict=True):
                self._objects[n] = data
        return [self._objects[n] for n in names]
