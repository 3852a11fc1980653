"""stepwatch: catch deep-learning training-speed regressions before they ship.

Installed, stepwatch is this one package: ``stepwatch.collector`` (the benchmarks, the store, the analysis and
the ``stepwatch`` command), ``stepwatch.dashboard`` and ``stepwatch.trainers``, so that a project's own
``trainers`` or ``dashboard`` package never meets stepwatch's. In stepwatch's repository the three are links to
the folders of those names at its top (the repository's layout); the wheel carries them as files.
"""
