"""Benchmark the lazy reader against its peers, on the same data, in one run.

Run from the repository root (a display is needed for the viewer figures; on a headless machine
use a virtual one)::

    xvfb-run -a python bench/reader.py            # everything (first run builds ~1.2 GB of data)
    python bench/reader.py --no-gui               # reader figures only, no display needed

What it prints (medians of ``--repeat`` runs; "speed ratio" = peer time / our time, so > 1 means
we are faster):

1. 2-D slice latency — one 512 × 512 z-plane of a 512³ uint8 volume, cold (no chunk cache), read
   through our ``LazyArray`` vs TensorStore directly vs CloudVolume (sharded precomputed) and vs
   zarr-python (the same voxels as a sharded zarr v3 array); N5 gzip (uint8 image, uint64
   segmentation) vs TensorStore's ``n5`` driver.
2. Full-read throughput — the whole 512³ volume through each reader, MB/s.

   Readers 1 and 2 are compared in pairs: for each peer, rounds of (ours, peer) with the order
   alternating and both opened afresh every round, the ratio taken per round; a third reader never
   runs between the two being compared.
3. napari: time from ``open`` (metadata read) to the first rendered frame of a 512³ sharded
   volume (uint64 segmentation and uint8 image, cold cache, viewer already created); a warm
   slice step (z ± 1 inside cached chunks, to a rendered frame); a warm plane read with
   ``recheck_cached_data="open"`` vs TensorStore's default.
4. Responsiveness: the longest GUI-thread stall and the time until the new plane is shown, per
   z-step of the sample volume served over HTTP with 50 ms latency per request, with napari's
   synchronous vs asynchronous slicing (each in a fresh process, ``NAPARI_ASYNC=0/1``).

Data lives in ``$SHARDSCOPE_CACHE_DIR/bench-reader-v1`` (see ``core.sample_data``) and is built
once: the sample EM volume tiled to 512³, written with TensorStore as sharded precomputed
(murmurhash3, gzip, 64³ chunks, 3 scales) and as a sharded zarr v3 array (64³ chunks in 256³
shards, gzip); the image and the segmentation also as N5 datasets (TensorStore's ``n5`` driver,
64³ blocks, gzip), read by ours against TensorStore's ``n5`` driver.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from napari_shardscope.core.sample_data import (
    SAMPLE_VOXEL_NM_XYZ,
    ensure_sample_dataset,
    sample_cache_dir,
    write_precomputed_pyramid,
)
from napari_shardscope.core.volumes import make_context, open_volume

SIZE = 512
CHUNK = 64
FACTORS = ((1, 1, 1), (2, 2, 2), (4, 4, 4))


# -- data ----------------------------------------------------------------------------------------------
def bench_dir() -> Path:
    return sample_cache_dir() / "bench-reader-v1"


def build_data(root: Path) -> dict[str, Path]:
    """The 512³ volumes (built once): precomputed image + segmentation, zarr v3 image."""
    paths = {"image": root / "image", "segmentation": root / "segmentation", "zarr": root / "image.zarr",
             "n5_image": root / "image.n5", "n5_segmentation": root / "segmentation.n5"}
    if (root / "DONE").exists():
        build_n5(root, paths)
        return paths
    t0 = time.perf_counter()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    sample = ensure_sample_dataset()
    src_img = np.asarray(open_volume(sample.image).levels[0].array)
    src_seg = np.asarray(open_volume(sample.segmentation).levels[0].array)
    reps = tuple(SIZE // s for s in src_img.shape)
    image = np.tile(src_img, reps)
    # offset supervoxel ids per tile so tiles are distinct objects, as in a real volume
    seg = np.empty((SIZE, SIZE, SIZE), np.uint64)
    tile = 0
    for iz in range(reps[0]):
        for iy in range(reps[1]):
            for ix in range(reps[2]):
                sz, sy, sx = src_seg.shape
                seg[iz * sz:(iz + 1) * sz, iy * sy:(iy + 1) * sy, ix * sx:(ix + 1) * sx] = src_seg + np.uint64(
                    tile * 10_000_000)
                tile += 1
    iso = (SAMPLE_VOXEL_NM_XYZ[0],) * 3
    ctx = make_context(0)
    write_precomputed_pyramid(paths["image"], image, "image", iso, FACTORS, (CHUNK,) * 3, context=ctx)
    write_precomputed_pyramid(paths["segmentation"], seg, "segmentation", iso, FACTORS, (CHUNK,) * 3, context=ctx)
    del seg
    import tensorstore as ts

    store = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": str(paths["zarr"]) + "/"}, "create": True,
        "metadata": {"shape": [SIZE] * 3, "data_type": "uint8", "dimension_names": ["z", "y", "x"],
                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [256] * 3}},
                     "codecs": [{"name": "sharding_indexed", "configuration": {
                         "chunk_shape": [CHUNK] * 3, "codecs": [{"name": "bytes"}, {"name": "gzip"}]}}]},
    }, context=ctx).result()
    store.write(image).result()
    (root / "DONE").write_text("ok")
    print(f"built benchmark data in {time.perf_counter() - t0:.1f} s at {root}")
    build_n5(root, paths)
    return paths


def build_n5(root: Path, paths: dict[str, Path]) -> None:
    """The N5 copies (built once, apart, so older data need not be rebuilt): the same image and segmentation
    written by TensorStore's ``n5`` driver, 64³ blocks, gzip at its default settings (N5's level -1)."""
    if (root / "DONE-n5").exists():
        return
    import tensorstore as ts

    t0 = time.perf_counter()
    ctx = make_context(0)
    for name, source in (("n5_image", paths["image"]), ("n5_segmentation", paths["segmentation"])):
        shutil.rmtree(paths[name], ignore_errors=True)
        data = np.asarray(open_volume(source, context=ctx).levels[0].array.read())  # z, y, x
        store = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(paths[name]) + "/"},
                         "create": True,
                         "metadata": {"dimensions": [SIZE] * 3, "blockSize": [CHUNK] * 3, "dataType": data.dtype.name,
                                      "compression": {"type": "gzip"}}}, context=ctx).result()
        store.write(data.T).result()  # N5 lists x first
        del data
    (root / "DONE-n5").write_text("ok")
    print(f"built N5 benchmark data in {time.perf_counter() - t0:.1f} s at {root}")


# -- timing helpers ------------------------------------------------------------------------------------
def median_time(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Times of each function, running them in turn ``repeat`` times (after one warm-up each)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:  # alternate the order: no reader always goes first
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def ratio_line(label: str, ours: list[float], peer: list[float], peer_name: str) -> str:
    """Medians and their ratio; the ratio of the best runs too, which resists other processes' load."""
    mo, mp = statistics.median(ours), statistics.median(peer)
    return (f"  {label:<18} ours {mo * 1e3:8.1f} ms   {peer_name:<12} {mp * 1e3:8.1f} ms   "
            f"speed ratio {mp / mo:5.2f}x (best runs {min(peer) / min(ours):5.2f}x)")


