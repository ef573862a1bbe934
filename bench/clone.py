"""Benchmark of clone (issue 28 item 4): a long history through S3 with a round trip per request, to a first plane.

Run ``PYTHONPATH=src:. python bench/clone.py`` (``--versions N``, ``--rounds R``, ``--delay S``,
``--peer-src DIR`` with ``--peer-versions M``, ``--json``).

The origin is a labelmap repository over a small precomputed base whose history has N committed
versions: a keyvalue edit in each (generated through ``Repository.batch``, as ``bench/dag.py`` does),
and a labelmap merge every ``N / 10`` versions, so the head's bodies come from versions spread over the
history. It is pushed once to a directory remote whose files are then put into moto's S3 backend
directly (the setup is not measured), and moto is served on 127.0.0.1 with ``--delay`` seconds added to
every request (outside moto's one-at-a-time lock, so requests in flight together overlap, as on a bucket).

Each round runs one fresh process that clones and reads the first z plane of the head's bodies at scale 0
(checked against the origin's), for:

* **ours, lazy** (the default): refs, the history packs, key listings; version data on first read;
* **ours, --prefetch**: every version's data downloaded by the clone;
* **the previous main** (``--peer-src``, the ``src`` of a git worktree of main before this work), on a
  smaller history of ``--peer-versions`` (it walks a node per request: at 20 ms it cannot clone 10⁵ in an
  hour), against ours at that size.

Reported per case: seconds (clone, first plane, total), requests and bytes the server sent, the child's
peak RSS; median [min–max] over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.moto_s3 import SERVED, S3Server, serve_moto  # the one loopback S3 the tests use too

CHILD = """
import json, sys, time
def peak_rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
url, dest, prefetch = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
profile = sys.argv[4] if len(sys.argv) > 4 else ""
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
t0 = time.perf_counter()
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
t1 = time.perf_counter()
path, result = R.clone(url, dest, prefetch=True) if prefetch else R.clone(url, dest)
t2 = time.perf_counter()
with open_repository(path) as repo:
    plane = open_labelmap(repo, "seg").at("main").read_bodies(scale=0)[0]
t3 = time.perf_counter()
if profile:
    prof.disable()
    prof.dump_stats(profile)
print(json.dumps({"import_s": t1 - t0, "clone_s": t2 - t1, "plane_s": t3 - t2, "total_s": t3 - t1,
                  "rss_kb": peak_rss_kb(), "versions": len(result.adopted) + 1,
                  "plane_sum": int(plane.astype("uint64").sum())}))
"""


def put_cached(cache: Path, bucket: str, prefix: str) -> int:
    """Put an origin saved by :func:`build` (``--cache``) into the bucket again; the head's first plane's sum."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for path in (cache / "objects").rglob("*"):
        if path.is_file():
            backend.put_object(bucket, f"{prefix}/{path.relative_to(cache / 'objects').as_posix()}",
                               path.read_bytes())
    return int((cache / "plane_sum").read_text())


