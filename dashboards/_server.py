"""How `workbench dashboard` starts Streamlit: `python _server.py run app.py --server.…`. What a
page's first run would otherwise import or build is done before the server answers, so a visitor's
first page paints at once instead of after the seconds those take on a cold start: the libraries
every page reads the store with (polars, DuckDB, Altair, the named queries, the spool ingester every
read runs first), what the pages import (pandas, which `st.dataframe` imports on a page's first
table; the run explorer's bills), Altair's compiled Vega-Lite schema, and inspect's map of loaded
modules to files, which Streamlit's first element walks (`env_util.is_repl` calls `inspect.stack()`)."""

from __future__ import annotations

import inspect
import sys

import altair
import duckdb  # noqa: F401
import pandas  # noqa: F401
import polars
from streamlit.web.cli import main

import workbench.capture.runs  # noqa: F401
import workbench.config  # noqa: F401
import workbench.money  # noqa: F401
import workbench.store.ingest  # noqa: F401
import workbench.store.queries  # noqa: F401

altair.Chart(polars.DataFrame({"x": [0]})).mark_bar().encode(x="x:Q", tooltip=["x:Q"]).to_dict()
inspect.stack()

if __name__ == "__main__":
    sys.exit(main())
