"""Lazily loaded public names (PEP 562): a module's ``__getattr__`` and ``__dir__`` from one table.

The public namespaces (:mod:`napari_shardscope`, :mod:`napari_shardscope.gui`) name objects that live
in modules costly to import (TensorStore, NumPy, napari, Qt). Each object's module is imported when
the name is first used, and the object is then kept in the namespace, so the next lookup is an
ordinary attribute. Nothing here imports more than :mod:`importlib`, and that only on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (tens of ms cold)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any


def attach(namespace: dict[str, Any], public: Mapping[str, str],
           submodules: Iterable[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module whose globals are ``namespace``.

    Parameters
    ----------
    namespace
        The module's ``globals()``: loaded objects are stored there.
    public
        Each public name → the module it lives in (``"pkg.mod"``, the attribute of the same name),
        ``"pkg.mod:other"`` (the object under another name: an alias) or ``"pkg.mod:"`` (the module itself).
    submodules
        Submodules reachable as attributes before they are imported (``ss.gui``).
    """
    package = namespace["__name__"]
    subs = tuple(submodules)

    def __getattr__(name: str) -> Any:
        import importlib

        target = public.get(name)
        if target is None:
            if name in subs:
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, colon, attribute = target.partition(":")
        loaded = importlib.import_module(module)
        value = loaded if colon and not attribute else getattr(loaded, attribute or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # what tab completion offers: the public names, dunders and submodules
        own = {n for n in namespace if n.startswith("__") or not (n.startswith("_") or n == "TYPE_CHECKING")}
        return sorted({*own, *public, *subs})

    return __getattr__, __dir__
