"""``inspect``, ``ls`` and ``validate`` on every real dataset (``../shared/realdata``, written by other software).

Clean, except what the datasets really have (their README lists it): the non-conformant
``ngscripts_sharded/zlib_as_gzip`` (validate names gzip) and the stale off-grid chunk files
CloudVolume left in ``noduli_seg_head``; an OME-Zarr labels group names the label images to inspect.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from napari_shardscope.core.cli import run
from tests.core.formats.test_consistency import DIRS, NOT_VOLUMES
from tests.realdata import REALDATA

VOLUMES = [d for d in DIRS if d not in NOT_VOLUMES]
#: ``validate`` findings the datasets really have (see ../shared/realdata/README.md).
KNOWN_PROBLEMS = {"ngscripts_sharded/zlib_as_gzip": "bad gzip data",
                  "noduli_seg_head": "file name is not a chunk of this scale's grid"}


@pytest.mark.realdata
@pytest.mark.parametrize("rel", VOLUMES)
def test_inspect_ls_and_validate_on_every_real_dataset(rel: str) -> None:
    url = str(REALDATA / rel)
    codes, outputs = [], []
    for verb in ("inspect", "ls", "validate"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            codes.append(run([verb, url]))
        outputs.append(out.getvalue())
    if rel in KNOWN_PROBLEMS:
        assert codes[2] == 1 and KNOWN_PROBLEMS[rel] in outputs[2], outputs[2]
        if rel == "ngscripts_sharded/zlib_as_gzip":
            assert "gzip" in outputs[2]
        return
    if rel == "zarrjava_ome05/labels":  # a labels group: its label images are the volumes the viewer opens
        assert codes == [3, 3, 3]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            run(["inspect", url])
        assert "labels group" in err.getvalue() and "zarrjava_ome05/labels/nuclei" in err.getvalue()
        return
    assert codes == [0, 0, 0], (rel, outputs)
