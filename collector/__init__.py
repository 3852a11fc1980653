"""stepwatch: the shared vocabulary (config.py, schema.py, metrics.py) and one subpackage per job: trial/ is the
measured child process, runner/ plans suites and turns trials into rows, environments/ builds the package sets and
virtual environments the checks compare, store/ keeps results in DuckDB, analysis/ judges them, workflows/ runs
them end to end, output/ renders them; cli/ is the ``stepwatch`` command."""
