"""The LRU map every format reader keeps its decoded indexes in: count and weight bounds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.cache import LruCache


def test_count_bound_evicts_least_recently_used() -> None:
    cache: LruCache[int, str] = LruCache(2)
    cache.put(1, "a")
    cache.put(2, "b")
    assert cache.get(1) == "a"  # 1 is now the most recent
    cache.put(3, "c")
    assert cache.contains(1) and cache.contains(3) and not cache.contains(2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), max_size=60), st.integers(1, 100))
def test_weight_bound_matches_a_model(ops: list[tuple[int, int]], limit: int) -> None:
    """Against a list model: the kept entries are the most recent ones within the count and weight bounds."""
    cache: LruCache[int, list[int]] = LruCache(8, weigh=len, max_weight=limit)
    model: list[tuple[int, int]] = []  # (key, weight), oldest first
    for key, weight in ops:
        cache.put(key, [0] * weight)
        model = [(k, w) for k, w in model if k != key] + [(key, weight)]
        while len(model) > 8 or (sum(w for _, w in model) > limit and len(model) > 1):
            model.pop(0)
        assert cache.total_weight == sum(w for _, w in model)
        assert all(cache.contains(k) for k, _ in model)
    assert cache.total_weight <= max(limit, max((w for _, w in model), default=0))
