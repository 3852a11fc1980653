"""Everything stepwatch renders, for the terminal, markdown, JSON and report files: ``text`` (what they share),
``comparison``, ``runs`` (suite runs, ingests, alerts, queries) and ``bisect``."""
