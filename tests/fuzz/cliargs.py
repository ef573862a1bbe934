"""Random ``shardscope`` command lines for the fuzz suite: real verbs, hostile values.

:func:`random_argv` builds, from a random generator and a dataset path, one argument vector for
``inspect``/``locate``/``ls``/``validate`` (and a few read-only repository and labelmap verbs), with
coordinates, scales, ids and options that are sometimes right and often wrong: too few or too many
coordinates, negative, huge or non-numeric values, unknown scales, ``..`` scales, bad global
options, unknown flags, URLs with format prefixes and schemes we do not read. Whatever it builds,
the command must end with one of the documented exit codes, never 70 (an internal error).

Left out on purpose: ``--follow-symlinks`` (it makes reading through links out of the dataset the
user's explicit choice, so the canary check would not apply), remote URLs (``gs://``, ``http://``:
the fuzz run must not depend on the network) and verbs that write (``export``, ``repo init``).
"""

from __future__ import annotations

import random

#: Values for ``--scale``: right ones are added by the caller from the dataset's own keys.
_SCALES = ("", "0", "s0", "s9", "../x", "/abs", "a/../b", "8_8_40", "x" * 300, "%2e%2e", "\\..\\", " ", "é")
#: Values for integer options (ids, shard numbers, timeouts).
_INTEGERS = ("0", "1", "-1", "7", "18446744073709551615", "18446744073709551616", "-9223372036854775809",
             "99999999999999999999999999", "0x10", "1e3", "nan", "", " 3", "1_000", "３")
_FLOATS = ("0", "-1", "0.001", "1e308", "inf", "nan", "x", "", "1e-320")


def random_coords(rng: random.Random) -> str:
    """A coordinate list, right-looking (three small integers) or hostile."""
    n = rng.choice((3, 3, 3, 0, 1, 2, 4, 5))
    parts = [rng.choice(("0", "1", "5", "17", "-1", "-100", "2147483648", "9223372036854775808", "1e9", "1.5",
                         "a", "", " 2", "nan", str(rng.randrange(64)), str(rng.randrange(64)), str(rng.randrange(64))))
             for _ in range(n)]
    sep = rng.choice((",", ",", ",", " ", ";", ",,"))
    return sep.join(parts)


def random_path(rng: random.Random, root: str) -> str:
    """The dataset path as a user might type it, or something near it."""
    return rng.choice((
        root, root, root, root + "/", f"file://{root}", f"precomputed://{root}", f"zarr3://{root}", f"n5://{root}",
        f"{root}|zarr3:", f"{root}|n5:", f"{root}/info", f"{root}/zarr.json", f"{root}/attributes.json",
        f"{root}/../ds", f"{root}/no-such-dir", "", "ftp://example.invalid/x", "memory://x", f"file://{root}/%00",
        root + "\u202e", f"precomputed://zarr3://{root}",
    ))


def random_argv(rng: random.Random, root: str, scales: tuple[str, ...] = ()) -> list[str]:
    """One ``shardscope`` argument vector over the dataset at ``root`` (``scales``: its own scale keys)."""
    argv: list[str] = []
    if rng.random() < 0.15:
        argv += ["--timeout", rng.choice(_FLOATS)]
    if rng.random() < 0.1:
        argv += ["--retries", rng.choice(_INTEGERS)]
    verb = rng.choice(("inspect", "locate", "locate", "ls", "validate", "inspect", "locate", "ls", "validate",
                       "repo", "labelmap", "kv"))
    path = random_path(rng, root)
    if verb == "repo":
        return [*argv, "repo", rng.choice(("log", "branches", "verify")), path, *(["--json"] * rng.randint(0, 1))]
    if verb == "kv":
        return [*argv, "kv", "ls", path, rng.choice(("main", "0", "", "../x")), rng.choice(("inst", "", ".."))]
    if verb == "labelmap":
        return [*argv, "labelmap", "info", path, rng.choice(("seg", "", "../x")), *(["--json"] * rng.randint(0, 1))]
    argv += [verb, path]
    if rng.random() < 0.5:
        argv += ["--scale", rng.choice((*_SCALES, *scales, *scales, *scales))]
    if verb == "locate":
        how = rng.choice(("--voxel", "--voxel", "--voxel", "--chunk-id", "--segment", "none", "both"))
        if how == "--voxel":
            argv += ["--voxel", random_coords(rng)]
        elif how in ("--chunk-id", "--segment"):
            argv += [how, rng.choice(_INTEGERS)]
        elif how == "both":
            argv += ["--voxel", random_coords(rng), "--chunk-id", rng.choice(_INTEGERS)]
    elif verb == "ls":
        if rng.random() < 0.5:
            argv += ["--shard", rng.choice(_INTEGERS)]
        if rng.random() < 0.3:
            argv += ["--minishard", rng.choice(_INTEGERS)]
    elif verb == "validate" and rng.random() < 0.5:
        argv.append("--quiet")
    if rng.random() < 0.5:
        argv.append("--json")
    if rng.random() < 0.08:
        argv.insert(rng.randrange(len(argv) + 1), rng.choice(("--bogus", "-x", "--", "--json=1", "--scale")))
    return argv
