"""Fixtures of the annotation tests: the sample dataset, a repository with its labelmap and an instance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import AnnotationInstance, create_annotation_instance
from napari_shardscope.core.labelmap import Labelmap, create_labelmap
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import Repository, create_repository
from napari_shardscope.core.volumes import open_volume
from tests.volume_cases import run_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDataset:
    return run_sample(tmp_path_factory)  # made once per test run, shared by the xdist workers


@pytest.fixture(scope="module")
def base0(sample: SampleDataset) -> np.ndarray:
    return np.asarray(open_volume(sample.segmentation).levels[0].array)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    r = create_repository(tmp_path / "repo")
    yield r
    r.close()


@pytest.fixture
def lm(sample: SampleDataset, repo: Repository) -> Labelmap:
    return create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)


@pytest.fixture
def syn(lm: Labelmap, repo: Repository) -> AnnotationInstance:
    return create_annotation_instance(repo, "synapses", labelmap=lm)