# -- 1 + 2: readers -----------------------------------------------------------------------------------
Factory = Callable[[], Callable[[int | None], Any]]


def readers(paths: dict[str, Path]) -> dict[str, tuple[str, dict[str, Factory]]]:
    """Per data set: its dtype and a factory per reader; each factory opens a reader with its defaults.

    Defaults as users get them: ours through ``open_volume`` with a context of the default cache size
    (:func:`default_cache_bytes`; a fresh context per round, so every timed read is cold, as the first
    visit of a plane is), TensorStore with its default context, CloudVolume and zarr-python with theirs.
    Opening is not timed.
    """
    import tensorstore as ts

    from napari_shardscope.core.bytestore.context import default_cache_bytes

    def ours(path: Path) -> Factory:
        def make() -> Callable[[int | None], Any]:
            arr = open_volume(path, context=make_context(default_cache_bytes())).levels[0].array
            return lambda z: np.asarray(arr.read() if z is None else arr[z].read())
        return make

    def ts_precomputed(path: Path) -> Factory:
        def make() -> Callable[[int | None], Any]:
            store = ts.open({"driver": "neuroglancer_precomputed", "scale_index": 0,
                             "kvstore": {"driver": "file", "path": str(path) + "/"}}).result()
            view = store[..., 0].T
            return lambda z: view.read().result() if z is None else view[z].read().result()
        return make

    def cloudvolume(path: Path) -> Factory:
        def make() -> Callable[[int | None], Any]:
            from cloudvolume import CloudVolume

            cv = CloudVolume(f"file://{path}", mip=0, progress=False)
            return lambda z: np.asarray(cv[:, :, :] if z is None else cv[:, :, z:z + 1])
        return make

    def ts_zarr() -> Callable[[int | None], Any]:
        store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(paths["zarr"]) + "/"}}).result()
        return lambda z: store.read().result() if z is None else store[z].read().result()

    def ts_n5(path: Path) -> Factory:
        def make() -> Callable[[int | None], Any]:
            view = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(path) + "/"}}).result().T
            return lambda z: view.read().result() if z is None else view[z].read().result()
        return make

    def zarr_python() -> Callable[[int | None], Any]:
        import zarr

        arr = zarr.open_array(str(paths["zarr"]), mode="r")
        return lambda z: arr[:] if z is None else arr[z]

    return {
        "precomputed uint64 segmentation (sharded)": ("uint64", {
            "ours": ours(paths["segmentation"]), "TensorStore": ts_precomputed(paths["segmentation"]),
            "CloudVolume": cloudvolume(paths["segmentation"])}),
        "precomputed uint8 image (sharded)": ("uint8", {
            "ours": ours(paths["image"]), "TensorStore": ts_precomputed(paths["image"]),
            "CloudVolume": cloudvolume(paths["image"])}),
        "zarr v3 uint8 image (sharded)": ("uint8", {
            "ours": ours(paths["zarr"]), "TensorStore": ts_zarr, "zarr-python": zarr_python}),
        "N5 uint8 image": ("uint8", {"ours": ours(paths["n5_image"]), "TensorStore": ts_n5(paths["n5_image"])}),
        "N5 uint64 segmentation": ("uint64", {
            "ours": ours(paths["n5_segmentation"]), "TensorStore": ts_n5(paths["n5_segmentation"])}),
    }


