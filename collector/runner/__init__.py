"""The runner: what the parent process does around trials. Suite files and the configs they plan (``suite.py``),
trials started, waited on and turned into rows (``trials.py``), the largest batch that fits (``max_batch.py``), how a
trial's processes are launched (``launchers.py``), the results parquet (``results.py``), prices and peaks
(``catalog.py``), and the bundled suites (``suites/*.toml``). It never imports a framework."""
