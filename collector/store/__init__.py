"""The results store: the DuckDB file and its tables, ingest, object storage, the selection language,
the queries every reader asks, export, and synthetic history for load tests."""