#: Goals of issue 20, as ratios peer time / our time: (plane, full read).
GOALS = {"TensorStore": (1.0, 1.0), "CloudVolume": (15.0, 3.0)}


def bench_readers(paths: dict[str, Path], rounds: int, only: str | None = None) -> None:
    """Cold z-plane and full reads, paired per peer: rounds of (ours, peer), both opened afresh each round.

    Each peer gets its own rounds against ours, alternating which of the two goes first, with the
    ratio computed per round — so ours never runs right after a third reader (CloudVolume churns
    memory and threads) while the peer it is compared with does not.
    """
    from common import record_pair

    for dataset, (dtype, group) in readers(paths).items():
        if only is not None and only.lower() not in dataset.lower():
            continue
        print(f"\n{dataset}: 512³ {dtype}, 64³ chunks, gzip")
        fns = {name: make() for name, make in group.items()}
        ref = np.asarray(fns["ours"](300)).reshape(SIZE, SIZE)
        for name, fn in fns.items():  # every reader returns the same plane before anything is timed
            got = np.asarray(fn(300)).reshape(-1)
            plane = got.reshape(SIZE, SIZE).T if name == "CloudVolume" else got.reshape(SIZE, SIZE)
            assert np.array_equal(plane, ref), f"{name} returned different voxels"
        del fns
        for peer in [name for name in group if name != "ours"]:
            goal = GOALS.get(peer)
            for what, z_of in (("cold z plane", plane_of_round), ("full read (cold)", no_plane)):
                wall, cpu = pair_readers(group["ours"], group[peer], z_of, rounds)
                goal_ratio = None if goal is None else goal[0 if what == "cold z plane" else 1]
                record_pair("reader", f"{what}, {dataset}", dtype, wall, peer, goal_ratio,
                            setting="defaults (ours: default cache size, cold)")
                if peer == "TensorStore":  # the work each does, whatever the other processes on the machine do
                    record_pair("reader", f"{what}, CPU time, {dataset}", dtype, cpu, peer, None,
                                setting="process CPU time of the read (all threads), same rounds")


def plane_of_round(r: int) -> int | None:
    """The z plane round ``r`` reads: a different one each round, none at a chunk boundary on purpose."""
    return 40 + 37 * r % 420


def no_plane(_r: int) -> int | None:
    """The whole volume (a full read)."""
    return None


def pair_readers(ours: Factory, peer: Factory, z_of: Callable[[int], int | None], rounds: int) -> tuple[Any, Any]:
    """``rounds`` paired rounds of ``ours`` vs ``peer``, both freshly opened (cold) each round: wall and CPU times.

    The order alternates each round (as :func:`common.paired_rounds`). One unrecorded round goes
    before them: the first large read of a process faults in fresh memory from the kernel (about a
    second per GiB here), a cost of whichever reader happens to run first, not of either reader.
    CPU time is the process's (every thread's), so it counts the work of each reader's own threads
    and not the wait for a core that another process holds.
    """
    from common import Paired

    wall, cpu = Paired(), Paired()
    for r in range(-1, rounds):
        z = z_of(rounds if r < 0 else r)
        opened = {"ours": ours(), "peer": peer()}  # the previous round's readers (and their caches) are gone
        for name in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
            c0, t0 = time.process_time(), time.perf_counter()
            opened[name](z)
            t, c = time.perf_counter() - t0, time.process_time() - c0
            if r >= 0:
                (wall.ours if name == "ours" else wall.peer).append(t)
                (cpu.ours if name == "ours" else cpu.peer).append(c)
        del opened
    return wall, cpu


