"""One integrity problem ``validate`` found, in the same shape for every format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One integrity problem found by ``validate``: where it is and what is wrong."""

    key: str
    message: str
    offset: int | None = None

    def __str__(self) -> str:
        where = f" at byte {self.offset}" if self.offset is not None else ""
        return f"{self.key}: {self.message}{where}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "message": self.message, "offset": self.offset}
