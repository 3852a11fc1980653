"""What stepwatch does end to end, for any front end (the CLI, the dashboard, a script): run the trials of
several environments interleaved, ingest them and compare them (``check``), calibrate a runner, bisect an
upgrade (``bisect``, with its search in ``search``), make synthetic history (``synthetic``). A workflow
returns what it found and reports progress through ``Hooks``; it prints nothing and has no exit codes."""
