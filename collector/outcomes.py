"""Every outcome stepwatch reports, named once: a comparison's verdicts, a series' numerics and a bisect step's
outcomes. The
analysis decides them, the store keeps them as these words, the output shows them and the CLI turns them
into exit codes (``collector.cli.exits``)."""

from __future__ import annotations

# A verdict on one series and metric.
REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE, MISSING = (
    "regression",
    "improvement",
    "no change",
    "inconclusive",
    "missing",
)
# A counter of the compiled step (collector.metrics, deterministic) that moved: the program changed, by how much, and
# no more; which way is worse is the user's to declare (collector.analysis.thresholds), never assumed.
CHANGED = "changed"
FAILED = "failed"  # every trial of a side failed: nothing to compare, and not a pass
# Verdicts worst first, the order every list of them is read in: what got worse, what failed, what cannot be
# told, then the rest.
VERDICT_ORDER = (REGRESSION, FAILED, INCONCLUSIVE, CHANGED, IMPROVEMENT, NO_CHANGE, MISSING)

# A series' numerics (collector.analysis.numerics): its training the same to the bit, within what changing the seed
# does, changed (CHANGED, the word a counter's change has), or not enough seeds to tell; worst first.
IDENTICAL, WITHIN_SEED_SPREAD, TOO_FEW_SEEDS = "identical", "within seed spread", "too few seeds"
NUMERICS_ORDER = (CHANGED, TOO_FEW_SEEDS, WITHIN_SEED_SPREAD, IDENTICAL)

# A bisect step against the good side: it reproduces the regression, clears it, cannot tell (INCONCLUSIVE), or
# was skipped (it could not be built, or its trials failed).
REPRODUCES, CLEARS, SKIPPED = "reproduces", "clears", "skipped"
STEP_OUTCOMES = (REPRODUCES, CLEARS, INCONCLUSIVE, SKIPPED)
