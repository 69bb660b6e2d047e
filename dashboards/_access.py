"""Who may see the dashboard. It listens on this machine only (127.0.0.1) unless
`workbench dashboard --host ADDRESS` says otherwise, and then only behind the password the user set
in WORKBENCH_DASHBOARD_PASSWORD: there is no default, and the command refuses to listen beyond this
machine without one. When a password is set, every page asks for it before anything is read."""

from __future__ import annotations

import hmac
import os
import time

import streamlit as st

from workbench.config import DASHBOARD_PASSWORD_ENV as PASSWORD_ENV

_UNLOCKED = "workbench_unlocked"


def require_password() -> None:
    """Stop the page with a password form until this session has given the password, if one is set."""
    expected = os.environ.get(PASSWORD_ENV)
    if not expected or st.session_state.get(_UNLOCKED):
        return
    st.title("Workbench")
    with st.form("unlock"):
        given = st.text_input("Password", type="password", help=f"the one set in {PASSWORD_ENV} where the "
                              "dashboard was started")
        submitted = st.form_submit_button("Open the dashboard")
    if submitted:
        if hmac.compare_digest(given.encode(), expected.encode()):
            st.session_state[_UNLOCKED] = True
            st.rerun()
        time.sleep(1)  # a wrong guess costs a second
        st.error("That is not the password.")
    st.stop()
