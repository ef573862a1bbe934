"""Writes that wait in memory for one sorted bulk put (used by the DAG writer's bulk adoption)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from napari_shardscope.core.versioned.engines.protocol import WriteTxn


class BufferedWrites:
    """A write transaction whose puts wait in memory, while buffering, for one sorted bulk put.

    Adopting a chain of versions writes about seven small DAG records per version; one engine call
    each costs more than computing them. While :attr:`buffering`, puts go into a dict (a later put of
    a key replaces the earlier, as in the engine) and :meth:`flush` writes them with one ``put_many``
    in key order (the engines' fastest). Gets see the buffer first, so the DAG writer's readers
    (its page reader, its look-ups past its caches) read what it wrote whenever their caches forget
    it; a scan or a delete flushes first, so they see the engine as the writes leave it. The final
    contents are those of the same puts made one by one.
    """

    def __init__(self, txn: WriteTxn) -> None:
        self.inner = txn
        self.buffering = False
        self._puts: dict[bytes, bytes] = {}

    def flush(self) -> None:
        """Write what waits (in key order) with one bulk put."""
        if self._puts:
            items = sorted(self._puts.items())
            self._puts = {}
            self.inner.put_many(items)

    def get(self, key: bytes) -> bytes | None:
        hit = self._puts.get(key)
        return hit if hit is not None else self.inner.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        keys = list(keys)
        if not self._puts:
            return self.inner.get_many(keys)
        out = [self._puts.get(k) for k in keys]
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            for i, raw in zip(missing, self.inner.get_many([keys[i] for i in missing]), strict=True):
                out[i] = raw
        return out

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        self.flush()
        return self.inner.scan(lo, hi, reverse=reverse)

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        self.flush()
        return self.inner.scan_keys(lo, hi, reverse=reverse)

    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        self.flush()
        return self.inner.find_last(lo, hi, accept)

    def put(self, key: bytes, value: bytes) -> None:
        if self.buffering:
            self._puts[key] = value
        else:
            self.inner.put(key, value)

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        if self.buffering:
            self._puts.update(items)
        else:
            self.inner.put_many(items)

    def delete(self, key: bytes) -> bool:
        self.flush()
        return bool(self.inner.delete(key))
