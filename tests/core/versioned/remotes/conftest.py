"""Fixtures of the remotes tests: a base volume, and a remote URL on a directory or on S3 (moto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.versioned.remotes.helpers import write_base
from tests.moto_s3 import S3Server, s3, s3_server  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("remotes") / "seg"
    write_base(path)
    return path


@pytest.fixture(params=["dir", "s3"])
def remote_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "dir":
        return str(tmp_path / "remote")
    server: S3Server = request.getfixturevalue("s3")
    return server.url("team/repo")
