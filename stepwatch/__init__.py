"""stepwatch: catch deep-learning training-speed regressions before they ship.

Installed, stepwatch is this one package: ``stepwatch.collector`` (the benchmarks, the store, the analysis and
the ``stepwatch`` command), ``stepwatch.dashboard`` and ``stepwatch.trainers``, so that a project's own
``trainers`` or ``dashboard`` package never meets stepwatch's. In stepwatch's repository the three are links to
the folders of those names at its top (the repository's layout); the wheel carries them as files.
"""

# What a training script of yours calls to mark its steps, report its quality and read its trial's seed
# (collector.trial.steps); each does nothing when the script runs on its own (``seed`` gives its default). Loaded on
# first use, so that ``import stepwatch`` stays cheap.
API = ("steps", "step", "keras_callback", "quality", "seed")
__all__ = list(API)


def __getattr__(name: str) -> object:
    if name in API:
        from stepwatch.collector.trial import steps

        return getattr(steps, name)
    raise AttributeError(f"module 'stepwatch' has no attribute {name!r}")
