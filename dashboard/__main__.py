"""``python -m dashboard [streamlit run options]``: ``streamlit run dashboard/app.py`` with the pages' modules
imported before the server starts, so that the first visit does not wait for them (pandas, plotly, DuckDB,
the analysis: about a second on 2 cores). What the pages compute is not touched: no query runs before a
visit. ``streamlit run dashboard/app.py`` serves the same app, its first visit slower."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from streamlit.web import cli

# Streamlit checks a cached function's settings where it is declared and, before its runtime exists, says
# it falls back to an in-memory cache. The caches themselves are made on first use, inside the runtime.
_CACHE_LOG = logging.getLogger("streamlit.runtime.caching.cache_data_api")
_CACHE_LOG.setLevel(logging.ERROR)
import collector.analysis.latest  # noqa: E402, F401
import collector.analysis.speedups  # noqa: E402, F401
import collector.output.comparison  # noqa: E402, F401
import collector.output.runs  # noqa: E402, F401
import collector.output.text  # noqa: E402, F401
import dashboard.charts  # noqa: E402, F401
import dashboard.data  # noqa: E402, F401
import dashboard.state  # noqa: E402, F401

_CACHE_LOG.setLevel(logging.NOTSET)

APP = Path(__file__).resolve().parent / "app.py"


def main() -> None:
    sys.argv = ["streamlit", "run", str(APP), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
