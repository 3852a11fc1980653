"""``python -m stepwatch.dashboard [streamlit run options]`` (what ``stepwatch dashboard`` starts): ``streamlit
run dashboard/app.py`` with the pages' modules imported before the server starts, so that the first visit does
not wait for them (pandas, plotly, DuckDB, the analysis: about a second on 2 cores), and the dashboard's
Streamlit settings (``streamlit.toml``) as options, from whatever directory it runs in. What the pages compute
is not touched: no query runs before a visit. ``streamlit run dashboard/app.py`` serves the same app from this
repository (its .streamlit/config.toml is that file), its first visit slower."""

from __future__ import annotations

import logging
import sys
import tomllib
from pathlib import Path

from streamlit.web import cli

# Streamlit checks a cached function's settings where it is declared and, before its runtime exists, says
# it falls back to an in-memory cache. The caches themselves are made on first use, inside the runtime.
_CACHE_LOG = logging.getLogger("streamlit.runtime.caching.cache_data_api")
_CACHE_LOG.setLevel(logging.ERROR)
import stepwatch.collector.analysis.latest  # noqa: E402, F401
import stepwatch.collector.analysis.speedups  # noqa: E402, F401
import stepwatch.collector.output.comparison  # noqa: E402, F401
import stepwatch.collector.output.runs  # noqa: E402, F401
import stepwatch.collector.output.text  # noqa: E402, F401
import stepwatch.dashboard.charts  # noqa: E402, F401
import stepwatch.dashboard.data  # noqa: E402, F401
import stepwatch.dashboard.state  # noqa: E402, F401

_CACHE_LOG.setLevel(logging.NOTSET)

APP = Path(__file__).resolve().parent / "app.py"
SETTINGS = Path(__file__).resolve().parent / "streamlit.toml"


def settings_options() -> list[str]:
    """The dashboard's Streamlit settings as ``streamlit run`` options (``--server.headless=true``)."""
    sections = tomllib.loads(SETTINGS.read_text())
    return [
        f"--{section}.{key}={str(value).lower() if isinstance(value, bool) else value}"
        for section, values in sections.items()
        for key, value in values.items()
    ]


def main() -> None:
    sys.argv = ["streamlit", "run", str(APP), *settings_options(), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
