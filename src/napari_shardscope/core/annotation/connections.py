"""What the connectome queries return: partners with counts, synapse sites, adjacency tables, diffs.

Plain frozen records and a column table (NumPy, convertible to pandas), kept apart from the
queries of :mod:`.connectome` so a caller can name and build them without the query machinery.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.model import Annotation
from napari_shardscope.core.errors import UnsupportedFeatureError

U64 = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class Partner:
    """A partner body and the number of synapses to (outgoing) or from (incoming) it."""

    body: int
    count: int


@dataclass(frozen=True)
class Connections:
    """The partners of ``body`` at a version, each side sorted by count (largest first), then body id."""

    body: int
    outgoing: tuple[Partner, ...]
    incoming: tuple[Partner, ...]

    @property
    def out_total(self) -> int:
        return sum(p.count for p in self.outgoing)

    @property
    def in_total(self) -> int:
        return sum(p.count for p in self.incoming)

    def to_json(self) -> dict[str, Any]:
        return {"body": self.body, "outgoing": [[p.body, p.count] for p in self.outgoing],
                "incoming": [[p.body, p.count] for p in self.incoming]}

    def rows(self) -> Iterator[dict[str, Any]]:
        """One row per partner: ``direction`` (``out``: body is pre), ``partner``, ``count``."""
        for direction, side in (("out", self.outgoing), ("in", self.incoming)):
            for p in side:
                yield {"body": self.body, "direction": direction, "partner": p.body, "count": p.count}


@dataclass(frozen=True)
class SynapseSite:
    """One synaptic annotation of a body and its partners: ``(partner annotation id, partner body)``."""

    annotation: Annotation
    body: int
    partners: tuple[tuple[int, int], ...]

    def rows(self) -> Iterator[dict[str, Any]]:
        a = self.annotation
        base = {"id": a.id, "kind": a.kind, "z": a.point[0], "y": a.point[1], "x": a.point[2], "body": self.body}
        if not self.partners:
            yield {**base, "partner": 0, "partner_body": 0}
        for pid, pbody in self.partners:
            yield {**base, "partner": pid, "partner_body": pbody}

    def to_json(self) -> dict[str, Any]:
        return {"annotation": self.annotation.to_json(), "body": self.body,
                "partners": [{"id": i, "body": b} for i, b in self.partners]}


def as_u64(values: Iterable[int]) -> U64:
    return np.fromiter((int(v) for v in values), dtype=np.uint64)


@dataclass(frozen=True, eq=False)
class ConnectionTable:
    """An adjacency table (neuPrint's ``fetch_adjacencies`` / CAVE's synapse table, aggregated).

    One row per connected pair of bodies: ``pre`` (body of the pre-synaptic sites), ``post`` and
    ``count`` (synapses), sorted by count (largest first), then pre, post. Columns are NumPy
    arrays; :meth:`to_pandas` gives a DataFrame, :meth:`to_records` a structured array.
    """

    pre: U64
    post: U64
    count: npt.NDArray[np.int64]

    DTYPE = np.dtype([("pre", "<u8"), ("post", "<u8"), ("count", "<i8")])

    @classmethod
    def from_counts(cls, counts: dict[tuple[int, int], int]) -> ConnectionTable:
        rows = sorted(((-n, a, b) for (a, b), n in counts.items() if n), key=lambda r: r)
        return cls(as_u64(r[1] for r in rows), as_u64(r[2] for r in rows),
                   np.fromiter((-r[0] for r in rows), dtype=np.int64))

    @classmethod
    def from_arrays(cls, pre: npt.ArrayLike, post: npt.ArrayLike, count: npt.ArrayLike) -> ConnectionTable:
        """The table of distinct ``(pre, post)`` pairs with their counts (zero counts dropped), sorted as above.

        Vectorised: a whole connectome's table is built without a Python object per row.
        """
        a = np.asarray(pre, dtype=np.uint64).reshape(-1)
        b = np.asarray(post, dtype=np.uint64).reshape(-1)
        n = np.asarray(count, dtype=np.int64).reshape(-1)
        keep = n != 0
        a, b, n = a[keep], b[keep], n[keep]
        order = np.lexsort((b, a, -n))
        return cls(a[order], b[order], n[order])

    def __len__(self) -> int:
        return int(self.pre.size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConnectionTable) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def as_dict(self) -> dict[tuple[int, int], int]:
        """``{(pre, post): count}``."""
        return {(int(a), int(b)): int(n) for a, b, n in zip(self.pre, self.post, self.count, strict=True)}

    def rows(self) -> Iterator[dict[str, int]]:
        for a, b, n in zip(self.pre.tolist(), self.post.tolist(), self.count.tolist(), strict=True):
            yield {"pre": a, "post": b, "count": n}

    def to_records(self) -> npt.NDArray[Any]:
        out = np.zeros(len(self), dtype=self.DTYPE)
        out["pre"], out["post"], out["count"] = self.pre, self.post, self.count
        return out

    def to_pandas(self) -> Any:
        """A DataFrame with columns ``pre``, ``post``, ``count`` (needs pandas: ``pip install pandas``)."""
        try:
            import pandas as pd  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise UnsupportedFeatureError("ConnectionTable.to_pandas",
                                          detail="install pandas: pip install pandas") from exc
        return pd.DataFrame({"pre": self.pre, "post": self.post, "count": self.count})


@dataclass(frozen=True)
class ConnectionChange:
    """One connection an edit created (``before`` 0), removed (``after`` 0) or changed."""

    pre: int
    post: int
    before: int
    after: int

    @property
    def status(self) -> str:
        return "created" if self.before == 0 else "removed" if self.after == 0 else "changed"

    def to_json(self) -> dict[str, Any]:
        return {"pre": self.pre, "post": self.post, "before": self.before, "after": self.after,
                "status": self.status}


@dataclass(frozen=True)
class ConnectivityDiff:
    """What differs in the wiring between versions ``a`` and ``b`` (sorted by pre, post)."""

    a: str
    b: str
    bodies: tuple[int, ...]
    changes: tuple[ConnectionChange, ...]

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "bodies": list(self.bodies), "changes": [c.to_json() for c in self.changes]}
