"""Real Neuroglancer (headless Chromium) draws the synapses ``shardscope serve`` hands out with a version.

A labelmap version with two synapses in one plane is served with its annotation instance; the link
``serve`` builds (segmentation layer plus the annotation layer linked to it) is opened, and the pixels
show the annotation colour along each synapse's line, from its pre site to its post site, and nowhere else.

The first test applies variations of the state with ``viewer.state.restoreState`` (to hide the
segmentation, turn off the axis lines); the last one opens the link exactly as a user does
(``page.goto(link)``), several times, and every load must show both layers: a ``#!{state}`` link
lost one of them in most loads (the client's start-up race, :mod:`napari_shardscope.core.serve.states`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.serve.handoff import serve
from napari_shardscope.core.serve.server import ShardServer
from napari_shardscope.core.versioned import create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.core.serve.browser import READY_TIMEOUT, VIEWPORT, Browser, Rendered, chromium, needs_chromium, settle
from tests.pixels import rgb_codes

pytestmark = needs_chromium
PX = 6.0  # screen pixels per voxel


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def render_state(browser: Browser, server: ShardServer, state: dict, shot: Path | None = None) -> Rendered:  # type: ignore[type-arg]
    """Open the served client, restore ``state`` in it, wait until every layer has loaded, read the pixels."""
    import io

    from PIL import Image

    page = browser.browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(server.client_url)
        page.wait_for_function("() => typeof viewer !== 'undefined'", timeout=READY_TIMEOUT * 1000)
        page.evaluate("(s) => viewer.state.restoreState(s)", state)
        names = [layer["name"] for layer in state["layers"]]
        settle(page)
        assert page.evaluate("() => viewer.layerManager.managedLayers.map(l => l.name)") == names
        rect = page.evaluate("""() => {
            const r = document.querySelector('.neuroglancer-rendered-data-panel').getBoundingClientRect();
            return [r.x, r.y, r.width, r.height]; }""")
        png = page.screenshot()
        if shot is not None:
            shot.write_bytes(png)
    finally:
        page.close()
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return Rendered(pixels, (rect[0], rect[1], rect[2], rect[3]))


def yellow(rendered: Rendered) -> np.ndarray:
    """Mask of the panel's pixels in Neuroglancer's default annotation colour (yellow)."""
    x, y, w, h = (round(a) for a in rendered.panel)
    rgb = rendered.pixels[y:y + h, x:x + w, :3].astype(int)
    return (rgb[..., 0] > 150) & (rgb[..., 1] > 150) & (rgb[..., 2] < 110)


def near_segment(shape: tuple[int, int], a: tuple[float, float], b: tuple[float, float], r: float) -> np.ndarray:
    """Pixels (row, column) of a ``shape`` panel within ``r`` pixels of the segment a–b (panel coordinates)."""
    rows, cols = np.mgrid[0:shape[0], 0:shape[1]].astype(float) + 0.5
    p = np.stack([cols, rows], axis=-1)
    a_, b_ = np.asarray(a), np.asarray(b)
    length2 = float((b_ - a_) @ (b_ - a_))
    t = np.clip(((p - a_) @ (b_ - a_)) / length2, 0, 1) if length2 else np.zeros(shape)
    closest = a_ + t[..., None] * (b_ - a_)
    return np.linalg.norm(p - closest, axis=-1) <= r


def test_served_synapses_are_drawn_where_they_are(tmp_path: Path, browser: Browser) -> None:
    base = voronoi_supervoxels((6, 64, 80), 24, seed=11)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1),), chunk_xyz=(32, 32, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    synapses = [((3, 32, 30), (3, 32, 50)), ((3, 10, 10), (3, 20, 10))]  # (pre, post), z, y, x voxels
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
        syn = create_annotation_instance(repo, "synapses", labelmap=lm)
        v = syn.at("main")
        for pre, post in synapses:
            v.relate(v.add("pre", pre).id, v.add("post", post).id)
        head = repo.commit("main", "two synapses")
    finally:
        repo.close()
    centre = (3, 32, 40)  # the voxel at the view's centre (z, y, x)
    voxel = (40.0, 4.0, 4.0)  # write_precomputed's resolution, z, y, x nm; napari's world puts voxel i at i * size
    handoff = serve(tmp_path / "repo", version=head.uuid, position=(centre[0] * voxel[0], centre[1] * voxel[1],
                                                                    centre[2] * voxel[2]), zoom=PX / voxel[2])
    try:
        state = dict(handoff.state)
        state.update({"showAxisLines": False, "showScaleBar": False, "showDefaultAnnotations": False})
        seg, ann = state["layers"]
        assert ann["type"] == "annotation" and ann["linkedSegmentationLayer"]["pre_segment"] == seg["name"]
        seg["visible"] = False  # a black background: what is drawn is the annotations
        rendered = render_state(browser, handoff.server, state)
        mask = yellow(rendered)
        _, _, w, h = rendered.panel
        # the panel pixel of voxel (y, x)'s centre: the view's centre is voxel `centre`'s centre
        def screen(p: tuple[int, int, int]) -> tuple[float, float]:
            return (w / 2 + (p[2] - centre[2]) * PX, h / 2 + (p[1] - centre[1]) * PX)

        lines = [near_segment(mask.shape, screen(a), screen(b), 6) for a, b in synapses]
        for (a, b), near in zip(synapses, lines, strict=True):
            assert (mask & near).sum() >= 0.6 * np.hypot(*np.subtract(screen(a), screen(b))), (a, b)
            for end in (a, b):  # both sites are drawn
                assert (mask & near_segment(mask.shape, screen(end), screen(end), 5)).any(), end
        assert (mask & ~(lines[0] | lines[1])).sum() <= 20, "annotation colour away from the synapses"

        # with the segmentation shown, the lines are drawn over it, at the same places
        seg["visible"] = True
        shots = os.environ.get("SHARDSCOPE_NG_SHOTS")
        over = yellow(render_state(browser, handoff.server, state,
                                   Path(shots) / "annotations-over-version.png" if shots else None))
        assert (over & lines[0]).sum() >= 0.6 * 20 * PX
    finally:
        handoff.stop()


def _synapse_repository(tmp_path: Path) -> tuple[Path, str]:
    base = voronoi_supervoxels((6, 64, 80), 24, seed=11)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1),), chunk_xyz=(32, 32, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
        v = create_annotation_instance(repo, "synapses", labelmap=lm).at("main")
        v.relate(v.add("pre", (3, 10, 10)).id, v.add("post", (3, 20, 10)).id)
        return tmp_path / "repo", repo.commit("main", "a synapse").uuid
    finally:
        repo.close()


def open_link(browser: Browser, link: str) -> tuple[list[str], list[str], str, Rendered]:
    """Open ``link`` as a user does; once the state is applied and every layer loaded: the client's layer
    names, the names in its state (``viewer.state.toJSON()``), the error messages it shows, and the pixels."""
    import io

    from PIL import Image

    page = browser.browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(link)
        page.wait_for_function("() => typeof viewer !== 'undefined'", timeout=READY_TIMEOUT * 1000)
        # a layer restored means the whole state is (the layers are restored together): a dropped one never comes
        page.wait_for_function("() => viewer.layerManager.managedLayers.length > 0", timeout=READY_TIMEOUT * 1000)
        settle(page)
        names = page.evaluate("() => viewer.layerManager.managedLayers.map(l => l.name)")
        in_state = page.evaluate("() => (viewer.state.toJSON().layers || []).map(l => l.name)")
        # an error message of the client's status bar comes with a "Dismiss" button
        errors = page.evaluate("""() => [...document.querySelectorAll('button')]
            .filter(b => b.textContent === 'Dismiss').map(b => b.parentElement.textContent).join(' | ')""")
        rect = page.evaluate("""() => {
            const r = document.querySelector('.neuroglancer-rendered-data-panel').getBoundingClientRect();
            return [r.x, r.y, r.width, r.height]; }""")
        png = page.screenshot()
    finally:
        page.close()
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return names, in_state, errors, Rendered(pixels, (rect[0], rect[1], rect[2], rect[3]))


#: Page loads of the link; every one must show both layers (a ``#!{state}`` link lost one in about half).
LOADS = 6


def test_the_link_shows_both_layers_in_every_page_load(tmp_path: Path, browser: Browser) -> None:
    repo, head = _synapse_repository(tmp_path)
    centre = (3, 32, 40)
    voxel = (40.0, 4.0, 4.0)
    handoff = serve(repo, version=head, position=(centre[0] * voxel[0], centre[1] * voxel[1], centre[2] * voxel[2]),
                    zoom=PX / voxel[2])
    try:
        expected = [layer["name"] for layer in handoff.state["layers"]]
        assert [layer["type"] for layer in handoff.state["layers"]] == ["segmentation", "annotation"]
        outcomes = []
        for _ in range(LOADS):
            names, in_state, errors, rendered = open_link(browser, handoff.url)
            x, y, w, h = (round(a) for a in rendered.panel)
            panel = rendered.pixels[y:y + h, x:x + w, :3].reshape(-1, 3)
            # the segmentation: many segments' colours, each over a patch; without it, a grey panel and a few lines
            _, counts = np.unique(rgb_codes(panel), return_counts=True)
            patches = int((counts >= 0.005 * len(panel)).sum())
            mask = yellow(rendered)

            pre, post = ((w / 2 + (p[2] - centre[2]) * PX, h / 2 + (p[1] - centre[1]) * PX)
                         for p in ((3, 10, 10), (3, 20, 10)))
            drawn = int((mask & near_segment(mask.shape, pre, post, 6)).sum())
            outcomes.append((names, in_state, errors, patches, drawn))
        for names, in_state, errors, patches, drawn in outcomes:
            assert names == expected and in_state == expected and not errors, outcomes
            assert patches >= 8, outcomes  # the segmentation is drawn
            assert drawn >= 0.6 * 10 * PX, outcomes  # the synapse is drawn, pre to post
    finally:
        handoff.stop()
