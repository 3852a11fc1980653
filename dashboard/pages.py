"""The dashboard's pages, declared once: the app's navigation, the tests and the dashboard benchmark read them.
A page is a script under dashboard/views/ named by its key; the first is the default (the Overview)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

VIEWS = Path(__file__).parent / "views"


@dataclass(frozen=True)
class Page:
    key: str  # its script, views/KEY.py, and its URL path (the default page's is "")
    title: str  # its title and heading
    icon: str

    @property
    def script(self) -> Path:
        return VIEWS / f"{self.key}.py"

    @property
    def address(self) -> str:
        """Its URL path below the server's: its key, "" for the default page (the first of ``PAGES``)."""
        return "" if self == PAGES[0] else self.key

    @property
    def view(self) -> str:
        """The path an AppTest switches to."""
        return f"views/{self.key}.py"


PAGES = (
    Page("overview", "Overview", ":material/home:"),
    Page("history", "History", ":material/show_chart:"),
    Page("versions", "Versions", ":material/upgrade:"),
    Page("compare", "Compare", ":material/compare_arrows:"),
    Page("speedups", "Speedups", ":material/speed:"),
    Page("cost", "Cost", ":material/payments:"),
    Page("run", "Run", ":material/search:"),
)
FIRST_RUN = Page("first_run", "Get started", ":material/rocket_launch:")  # the only page of an empty store
TITLES = {page.key: page.title for page in PAGES}
