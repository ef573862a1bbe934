"""The public surface of napari-shardscope as text: every name of ``napari_shardscope.__all__`` and
``napari_shardscope.gui.__all__`` with its signature, and each class's public members with theirs.

``tests/test_public_api.py`` compares it with the committed snapshot ``tests/public_api.txt``, so a change
to what users call (a renamed argument, a removed method, a new name) shows up in review as a diff of
that file. To accept a change on purpose, regenerate the snapshot and commit it::

    .venv/bin/python -m tests.public_api --update
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("public_api.txt")
#: The namespaces whose ``__all__`` is the public surface.
NAMESPACES = ("napari_shardscope", "napari_shardscope.gui")
UPDATE_COMMAND = ".venv/bin/python -m tests.public_api --update"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class _Text:
    """An annotation written as its source text (``int``, not ``'int'``: the modules use postponed annotations)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _unquoted(annotation: Any) -> Any:
    return _Text(annotation) if isinstance(annotation, str) else annotation


def _signature(obj: Any) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin or an exception class without a Python __init__
        return "(...)"
    params = [p.replace(annotation=_unquoted(p.annotation)) for p in sig.parameters.values()]
    sig = sig.replace(parameters=params, return_annotation=_unquoted(sig.return_annotation))
    return _ADDRESS.sub("", str(sig))


def _members(cls: type) -> list[str]:
    """``  Class.member...`` lines for the public members the class or its project base classes define."""
    lines: list[str] = []
    seen = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()  # in the signature
    for klass in cls.__mro__:
        if not klass.__module__.startswith("napari_shardscope"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, property):
                lines.append(f"    {cls.__name__}.{name}: property")
            elif isinstance(value, staticmethod | classmethod):
                kind = "staticmethod" if isinstance(value, staticmethod) else "classmethod"
                lines.append(f"    {cls.__name__}.{name}{_signature(getattr(cls, name))}  [{kind}]")
            elif inspect.isfunction(value):
                lines.append(f"    {cls.__name__}.{name}{_signature(value)}")
            elif inspect.isclass(value):
                lines.append(f"    {cls.__name__}.{name}: class")
            else:
                lines.append(f"    {cls.__name__}.{name}: attribute")
    return sorted(lines)


def describe(name: str, obj: Any) -> list[str]:
    """The snapshot lines of one public name."""
    if inspect.ismodule(obj):
        return [f"{name}: module {obj.__name__}"]
    if inspect.isclass(obj):
        bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
        head = f"class {name}({bases})" if bases else f"class {name}"
        return [f"{head}{_signature(obj)}", *_members(obj)]
    if callable(obj):
        return [f"def {name}{_signature(obj)}"]
    return [f"{name}: {type(obj).__name__} = {obj!r}" if name != "__version__" else f"{name}: str"]


def render() -> str:
    """The whole public surface, one namespace after the other, names sorted."""
    lines: list[str] = []
    for namespace in NAMESPACES:
        module = importlib.import_module(namespace)
        lines.append(f"# {namespace}")
        for name in sorted(module.__all__):
            lines += describe(name, getattr(module, name))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print, or with --update rewrite, the public API snapshot.")
    parser.add_argument("--update", action="store_true", help=f"rewrite {SNAPSHOT.name}")
    args = parser.parse_args(argv)
    text = render()
    if args.update:
        SNAPSHOT.write_text(text, encoding="utf-8")
        print(f"wrote {SNAPSHOT} ({text.count(chr(10))} lines)")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
