"""Running benchmarks: suites, the trial process and its measurement, the host environment, prices and
peaks, the results file, and the upgrade check's side environments. ``runtime/`` holds one module per
framework; nothing else here imports a framework."""
