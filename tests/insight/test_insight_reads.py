"""What insight reads while it judges a batch, on crafted stored prefixes: the entry an older call
made, found per lineage and key (the latest writer, before a time when asked); and the changed bytes
of two texts, as a character-by-character walk finds them."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from workbench.insight.ingest import _common_ends, short_diff
from workbench.store.db import open_store
from workbench.store.queries import insight as q


def _at(second: int) -> datetime:
    return datetime(2026, 1, 1, 0, 0, second, tzinfo=timezone.utc)


def test_older_entries_names_the_latest_writer_per_lineage_and_key(tmp_path):
    rows = [  # call, lineage, second, keys, written (null: stored before insight kept what each made)
        ("a1", "A", 1, [10, 20], [10, 20]),
        ("a2", "A", 2, [10, 20], []),  # refreshed both, made neither anew
        ("a3", "A", 3, [20, 30], [30]),
        ("a4", "A", 4, [10], None),  # every entry it left counts
        ("b1", "B", 5, [10], [10]),
        ("a5", "A", 6, None, None),  # left nothing
    ]
    with open_store(tmp_path / "wb.duckdb") as con:
        for call_id, lineage, second, keys, written in rows:
            con.execute("INSERT INTO call_prefixes (call_id, lineage, clock_at, keys, written) VALUES (?, ?, ?, ?, ?)",
                        [call_id, lineage, _at(second), keys, written])

        def found(lineages: list[str], keys: list[int], before: datetime | None = None) -> list[tuple]:
            return sorted(q.older_entries(con, lineages, keys, before).rows())

        assert found(["A"], [10, 20, 30, 40]) == [("A", 10, "a4"), ("A", 20, "a1"), ("A", 30, "a3")]
        assert found(["A", "B"], [10]) == [("A", 10, "a4"), ("B", 10, "b1")]
        assert found(["A"], [10, 30], _at(4)) == [("A", 10, "a1"), ("A", 30, "a3")]
        assert found(["C"], [10]) == []


def _walked(old: str, new: str) -> tuple[int, int]:
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return start, end


def test_the_common_ends_are_those_a_character_walk_finds():
    cases = [("", ""), ("", "abc"), ("abc", "abc"), ("abc", "abcd"), ("aaa", "aa"), ("abab", "ab"),
             ("x" * 6000 + " Variant 1.", "x" * 6000), ("\U0001f600é" * 50, "\U0001f600" + "é\U0001f600" * 49 + "e")]
    chars = "ab\u00e9\U0001f600 "
    generator = random.Random(7)
    for _ in range(3000):
        base = "".join(generator.choice(chars) for _ in range(generator.randrange(12)))
        edited = [base, base]
        for side in (0, 1):
            for _ in range(generator.randrange(3)):
                at = generator.randrange(len(edited[side]) + 1)
                edited[side] = edited[side][:at] + generator.choice(chars) + edited[side][at + generator.randrange(2):]
        cases.append(tuple(edited))
    for old, new in cases:
        assert _common_ends(old, new) == _walked(old, new), (old, new)
    assert short_diff("Now: 10:20:00 UTC.", "Now: 10:27:00 UTC.") == "Now: 10:2[-0-]{+7+}:00 UTC."
