"""The Zarr v3 codec chain, for decoding (and encoding) single chunks.

Voxel data on the hot path goes through TensorStore; this module exists so ``validate`` can prove
that every stored inner chunk decodes, and so tests can write shards byte by byte. It implements
the codecs TensorStore and zarr-python write by default:

* array -> array: ``transpose`` (``order`` is a permutation);
* array -> bytes: ``bytes`` (``endian`` little/big, optional for 1-byte types) and a nested
  ``sharding_indexed`` (decoded by :mod:`.sharding`);
* bytes -> bytes: ``gzip``, ``zstd``, ``blosc``, ``crc32c``.

Configurations are checked as the codec specs (and TensorStore) require: gzip ``level``; zstd
``level`` (``checksum`` optional); blosc ``cname``, ``clevel``, ``shuffle``, and ``typesize``
unless ``shuffle`` is ``noshuffle`` (``blocksize`` optional, 0 = automatic).

A chain is ``array->array* array->bytes bytes->bytes*`` (spec, "Codecs"); decoding runs it
backwards. Every failure is a :class:`ChunkDecodeError` (or :class:`ChecksumError`) naming the key
and byte offset the bytes came from; unknown codecs are a :class:`MetadataError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import crc32c as _crc32c
import numpy as np
import numpy.typing as npt

from napari_shardscope.core.encoding import MAX_DECODED_BYTES, BloscExpected, decompress, gunzip, gzip_compress
from napari_shardscope.core.errors import ChecksumError, ChunkDecodeError, MetadataError, UnsupportedFeatureError
from napari_shardscope.core.formats.zarr3.metadata import CodecSpec

CodecKind = Literal["array->array", "array->bytes", "bytes->bytes"]

CODEC_KINDS: dict[str, CodecKind] = {
    "transpose": "array->array",
    "bytes": "array->bytes",
    "sharding_indexed": "array->bytes",
    "gzip": "bytes->bytes",
    "zstd": "bytes->bytes",
    "blosc": "bytes->bytes",
    "crc32c": "bytes->bytes",
}

BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
#: Bytes a bytes -> bytes codec may add to what it encodes (headers, checksums, incompressible
#: input): decodes are capped at the chunk's bytes plus this much per codec.
CODEC_SLACK_BYTES = 4096

BLOSC_CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib")


@dataclass(frozen=True)
class CodecChain:
    """A codec list split by kind, checked for order and configuration.

    ``encoded_shape`` is the shape the array -> bytes codec sees, i.e. the chunk shape after the
    array -> array codecs (transposes) permuted it.
    """

    array_to_array: tuple[CodecSpec, ...]
    array_to_bytes: CodecSpec
    bytes_to_bytes: tuple[CodecSpec, ...]

    @property
    def permutation(self) -> tuple[int, ...] | None:
        """Composite axis order of the transposes (``None`` when there are none)."""
        perm: tuple[int, ...] | None = None
        for codec in self.array_to_array:
            order = tuple(codec.configuration["order"])
            perm = order if perm is None else tuple(perm[i] for i in order)
        return perm

    def encoded_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        perm = self.permutation
        return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def check_codec_names(codecs: Sequence[CodecSpec], *, key: str, field: str = "codecs") -> None:
    """Refuse a codec we do not implement, anywhere in the chain (inside ``sharding_indexed`` too).

    The volume spec checks only this, not each codec's configuration: voxels are TensorStore's to
    decode, but an array that ``inspect`` cannot read is reported the same way by ``open``.

    Raises
    ------
    UnsupportedFeatureError
        Naming the codec and where it is listed.
    """
    for codec in codecs:
        if codec.name not in CODEC_KINDS:
            raise UnsupportedFeatureError(f"zarr v3 codec {codec.name!r} (in {field})", key=key,
                                          detail=f"known codecs: {', '.join(CODEC_KINDS)}")
        if codec.name == "sharding_indexed":
            for inner in ("codecs", "index_codecs"):
                value = codec.configuration.get(inner)
                if isinstance(value, list):
                    names = [CodecSpec(c) if isinstance(c, str) else CodecSpec(str(c.get("name")))
                             for c in value if isinstance(c, str | dict)]
                    check_codec_names(names, key=key, field=f"sharding_indexed {inner}")


def spelled_out_transpose(codec: CodecSpec, ndim: int) -> CodecSpec:
    """A ``transpose`` whose ``order`` is the pre-spec ``"C"`` / ``"F"`` as the permutation it means.

    Early zarr v3 writers (zarrita) wrote ``"order": "F"`` for the reversed axis order and ``"C"``
    for the identity; the final spec requires the permutation. TensorStore still reads the letters,
    so the viewer did; reading them here too keeps ``inspect`` and the viewer on one answer.
    """
    order = codec.configuration.get("order") if codec.name == "transpose" else None
    if order == "C":
        return CodecSpec("transpose", {**codec.configuration, "order": list(range(ndim))})
    if order == "F":
        return CodecSpec("transpose", {**codec.configuration, "order": list(reversed(range(ndim)))})
    return codec


def split_codec_chain(
    codecs: Sequence[CodecSpec], ndim: int, dtype: np.dtype[Any], *, key: str, field: str = "codecs"
) -> CodecChain:
    """Check a codec list and split it into its three stages.

    Raises
    ------
    MetadataError
        For a chain out of order, no or several array -> bytes codecs, or a bad configuration
        (names ``field``, the codec and the value).
    UnsupportedFeatureError
        For a codec this package does not implement (names it and ``field``).
    """
    aa: list[CodecSpec] = []
    ab: CodecSpec | None = None
    bb: list[CodecSpec] = []
    for codec in codecs:
        check_codec_names([codec], key=key, field=field)
        codec = spelled_out_transpose(codec, ndim)
        kind = CODEC_KINDS[codec.name]
        check_codec_configuration(codec, ndim, dtype, key=key, field=field)
        if kind == "array->array":
            if ab is not None:
                raise MetadataError(
                    f"{field}: array -> array codec {codec.name!r} after an array -> bytes codec", key=key
                )
            aa.append(codec)
        elif kind == "array->bytes":
            if ab is not None:
                raise MetadataError(
                    f"{field}: more than one array -> bytes codec ({ab.name!r}, {codec.name!r})", key=key
                )
            ab = codec
        else:
            if ab is None:
                raise MetadataError(
                    f"{field}: bytes -> bytes codec {codec.name!r} before the array -> bytes codec", key=key
                )
            bb.append(codec)
    if ab is None:
        raise MetadataError(f"{field}: no array -> bytes codec (e.g. 'bytes') in {[c.name for c in codecs]}", key=key)
    return CodecChain(tuple(aa), ab, tuple(bb))


def check_codec_configuration(
    codec: CodecSpec, ndim: int, dtype: np.dtype[Any], *, key: str, field: str = "codecs"
) -> None:
    """Check one codec's configuration against the spec of that codec."""
    cfg = codec.configuration
    where = f"{field}: codec {codec.name!r}"
    if codec.name == "transpose":
        order = cfg.get("order")
        if (
            not isinstance(order, list)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in order)
            or sorted(order) != list(range(ndim))
        ):
            raise MetadataError(f"{where}: order must be a permutation of 0..{ndim - 1}, got {order!r}", key=key)
    elif codec.name == "bytes":
        endian = cfg.get("endian")
        if endian is None and dtype.itemsize > 1:
            raise MetadataError(f"{where}: endian is required for {dtype.itemsize}-byte data types", key=key)
        if endian not in (None, "little", "big"):
            raise MetadataError(f"{where}: endian must be 'little' or 'big', got {endian!r}", key=key)
    elif codec.name == "gzip":
        level = cfg.get("level")
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
            raise MetadataError(f"{where}: level must be an integer 0..9, got {level!r}", key=key)
    elif codec.name == "zstd":
        level = cfg.get("level")
        if isinstance(level, bool) or not isinstance(level, int) or not -131072 <= level <= 22:
            raise MetadataError(f"{where}: level must be an integer -131072..22, got {level!r}", key=key)
        if not isinstance(cfg.get("checksum", False), bool):
            raise MetadataError(f"{where}: checksum must be true or false, got {cfg.get('checksum')!r}", key=key)
    elif codec.name == "blosc":
        _check_blosc_configuration(cfg, where, key)
    elif codec.name == "crc32c" and cfg:
        raise MetadataError(f"{where}: takes no configuration, got {dict(cfg)!r}", key=key)
    # sharding_indexed is checked by sharding.parse_sharding_config, which knows the chunk shape.


