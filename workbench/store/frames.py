"""Spool lines into typed frames: every record kind's rows as a polars frame of its table's columns,
parsed in native code where the batch allows it (orjson, then polars' NDJSON reader), the columns'
types read from the store's catalog. Ingestion (`workbench.store.ingest`) writes what this parses."""

from __future__ import annotations

from collections import defaultdict

import duckdb
import orjson
import polars as pl

from workbench.store.records import TABLES

_POLARS_TYPES = {
    "VARCHAR": pl.Utf8, "BIGINT": pl.Int64, "INTEGER": pl.Int32, "BOOLEAN": pl.Boolean,
    "VARCHAR[]": pl.List(pl.Utf8), "TIMESTAMP WITH TIME ZONE": pl.Utf8, "DOUBLE": pl.Float64,
    "BIGINT[]": pl.List(pl.Int64), "INTEGER[]": pl.List(pl.Int32),
}
# what polars infers from parsed JSON that converts exactly into a column of another type
_WIDENS = {pl.Int32: (pl.Int64,), pl.Float64: (pl.Int64,), pl.List(pl.Int32): (pl.List(pl.Int64),)}
# the Python type of a list column's plain items, as parsed JSON gives them
_ITEM_TYPES = {pl.Utf8: str, pl.Int64: int, pl.Int32: int}


def record_schemas(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, pl.DataType]]:
    """Every record table's columns, as polars types, in one query."""
    tables = {table for table, _, _ in TABLES.values()}
    schemas: dict[str, dict[str, pl.DataType]] = {table: {} for table in tables}
    # DuckDB's own catalog function, not `information_schema.columns` (a view of it that costs a batch
    # of a few hundred calls ~5 ms more to plan): the same rows
    for table, name, kind in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'main' ORDER BY table_name, column_index"
    ).fetchall():
        if table in schemas:
            schemas[table][name] = _POLARS_TYPES.get(kind, pl.Utf8)
    return schemas


def parse_frames(data: bytes, schemas: dict[str, dict[str, pl.DataType]]) -> dict[str, pl.DataFrame]:
    """Every kind's rows as a frame, parsed in native code (not a Python loop per value). Raises on
    anything unusual (a torn line, a value of another type); the caller then falls back to the
    line-by-line parse."""
    try:
        frames = _frames_orjson(data, schemas)
    except (ValueError, TypeError, KeyError, AttributeError, pl.exceptions.PolarsError):
        frames = None  # polars' reader decides, as it always has
    return _frames_polars(data, schemas) if frames is None else frames


def _frames_orjson(data: bytes, schemas: dict[str, dict[str, pl.DataType]]) -> dict[str, pl.DataFrame] | None:
    """Each line parsed by orjson, each column built by polars from the parsed values: about half the
    CPU of polars' NDJSON reader on a batch of calls (which parses every line into a struct of every
    table's columns). None when a column's values are not plainly of its type (an int in a text
    column): polars' reader then takes the batch, so such a batch goes in as it always did."""
    rows: dict[str, list] = defaultdict(list)
    for line in data.splitlines():
        if line.strip():
            record = orjson.loads(line)
            rows[record["kind"]].append(record["row"])
    frames = {}
    for kind, kind_rows in rows.items():
        if kind not in TABLES:
            return None
        frame = _typed_frame(kind_rows, schemas[TABLES[kind][0]])
        if frame is None:
            return None
        frames[kind] = frame
    return frames


def _typed_frame(rows: list[dict], schema: dict[str, pl.DataType]) -> pl.DataFrame | None:
    """The rows as a frame of the table's columns when polars infers each column as its type, as one
    that converts to it exactly (a strict cast: an int32 out of range raises), or as null; None
    otherwise."""
    columns = []
    for (name, kind), values in zip(schema.items(), _columns(rows, schema)):
        column = _plain_list_column(name, values, kind) if isinstance(kind, pl.List) else None
        if column is None:
            column = pl.Series(name, values, strict=True)
            if column.dtype != kind:
                if not (column.dtype in _WIDENS.get(kind, ()) or column.dtype == pl.Null
                        or column.dtype == pl.List(pl.Null) and isinstance(kind, pl.List)):
                    return None
                column = column.cast(kind, strict=True)
        columns.append(column)
    return pl.DataFrame(columns)


def _columns(rows: list[dict], names) -> list[list]:
    """Each named column's values, None where a row has no such key: transposed in one pass when
    every row has the same keys in the same order (a recorder's rows do), else row by row."""
    keys = list(rows[0])
    if not all(list(row) == keys for row in rows):
        return [[row.get(name) for row in rows] for name in names]
    by_name = dict(zip(keys, map(list, zip(*[row.values() for row in rows]))))
    missing = [None] * len(rows)
    return [by_name.get(name, missing) for name in names]


def _plain_list_column(name: str, values: list, kind: pl.List) -> pl.Series | None:
    """A list column whose rows are lists (or nulls) of plain items of its inner type (ints, texts;
    nulls), built from the items' one series and the rows' JSON text, decoded natively: polars
    builds a series per row from the lists themselves, most of a prefix batch's parse. None for any
    other column, which is built as before: the same frame, or the same refusal, either way."""
    if not all(value is None or type(value) is list for value in values):
        return None
    items = [item for value in values if value is not None for item in value]
    if not all(item is None or type(item) is _ITEM_TYPES[kind.inner] for item in items):
        return None
    items = pl.Series(items, strict=True)
    if items.dtype != kind.inner:
        if not (items.dtype in _WIDENS.get(kind.inner, ()) or items.dtype == pl.Null):
            return None
        items = items.cast(kind.inner, strict=True)  # raises for an item out of the inner type's range
    return list_series(name, values, kind)


def list_series(name: str, values: list[list | None], kind: pl.List) -> pl.Series:
    """A list column from rows of plain items of its inner type (nulls too): the whole column as
    one JSON text, decoded natively into a one-row list of lists that is then exploded (polars
    builds a series per row from the lists themselves; a text per row was still ~a third of that)."""
    if not values:
        return pl.Series(name, [], dtype=kind)
    return pl.Series(name, [orjson.dumps(values).decode()], dtype=pl.Utf8).str.json_decode(pl.List(kind)).explode()


def _frames_polars(data: bytes, schemas: dict[str, dict[str, pl.DataType]]) -> dict[str, pl.DataFrame]:
    """The batch parsed by polars' NDJSON reader (it turns a number or an object in a text column
    into its text, as ingestion always has)."""
    fields: dict[str, pl.DataType] = {}
    for schema in schemas.values():
        fields.update(schema)
    frame = pl.read_ndjson(data, schema={"kind": pl.Utf8, "row": pl.Struct(fields)})
    frames = {}
    for (kind,), rows in frame.partition_by("kind", as_dict=True, maintain_order=True).items():
        if kind not in TABLES:
            raise ValueError(f"unknown record kind {kind!r}")
        frames[kind] = rows.get_column("row").struct.unnest().select(list(schemas[TABLES[kind][0]]))
    return frames


def table_frame(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> pl.DataFrame:
    columns = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    schema = {name: _POLARS_TYPES.get(kind, pl.Utf8) for name, kind in columns}
    return pl.DataFrame([{name: row.get(name) for name in schema} for row in rows], schema=schema, strict=False)
