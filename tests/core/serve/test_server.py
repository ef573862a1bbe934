"""The loopback server over HTTP: byte ranges, HEAD, CORS only for the origins a user allows, keys kept inside
the root and named relative to it in every error, and a labelmap version's chunks equal to what the version reads."""

from __future__ import annotations

import http.client
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.errors import ArgumentError, UnsupportedError
from napari_shardscope.core.labelmap import Labelmap, create_labelmap
from napari_shardscope.core.serve.handoff import mount_version
from napari_shardscope.core.serve.messages import client_message
from napari_shardscope.core.serve.server import ShardServer, StoreMount
from napari_shardscope.core.serve.version_source import merge_equivalences
from napari_shardscope.core.versioned import Repository, create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ShardServer, Path]]:
    root = tmp_path / "ds"
    root.mkdir()
    (root / "blob").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "secret").write_bytes(b"SECRET-BYTES")
    with ShardServer() as server:
        server.mount("data/ds", StoreMount(open_store(str(root))))
        yield server, root


def request(server: ShardServer, method: str, path: str, headers: dict[str, str] | None = None
            ) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_binds_loopback_only() -> None:
    with pytest.raises(ArgumentError):
        ShardServer(host="0.0.0.0")


def test_foreign_host_names_are_refused(served: tuple[ShardServer, Path]) -> None:
    server, _ = served
    status, _, body = request(server, "GET", "/data/ds/blob", {"Host": f"attacker.example:{server.port}"})
    assert status == 421 and bytes(range(16)) not in body
    status, _, _ = request(server, "GET", "/data/ds/blob", {"Host": f"localhost:{server.port}"})
    assert status == 200


def test_client_paths_cannot_be_mounted_over(served: tuple[ShardServer, Path]) -> None:
    server, root = served
    for path in ("v/x", "events", "state", "state/x", "../up", ""):
        with pytest.raises(ArgumentError):
            server.mount(path, StoreMount(open_store(str(root))))


def test_state_links_name_a_served_state_document(served: tuple[ShardServer, Path]) -> None:
    """``state_link`` keeps the state and links to its document; the document is the state, served read-only."""
    server, _ = served
    state = {"layers": [{"type": "segmentation", "source": "precomputed://x", "name": "ü seg"}], "layout": "xy"}
    link = server.state_link(state)
    prefix = server.client_url + "#!" + server.url + "/state/"
    assert link.startswith(prefix) and re.fullmatch(r"[0-9a-f]{64}\.json", link[len(prefix):])
    assert server.state_link(dict(state)) == link  # the same state, the same link
    path = link[len(server.client_url + "#!" + server.url):]
    status, headers, body = request(server, "GET", path)
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(body) == state
    status, headers, body = request(server, "HEAD", path)
    assert status == 200 and int(headers["content-length"]) > 0 and body == b""
    status, headers, body = request(server, "GET", path, {"Range": "bytes=0-0"})
    assert status == 206 and body == b"{"
    other = server.state_link({**state, "layout": "3d"})
    assert other != link and json.loads(request(server, "GET", other.split(server.url, 2)[2])[2])["layout"] == "3d"


@pytest.mark.parametrize("name", [
    "0" * 64 + ".json",  # well formed, never published
    "0" * 63 + ".json", "0" * 64, "A" * 64 + ".json", "../" + "0" * 64 + ".json", "..", "%2e%2e/blob",
    "../data/ds/blob", "x" * 5000 + ".json", "a/" * 3000, "", "0" * 64 + ".json/x",
])
def test_unknown_or_hostile_state_names_are_not_found(served: tuple[ShardServer, Path], name: str) -> None:
    server, _ = served
    server.state_link({"layers": []})
    status, _, body = request(server, "GET", "/state/" + name)
    assert status == 404 and bytes(range(16)) not in body and b"{" not in body


def test_a_link_this_process_serves_opens_while_its_server_is_busy() -> None:
    """napari opens links its own server handed out; a server whose connections are all taken still opens them.

    Found in CI: "Open Neuroglancer link" asked the viewer's own server over loopback from the GUI
    thread and timed out while the machine was busy. The document is read from the shelf instead.
    """
    import socket
    import time

    from napari_shardscope.core.serve.states import load_state

    state = {"layers": [], "position": [4, 5, 6], "layout": "xy"}
    with ShardServer(max_connections=1) as server:
        link = server.state_link(state)
        with socket.create_connection(("127.0.0.1", server.port)):  # takes the only connection, sends nothing
            deadline = time.monotonic() + 10
            while server.connections < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.connections == 1
            assert load_state(link) == state
    with pytest.raises(ArgumentError, match="while its server runs"):  # stopped: nothing is read from its shelf
        load_state(link)


