"""While ``stepwatch run --dashboard`` runs a suite beside the dashboard: the suite's progress, and a page that
follows it. Every few seconds a fragment compares the store's identity and the progress with what the page was
drawn from, and reruns the page when either moved, so a trial's row appears without a reload. With no suite
running (no ``STEPWATCH_PROGRESS``, or its run has ended) nothing is polled."""

from __future__ import annotations

import streamlit as st

from stepwatch.collector.runner import progress
from stepwatch.dashboard import data

EVERY_S = 2.0  # how often a page beside a running suite looks for new rows


def follow() -> None:
    """While a suite runs: rerun the app when the store or the progress changes."""
    now = progress.read()
    if now is None or now.ended:
        return
    drawn = (data.identity(), now.updated)

    @st.fragment(run_every=EVERY_S)
    def watch() -> None:
        later = progress.read()
        if (data.identity(), later.updated if later else None) != drawn:
            st.rerun()

    watch()


def show() -> None:
    """The running suite's progress, where there is one (the Run page, the first run's page)."""
    now = progress.read()
    if now is None:
        return
    if now.ended:
        st.success(progress.said(now))
    else:
        st.info(progress.said(now))
        st.progress(now.done / max(now.total, 1))
