"""The sorted-table fuzz target (``tests/fuzz/tables.py``): a fixed range of seeds must end with zero findings,
and its detectors must detect (an untyped exception, a hang)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("zarr")

from tests.fuzz import tables as fuzz_tables

#: The seeds CI runs (about a minute on two cores); ``python -m tests.fuzz.tables --cases N`` runs more.
CI_SEEDS = range(0, 150)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[fuzz_tables.Seed]:
    return fuzz_tables.build_seeds(tmp_path_factory.mktemp("table-seeds"))


def test_ci_seeds_have_no_findings(seeds: list[fuzz_tables.Seed]) -> None:
    report = fuzz_tables.fuzz(CI_SEEDS, seeds, workers=2)
    assert report.cases == len(CI_SEEDS)
    assert not report.findings, report.findings[:3]
    assert report.outcomes["corrupt"] > len(CI_SEEDS) // 2  # the damage reaches the readers
    assert report.outcomes["ok"] > 0  # and some cases still read (damage that a lookup never touches)


def test_every_seed_table_reads_cleanly(seeds: list[fuzz_tables.Seed], tmp_path: Path) -> None:
    import random

    for seed in seeds:
        ops = fuzz_tables.operations(seed.path, seed.options, random.Random(1))
        for name, op in ops:
            op()  # undamaged: every operation succeeds
            assert name


def test_detectors_detect(seeds: list[fuzz_tables.Seed]) -> None:
    """An untyped exception and a hang inside an operation are findings (the detectors are not blind)."""
    report = fuzz_tables.Report()
    report.add({"seed": 1, "base": "x", "damage": [], "ops": [("lookup", fuzz_tables.classify(KeyError("k")), "")]})
    assert report.findings and report.findings[0]["outcome"] == "untyped"
    # a hang: a case whose worker does not answer in time is killed and reported
    slow = [fuzz_tables.Seed("slow", seeds[0].path, {fuzz_tables.SLEEP_OPTION: 30})]
    report = fuzz_tables.fuzz([0], slow, workers=1, case_seconds=3)
    assert [f["outcome"] for f in report.findings] == ["hang"]
