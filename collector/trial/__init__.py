"""The trial process: everything that runs inside the measured child. ``process.py`` is its entry point (``python
-m stepwatch.collector.trial.process``), which runs the workload's kind: a bundled model or a model of yours through
a ``runtime/`` backend (one module per framework), or a script of yours (``script.py``, its steps marked through
``steps.py``). Around the steps: the window clock (``measure.py``), the machine's state (``machine.py``), memory
(``memory.py``), the compiled step's counters (``counters.py``), per-op profiles (``profiles.py``), host facts
(``host.py``), a rank's place among several (``ranks.py``); ``fields.py`` builds every kind's measured fields. Only
``runtime/`` imports a framework."""
