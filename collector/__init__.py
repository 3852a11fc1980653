"""stepwatch: the shared vocabulary (config.py, schema.py, metrics.py) and one subpackage per job: bench/ runs
benchmarks, store/ keeps their results in DuckDB, analysis/ judges them; cli/ is the ``stepwatch`` command."""