def _check_blosc_configuration(cfg: Any, where: str, key: str) -> None:
    cname = cfg.get("cname")
    if cname not in BLOSC_CNAMES:
        raise MetadataError(f"{where}: cname must be one of {BLOSC_CNAMES}, got {cname!r}", key=key)
    clevel = cfg.get("clevel")
    if isinstance(clevel, bool) or not isinstance(clevel, int) or not 0 <= clevel <= 9:
        raise MetadataError(f"{where}: clevel must be an integer 0..9, got {clevel!r}", key=key)
    shuffle = cfg.get("shuffle")
    if not isinstance(shuffle, str) or shuffle not in BLOSC_SHUFFLES:  # a list or object is unhashable
        raise MetadataError(f"{where}: shuffle must be one of {tuple(BLOSC_SHUFFLES)}, got {shuffle!r}", key=key)
    typesize = cfg.get("typesize", 1 if shuffle == "noshuffle" else None)
    if isinstance(typesize, bool) or not isinstance(typesize, int) or not 1 <= typesize <= 255:
        raise MetadataError(
            f"{where}: typesize must be an integer 1..255 (required when shuffling), got {typesize!r}", key=key
        )
    blocksize = cfg.get("blocksize", 0)
    if isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 0:
        raise MetadataError(f"{where}: blocksize must be a non-negative integer, got {blocksize!r}", key=key)


