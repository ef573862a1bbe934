"""What another writer changed in an open version since a state's stamp: the keys to forget, not the whole cache.

A :class:`~.state.VersionState` of an open version caches the records it read. When another handle
(another process) edits the version, the state's stamp no longer matches the store's, and the
state used to forget everything it had read: the next query after every such edit re-read every
record it touched (~340 store reads for ``connections(body)`` of 10⁴ synapses: half its time).

Every edit is one mutation written by :func:`~.edits.write_plan` in one transaction: a log entry
of the version, the stamp set to the mutation's id, and an undo record naming every body-map
record (and overlay block, overlay count) it wrote. So the records that changed between two
stamps are those named by the undo records of the log entries appended in between; everything
else a state read is still what the store holds (the version's ancestors are committed, and
nothing else wrote the version). When that chain cannot be followed exactly — the log shorter
than before (a migration), an entry whose mutation id is not the stamp reached, too many entries
to be worth reading, a mutation with effects but no undo record — the caller forgets everything,
as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from napari_shardscope.core.labelmap.keys import (
    BLOCK_PREFIX,
    INDEX_PREFIX,
    OVERLAY_COUNT_PREFIX,
    decode_saved,
    undo_prefix,
)
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.records import MAP_PREFIXES, PARENT_PREFIX
from napari_shardscope.core.labelmap.undo_records import MAGIC, OLD_MAGIC, decode_undo_record
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.view import VersionView

#: Mutations read to catch up at most; beyond, reading their undo records costs more than re-reading.
MAX_CATCH_UP = 64
_BLOCK_KEY_LEN = 14  # b + >BIII


@dataclass(frozen=True)
class CaughtUp:
    """The records mutations wrote since a state's stamp, and the version's log length after them.

    ``unlinked``: a union-find parent link was removed or replaced (a root memo must be dropped).
    ``blocks``: an overlay block or count was written (the overlay must be re-read).
    """

    keys: frozenset[bytes]
    unlinked: bool
    blocks: bool
    log_length: int


def is_cached_record(key: bytes) -> bool:
    """True for the kinds of record a state may keep across another writer's edit: those an edit's undo
    record names when it writes them. Anything else (stack tops, history, the stamp) is forgotten."""
    kind = key[:1]
    if len(key) == 9:
        return kind in MAP_PREFIXES or kind == INDEX_PREFIX
    return (kind == BLOCK_PREFIX and len(key) == _BLOCK_KEY_LEN) or (kind == OVERLAY_COUNT_PREFIX and len(key) == 2)


def written_since(view: VersionView, instance: Instance, log_from: int, stamp: int) -> CaughtUp | None:
    """The records the version's mutations ``log_from``.. wrote, as ``view`` sees them, if they lead to ``stamp``.

    ``None``: the chain cannot be followed exactly (see the module docstring): forget everything.
    """
    length = view.log_length(instance)
    if not log_from < length <= log_from + MAX_CATCH_UP:
        return None
    vid = view.version.vid
    keys: set[bytes] = set()
    unlinked = False
    last = None
    for seq in range(log_from, length):
        data = view.log_entry(instance, vid, seq)
        if data is None:
            return None
        m = Mutation.from_bytes(data, key=f"mutation log of version {view.version.uuid}, entry {seq}")
        prefix = undo_prefix(m.mutation_id)
        found = False
        for k, raw in view.scan(instance, prefix=prefix):
            if len(k) == len(prefix):
                saved = decode_saved(raw) if raw[:4] == OLD_MAGIC else \
                    decode_undo_record(raw, where=f"undo record of mutation {m.mutation_id}") \
                    if raw[:4] == MAGIC else None
                if saved is None:
                    return None
                for key, old in saved.items():
                    keys.add(key)
                    unlinked |= key[:1] == PARENT_PREFIX and old is not None
            else:  # a per-key record (the replay era, migrations): its previous value is not needed
                key = k[len(prefix):]
                keys.add(key)
                unlinked |= key[:1] == PARENT_PREFIX
            found = True
        if not found and (m.delta.explicit or m.delta.retired or m.delta.parent or m.blocks):
            return None
        last = m.mutation_id
    if last != stamp:
        return None
    blocks = any(k[:1] in (BLOCK_PREFIX, OVERLAY_COUNT_PREFIX) for k in keys)
    return CaughtUp(frozenset(keys), unlinked, blocks, length)


__all__ = ["MAX_CATCH_UP", "CaughtUp", "is_cached_record", "written_since"]
