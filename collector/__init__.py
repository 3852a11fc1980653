"""stepwatch collector: runs benchmarks, captures the environment and writes parquet."""
