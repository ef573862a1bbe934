"""The seeds of the hostile-dataset fuzz run in CI: a covering handful of ``range(0, 400)``, not all of it.

Every seed of ``range(0, 400)`` (the run CI made until 2026-12-05) is one *case*: a seed dataset (format,
codec, layout) damaged by one to three mutations. What a case exercises is its format, its seed dataset and
its mutation kinds; the 400 seeds repeat those classes many times over (41 format-mutation pairs, 35 seed
datasets). :data:`CI_SEEDS` are 40 of them that still reach every format-mutation pair and every seed
dataset that the 400 reach (a greedy cover, chosen by :func:`covering_seeds`); the test's coverage check
fails when a change to the generator makes them miss one. The long runs (``SHARDSCOPE_FUZZ_SLOW=1``,
``scripts/fuzz.py``) go deep.

Regenerate after changing :mod:`tests.fuzz.hostile` (its mutations or seed datasets)::

    .venv/bin/python -m tests.fuzz.ci_seeds
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tests.fuzz.hostile import _OWN_SEEDS, REALDATA_SEEDS, SeedDataset, build_seeds, make_case

#: The range :data:`CI_SEEDS` stands for, and what it covers (with every seed dataset present).
FULL_SEEDS = range(0, 400)
CI_SEEDS: tuple[int, ...] = (0, 1, 5, 6, 7, 8, 9, 10, 14, 16, 17, 18, 23, 28, 29, 30, 31, 33, 36, 38, 51, 53, 59,
                             60, 73, 74, 85, 88, 102, 128, 133, 134, 136, 144, 158, 162, 165, 216, 220, 235)
#: The (format, mutation kind) pairs ``FULL_SEEDS`` reaches ("none": a case whose mutations all declined);
#: its cases never escape paths in N5 or zarr v2 or replace a zarr v2 path.
FORMAT_MUTATIONS: frozenset[tuple[str, str]] = frozenset(
    (fmt, kind) for fmt in ("precomputed", "zarr3", "n5", "zarr2")
    for kind in ("truncate", "flip", "splice", "integer", "codec_header", "bomb", "path", "metadata", "escape",
                 "metabytes", "none")
) - {("n5", "escape"), ("zarr2", "escape"), ("zarr2", "path")}


#: The pairs of :data:`FORMAT_MUTATIONS` that only cases of the real datasets reach (their zarr v3 arrays, where
#: every mutation of some case declines). Without the real datasets (a fresh clone without ``shared/realdata``),
#: ``FULL_SEEDS`` reaches every other pair.
REALDATA_ONLY_PAIRS: frozenset[tuple[str, str]] = frozenset({("zarr3", "none")})


def all_seeds_present(seeds: list[SeedDataset]) -> bool:
    """Whether ``seeds`` are every seed dataset, the real datasets' included (see :func:`list_all_seeds`)."""
    return [s.name for s in seeds] == [s.name for s in list_all_seeds()]


def ci_seeds(seeds: list[SeedDataset]) -> Iterable[int]:
    """:data:`CI_SEEDS` with every seed dataset present; ``FULL_SEEDS`` without some of them (the real
    datasets absent: a seed then picks another dataset, and the cover no longer holds)."""
    return CI_SEEDS if all_seeds_present(seeds) else FULL_SEEDS


def expected_pairs(seeds: list[SeedDataset]) -> frozenset[tuple[str, str]]:
    """The (format, mutation kind) pairs the run of :func:`ci_seeds` over ``seeds`` must reach."""
    return FORMAT_MUTATIONS if all_seeds_present(seeds) else FORMAT_MUTATIONS - REALDATA_ONLY_PAIRS


def list_all_seeds() -> list[SeedDataset]:
    """Every seed dataset :func:`~tests.fuzz.hostile.build_seeds` writes when the real datasets are present."""
    return [SeedDataset(name, fmt, Path(rel)) for name, fmt, rel in (*_OWN_SEEDS, *REALDATA_SEEDS)]


def case_classes(base: str, fmt: str, mutations: Iterable[str]) -> set[tuple[str, ...]]:
    """What one case exercises: its seed dataset and each (format, mutation kind) pair."""
    return {("base", base)} | {("pair", fmt, m.split(":", 1)[0]) for m in mutations}


def covering_seeds(candidates: Iterable[int], seeds: list[SeedDataset], bomb: Path) -> list[int]:
    """A small set of ``candidates`` reaching every class they reach together (greedy set cover)."""
    work = Path(tempfile.mkdtemp(prefix="shardscope-fuzz-cover-"))
    try:
        classes: dict[int, set[tuple[str, ...]]] = {}
        for seed in candidates:
            case = make_case(seed, seeds, work / str(seed), bomb)
            classes[seed] = case_classes(case.base, case.fmt, case.mutations)
            shutil.rmtree(work / str(seed))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return greedy_cover(classes)


def greedy_cover(classes: dict[int, set[tuple[str, ...]]]) -> list[int]:
    """Seeds of ``classes`` (seed: the classes its case exercises) that together reach every class: each
    step takes the seed adding the most classes not reached yet (the lowest seed on a tie)."""
    everything = set().union(*classes.values())
    chosen: list[int] = []
    covered: set[tuple[str, ...]] = set()
    while covered != everything:
        best = max(classes, key=lambda s: (len(classes[s] - covered), -s))
        chosen.append(best)
        covered |= classes[best]
    return sorted(chosen)


def main() -> int:
    root = Path(tempfile.gettempdir()) / "shardscope-fuzz-cover-seeds"
    seeds = build_seeds(root)
    print(covering_seeds(FULL_SEEDS, seeds, root / "bomb.gz"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
