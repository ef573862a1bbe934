"""Length units as OME-Zarr, N5 and BigDataViewer write them, converted to nanometres.

Connectomics tools (Neuroglancer, CloudVolume, DVID) think in nanometres; OME-Zarr writes UDUNITS
names (``"micrometer"``), N5 tools write abbreviations (``"um"``, ``"nm"``). Converting everything
to nm lets an image and its segmentation from different formats overlay in one napari world.
"""

from __future__ import annotations

from collections.abc import Sequence

_NM_PER_UNIT: dict[str, float] = {
    "angstrom": 0.1, "å": 0.1,
    "picometer": 1e-3, "pm": 1e-3,
    "nanometer": 1.0, "nanometre": 1.0, "nm": 1.0,
    "micrometer": 1e3, "micrometre": 1e3, "micron": 1e3, "um": 1e3, "µm": 1e3, "μm": 1e3,
    "millimeter": 1e6, "millimetre": 1e6, "mm": 1e6,
    "centimeter": 1e7, "centimetre": 1e7, "cm": 1e7,
    "meter": 1e9, "metre": 1e9, "m": 1e9,
}


def nm_per_unit(unit: object) -> float | None:
    """How many nanometres one ``unit`` is, or ``None`` for a missing or non-length unit."""
    if not isinstance(unit, str):
        return None
    return _NM_PER_UNIT.get(unit.strip().lower())


#: Neuroglancer's length units as its coordinate spaces write them (``[scale, unit]``): exact, case-sensitive
#: SI prefixes of the metre ("Mm" is not "mm"), and ``""`` for a dimensionless axis, read as 1 nm per unit
#: as Neuroglancer lays such an axis next to nanometre ones.
_NM_PER_NEUROGLANCER_UNIT: dict[str, float] = {"": 1.0, "m": 1e9, "mm": 1e6, "um": 1e3, "µm": 1e3, "nm": 1.0,
                                               "pm": 1e-3}


def nm_per_neuroglancer_unit(unit: object) -> float | None:
    """How many nanometres one unit of a Neuroglancer dimension (state or annotation ``info``) is, or ``None``
    for a unit that is not a length (``"s"``, ``"Hz"``) or not a string.

    Separate from :func:`nm_per_unit`: OME-Zarr and N5 spell units freely ("Micrometer", "micron"), where
    Neuroglancer's are exact symbols.
    """
    return _NM_PER_NEUROGLANCER_UNIT.get(unit) if isinstance(unit, str) else None


def nm_factors(units: Sequence[object]) -> tuple[float, ...] | None:
    """Nanometres per unit of each axis, or ``None`` unless *every* unit is a length unit.

    All or nothing: converting some axes and not others would leave a volume in a mix of units
    that no viewer could label, so a volume with one unknown or non-length unit (``"s"``,
    ``"pixel"``, missing) keeps its values as written and is reported unitless.
    """
    factors = [nm_per_unit(u) for u in units]
    if not factors or any(f is None for f in factors):
        return None
    return tuple(float(f) for f in factors if f is not None)
