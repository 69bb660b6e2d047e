"""Odd values in a spool line (the wrong type, a huge or non-finite number, nested junk, unicode,
nulls) are handled exactly as ingestion always handled them: the parse's frames (or its refusal,
which sends the batch to the line-by-line check) are pinned for every value in every kind of
column, as main's parse gave them (`odd_values.json`), and a few whole ingests pin what is stored
and what is quarantined. A faster parse must give the same answers."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.store.db import open_store
from workbench.store.frames import parse_frames, record_schemas
from workbench.store.ingest import ingest_spools

PINNED = json.loads((Path(__file__).parent / "odd_values.json").read_text())
PLAIN = {"call": '{"kind":"call","row":{"call_id":"c0","input_tokens":3,"tool_names":["a"],"settled":true}}',
         "call_prefix": '{"kind":"call_prefix","row":{"call_id":"c0","blocks":[1,2],"sizes":[3,4],"ttl_s":300}}'}
DEAD = f"{socket.gethostname()}-999999999-deadbeef.jsonl"  # no such pid: its writer is gone


def _batch(case: str) -> bytes:
    """A plain record and the odd one: `kind.column=JSON` names the odd value and where it goes."""
    where, value = case.split("=", 1)
    kind, column = where.split(".")
    odd = '{"kind":"%s","row":{"call_id":"c1","%s":%s}}' % (kind, column, value)
    return (PLAIN[kind] + "\n" + odd + "\n").encode()


@pytest.fixture(scope="module")
def schemas(tmp_path_factory):
    with open_store(tmp_path_factory.mktemp("odd") / "wb.duckdb") as con:
        return record_schemas(con)


def test_every_kind_of_column_meets_every_odd_value():
    columns = {case.split("=", 1)[0] for case in PINNED}
    assert columns == {"call.model_served", "call.input_tokens", "call.http_status", "call.settled", "call.tool_names",
                       "call_prefix.blocks", "call_prefix.sizes", "call_prefix.ttl_s"}
    assert len(PINNED) == 8 * 30


@pytest.mark.parametrize("case", sorted(PINNED))
def test_the_parse_of_an_odd_value_is_what_it_always_was(case, schemas):
    kind, column = case.split("=", 1)[0].split(".")
    try:
        frames = parse_frames(_batch(case), schemas)
    except Exception as exc:  # noqa: BLE001 - which refusal is part of what is pinned
        got = f"raises {type(exc).__name__}"
    else:
        got = f"{frames[kind].get_column(column).to_list()!r} {frames[kind].schema[column]}"
    assert got == PINNED[case]


STORED = {
    # an int, a bool, an object in a text column: polars' reader keeps their JSON text
    'call.model_served=7': ([("c0", None), ("c1", "7")], []),
    'call.model_served={"a": [1, {"b": null}]}': ([("c0", None), ("c1", '{"a": [1, {"b": null}]}')], []),
    'call.model_served="\\ud83d\\ude00\\u0000\u00e9"': ([("c0", None), ("c1", "😀\x00é")], []),
    # today a bool in an integer column goes in as 0/1 (polars' reader), a float is quarantined
    'call.input_tokens=true': ([("c0", 3), ("c1", 1)], []),
    'call.input_tokens=1.5': ([("c0", 3)], ["calls.input_tokens: 1.5 is not an integer"]),
    'call.input_tokens=9223372036854775808': (
        [("c0", 3)], ["calls.input_tokens: 9223372036854775808 is out of range [-9223372036854775808, "
                      "9223372036854775807]"]),
    'call.http_status=2147483648': (
        [("c0", None)], ["calls.http_status: 2147483648 is out of range [-2147483648, 2147483647]"]),
    'call.input_tokens=NaN': ([("c0", 3)], ["calls.input_tokens: nan is not an integer"]),
    'call.input_tokens=null': ([("c0", 3), ("c1", None)], []),
    'call.tool_names=[1, [2]]': ([("c0", ["a"]), ("c1", ["1", "[2]"])], []),
    'call.settled="\\ud800"': ([("c0", True)], ["calls.settled: '\\ud800' is not a boolean"]),
}


@pytest.mark.parametrize("case", sorted(STORED))
def test_what_an_odd_value_stores_or_quarantines(case, tmp_path):
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool.mkdir()
    (spool / DEAD).write_bytes(_batch(case))
    kind, column = case.split("=", 1)[0].split(".")
    ingest_spools(db, spool)
    con = duckdb.connect(str(db), read_only=True)
    try:
        table = {"call": "calls", "call_prefix": "call_prefixes"}[kind]
        stored = con.execute(f"SELECT call_id, {column} FROM {table} ORDER BY call_id").fetchall()
        reasons = [reason for (reason,) in con.execute("SELECT reason FROM quarantine ORDER BY reason").fetchall()]
    finally:
        con.close()
    assert (stored, reasons) == STORED[case]
    assert not list(spool.glob("*.jsonl"))  # read whole: nothing left behind, nothing lost


ITEMS = [0, -7, 2**31, 2**31 - 1, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, 2**64, True, False, None, 1.5, 1.0, "a", "",
         "😀\x00", [1], [], {"a": 1}]


def _per_row(values: list, kind) -> tuple | None:
    """A list column as polars builds it from the lists themselves, with the parse's rule: its type,
    one that converts to it exactly, or null; None (or a raise) is a refusal."""
    import polars as pl

    try:
        column = pl.Series("c", values, strict=True)
        if column.dtype != kind:
            if not (column.dtype == pl.List(pl.Int64) and kind == pl.List(pl.Int32) or column.dtype in (
                    pl.Null, pl.List(pl.Null))):
                return None
            column = column.cast(kind, strict=True)
    except Exception:  # noqa: BLE001
        return None
    return column.dtype, column.to_list()


@given(st.sampled_from(["List(Int64)", "List(Int32)", "List(String)"]),
       st.lists(st.one_of(st.none(), st.lists(st.one_of(st.sampled_from([5, -3, 2**40, "x", "y z"]),
                                                         st.sampled_from(ITEMS)), max_size=4)), min_size=1, max_size=6))
@settings(max_examples=400, deadline=None)
def test_a_list_column_is_parsed_as_polars_builds_it_from_the_lists(kind_name, values):
    """The list columns' fast build (their items' one series) gives the frame of polars' build from
    the lists themselves, row by row, or refuses as it does."""
    import polars as pl

    from workbench.store.frames import _typed_frame

    kind = {"List(Int64)": pl.List(pl.Int64), "List(Int32)": pl.List(pl.Int32), "List(String)": pl.List(pl.Utf8)}[kind_name]
    try:
        frame = _typed_frame([{"c": value} for value in values], {"c": kind})
    except Exception:  # noqa: BLE001 - a raise is a refusal too: the batch goes to polars' reader
        frame = None
    assert (None if frame is None else (frame["c"].dtype, frame["c"].to_list())) == _per_row(values, kind)


@given(st.sampled_from(["List(Int64)", "List(Int32)", "List(String)"]),
       st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.text()),
                                              max_size=5)), max_size=8))
@settings(max_examples=300, deadline=None)
def test_a_list_column_from_one_json_text_is_the_one_polars_builds_row_by_row(kind_name, values):
    """`list_series` (the parse's plain list columns, the prefix frame's keys and writes): rows of
    plain items of the inner type, null rows, empty lists and no rows at all give the column polars
    builds from the lists themselves."""
    import polars as pl

    from workbench.store.frames import list_series

    kind = {"List(Int64)": pl.List(pl.Int64), "List(Int32)": pl.List(pl.Int32), "List(String)": pl.List(pl.Utf8)}[kind_name]
    plain = int if kind.inner != pl.Utf8 else str
    values = [None if value is None else [item for item in value if item is None or type(item) is plain]
              for value in values]
    built = list_series("c", values, kind)
    expected = pl.Series("c", values, dtype=kind)
    assert (built.name, built.dtype, built.to_list()) == (expected.name, expected.dtype, expected.to_list())
