"""How deep a costly Hypothesis test searches: a few examples in the default run, many in the ``long`` profile.

A model test (a rule-based state machine whose invariant recounts everything after every step) costs tens
of CPU seconds at the counts its authors first chose, and the default run (``pytest``: the "ci" profile of
``tests/conftest.py``) has to fit in minutes on two cores. A fixed ``max_examples`` would be the same in the
``long`` profile, which exists to search deeper; :func:`examples` scales the test's own count by the profile's
depth instead: ``n`` under "ci" (50 examples by default), twenty times ``n`` under "long" (1000).

The profile is chosen before any test module is imported (the conftest loads "ci"; ``--hypothesis-profile``
is applied at configure time), so the count is fixed when the module's ``settings(...)`` is built.
"""

from __future__ import annotations

from hypothesis import settings

#: The default run's examples per test (the "ci" profile of tests/conftest.py): depth 1.
CI_EXAMPLES = 50


def examples(n: int) -> int:
    """``n`` examples in the default run; as many times more as the loaded profile searches deeper."""
    loaded = settings().max_examples  # a settings object with nothing set carries the loaded profile's values
    return max(n, n * loaded // CI_EXAMPLES)