# -- decoding ---------------------------------------------------------------------------------


def decode_chunk(
    data: bytes,
    chain: CodecChain,
    shape: Sequence[int],
    dtype: np.dtype[Any],
    fill_value: np.generic,
    *,
    key: str,
    offset: int | None = None,
) -> npt.NDArray[Any]:
    """Decode one stored chunk to an array of ``shape`` (the chunk's shape in array order).

    ``key`` and ``offset`` say where ``data`` was stored (the shard file and the chunk's start
    in it), so an error points at the broken bytes. ``fill_value`` is needed only by a nested
    ``sharding_indexed`` codec, whose empty inner chunks are filled with it.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_DECODED_BYTES:
        raise ChunkDecodeError(
            f"chunk of shape {list(shape)} ({nbytes} bytes) is too large to decode", key=key, offset=offset
        )
    ab = chain.array_to_bytes
    # What the spec implies each bytes -> bytes decode may produce: the chunk's bytes plus, per
    # codec still to undo, a checksum or a compressor's worst-case expansion of tiny inputs
    # (a nested shard also holds its index: only the budget applies there).
    cap = nbytes + CODEC_SLACK_BYTES * len(chain.bytes_to_bytes) if ab.name == "bytes" else MAX_DECODED_BYTES
    for i in reversed(range(len(chain.bytes_to_bytes))):
        # the first bytes -> bytes codec (undone last) gives the ``bytes`` codec its input: exactly the chunk
        exact = i == 0 and ab.name == "bytes"
        data = decode_bytes_codec(data, chain.bytes_to_bytes[i], key=key, offset=offset,
                                  max_size=nbytes if exact else cap, exact=exact, itemsize=dtype.itemsize)
    encoded_shape = chain.encoded_shape(shape)
    if ab.name == "bytes":
        array = decode_bytes_to_array(data, ab, encoded_shape, dtype, key=key, offset=offset)
    else:  # sharding_indexed, nested inside an outer shard
        from napari_shardscope.core.formats.zarr3.sharding import decode_shard_array, parse_sharding_config

        config = parse_sharding_config(ab, encoded_shape, dtype, key=key)
        array = decode_shard_array(data, config, encoded_shape, dtype, fill_value, key=key, offset=offset)
    for codec in reversed(chain.array_to_array):
        order = codec.configuration["order"]
        array = array.transpose(np.argsort(order))
    return array


def decode_bytes_to_array(
    data: bytes,
    codec: CodecSpec,
    shape: Sequence[int],
    dtype: np.dtype[Any],
    *,
    key: str,
    offset: int | None = None,
) -> npt.NDArray[Any]:
    """The ``bytes`` codec: a C-order array of fixed-size elements in the configured byte order."""
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise ChunkDecodeError(
            f"bytes codec: {len(data)} bytes do not hold a {list(shape)} {dtype} chunk ({expected} bytes)",
            key=key,
            offset=offset,
        )
    order: Literal["<", ">"] = "<" if codec.configuration.get("endian", "little") == "little" else ">"
    stored = dtype.newbyteorder(order) if dtype.itemsize > 1 else dtype
    return np.frombuffer(data, dtype=stored).astype(dtype).reshape(tuple(shape))


def decode_bytes_codec(
    data: bytes, codec: CodecSpec, *, key: str, offset: int | None = None, max_size: int = MAX_DECODED_BYTES,
    exact: bool = False, itemsize: int | None = None,
) -> bytes:
    """Undo one bytes -> bytes codec, producing at most ``max_size`` bytes (else ChunkDecodeError).

    ``exact``: the output must be ``max_size`` bytes, and a header that says otherwise is refused
    before decoding. ``itemsize`` is the array's element size, which a shuffling blosc header must use.
    """
    if codec.name == "gzip":
        return gunzip(data, key=key, offset=offset, max_size=max_size)
    if codec.name == "zstd":
        return decompress("zstd", data, key=key, offset=offset, max_size=max_size, exact=exact)
    if codec.name == "blosc":
        return decompress("blosc", data, key=key, offset=offset, max_size=max_size, exact=exact,
                          blosc=blosc_expected(codec.configuration, itemsize))
    if codec.name == "crc32c":
        return strip_crc32c(data, key=key, offset=offset)
    raise MetadataError(f"codec {codec.name!r} is not a bytes -> bytes codec we decode", key=key)


def blosc_expected(cfg: Any, itemsize: int | None) -> BloscExpected:
    """What a blosc header must say under the codec configuration ``cfg`` (``cname``, ``shuffle``, ``typesize``)."""
    typesize = cfg.get("typesize")
    sizes = {t for t in (typesize, itemsize) if isinstance(t, int) and not isinstance(t, bool) and t > 0}
    return BloscExpected(cname=str(cfg.get("cname")) if cfg.get("cname") in BLOSC_CNAMES else None,
                         shuffle=BLOSC_SHUFFLES.get(str(cfg.get("shuffle"))), typesizes=tuple(sorted(sizes)))


def strip_crc32c(data: bytes, *, key: str, offset: int | None = None) -> bytes:
    """Check and remove the 4-byte little-endian CRC32C the ``crc32c`` codec appends.

    The error's offset is that of the checksum itself (``offset + len(data) - 4``).
    """
    if len(data) < 4:
        raise ChunkDecodeError(f"crc32c: {len(data)} bytes cannot hold a 4-byte checksum", key=key, offset=offset)
    body, stored = data[:-4], int.from_bytes(data[-4:], "little")
    actual = _crc32c.crc32c(body)
    if actual != stored:
        at = None if offset is None else offset + len(body)
        raise ChecksumError(
            f"crc32c mismatch: stored {stored:#010x}, computed {actual:#010x} over {len(body)} bytes",
            key=key,
            offset=at,
        )
    return body


# -- encoding ---------------------------------------------------------------------------------


def encode_chunk(array: npt.NDArray[Any], chain: CodecChain, fill_value: np.generic | None = None) -> bytes:
    """Encode one chunk (``array`` has the chunk's full shape) through ``chain``."""
    for codec in chain.array_to_array:
        array = array.transpose(codec.configuration["order"])
    ab = chain.array_to_bytes
    if ab.name == "bytes":
        data = encode_array_to_bytes(array, ab)
    else:
        from napari_shardscope.core.formats.zarr3.sharding import encode_shard_array, parse_sharding_config

        config = parse_sharding_config(ab, array.shape, array.dtype, key="<encode>")
        data = encode_shard_array(array, config, fill_value)
    for codec in chain.bytes_to_bytes:
        data = encode_bytes_codec(data, codec)
    return data


def encode_array_to_bytes(array: npt.NDArray[Any], codec: CodecSpec) -> bytes:
    """The ``bytes`` codec: C order, configured byte order."""
    order: Literal["<", ">"] = "<" if codec.configuration.get("endian", "little") == "little" else ">"
    stored = array.dtype.newbyteorder(order) if array.dtype.itemsize > 1 else array.dtype
    return np.asarray(array, dtype=stored).tobytes(order="C")


def encode_bytes_codec(data: bytes, codec: CodecSpec) -> bytes:
    """Apply one bytes -> bytes codec."""
    cfg = codec.configuration
    if codec.name == "gzip":
        return gzip_compress(data, int(cfg.get("level", 6)))  # libdeflate: TensorStore and zarr-python read it
    if codec.name == "zstd":
        import zstandard

        level = int(cfg.get("level", 0))
        return bytes(
            zstandard.ZstdCompressor(level=level, write_checksum=bool(cfg.get("checksum", False))).compress(data)
        )
    if codec.name == "blosc":
        from numcodecs import blosc

        typesize = int(cfg.get("typesize", 0)) or 1
        return bytes(
            blosc.compress(
                data,
                str(cfg.get("cname", "lz4")).encode(),
                int(cfg.get("clevel", 5)),
                BLOSC_SHUFFLES[str(cfg.get("shuffle", "noshuffle"))],
                int(cfg.get("blocksize", 0)),
                typesize=typesize,
            )
        )
    if codec.name == "crc32c":
        return append_crc32c(data)
    raise MetadataError(f"codec {codec.name!r} is not a bytes -> bytes codec we encode")


def append_crc32c(data: bytes) -> bytes:
    """``data`` followed by its CRC32C, little-endian (the ``crc32c`` codec)."""
    return data + int(_crc32c.crc32c(data)).to_bytes(4, "little")