# -- 3: napari ------------------------------------------------------------------------------------------
def bench_viewer(paths: dict[str, Path], repeat: int) -> dict[str, Any]:
    os.environ["NAPARI_ASYNC"] = "0"  # measure the synchronous path: the frame must contain the data
    import napari
    import tensorstore as ts
    from qtpy.QtWidgets import QApplication

    from napari_shardscope.napari_plugin.viewer import add_volumes

    t0 = time.perf_counter()
    viewer = napari.Viewer(show=True)
    canvas = viewer.window._qt_viewer.canvas
    QApplication.processEvents()
    print(f"\nnapari (viewer created in {time.perf_counter() - t0:.2f} s, not counted below)")
    results: dict[str, Any] = {}

    def first_frame(path: Path) -> float:
        t = time.perf_counter()
        volume = open_volume(path, context=make_context(512 << 20))
        add_volumes(viewer, [volume])
        canvas.screenshot()  # on_draw + framebuffer grab: a rendered frame with the data in it
        elapsed = time.perf_counter() - t
        viewer.layers.clear()
        QApplication.processEvents()
        return elapsed

    # The first Image and the first Labels layer of a process pay napari's one-time costs (lazy
    # imports such as pandas for layer features, GL shader compilation): shown separately.
    once = {name: first_frame(paths[name]) for name in ("image", "segmentation")}
    results["first_layer_in_process_s"] = once
    print("  first layer of its type in a fresh process (napari one-time setup included): "
          + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in once.items()))
    for name in ("segmentation", "image"):
        times = [first_frame(paths[name]) for _ in range(repeat)]
        results[f"first_frame_{name}_s"] = statistics.median(times)
        print(f"  open -> first rendered frame, 512³ sharded {name:<12} median {statistics.median(times) * 1e3:7.1f} ms"
              f"   (runs: {', '.join(f'{t * 1e3:.0f}' for t in times)})")

    volume = open_volume(paths["segmentation"], context=make_context(512 << 20))
    (layer,) = add_volumes(viewer, [volume])
    canvas.screenshot()
    zs = [256 + d for d in range(8)]  # one chunk deep: after the first pass every step is warm
    for z in zs:
        viewer.dims.set_current_step(0, z)
        canvas.screenshot()
    steps = []
    for _ in range(3):
        for z in zs + zs[::-1]:
            t = time.perf_counter()
            viewer.dims.set_current_step(0, z)
            canvas.screenshot()
            steps.append(time.perf_counter() - t)
    results["warm_step_s"] = statistics.median(steps)
    print(f"  warm slice step (z±1 in cached chunks, to a rendered frame), level {layer.data_level}: "
          f"median {statistics.median(steps) * 1e3:.1f} ms, max {max(steps) * 1e3:.1f} ms")
    viewer.close()

    arr = volume.levels[0].array
    plain = ts.open({"driver": "neuroglancer_precomputed", "scale_index": 0,
                     "kvstore": {"driver": "file", "path": str(paths["segmentation"]) + "/"}},
                    context=make_context(512 << 20)).result()[..., 0].T
    for z in zs:
        np.asarray(arr[z])
        plain[z].read().result()
    ours = median_time(lambda: [np.asarray(arr[z]) for z in zs], repeat * 3) / len(zs)
    default = median_time(lambda: [plain[z].read().result() for z in zs], repeat * 3) / len(zs)
    results["warm_plane_open_s"], results["warm_plane_default_s"] = ours, default
    print(f"  warm 512² uint64 plane read: recheck_cached_data='open' {ours * 1e3:.2f} ms, "
          f"TensorStore default {default * 1e3:.2f} ms")
    return results


