"""How `workbench dashboard` starts Streamlit: `python _server.py run app.py --server.…`. The
libraries every page reads the store with (polars, DuckDB, Altair, the named queries) are imported
before the server answers, so a visitor's first page paints at once instead of after the seconds
those imports take on a cold start."""

from __future__ import annotations

import sys

import altair  # noqa: F401
import duckdb  # noqa: F401
import polars  # noqa: F401
from streamlit.web.cli import main

import workbench.store.queries  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
