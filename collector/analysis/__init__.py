"""The analysis: pure statistics, change points, per-series thresholds, comparisons of two selections,
alerts with their lifecycle, and the reports (terminal, markdown, JSON) that show them."""