# -- 4: responsiveness ------------------------------------------------------------------------------------
class SlowHandler(SimpleHTTPRequestHandler):
    """Static files with byte ranges and a fixed latency per request (a far-away bucket)."""

    latency = 0.05

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        time.sleep(self.latency)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        size = path.stat().st_size
        start, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng:
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start, end = (max(0, size - int(b)), size) if a == "" else (int(a), min(size, int(b) + 1) if b else size)
            status = 206
        with path.open("rb") as fh:
            fh.seek(start)
            body = fh.read(end - start)
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(root: Path) -> tuple[str, Callable[[], None]]:
    handler = type("H", (SlowHandler,), {"__init__": lambda self, *a, **k: SlowHandler.__init__(
        self, *a, directory=str(root), **k)})

    class Server(ThreadingHTTPServer):
        request_queue_size = 256
        daemon_threads = True

    httpd = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/", httpd.shutdown


def responsiveness_probe(url: str) -> dict[str, Any]:
    """Run inside a child process with NAPARI_ASYNC set: GUI stall and time-to-plane per z-step."""
    import napari
    from qtpy.QtCore import QTimer
    from qtpy.QtWidgets import QApplication

    from napari_shardscope.core.volumes import open_volumes
    from napari_shardscope.napari_plugin.viewer import add_volumes

    viewer = napari.Viewer(show=True)
    app = QApplication.instance()
    layers = add_volumes(viewer, [v for name in ("image", "segmentation") for v in open_volumes(url + name)])
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(5)

    def pump(seconds: float, until: Callable[[], bool] | None = None) -> float:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            app.processEvents()
            if until is not None and until():
                return time.perf_counter() - start
            time.sleep(0.001)
        return time.perf_counter() - start

    pump(1.5)
    stalls, shown = [], []
    for z in (5, 14, 22, 47, 55, 60):
        ticks.clear()
        t0 = time.perf_counter()
        viewer.dims.set_current_step(0, z)
        want = viewer.dims.point[0]
        pump(5.0, until=lambda want=want: all(  # type: ignore[misc]
            la.loaded and la._slice_input.world_slice.point[0] == want for la in layers))
        shown.append(time.perf_counter() - t0)
        stalls.append(float(np.max(np.diff([t0, *ticks, time.perf_counter()]))))
    viewer.close()
    return {"stall_s": stalls, "shown_s": shown}


def bench_responsiveness() -> dict[str, Any]:
    sample = ensure_sample_dataset()
    url, stop = serve(sample.root)
    out: dict[str, Any] = {}
    print("\nresponsiveness: sample volume (image + labels) over HTTP with 50 ms latency per request")
    try:
        for mode in ("0", "1"):
            env = {**os.environ, "NAPARI_ASYNC": mode}
            proc = subprocess.run([sys.executable, __file__, "--_probe", url], capture_output=True, text=True,
                                  env=env, timeout=300)
            if proc.returncode != 0:
                print(f"  probe failed ({mode}): {proc.stderr.strip().splitlines()[-1:]}")
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            name = "async" if mode == "1" else "sync"
            out[name] = res
            stall, shown = statistics.median(res["stall_s"]), statistics.median(res["shown_s"])
            print(f"  {name:<5} slicing: longest GUI stall per z-step median {stall * 1e3:6.0f} ms "
                  f"(max {max(res['stall_s']) * 1e3:.0f}); new plane shown after median {shown * 1e3:6.0f} ms")
    finally:
        stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9, help="runs per napari measurement (median)")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds per reader measurement")
    parser.add_argument("--no-gui", action="store_true", help="skip the napari measurements")
    parser.add_argument("--no-peers", action="store_true", help="skip the reader comparison")
    parser.add_argument("--only", help="compare readers only on the data sets whose name contains this (e.g. N5); "
                        "the other rows of bench/results/reader.json are kept")
    parser.add_argument("--_probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._probe:
        print(json.dumps(responsiveness_probe(args._probe)))
        return 0
    from importlib.metadata import version

    peers = ", ".join(f"{p} {version(p)}" for p in ("tensorstore", "cloud-volume", "zarr", "napari"))
    print(f"napari-shardscope reader benchmark — {peers}; {os.cpu_count()} CPUs")
    paths = build_data(bench_dir())
    results: dict[str, Any] = {}
    if not args.no_peers:
        bench_readers(paths, args.rounds, args.only)
        from common import save

        save("reader", partial=args.only is not None)
    if not args.no_gui:
        if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
            print("\nno display: skipping napari figures (run under xvfb-run -a)")
        else:
            results["responsiveness"] = bench_responsiveness()
            results["viewer"] = bench_viewer(paths, max(3, args.repeat // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
