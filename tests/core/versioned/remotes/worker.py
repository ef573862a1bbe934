"""A separate process working on its own local repository (the two-process and kill tests run it).

    python -m tests.core.versioned.remotes.worker edit REPO SEED FIRST LAST   # merge + cleave, commit each
    python -m tests.core.versioned.remotes.worker push REPO [GO_FILE]        # wait for GO_FILE, then push
    python -m tests.core.versioned.remotes.worker pull REPO
    python -m tests.core.versioned.remotes.worker fetch REPO

Prints one JSON line with the outcome; exits with the CLI's code for our errors (7: conflict).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from napari_shardscope.core.errors import ShardscopeError, exit_code_for
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.labelmap.remote import pull_merger
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from tests.core.versioned.remotes.helpers import edit

GO_WAIT_S = 60.0


def main(argv: list[str]) -> int:
    verb, path = argv[0], Path(argv[1])
    repo = open_repository(path)
    try:
        if verb == "edit":
            seed, first, last = int(argv[2]), int(argv[3]), int(argv[4])
            bodies = sorted(int(s) for s in open_labelmap(repo, "seg").index_summary().supervoxels)[first:last]
            rng = np.random.default_rng(seed)
            out = [edit(repo, kind, rng, bodies) for kind in ("merge", "cleave")]
            print(json.dumps({"edits": out}))
        elif verb == "push":
            if len(argv) > 2:
                deadline = time.monotonic() + GO_WAIT_S
                while not Path(argv[2]).exists() and time.monotonic() < deadline:
                    time.sleep(0.005)
            print(json.dumps({"ready": True}), flush=True)
            print(json.dumps(R.push(repo).to_json()))
        elif verb == "pull":
            print(json.dumps(R.pull(repo, merge=pull_merger()).to_json()))
        elif verb == "fetch":
            print(json.dumps({"ready": True}), flush=True)
            print(json.dumps(R.fetch(repo).to_json()))
        else:
            raise SystemExit(f"unknown verb {verb}")
    except ShardscopeError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return exit_code_for(exc)
    finally:
        repo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