def test_a_state_server_that_misses_the_timeout_once_is_asked_again() -> None:
    """A state document whose server answers late (a busy machine) is fetched on a retry, as remote reads are.

    Found in CI: ``shardscope open LINK`` and the bare-base round trip failed with "timed out" while
    the serving process waited for a core; one timeout ended the fetch although ``--retries`` allows more.
    """
    from napari_shardscope.core.bytestore.context import remote_limits, set_remote_limits

    before = remote_limits()
    set_remote_limits(timeout_s=0.5, retries=2)
    try:
        _late_then_silent_servers()
    finally:
        set_remote_limits(before.timeout_s, before.retries)


def _late_then_silent_servers() -> None:
    import socket
    import threading

    from napari_shardscope.core.bytestore.context import set_remote_limits
    from napari_shardscope.core.serve.states import load_state

    body = json.dumps({"layers": [], "layout": "3d"}).encode()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:  # the first connection is accepted and never answered; the second is
        held.append(listener.accept()[0])
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        link = f"http://127.0.0.1:{port}/v/x/#!http://127.0.0.1:{port}/state/{'a' * 64}.json"
        assert load_state(link) == {"layers": [], "layout": "3d"}
    finally:
        thread.join(timeout=10)
        for conn in held:
            conn.close()
        listener.close()
    set_remote_limits(retries=0)
    silent = socket.create_server(("127.0.0.1", 0))
    try:  # never answers: the error says how long it tried and where the limits are set
        with pytest.raises(ArgumentError, match=r"timed out after 1 attempts of 0\.5 s \(see --timeout/--retries\)"):
            load_state(f"https://h/#!http://127.0.0.1:{silent.getsockname()[1]}/state/{'b' * 64}.json")
    finally:
        silent.close()


