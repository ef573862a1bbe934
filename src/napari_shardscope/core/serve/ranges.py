"""The ``Range`` header of a request, read as RFC 9110 §14 says, with bounds a hostile client cannot pass.

What the server does with each kind of header (all allowed by RFC 9110 §14.2, which lets a server
ignore a ``Range`` header):

* one range, ``bytes=a-b``, ``bytes=a-`` or ``bytes=-n`` (the unit case-insensitive, spaces around
  it allowed): answered ``206`` with that part, or ``416`` with ``Content-Range: bytes */LEN`` when
  it is unsatisfiable (``a`` at or past the end, ``-0``, any range of an empty value);
* several ranges (``bytes=0-1,5-9``): ignored, the whole value is sent (``200``) — no client of
  this server asks for several, and ``multipart/byteranges`` would be a second body format to get
  right;
* a header that is not a byte-range set (``bytes=5-2``, ``items=0-1``, ``bytes=x``), longer than
  :data:`MAX_HEADER` characters or with a number of more than :data:`MAX_DIGITS` digits (larger
  than any file): ignored, the whole value is sent;
* any ``If-Range``: the ``Range`` is ignored (the server sends no validator an ``If-Range`` could
  match, and RFC 9110 §13.1.5 then requires sending the whole value).

Parsing never converts more than :data:`MAX_DIGITS` digits to a number, so no header costs more
than a few microseconds or raises (Python refuses ``int()`` of over 4,300 digits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The longest ``Range`` header read; a longer one is ignored. A single range of two 20-digit
#: numbers is 48 characters.
MAX_HEADER = 256
#: The most digits a position may have (2⁶⁴ has 20); a longer number makes the header ignored.
MAX_DIGITS = 20

_SPEC = re.compile(r"^([0-9]*)-([0-9]*)$")  # ASCII digits: \d matches any script's


@dataclass(frozen=True)
class ByteRangeSpec:
    """One range of a ``Range`` header: ``first-last``, ``first-`` (``last`` is ``None``) or the
    suffix ``-length`` (``first`` is ``None``, ``last`` holds the length)."""

    first: int | None
    last: int | None

    def resolve(self, size: int) -> tuple[int, int] | None:
        """The byte span ``[start, end)`` it selects of a value of ``size`` bytes; ``None`` when unsatisfiable."""
        if self.first is None:  # suffix: the last ``last`` bytes
            assert self.last is not None
            if self.last == 0 or size == 0:
                return None
            return max(0, size - self.last), size
        if self.first >= size:
            return None
        end = size if self.last is None else min(self.last + 1, size)
        return self.first, end


def parse_range(header: str | None, if_range: str | None = None) -> ByteRangeSpec | None:
    """The one byte range ``header`` asks for, or ``None`` when the whole value is to be sent.

    ``None`` for: no header, an ``If-Range`` (see the module docstring), several ranges, and any
    header that is malformed or beyond the bounds above. Never raises.
    """
    if header is None or if_range is not None or len(header) > MAX_HEADER:
        return None
    unit, sep, ranges = header.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    specs = [s.strip() for s in ranges.split(",") if s.strip()]  # empty list elements are allowed (RFC 9110 §5.6.1)
    if len(specs) != 1:
        return None
    m = _SPEC.match(specs[0])
    if m is None:
        return None
    a, b = m.groups()
    if len(a) > MAX_DIGITS or len(b) > MAX_DIGITS or (not a and not b):
        return None
    if not a:
        return ByteRangeSpec(None, int(b))
    first = int(a)
    last = int(b) if b else None
    if last is not None and last < first:  # invalid (RFC 9110 §14.1.1)
        return None
    return ByteRangeSpec(first, last)
