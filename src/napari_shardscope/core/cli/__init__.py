"""The ``shardscope`` command line: one package, the parser built in one place, one map to exit codes.

:func:`run` parses and runs a command line (:mod:`.main`); :mod:`.parser` builds the argparse parser
from the verbs each module declares; :mod:`.common` holds what the verbs share. One module per verb
group: :mod:`.inspect` (inspect, locate, ls, validate), :mod:`.repo` (repo, kv), :mod:`.labelmap`
(labelmap and the proofreading verbs), :mod:`.export` (export, index), :mod:`.remote` (remote, clone,
fetch, push, pull, status, review, ids).
"""

from napari_shardscope.core.cli.main import run

__all__ = ["run"]