def test_a_served_link_reads_back_to_its_state(tmp_path: Path) -> None:
    """``shardscope open`` / "Open Neuroglancer link" take ``serve``'s links: the state they name is fetched."""
    from napari_shardscope.core.serve.states import load_state

    state = {"layers": [{"type": "image", "source": "zarr3://https://h/x", "name": "em"}], "position": [1, 2, 3]}
    with ShardServer() as server:
        link = server.state_link(state)
        assert load_state(link) == state
        client, _, doc = link.partition("#!")
        assert load_state(client + "#!" + quote(doc, safe="")) == state  # percent-encoded as a browser may
        missing = link.rsplit("/", 1)[0] + "/" + "0" * 64 + ".json"
        with pytest.raises(ArgumentError, match="no Neuroglancer state at"):
            load_state(missing)
    (tmp_path / "big.json").write_bytes(b"[" * 100 + b"]" * 100)
    with pytest.raises(ArgumentError, match=r"big\.json"):
        load_state("https://h/#!file://" + str(tmp_path / "big.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ArgumentError, match="must be a JSON object"):
        load_state("https://h/#!file://" + str(tmp_path / "list.json"))
    with ShardServer() as server:
        gone = server.state_link({"layers": [], "layout": "3d"})
    with pytest.raises(ArgumentError, match="while its server runs"):  # stopped: said at once, not a hang
        load_state(gone)


def test_the_state_shelf_is_bounded() -> None:
    from napari_shardscope.core.json_document import MAX_JSON_BYTES
    from napari_shardscope.core.serve.states import StateShelf

    shelf = StateShelf(capacity=3)
    names = [shelf.publish({"n": i}) for i in range(5)]
    assert [shelf.open(n) is not None for n in names] == [False, False, True, True, True]
    with pytest.raises(ArgumentError, match="larger than"):
        shelf.publish({"x": "a" * MAX_JSON_BYTES})
    with pytest.raises(ArgumentError, match="not a JSON document"):
        shelf.publish({"x": float("nan")})


def test_whole_range_suffix_and_head(served: tuple[ShardServer, Path]) -> None:
    server, root = served
    data = (root / "blob").read_bytes()
    status, h, body = request(server, "GET", "/data/ds/blob")
    assert (status, body) == (200, data)
    status, h, body = request(server, "GET", "/data/ds/blob", {"Range": "bytes=10-19"})
    assert (status, body, h["content-range"]) == (206, data[10:20], f"bytes 10-19/{len(data)}")
    status, h, body = request(server, "GET", "/data/ds/blob", {"Range": "bytes=-16"})
    assert (status, body) == (206, data[-16:])
    status, h, body = request(server, "GET", "/data/ds/blob", {"Range": "bytes=1000-"})
    assert (status, body) == (206, data[1000:])
    status, h, _ = request(server, "GET", "/data/ds/blob", {"Range": "bytes=5000-"})
    assert status == 416 and h["content-range"] == f"bytes */{len(data)}"
    status, h, body = request(server, "HEAD", "/data/ds/blob")
    assert (status, int(h["content-length"]), body) == (200, len(data), b"")


def test_no_cross_origin_access_by_default(served: tuple[ShardServer, Path]) -> None:
    """The client is served by the same server (same origin): no page of another origin may read an answer."""
    server, _ = served
    for method, path in (("GET", "/data/ds/blob"), ("GET", "/data/ds/missing"), ("GET", "/nothing/here"),
                         ("OPTIONS", "/data/ds/blob")):
        headers = {"Origin": "https://attacker.example", "Access-Control-Request-Headers": "range",
                   "Access-Control-Request-Private-Network": "true"}
        status, h, _ = request(server, method, path, headers)
        assert "access-control-allow-origin" not in h, (method, path, status)
        assert "access-control-allow-private-network" not in h, (method, path, status)


def test_cors_for_the_origins_allowed(tmp_path: Path) -> None:
    """``cors=(ORIGIN, ...)``: those origins (and no other) may read every answer, errors and preflights included."""
    (tmp_path / "blob").write_bytes(b"0123456789")
    mine = "http://localhost:8080"
    with ShardServer(cors=(mine + "/", "https://Neuroglancer-Demo.appspot.com")) as server:
        server.mount("data/ds", StoreMount(open_store(str(tmp_path))))
        for origin in (mine, "https://neuroglancer-demo.appspot.com"):
            status, h, body = request(server, "GET", "/data/ds/blob", {"Origin": origin, "Range": "bytes=0-3"})
            assert (status, body, h["access-control-allow-origin"]) == (206, b"0123", origin)
            assert "origin" in h["vary"].lower() and "content-range" in h["access-control-expose-headers"]
            status, h, _ = request(server, "GET", "/data/ds/missing", {"Origin": origin})
            assert status == 404 and h["access-control-allow-origin"] == origin
            preflight = {"Origin": origin, "Access-Control-Request-Headers": "range",
                         "Access-Control-Request-Private-Network": "true"}
            status, h, _ = request(server, "OPTIONS", "/data/ds/blob", preflight)
            assert status == 204 and h["access-control-allow-origin"] == origin
            assert "range" in h["access-control-allow-headers"] and h["access-control-allow-private-network"] == "true"
        for other in ("http://localhost:8081", "https://attacker.example", "null"):
            status, h, _ = request(server, "GET", "/data/ds/blob", {"Origin": other})
            assert status == 200 and "access-control-allow-origin" not in h and "origin" in h["vary"].lower()


@pytest.mark.parametrize("origin", ["*", "localhost:8080", "http://h/path", "ftp://h", "http://", "http://a b"])
def test_cors_origins_are_origins(origin: str) -> None:
    with pytest.raises(ArgumentError, match="origin"):
        ShardServer(cors=(origin,))


@pytest.mark.parametrize("path", ["/data/ds/../secret", "/data/ds/%2e%2e/secret", "/data/ds//secret",
                                  "/data/ds/..%2fsecret", "/v/tok/../../secret"])
def test_keys_stay_inside_the_root(served: tuple[ShardServer, Path], path: str) -> None:
    server, _ = served
    status, _, body = request(server, "GET", path)
    assert status in (400, 404) and b"SECRET-BYTES" not in body


def test_links_out_of_the_root_are_refused(served: tuple[ShardServer, Path]) -> None:
    server, root = served
    (root / "link").symlink_to(root.parent / "secret")
    status, _, body = request(server, "GET", "/data/ds/link")
    assert status in (400, 404) and b"SECRET-BYTES" not in body


def leaks(body: bytes, *paths: Path) -> list[str]:
    """The local absolute paths (as given and resolved) that ``body`` names."""
    text = body.decode("utf-8", "replace")
    found = [str(p) for p in paths if str(p) in text or str(p.resolve()) in text]
    return found + re.findall(r"(?<![\w.:/~-])/(?:tmp|home|root|etc|var|usr)\b[^\s'\"]*", text)


def test_error_bodies_name_keys_relative_to_the_served_root(served: tuple[ShardServer, Path]) -> None:
    """An HTTP client is told which key failed and why, never where the dataset (or a link's target) lies on disk."""
    server, root = served
    (root / "link").symlink_to(root.parent / "secret")
    (root / "dangling").symlink_to(root.parent / "nowhere")
    (root / "up").symlink_to(root.parent)
    (root / "loop").symlink_to("loop")
    (root / "sub").mkdir()
    os.mkfifo(root / "sub" / "fifo")
    for key, status, says in (("link", 400, "link"), ("dangling", 400, "dangling"), ("up/secret", 400, "up/secret"),
                              ("loop", 404, "loop"), ("sub/fifo", 404, "sub/fifo")):
        got, _, body = request(server, "GET", f"/data/ds/{key}")
        assert got == status and says.encode() in body, (key, got, body)
        assert not leaks(body, root, root.parent), (key, body)
        got, _, body = request(server, "HEAD", f"/data/ds/{key}")
        assert got == status and body == b"", key


@pytest.mark.parametrize(("text", "want"), [
    ("/srv/ds/s0/1.shard: chunk 4 truncated at byte 70", "s0/1.shard: chunk 4 truncated at byte 70"),
    ("file:///srv/ds/s0/1.shard: bad", "s0/1.shard: bad"),
    ("/srv/base/4_4_40/0.shard: chunk 1 data [299, 506) truncated", "<base>/4_4_40/0.shard: chunk 1 data [299, 506) "
     "truncated"),
    ("cannot write /srv/ds: read-only", "cannot write the served root: read-only"),
    ("link to /home/ana/.ssh/id_rsa, outside '/srv/ds2'", "link to <local path>, outside '<local path>'"),
    ("C:\\data\\x.shard: bad", "<local path>: bad"),
    ("no key 'a/b' at https://host/bucket/a/b or gs://b/k (1/2, x / y)",
     "no key 'a/b' at https://host/bucket/a/b or gs://b/k (1/2, x / y)"),
])
def test_client_messages_hide_local_paths(text: str, want: str) -> None:
    assert client_message(text, [("/srv/ds", ""), ("/srv/base/", "<base>")]) == want


def test_a_broken_base_is_named_without_its_local_path(
        edited: tuple[Repository, Labelmap, np.ndarray, list[int]], tmp_path: Path) -> None:
    """A version's chunk whose base shard is corrupt: the client learns what broke, not the base's directory."""
    repo, lm, _, _ = edited
    with ShardServer() as server:
        layer = mount_version(server, lm, "main")
        base = layer.layer.source.removeprefix("precomputed://").removeprefix(server.url)
        for f in (tmp_path / "seg").rglob("*.shard"):
            f.write_bytes(b"garbage" * 10)
        status, _, body = request(server, "GET", f"{base}s0/0-16_0-16_0-8")
        assert status == 500 and b".shard" in body and b"truncated" in body, body
        assert not leaks(body, tmp_path, Path(str(repo.path))), body


def test_client_and_event_stream(served: tuple[ShardServer, Path]) -> None:
    server, _ = served
    status, h, body = request(server, "GET", f"/v/{server.token}/")
    assert status == 200 and h["content-type"].startswith("text/html") and b"<script" in body
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", f"/events/{server.token}")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream"
    assert resp.fp.readline() in (b": idle\n", b"")  # it stays open and idles
    conn.close()


@pytest.fixture
def edited(tmp_path: Path) -> Iterator[tuple[Repository, Labelmap, np.ndarray, list[int]]]:
    base = voronoi_supervoxels((8, 40, 48), 20, seed=2)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 16, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
    yield repo, lm, base, [int(s) for s in np.unique(base)]
    repo.close()


def test_version_chunks_equal_the_version(edited: tuple[Repository, Labelmap, np.ndarray, list[int]]) -> None:
    repo, lm, _, svs = edited
    v = lm.at("main")
    v.merge(svs[0], [svs[1], svs[2]])
    v.cleave(svs[0], [svs[2]])
    committed = repo.commit(v.uuid, "edits")
    with ShardServer() as server:
        layer = mount_version(server, lm, committed.uuid)
        base = layer.layer.source.removeprefix("precomputed://").removeprefix(server.url)
        assert committed.uuid in base
        status, h, body = request(server, "GET", base + "info")
        info = json.loads(body)
        assert status == 200 and info["data_type"] == "uint64" and "max-age" in h["cache-control"]
        for i, scale in enumerate(info["scales"]):
            sx, sy, sz = scale["size"]
            cx, cy, cz = scale["chunk_sizes"][0]
            for x0 in range(0, sx, cx):
                x1, y1, z1 = min(x0 + cx, sx), min(cy, sy), min(cz, sz)
                status, _, body = request(server, "GET", f"{base}{scale['key']}/{x0}-{x1}_0-{y1}_0-{z1}")
                assert status == 200
                got = np.frombuffer(body, "<u8").reshape(z1, y1, x1 - x0)
                want = lm.at(committed.uuid).read_bodies(np.s_[0:z1, 0:y1, x0:x1], i)
                np.testing.assert_array_equal(got, want)
        status, _, _ = request(server, "GET", f"{base}s0/0-16_0-16_0-99")
        assert status == 404


def test_open_version_is_not_cached_and_shows_new_edits(
        edited: tuple[Repository, Labelmap, np.ndarray, list[int]]) -> None:
    _, lm, base, _ = edited
    v = lm.at("main")
    with ShardServer() as server:
        layer = mount_version(server, lm, v.uuid)
        url = layer.layer.source.removeprefix("precomputed://").removeprefix(server.url) + "s0/0-16_0-16_0-8"
        _, h, before = request(server, "GET", url)
        assert h["cache-control"] == "no-store"
        a, b = (int(s) for s in np.unique(base[:8, :16, :16])[:2])
        v.merge(a, [b])
        _, _, after = request(server, "GET", url)
        got = np.frombuffer(after, "<u8").reshape(8, 16, 16)
        assert before != after and set(np.unique(got[base[:8, :16, :16] == b])) == {a}


def test_merge_only_version_as_equivalences(edited: tuple[Repository, Labelmap, np.ndarray, list[int]]) -> None:
    _, lm, _, svs = edited
    v = lm.at("main")
    v.merge(svs[0], [svs[1]])
    v.merge(svs[3], [svs[4], svs[5]])
    assert sorted(merge_equivalences(lm, v.uuid)) == sorted([sorted(svs[0:2]), sorted(svs[3:6])])
    v.cleave(svs[3], [svs[5]])
    with pytest.raises(UnsupportedError, match="cleave"):
        merge_equivalences(lm, v.uuid)


def test_notebook_api_returns_a_link_that_serves(edited: tuple[Repository, Labelmap, np.ndarray, list[int]]) -> None:
    from napari_shardscope.core.serve import serve

    repo, _, _, _ = edited
    with serve(str(repo.path), version="main") as handoff:
        assert handoff.url.startswith(handoff.server.client_url + "#!")
        state = handoff.state
        source = state["layers"][0]["source"].removeprefix("precomputed://")
        status, _, body = request(handoff.server, "GET", source.removeprefix(handoff.server.url) + "info")
        assert status == 200 and json.loads(body)["type"] == "segmentation"
    assert not handoff.server.running


def test_merge_only_version_of_a_remote_base_as_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from urllib.parse import unquote

    from napari_shardscope.core.cli import run

    base = voronoi_supervoxels((4, 32, 32), 10, seed=8)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1),), chunk_xyz=(16, 16, 4), sharded=True)
    svs = [int(s) for s in np.unique(base)]
    with ShardServer() as server:  # the "remote" base: over HTTP, as a public bucket would serve it
        url = server.mount("data/seg", StoreMount(open_store(str(tmp_path / "seg"))))
        repo = create_repository(tmp_path / "repo")
        lm = create_labelmap(repo, "seg", url, block=16)
        lm.at("main").merge(svs[0], [svs[1], svs[2]])
        repo.close()
        assert run(["serve", str(tmp_path / "repo"), "--equivalences", "--segments", str(svs[0]), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["url"].startswith("https://neuroglancer-demo.appspot.com/#!")
        state = json.loads(unquote(out["url"].split("#!", 1)[1]))
        layer = state["layers"][0]
        assert layer["source"] == f"precomputed://{url}" and layer["segments"] == [str(svs[0])]
        assert layer["equivalences"] == [[str(s) for s in sorted(svs[:3])]]


def test_a_remote_dataset_is_served_through_its_store(served: tuple[ShardServer, Path]) -> None:
    """A dataset on another HTTP server: ranges need no size; HEAD and suffixes learn it once."""
    origin, root = served
    data = (root / "blob").read_bytes()
    with ShardServer() as relay:
        relay.mount("data/remote", StoreMount(open_store(origin.url + "/data/ds/")))
        status, h, body = request(relay, "GET", "/data/remote/blob", {"Range": "bytes=10-19"})
        assert (status, body, h["content-range"]) == (206, data[10:20], "bytes 10-19/*")
        status, h, body = request(relay, "GET", "/data/remote/blob", {"Range": "bytes=-16"})
        n = len(data)
        assert (status, body, h["content-range"]) == (206, data[-16:], f"bytes {n - 16}-{n - 1}/{n}")
        status, h, _ = request(relay, "HEAD", "/data/remote/blob")
        assert (status, int(h["content-length"])) == (200, len(data))
        status, h, _ = request(relay, "GET", "/data/remote/none", {"Range": "bytes=0-9"})
        assert status == 404


def test_version_meshes_are_served_as_legacy_meshes(edited: tuple[Repository, Labelmap, np.ndarray, list[int]]
                                                    ) -> None:
    """Bodies' meshes at the version through the server: our reader and CloudVolume's read what Labelmap.mesh gives."""
    from cloudvolume import CloudVolume

    from napari_shardscope.core.formats.precomputed.meshes import open_mesh_source

    repo, lm, _, svs = edited
    v = lm.at("main")
    v.merge(svs[0], [svs[1], svs[2]])
    cleaved = v.cleave(svs[0], [svs[2]])
    committed = repo.commit(v.uuid, "edits")
    with ShardServer() as server:
        layer = mount_version(server, lm, committed.uuid)
        url = layer.layer.source.removeprefix("precomputed://")
        base = url.removeprefix(server.url)
        status, _, body = request(server, "GET", base + "info")
        assert json.loads(body)["mesh"] == "mesh"
        source = open_mesh_source(open_store(url), "mesh")
        assert type(source).__name__ == "LegacyMeshSource"
        for body_id in (svs[0], cleaved, svs[5]):
            want = lm.mesh(body_id, committed.uuid)
            assert len(want.faces) > 0
            got = source.mesh(body_id)
            assert got is not None
            np.testing.assert_array_equal(got.vertices, want.vertices)
            np.testing.assert_array_equal(got.faces, want.faces)
        merged = lm.mesh(svs[0], committed.uuid)  # svs[0] and svs[1] as one body
        status, _, _ = request(server, "GET", f"{base}mesh/{svs[1]}:0")  # merged away at the version: no body
        assert status == 404
        cv = CloudVolume(url, progress=False, use_https=False, cache=False)
        m = cv.mesh.get(svs[0], remove_duplicate_vertices=False)
        m = m[svs[0]] if isinstance(m, dict) else m
        np.testing.assert_allclose(np.asarray(m.vertices), merged.vertices, atol=1e-3)
        np.testing.assert_array_equal(np.asarray(m.faces), merged.faces)


def test_serve_cors_option_from_the_command_line(tmp_path: Path) -> None:
    """``shardscope serve DS --cors ORIGIN --json`` read from a pipe: that origin may read the data, no other may;
    a value that is no origin (``*``) is refused with exit code 2 before anything is served."""
    import subprocess
    import sys

    from tests.core.cli.test_flush import buffered_env
    from tests.core.serve.test_streaming import fetch, read_line

    write_precomputed(tmp_path / "seg", voronoi_supervoxels((4, 16, 16), 5, seed=3), ((1, 1, 1),), chunk_xyz=(8, 8, 4))
    mine = "http://localhost:8080"
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "serve", str(tmp_path / "seg"), "--json",
                             "--cors", mine], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=buffered_env())
    try:
        record = json.loads(read_line(proc))
        port = int(record["server"].rsplit(":", 1)[1])
        info = record["state"]["layers"][0]["source"].removeprefix("precomputed://").removeprefix(record["server"])
        info += "info"
        got = fetch(port, info, {"Origin": mine})
        assert (got.status, got.headers["access-control-allow-origin"]) == (200, mine)
        got = fetch(port, info, {"Origin": "https://attacker.example"})
        assert got.status == 200 and "access-control-allow-origin" not in got.headers
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    done = subprocess.run([sys.executable, "-m", "napari_shardscope", "serve", str(tmp_path / "seg"), "--cors", "*"],
                          capture_output=True, timeout=120, env=buffered_env())
    assert done.returncode == 2 and b"origin" in done.stderr and b"Traceback" not in done.stderr, done.stderr
