"""The one JSON loader: byte offsets, size and depth limits, for every metadata document."""

from __future__ import annotations

from pathlib import Path

import pytest

from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.json_document import load_json, load_json_object


def test_offsets_are_bytes_not_characters() -> None:
    text = '{"unit": "µm", "x": [1, 2,, 3]}'
    with pytest.raises(MetadataError) as err:
        load_json(text.encode(), key="info")
    assert err.value.offset == text.encode().index(b",,") + 1  # the byte, not the character (µ is 2 bytes)
    assert err.value.key == "info"


def test_bom_is_accepted_and_counted() -> None:
    assert load_json(b"\xef\xbb\xbf{}", key="k") == {}
    with pytest.raises(MetadataError) as err:
        load_json(b"\xef\xbb\xbf{x}", key="k")
    assert err.value.offset == 4


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"[" * 100_000, "nested deeper"),
        (b"[" * 65 + b"]" * 65, "nested deeper"),
        (b'{"a": ' + b"9" * 5000 + b"}", "unusable JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
    ],
)
def test_hostile_documents_are_metadata_errors(blob: bytes, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        load_json_object(blob, key="zarr.json")


def test_size_limit_before_parsing() -> None:
    with pytest.raises(MetadataError, match="larger than the 100-byte limit"):
        load_json(b"{}" + b" " * 200, key="attributes.json", max_bytes=100)


@pytest.mark.parametrize("document", ["info", "zarr.json", "attributes.json"])
def test_every_format_reports_the_byte_offset(tmp_path: Path, document: str) -> None:
    # Four of the five old loaders reported character positions as byte offsets.
    blob = '{"description": "Ω∑ unit µm", "broken": }'.encode()
    (tmp_path / document).write_bytes(blob)
    with pytest.raises(MetadataError) as err:
        open_dataset(tmp_path).inspector()
    assert err.value.offset == blob.index(b"}")
    assert err.value.key is not None and err.value.key.endswith(document)
