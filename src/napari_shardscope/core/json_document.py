"""The one JSON loader for metadata documents (``info``, ``zarr.json``, ``attributes.json``, states).

Every metadata file a dataset holds goes through :func:`load_json` before any other code (ours or
TensorStore's) sees it, because that is where three things are checked once:

* **size**: a document larger than ``max_bytes`` is refused before it is decoded (a metadata file
  is kilobytes; a multi-gigabyte "info" is damage or an attack);
* **depth**: nesting deeper than ``max_depth`` is refused (Python's parser raises
  ``RecursionError`` on very deep input and TensorStore's parser crashes the process on it);
* **where**: errors name the file and the *byte* offset of the problem. ``json`` reports
  character positions, which differ from byte offsets as soon as a document holds non-ASCII text
  (unit names like ``µm``), so positions are converted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from napari_shardscope.core.errors import MetadataError

#: Largest metadata document accepted (a consolidated zarr.json of 10⁴ arrays is a few MB).
MAX_JSON_BYTES = 64 << 20
#: Deepest nesting accepted (OME-Zarr metadata nests about 8 levels; Neuroglancer states about 10).
MAX_JSON_DEPTH = 64


def load_json(data: bytes | bytearray | memoryview | str, *, key: str, max_bytes: int = MAX_JSON_BYTES,
              max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse ``data`` as JSON, with errors that name ``key`` and a byte offset.

    Raises
    ------
    MetadataError
        For a document over ``max_bytes``, text that is not UTF-8, invalid JSON, or nesting deeper
        than ``max_depth``.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise MetadataError(f"is {len(raw)} bytes, larger than the {max_bytes}-byte limit for a metadata "
                            "document", key=key)
    try:
        text = raw.decode("utf-8-sig" if raw.startswith(b"\xef\xbb\xbf") else "utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataError("is not UTF-8 text", key=key, offset=exc.start) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        offset = len(text[: exc.pos].encode()) + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        raise MetadataError(f"invalid JSON ({exc.msg})", key=key, offset=offset) from None
    except RecursionError:
        raise MetadataError(f"JSON nested deeper than {max_depth} levels", key=key) from None
    except ValueError as exc:  # an integer with more digits than Python converts
        raise MetadataError(f"unusable JSON ({exc})", key=key) from None
    if json_depth(obj) > max_depth:
        raise MetadataError(f"JSON nested deeper than {max_depth} levels", key=key)
    return obj


def load_json_object(data: bytes | bytearray | memoryview | str | Mapping[str, Any], *, key: str,
                     max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """:func:`load_json` for documents that must be a JSON object (an already parsed mapping passes).

    Raises
    ------
    MetadataError
        As :func:`load_json`, and when the document is not an object.
    """
    obj = dict(data) if isinstance(data, Mapping) else load_json(data, key=key, max_bytes=max_bytes)
    if not isinstance(obj, dict):
        raise MetadataError(f"must be a JSON object, got {type(obj).__name__}", key=key)
    return obj


def json_depth(obj: Any) -> int:
    """How deeply ``obj`` nests lists and dicts (a scalar is 0), computed without recursion."""
    depth = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in value)
    return depth
