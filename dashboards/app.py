"""The Workbench dashboard: `workbench dashboard [--db PATH] [--port N] [--host ADDRESS]` runs this
file with Streamlit. It is the router: the password check (`_access`), then each page, its own
file beside it, reading only `workbench.store.queries`; the sidebar's navigation (keeping the
filters) is drawn by `_common.page_header` on every page, its filters by `_common.filter_sidebar` once
the page's headline figures are sent."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the pages import _common beside them

from _access import require_password  # noqa: E402
from _common import PAGES  # noqa: E402

st.set_page_config(page_title="Workbench", page_icon=":material/monitoring:", layout="wide")
pages = [st.Page(path, title=title, icon=icon, default=index == 0) for index, (path, title, icon) in enumerate(PAGES)]
page = st.navigation(pages, position="hidden")
require_password()  # before any page reads the store
page.run()
