"""``clone --prefetch``: a region clone of a repository whose base is only reachable over HTTP works
after the server is gone — it reads the region (every scale, bit-identical to the origin) and
makes an edit. Without the prefetch the same read fails with a typed error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from tests.core.versioned.remotes.helpers import FACTORS, make_repo, write_base
from tests.http_range_server import RangeServer

REGION = ((0, 8), (0, 16), (0, 16))  # z, y, x at scale 0: one chunk column of the 32 x 32 base


def test_prefetched_region_clone_works_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_base(tmp_path / "www" / "seg")
    server = RangeServer(tmp_path / "www")
    remote = str(tmp_path / "remote")
    region = ",".join(f"{a}:{b}" for a, b in REGION)
    try:
        a = make_repo(tmp_path / "a", server.url + "seg")  # the base lives on the (loopback) web only
        R.add_remote(a, "origin", remote)
        R.push(a, "origin", "main")
        expected = [open_labelmap(a, "seg").at("main").read_bodies(scale=s) for s in range(len(FACTORS))]
        a.close()
        assert run(["clone", remote, str(tmp_path / "laptop"), "--region", region, "--prefetch", "--json"]) == 0
        assert '"prefetched"' in capsys.readouterr().out
        assert run(["clone", remote, str(tmp_path / "online"), "--region", region]) == 0
    finally:
        server.close()  # no network from here on
    box = tuple(slice(a_, b_) for a_, b_ in REGION)
    with open_repository(tmp_path / "laptop") as laptop:
        lm = open_labelmap(laptop, "seg")
        v = lm.at("main")
        np.testing.assert_array_equal(v.read_bodies(box), expected[0][box])
        np.testing.assert_array_equal(v.read_bodies(box), data[box])  # identity agglomeration: supervoxels
        coarse = tuple(slice(a_ // f, b_ // f) for (a_, b_), f in zip(REGION, FACTORS[1], strict=True))
        np.testing.assert_array_equal(v.read_bodies(coarse, scale=1), expected[1][coarse])
        ids = [int(i) for i in np.unique(data[box]) if i]
        child = laptop.new_version(laptop.head("main"))
        edit = lm.at(child)
        edit.merge(ids[0], [ids[1]])  # an edit inside the region, offline
        assert edit.body_of(ids[1]) == ids[0]
        laptop.commit(child, "offline merge")
        assert open_labelmap(laptop, "seg").at("main").body_of(ids[1]) == ids[0]
    with open_repository(tmp_path / "online") as online, pytest.raises(ShardscopeError):
        open_labelmap(online, "seg").at("main").read_bodies(box)  # no copy: the gone server is needed


def test_prefetch_refuses_a_damaged_cache_file(tmp_path: Path, base: Path) -> None:
    """A damaged ``base-cache.json`` is an error naming it, not a silent "read the origin" (which
    fails only later, offline), and a prefetch does not overwrite it."""
    from napari_shardscope.core.labelmap.prefetch import CACHE_FILE, local_base, prefetch_base
    from napari_shardscope.core.versioned.errors import StoreCorruptError

    repo = make_repo(tmp_path / "a", base)
    first = prefetch_base(repo, "seg", [list(r) for r in REGION])
    assert first.objects > 0 and local_base(repo, "seg") == str(first.path)
    (tmp_path / "a" / CACHE_FILE).write_text("[1, 2")
    with pytest.raises(StoreCorruptError, match=CACHE_FILE.replace(".", r"\.")):
        local_base(repo, "seg")
    with pytest.raises(StoreCorruptError, match=CACHE_FILE.replace(".", r"\.")):
        prefetch_base(repo, "seg")
    assert (tmp_path / "a" / CACHE_FILE).read_text() == "[1, 2"
    repo.close()
