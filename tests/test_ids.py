"""Record ids: unique, 32 hex characters, and in the order they were made, so the keys a batch
stores are neighbours in the store's primary-key indexes (a commit touches the index's right edge,
not every node of it: the ingester's memory does not grow with the store)."""

from __future__ import annotations

import re
import time

from workbench.ids import new_id


def test_ids_made_later_sort_after_earlier_ones():
    made = []
    for _ in range(20):
        made.append(new_id())
        time.sleep(0.002)  # the next id in a later millisecond
    assert sorted(made) == made


def test_ids_are_unique_hex_and_random_within_a_millisecond():
    ids = [new_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)
    assert len({value[12:] for value in ids}) == len(ids)  # 80 random bits after the clock

