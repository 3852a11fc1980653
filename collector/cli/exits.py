"""What ``stepwatch`` exits with, and what each code means. The outcomes themselves are named in
``collector.outcomes``; only the command line turns them into codes.

0 no problem (no regression), 1 regression (or a training whose numerics changed, with --numerics fail), 2 usage
error (bad flags, suite, catalog, selection or metric),
3 inconclusive (with --fail-on-inconclusive; a bisect the noise could not decide), 4 benchmarks failed to run,
results could not be stored (none of them was), or a file was quarantined, 5 not known whether results were stored (a
shared store's catalog went away while committing them: ingest again, it adds only what the store lacks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepwatch.collector.outcomes import CHANGED, FAILED, INCONCLUSIVE, REGRESSION, SKIPPED

if TYPE_CHECKING:  # every command imports this module: it must not load the analysis (pandas) to name its types
    from stepwatch.collector.analysis.comparison import Comparison
    from stepwatch.collector.workflows.bisect import Step
    from stepwatch.collector.workflows.search import Search

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_FAILED, EXIT_UNKNOWN = 0, 1, 2, 3, 4, 5


def of_comparison(comparison: Comparison, fail_on_inconclusive: bool = False, numerics: str = "show") -> int:
    """1 on any regression (or, with ``numerics`` "fail", a series whose training changed), else 4 if a series'
    trials all failed, else 3 on inconclusive when asked, else 0."""
    if comparison.by_verdict(REGRESSION):
        return EXIT_REGRESSION
    if numerics == "fail" and any(found.verdict == CHANGED for found in comparison.numerics.values()):
        return EXIT_REGRESSION
    if comparison.by_verdict(FAILED):
        return EXIT_FAILED
    if fail_on_inconclusive and comparison.by_verdict(INCONCLUSIVE):
        return EXIT_INCONCLUSIVE
    return EXIT_OK


def of_bisect(ends: Step, search: Search | None) -> int:
    """0 nothing to bisect, 1 a culprit, 3 the noise could not decide, 4 the ends could not be measured."""
    if ends.outcome == SKIPPED:
        return EXIT_FAILED
    if ends.outcome == INCONCLUSIVE:
        return EXIT_INCONCLUSIVE
    if search is None:
        return EXIT_OK
    if search.stopped:
        return EXIT_INCONCLUSIVE
    if search.culprit is None and search.together is None:
        return EXIT_FAILED
    return EXIT_REGRESSION
