"""Storage engines of the versioned store: ordered key-value stores behind one small protocol.

:mod:`.protocol` is the contract (snapshot reads, atomic writes, ordered range scans); :mod:`.memory`,
:mod:`.lmdb` and :mod:`.sqlite` implement it; :mod:`.registry` maps engine names to them. The
repository imports the protocol and :func:`open_engine`, never an engine module.
"""

from napari_shardscope.core.versioned.engines.protocol import OrderedKV, ReadTxn, WriteTxn
from napari_shardscope.core.versioned.engines.registry import (
    ENGINE_NAMES,
    ENGINES,
    EngineKind,
    engine_kind,
    open_engine,
)

__all__ = ["ENGINES", "ENGINE_NAMES", "EngineKind", "OrderedKV", "ReadTxn", "WriteTxn", "engine_kind", "open_engine"]
