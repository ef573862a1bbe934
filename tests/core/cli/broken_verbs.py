"""A verb module with a bug in it, added to the parser the way the GUI verbs are (``extra_modules``).

It lets the exit-code tests run a real command line through :func:`run` whose verb raises an
exception that is not ours, as a bug in a verb would.
"""

from __future__ import annotations

import argparse

from napari_shardscope.core.cli.parser import Verb, arg
from napari_shardscope.core.errors import ShardscopeError


def cmd_divide(args: argparse.Namespace) -> int:
    print(f"{args.numerator} / 0 = {args.numerator / 0}")
    return 0


def cmd_groupless(_args: argparse.Namespace) -> int:
    raise ShardscopeError("an error of ours in no group")


VERBS = (Verb("divide-by-zero", cmd_divide, "divide a number by zero (a bug)", (arg("numerator", type=int),)),
         Verb("groupless", cmd_groupless, "raise an error of ours that belongs to no group"))
