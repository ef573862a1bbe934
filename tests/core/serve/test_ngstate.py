"""Neuroglancer states: built from a view description, parsed back, links and state files, what cannot open."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.serve.ngstate import (
    LayerView,
    ViewDescription,
    build_state,
    openable_url,
    parse_state,
    state_document_link,
    state_from_text,
    state_url,
)

SEG = LayerView("seg", "segmentation", "precomputed://http://127.0.0.1:1/version/r/u/", "precomputed",
                segments=(7, 12))
OME = LayerView("img", "image", "zarr://https://host/img.ome.zarr", "zarr3", ome=True)


def test_state_layout() -> None:
    state = build_state(ViewDescription((OME, SEG), (400.0, 80.0, 36.0), (40.0, 8.0, 4.0), 0.5))
    assert list(state["dimensions"]) == ["x", "y", "z"]
    assert state["dimensions"]["x"] == [4e-9, "m"] and state["dimensions"]["z"] == [40e-9, "m"]
    assert state["position"] == [9.0, 10.0, 10.0]  # OME-Zarr reference layer: no half-voxel shift
    assert state["crossSectionScale"] == pytest.approx(0.5)  # 1 / (0.5 px/nm * 4 nm)
    assert state["layers"][1]["segments"] == ["7", "12"] and state["layout"] == "xy"
    shifted = build_state(ViewDescription((SEG,), (400.0, 80.0, 36.0), (40.0, 8.0, 4.0), 0.5))
    assert shifted["position"] == [9.5, 10.5, 10.5]


def test_bad_views_are_refused() -> None:
    with pytest.raises(ArgumentError):
        ViewDescription((), (0, 0, 0), (1, 1, 1), 1.0)
    with pytest.raises(ArgumentError):
        ViewDescription((SEG,), (0, 0, 0), (0, 1, 1), 1.0)
    with pytest.raises(ArgumentError):
        ViewDescription((SEG,), (0, 0, 0), (1, 1, 1), 1.0, layout="tiles")


finite = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False)
size = st.floats(min_value=0.1, max_value=1e4, allow_nan=False)


@given(pos=st.tuples(finite, finite, finite), vs=st.tuples(size, size, size),
       zoom=st.floats(min_value=1e-4, max_value=1e3), ome=st.booleans())
def test_round_trip_through_a_link(pos: tuple[float, float, float], vs: tuple[float, float, float], zoom: float,
                                   ome: bool) -> None:
    layer = OME if ome else SEG
    state = build_state(ViewDescription((layer,), pos, vs, zoom))
    parsed = parse_state(state_from_text(state_url("http://127.0.0.1:9/v/t/", state)))
    assert parsed.position is not None and parsed.zoom is not None
    assert parsed.position == pytest.approx(pos, rel=1e-9, abs=1e-6)
    assert parsed.zoom == pytest.approx(zoom, rel=1e-9)
    assert [s.open_url for s in parsed.sources] == [layer.source]


def test_parse_names_what_it_cannot_open() -> None:
    state = {
        "dimensions": {"x": [8, "nm"], "y": [8, "nm"], "z": [40, "nm"], "t": [1, "s"]},
        "position": [10, 20, 3, 0],
        "crossSectionScale": 2,
        "layers": [
            {"type": "image", "source": "gs://bucket/em|zarr3:", "name": "em"},
            {"type": "segmentation", "source": {"url": "precomputed://s3://b/seg"}, "segments": ["5", "!6", "x"],
             "name": "seg"},
            {"type": "segmentation", "source": "graphene://https://host/table", "name": "chunkedgraph"},
            {"type": "annotation", "source": "local://annotations", "name": "notes"},
            {"type": "image", "source": "nifti://https://host/brain.nii", "name": "mri"},
        ],
    }
    parsed = parse_state(state)
    assert [(s.layer, s.open_url) for s in parsed.openable] == [("em", "zarr3://gs://bucket/em"),
                                                                 ("seg", "precomputed://s3://b/seg")]
    assert [s.layer for s in parsed.not_opened] == ["chunkedgraph", "notes", "mri"]
    assert all(s.reason for s in parsed.not_opened)
    assert parsed.segments["seg"] == (5,)
    assert any("'x'" in p for p in parsed.problems)
    assert parsed.position == pytest.approx((120.0, 160.0, 80.0))  # zarr reference: no shift assumed
    assert parsed.position_for("precomputed") == pytest.approx((100.0, 156.0, 76.0))
    assert parsed.zoom == pytest.approx(1 / 16)


def test_old_dict_layers_and_plain_json() -> None:
    text = json.dumps({"layers": {"a": {"type": "image", "source": "precomputed://https://h/a"}}})
    parsed = parse_state(state_from_text(text))
    assert [s.layer for s in parsed.openable] == ["a"] and parsed.position is None and parsed.zoom is None


@pytest.mark.parametrize("text", ["https://neuroglancer-demo.appspot.com/", "https://h/#!gs://bucket/state.json",
                                  "https://h/#!" + quote("{not json"), "https://h/#!" + quote("[1, 2]")])
def test_bad_links(text: str) -> None:
    with pytest.raises(ArgumentError):
        state_from_text(text)


@pytest.mark.parametrize(("text", "url"), [
    ("http://127.0.0.1:9/v/t/#!http://127.0.0.1:9/state/ab.json", "http://127.0.0.1:9/state/ab.json"),
    ("https://spelunker.example/#!gs%3A%2F%2Fbucket%2Fstate.json", "gs://bucket/state.json"),
    ("https://h/#!middleauth+https://h/nglstate/api/v1/1", "middleauth+https://h/nglstate/api/v1/1"),
    ("https://h/#!" + quote('{"layers": []}'), None), ('{"layers": []}', None), ("https://h/", None),
    ("https://h/#!not a url", None)])
def test_links_naming_a_state_document(text: str, url: str | None) -> None:
    assert state_document_link(text) == url


@pytest.mark.parametrize(("url", "ok"), [("precomputed://gs://b/x", True), ("zarr3://https://h/x", True),
                                         ("n5://s3://b/x", True), ("https://h/x/", True), ("gs://b/x|n5:", True),
                                         ("boss://x", False), ("precomputed://local/x", False),
                                         ("gs://b/x|deepzoom:", False), ("plain", False),
                                         ("https://h/x/|neuroglancer-precomputed:", True),
                                         ("gs://b/x.zip|zip:|zarr3:", False)])
def test_openable_urls(url: str, ok: bool) -> None:
    got, why = openable_url(url)
    assert (got is not None) == ok and (ok or why)