def build(work: Path, versions: int, bucket: str, prefix: str, cache: Path | None = None) -> int:
    """The origin of ``versions`` versions, put into the bucket as a push would; the head's first plane's sum.

    The root (instances, unversioned pages) goes through a real push to a directory remote; the history is
    then encoded by the same functions a push uses (node objects, data objects, key listings, packs) and
    put into moto's backend directly, as one push of it would leave the remote — a push through moto or to a
    directory makes 3 requests or fsyncs per version, an hour of setup at 10⁵.
    """
    import numpy as np
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from tests.core.versioned.remotes.helpers import edit, make_repo, write_base

    from napari_shardscope.core.labelmap import open_labelmap
    from napari_shardscope.core.versioned import open_keyvalue
    from napari_shardscope.core.versioned import remotes as R
    from napari_shardscope.core.versioned.remotes import config as C
    from napari_shardscope.core.versioned.remotes.history import PACK_MAX_BYTES
    from napari_shardscope.core.versioned.remotes.pack import (
        encode_data_and_keys,
        encode_node,
        encode_pack,
        object_key,
        object_name,
    )
    from napari_shardscope.core.versioned.remotes.store import REFS_KEY, NodeRef, PackRef, Refs

    base = (cache if cache is not None else work) / "base"  # the clones read the base where the origin has it
    write_base(base)
    origin = make_repo(work / "origin", base)
    remote = work / "remote"
    kv = open_keyvalue(origin, "kv", create=True)
    R.add_remote(origin, "dir", str(remote))
    R.push(origin, "dir")  # the root, its instances and their unversioned pages
    rng = np.random.default_rng(1)
    made = 1
    edits = max(2, versions // 10)
    t0 = time.perf_counter()
    while made < versions:
        n_kv, done = min(edits - 1, versions - made), 0
        while done < n_kv:
            with origin.batch() as b:
                v = b.version("main")
                for _ in range(min(1000, n_kv - done)):
                    nv = b.new_version(v)
                    b.write(nv).put(kv.instance, b"k%d" % (made % 97), b"%d" % made)
                    v = b.commit(nv, f"kv {made}")
                    made += 1
                    done += 1
        if made < versions:
            edit(origin, "merge", rng)
            made += 1
    print(f"built {origin.version_count()} versions in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    plane = open_labelmap(origin, "seg").at("main").read_bodies(scale=0)[0]
    t0 = time.perf_counter()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def put(key: str, data: bytes) -> None:
        backend.put_object(bucket, f"{prefix}/{key}", data)
        if cache is not None:
            (cache / "objects" / key).parent.mkdir(parents=True, exist_ok=True)
            (cache / "objects" / key).write_bytes(data)

    for path in remote.rglob("*"):
        if path.is_file() and not path.name.startswith(".") and path.name != REFS_KEY:
            put(path.relative_to(remote).as_posix(), path.read_bytes())
    names = dict(C.load_state(origin, "dir").objects)
    head = origin.head("main")
    packed: list[bytes] = []
    for v in reversed(origin.ancestry(head)):
        if v.uuid in names:
            continue
        content = origin.read_node(v)
        datas, instances, keys = encode_data_and_keys(content)
        node = encode_node(content, names, [object_name(d) for d in datas], instances, keys=object_name(keys))
        names[v.uuid] = object_name(node)
        for o in (*datas, keys, node):
            put(object_key(object_name(o)), o)
        packed += [node, keys]
    packs: list[PackRef] = []
    part: list[bytes] = []
    size = 0
    for i, o in enumerate(packed):
        part.append(o)
        size += len(o)
        if size >= PACK_MAX_BYTES or i == len(packed) - 1:
            pack = encode_pack(part)
            put(object_key(object_name(pack)), pack)
            packs.append(PackRef(object_name(pack), 0))
            part, size = [], 0
    packs[-1] = PackRef(packs[-1].name, versions - 1)  # as extend_packs counts a push split into parts
    refs = Refs.from_bytes((remote / REFS_KEY).read_bytes(), REFS_KEY)
    refs = refs.bumped("bench", branches={"main": NodeRef(head.uuid, names[head.uuid])}, packs=tuple(packs))
    put(REFS_KEY, refs.to_bytes())
    print(f"encoded and put {versions} versions in {time.perf_counter() - t0:.0f} s ({len(packs)} pack(s))",
          file=sys.stderr)
    origin.close()
    if cache is not None:
        (cache / "plane_sum").write_text(str(int(plane.astype("uint64").sum())))
    return int(plane.astype("uint64").sum())


def run_child(src: Path, env: dict[str, str], url: str, dest: Path, prefetch: bool,
              log: list[Any], profile: str = "") -> dict[str, Any]:
    shutil.rmtree(dest, ignore_errors=True)
    before, served = len(log), SERVED.bytes
    done = subprocess.run([sys.executable, "-c", CHILD, url, str(dest), "1" if prefetch else "0", profile],
                          env={**env, "PYTHONPATH": str(src)}, capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise SystemExit(f"child failed: {done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["requests"] = len(log) - before
    out["bytes"] = SERVED.bytes - served
    return out


def summary(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.02, help="seconds added to every request (default 0.02)")
    ap.add_argument("--prefetch-rounds", type=int, default=1, help="rounds of the --prefetch peer (0: none)")
    ap.add_argument("--peer-src", type=Path, default=None, help="src directory of the previous main")
    ap.add_argument("--peer-versions", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cache", type=Path, default=None,
                    help="directory keeping each built origin (h<N>/), reused by later runs (setup of 10⁵: ~5 min)")
    ap.add_argument("--profile", default="", help="cProfile the first round of 'ours lazy' into this file")
    args = ap.parse_args()
    ours = Path(__file__).resolve().parents[1] / "src"
    work = Path(tempfile.mkdtemp(prefix="bench-clone-"))
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        sizes = sorted({args.versions, *([args.peer_versions] if args.peer_src else [])})
        log: list[Any] = []
        with serve_moto(log=log, delay=args.delay) as endpoint:
            server = S3Server(endpoint, S3Server(endpoint, "").new_bucket())
            env = {**os.environ, **server.env()}
            sums = {}
            for n in sizes:
                cached = args.cache / f"h{n}" if args.cache is not None else None
                if cached is not None and (cached / "plane_sum").exists():
                    sums[n] = put_cached(cached, server.bucket, f"h{n}")
                    continue
                if cached is not None:
                    shutil.rmtree(cached, ignore_errors=True)
                    cached.mkdir(parents=True)
                sums[n] = build(work / f"h{n}", n, server.bucket, f"h{n}", cached)
            cases: list[tuple[str, Path, int, bool, int]] = [("ours lazy", ours, args.versions, False, args.rounds)]
            if args.prefetch_rounds:
                cases.append(("ours --prefetch", ours, args.versions, True, args.prefetch_rounds))
            if args.peer_src:
                cases += [("ours lazy (peer size)", ours, args.peer_versions, False, args.rounds),
                          ("previous main (peer size)", args.peer_src, args.peer_versions, False, args.rounds)]
            for name, src, n, prefetch, rounds in cases:
                for r in range(rounds):
                    profile = args.profile if (name == "ours lazy" and r == 0) else ""
                    got = run_child(src, env, server.url(f"h{n}"), work / "dest", prefetch, log, profile)
                    assert got["plane_sum"] == sums[n], (name, got)  # the first plane is the origin's
                    got["n"] = n
                    results.setdefault(name, []).append(got)
                    print(f"{name} round {r}: {json.dumps(got)}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"clone to a first plane through moto S3, {args.delay * 1000:.0f} ms per request")
    print("| case | versions | total s | clone s | first plane s | requests | MB received | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        print(f"| {name} | {rows[0]['n']:,} | {summary([r['total_s'] for r in rows], 1)} | "
              f"{summary([r['clone_s'] for r in rows], 1)} | {summary([r['plane_s'] for r in rows], 2)} | "
              f"{summary([r['requests'] for r in rows], 0)} | {summary([r['bytes'] / 1e6 for r in rows], 1)} | "
              f"{summary([r['rss_kb'] / 1024 for r in rows], 0)} |")


if __name__ == "__main__":
    main()
