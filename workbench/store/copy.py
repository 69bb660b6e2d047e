"""`workbench store copy`: every record of one store into another — a local file into a lake, a
lake back into a file — in bounded chunks, each its own transaction, written the way the ingest
writes (idempotent by key), so a copy cut short and run again ends with every row once."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from workbench.store.db import open_store
from workbench.store.ingest import commit_frames
from workbench.store.records import TABLES

# rows read and committed at a time: bounds memory whatever the store's size
CHUNK_ROWS = 50_000


def totals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows of every record table, and the exact cost of every call: what a copy must keep."""
    counts = {table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
              for table, _, _ in TABLES.values()}
    counts["calls.cost_micros"] = con.execute("SELECT coalesce(sum(cost_micros), 0) FROM calls").fetchall()[0][0]
    return counts


def copy_store(source: Path | str, target: Path | str, chunk_rows: int = CHUNK_ROWS) -> tuple[dict, dict]:
    """Copy every record of `source` into `target` (made and migrated when new); returns the
    totals of both afterwards."""
    with open_store(source, read_only=True) as src, open_store(target) as dst:
        for kind, (table, _, _) in TABLES.items():
            columns = [name for (name,) in dst.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
                "AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()]
            reader = src.execute(f"SELECT {', '.join(columns)} FROM {table}").to_arrow_reader(chunk_rows)
            for batch in reader:
                frame = pl.from_arrow(batch)
                if frame.height:
                    commit_frames(dst, {kind: frame}, {}, [], known_new=False)
        offsets = src.execute('SELECT file, "offset" FROM spool_offsets').fetchall()
        if offsets:  # where the source's spool files were read to, so an ingest resumes there
            commit_frames(dst, {}, dict(offsets), [], known_new=False)
        return totals(src), totals(dst)
