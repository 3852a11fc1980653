"""Package environments: the package set a repository's pin files give (``pinfiles.py``), what two environments
differ in and what can move alone (``packages.py``), and the virtual environments that upgrade-check, bisect,
calibrate and ``run --with`` build and run interleaved trials in (``virtualenvs.py``)."""
