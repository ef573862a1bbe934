"""A push to an S3 look-alike that ignores ``If-Match`` / ``If-None-Match`` is refused before any ref is written.

The server is moto's real S3 app on 127.0.0.1 behind a middleware that drops the conditional
headers, as an S3-compatible store without conditional writes does: every conditional PUT then
succeeds, so two pushers could both "win". The per-remote CAS probe must notice and refuse, and
the remote must be left without a refs object (objects no ref reaches are harmless).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.errors import NoCompareAndSwapError
from napari_shardscope.core.versioned.remotes.store import RemoteStore
from tests.core.versioned.remotes.helpers import edit, make_repo
from tests.gcs_emulator import GcsServer, gcs, gcs_server  # noqa: F401  (fixtures)
from tests.moto_s3 import S3Server, serve_moto

CONDITIONAL = ("HTTP_IF_MATCH", "HTTP_IF_NONE_MATCH")


@pytest.fixture
def lax_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """moto S3 on 127.0.0.1 that ignores conditional-write headers (one request at a time)."""
    with serve_moto(drop_headers=CONDITIONAL) as endpoint:
        s3 = S3Server(endpoint, S3Server(endpoint, "").new_bucket())
        for k, v in s3.env().items():
            monkeypatch.setenv(k, v)
        yield s3


def test_push_to_a_store_without_cas_is_refused(lax_s3: S3Server, base: Path, tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(2))
    url = lax_s3.url("team/repo")
    R.add_remote(a, "lax", url)
    with pytest.raises(NoCompareAndSwapError, match="stale conditional write"):
        R.push(a, "lax", "main")
    refs, _ = RemoteStore(url).read_refs()
    assert refs is None  # no ref was ever written: nothing points anywhere
    with pytest.raises(NoCompareAndSwapError):  # and it stays refused
        R.push(a, "lax", "main")
    a.close()


def test_push_to_the_gcs_emulator_is_refused(gcs: GcsServer, base: Path, tmp_path: Path) -> None:  # noqa: F811
    """gs:// through TensorStore's gcs driver to gcp-storage-emulator, which ignores ``ifGenerationMatch``."""
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(3))
    url = gcs.url("team/repo")
    R.add_remote(a, "emu", url)
    with pytest.raises(NoCompareAndSwapError, match="stale conditional write"):
        R.push(a, "emu", "main")
    refs, _ = RemoteStore(url).read_refs()
    assert refs is None  # no ref was ever written
    a.close()
