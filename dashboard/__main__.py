"""``python -m dashboard [streamlit run options]``: ``streamlit run dashboard/app.py`` with the pages' modules
imported before the server starts, so that the first visit does not wait for them (pandas, plotly, DuckDB,
the analysis: about a second on 2 cores). What the pages compute is not touched: no query runs before a
visit. ``streamlit run dashboard/app.py`` serves the same app, its first visit slower."""

from __future__ import annotations

import sys
from pathlib import Path

from streamlit.web import cli

import collector.analysis.latest  # noqa: F401
import collector.analysis.report  # noqa: F401
import collector.analysis.speedups  # noqa: F401
import dashboard.charts  # noqa: F401
import dashboard.data  # noqa: F401
import dashboard.state  # noqa: F401

APP = Path(__file__).resolve().parent / "app.py"


def main() -> None:
    sys.argv = ["streamlit", "run", str(APP), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
