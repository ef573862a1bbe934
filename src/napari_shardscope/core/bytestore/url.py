"""The one URL grammar: turn what a user types into a :class:`Location` (a TensorStore kvstore spec).

Accepted forms (the same for every format):

* a local path (``~`` expanded, made absolute) or a ``file://`` URL;
* ``http://`` / ``https://`` — TensorStore's http kvstore issues range requests, so a sharded
  volume on any static web server (or a public bucket's HTTPS endpoint) opens without a
  download;
* ``gs://bucket/path`` and ``s3://bucket/path`` — handed to TensorStore's gcs / s3 drivers,
  which take credentials from the environment as the Google and AWS SDKs do
  (``GOOGLE_APPLICATION_CREDENTIALS`` or ``gcloud auth application-default login``;
  ``AWS_PROFILE`` / ``AWS_ACCESS_KEY_ID`` …, ``AWS_REGION``). Public buckets need none. An
  S3-compatible store elsewhere than AWS is named by ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``.

Any of these may carry a Neuroglancer-style format prefix — ``precomputed://``, ``zarr3://``
(or ``zarr://``), ``n5://`` — or Neuroglancer's newer pipe suffix (``gs://bucket/ds|zarr3:``), which
skips format detection, as in Neuroglancer's own URLs. A URL that names a metadata document itself
(``…/info``, ``…/zarr.json``, ``…/attributes.json``) means its directory, with the format it implies:
that is what a user who drags the file onto napari or copies its URL means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from napari_shardscope.core.errors import ArgumentError

#: Neuroglancer-style prefixes that name the format, and the format they select.
FORMAT_PREFIXES: dict[str, str] = {
    "precomputed://": "precomputed",
    "zarr3://": "zarr3",
    "zarr2://": "zarr2",
    "zarr://": "zarr",
    "n5://": "n5",
}
#: Neuroglancer's pipe suffixes (``URL|zarr3:``) and the format they select.
FORMAT_SUFFIXES: dict[str, str] = {
    "|precomputed:": "precomputed",
    "|zarr3:": "zarr3",
    "|zarr2:": "zarr2",
    "|zarr:": "zarr",
    "|n5:": "n5",
}
#: Metadata documents that name their format when a URL points at them.
METADATA_DOCUMENTS: dict[str, str] = {"info": "precomputed", "zarr.json": "zarr3", "attributes.json": "n5",
                                      ".zarray": "zarr2", ".zgroup": "zarr2", ".zattrs": "zarr2"}
REMOTE_SCHEMES = ("http", "https", "gs", "s3")


@dataclass(frozen=True)
class Location:
    """A directory-like place in a kvstore.

    Attributes
    ----------
    url
        The location as a user would type it (format prefix removed).
    kvstore
        TensorStore kvstore JSON spec whose ``path`` ends with ``/``.
    format_hint
        The format named by a prefix (``"precomputed"``, ``"zarr"``, ``"n5"``), or ``None``.
    """

    url: str
    kvstore: dict[str, Any]
    format_hint: str | None = None

    @property
    def name(self) -> str:
        """The last path component: a layer name a user recognises."""
        path = str(self.kvstore.get("path", "")).rstrip("/")
        return path.rsplit("/", 1)[-1] or self.url.rstrip("/").rsplit("/", 1)[-1] or "volume"

    @property
    def is_local(self) -> bool:
        return self.kvstore.get("driver") == "file"

    def parent(self) -> Location:
        """The location one level up (used when a user points at a metadata file itself)."""
        path = str(self.kvstore.get("path", "")).rstrip("/")
        head = path.rsplit("/", 1)[0] if "/" in path else ""
        spec = dict(self.kvstore)
        spec["path"] = f"{head}/" if head else ""
        return Location(url=self.url.rstrip("/").rsplit("/", 1)[0], kvstore=spec, format_hint=self.format_hint)

    def child(self, *parts: str) -> Location:
        """The location ``parts`` below this one (``"labels"``, ``"cells"`` …)."""
        rel = "/".join(p.strip("/") for p in parts if p.strip("/"))
        if not rel:
            return self
        spec = dict(self.kvstore)
        spec["path"] = f"{spec.get('path', '')}{rel}/"
        return Location(url=f"{self.url.rstrip('/')}/{rel}", kvstore=spec, format_hint=None)


def parse_url(url: str | os.PathLike[str] | Location) -> Location:
    """Parse a path or URL (optionally with a format prefix or suffix) into a :class:`Location`.

    A URL ending in a metadata document's name (``info``, ``zarr.json``, ``attributes.json``)
    becomes its directory, with that document's format as the hint.

    Raises
    ------
    ArgumentError
        For an empty string or a URL scheme we cannot read.
    """
    if isinstance(url, Location):
        return url
    text, hint = split_format(os.fspath(url))
    if not text:
        raise ArgumentError("an empty path is not a dataset")
    loc = _parse_plain(text, hint)
    document = loc.name
    if document in METADATA_DOCUMENTS and not text.endswith("/") and _points_at_file(loc):
        return Location(url=loc.parent().url, kvstore=loc.parent().kvstore,
                        format_hint=hint or METADATA_DOCUMENTS[document])
    return loc


def split_format(text: str) -> tuple[str, str | None]:
    """``text`` without its Neuroglancer format prefix or pipe suffix, and the format it names."""
    text = text.strip()
    lowered = text.lower()
    for prefix, fmt in FORMAT_PREFIXES.items():
        if lowered.startswith(prefix):
            return text[len(prefix):], fmt
    for suffix, fmt in FORMAT_SUFFIXES.items():
        if lowered.endswith(suffix):
            return text[: -len(suffix)], fmt
    return text, None


def _points_at_file(loc: Location) -> bool:
    """Whether a location named like a metadata document is that document (not a directory so named)."""
    if loc.is_local:
        return os.path.isfile(str(loc.kvstore["path"]).rstrip("/"))
    return True  # a remote URL ending in /info names the document: buckets have no directories


def _parse_plain(text: str, hint: str | None) -> Location:
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        if "\x00" in text:
            raise ArgumentError(f"{text!r} contains a NUL byte, which no path can have")
        path = os.path.abspath(os.path.expanduser(text))
        return Location(url=text, kvstore={"driver": "file", "path": _dir(path)}, format_hint=hint)
    if scheme == "file":
        path = os.path.abspath(unquote(parsed.path))
        if "\x00" in path:  # %00 in a file:// URL: no file has that name, and os calls raise ValueError
            raise ArgumentError(f"{text!r} names a path with a NUL byte (%00), which no file can have")
        return Location(url=text, kvstore={"driver": "file", "path": _dir(path)}, format_hint=hint)
    if scheme in REMOTE_SCHEMES:
        import tensorstore as ts

        try:
            spec = dict(ts.KvStore.Spec(_dir(text)).to_json())
        except (ValueError, TypeError) as exc:
            raise ArgumentError(f"{text!r} is not a URL TensorStore can open: {exc}") from None
        if scheme == "s3":
            spec.update(s3_endpoint_from_env())
        return Location(url=text, kvstore=spec, format_hint=hint)
    raise ArgumentError(unknown_scheme_message(parsed.scheme, text))


def unknown_scheme_message(scheme: str, text: str) -> str:
    """Why ``text`` cannot be opened: every scheme and format prefix that exists, and the likely one meant."""
    import difflib

    prefixes = [p.removesuffix("://") for p in FORMAT_PREFIXES]
    known = [*prefixes, "file", "http", "https", "gs", "s3"]
    guess = difflib.get_close_matches(scheme.lower(), known, n=1, cutoff=0.6)
    hint = f"; did you mean {guess[0]}://?" if guess else ""
    return (f"unknown URL scheme {scheme!r} in {text!r}: use a path, file://, http(s)://, gs:// or s3://, "
            f"optionally after a format prefix ({', '.join(p + '://' for p in prefixes)}){hint}")


def s3_endpoint_from_env() -> dict[str, str]:
    """An S3-compatible endpoint other than AWS (MinIO, Ceph, a test server), from the AWS SDKs' variables.

    ``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``) names the endpoint, as for the AWS CLI and
    boto3; TensorStore takes it only in the spec, with a region (``AWS_REGION``, default us-east-1).
    """
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return {}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return {"endpoint": endpoint, "aws_region": region}


def is_remote(url: str | os.PathLike[str]) -> bool:
    """Whether ``url`` (prefix allowed) names a remote store rather than the local disk."""
    text, _ = split_format(os.fspath(url))
    return urlparse(text).scheme.lower() in REMOTE_SCHEMES


def _dir(path: str) -> str:
    return path if path.endswith("/") else path + "/"


