"""``python -m napari_shardscope`` runs the ``shardscope`` command line."""

import sys

from napari_shardscope.cli import main

sys.exit(main())
