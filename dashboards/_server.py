"""How `workbench dashboard` starts Streamlit: `python _server.py run app.py --server.…`. What a
page's first run would otherwise import or build is done before the server answers, so a visitor's
first page paints at once instead of after the seconds those take on a cold start: the libraries
every page reads the store with (polars, DuckDB, Altair, the named queries, the spool ingester every
read runs first), what the pages import (pandas, which `st.dataframe` imports on a page's first
table; the run explorer's bills), Altair's compiled Vega-Lite schema, and inspect's map of loaded
modules to files, which Streamlit's first element walks (`env_util.is_repl` calls `inspect.stack()`).
All of it is then frozen out of the garbage collector's full collections, which would walk it after
every run of a page."""

from __future__ import annotations

import gc
import inspect
import sys

gc.disable()  # until what follows is loaded: its full collections (~0.2 s) would find next to nothing

import altair  # noqa: E402
import duckdb  # noqa: E402, F401
import pandas  # noqa: E402, F401
import polars  # noqa: E402
from streamlit.web.cli import main  # noqa: E402

import workbench.capture.runs  # noqa: E402, F401
import workbench.config  # noqa: E402, F401
import workbench.money  # noqa: E402, F401
import workbench.store.ingest  # noqa: E402, F401
import workbench.store.queries  # noqa: E402, F401

altair.Chart(polars.DataFrame({"x": [0]})).mark_bar().encode(x="x:Q", tooltip=["x:Q"]).to_dict()
inspect.stack()
# what is loaded now lives as long as the server: kept out of the garbage collector's sight, a full
# collection (Streamlit's after every run of a page, ~0.1 s walking it; Python's own) no longer walks it
gc.freeze()
gc.enable()

if __name__ == "__main__":
    sys.exit(main())
