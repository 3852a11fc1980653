# Two commands: `make run` (set up, run the CPU smoke suite, open the dashboard on it) and `make test`
# (set up, run the tests).
PYTHON ?= python3
DASHBOARD_ADDRESS ?= 127.0.0.1
DASHBOARD_PORT ?= 8501
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BACKENDS_STAMP := $(VENV)/.backends
# The tests run every Keras backend on the CPU: JAX, and torch's CPU-only build (a fraction of the size of the
# default CUDA build; from https://download.pytorch.org/whl/cpu where the package index lacks it).
TORCH ?= torch==2.13.0+cpu
# The core install pins no framework (it measures the one a project has); this checkout's runs and tests pin the
# TensorFlow the reference history was measured with.
TENSORFLOW ?= tensorflow==2.21.0

.PHONY: run demo demo-gpu dashboard test test-large browser engines lint setup clean

# uv installs into the environment: it unpacks TensorFlow, JAX and torch in parallel and links them from its cache
# (7 s on a fresh clone, where pip took 2 min 12 s). uv reads no pip configuration, so pip's find-links and extra index
# (where torch's CPU build lies) are passed on, and every index is searched for the best match, as pip does. pip itself
# is installed too: `upgrade-check` builds its side environments with this environment's pip.
#
# Bytecode: where PYTHONDONTWRITEBYTECODE is set, nothing imported is ever cached, and a trial's imports of TensorFlow
# took 5 s more each time. What the frameworks and the dashboard import is compiled once, at setup, by importing it,
# two imports at a time: 7,100 of the 20,400 files installed (compiling all of them took 76 s of CPU; the whole setup on
# a fresh clone 34 s, where it took 40 s). The recipes below run with PYTHONDONTWRITEBYTECODE unset, so what a command
# imports beyond that is cached the first time (8,200 files after `make test`). stepwatch's own source is compiled too
# (0.1 s off every command).
unexport PYTHONDONTWRITEBYTECODE
UV_ARGS = --quiet --python $(BIN)/python --index-strategy unsafe-best-match \
	$(foreach link,$(PIP_FIND_LINKS),--find-links $(link)) $(foreach url,$(PIP_EXTRA_INDEX_URL),--extra-index-url $(url))
WARM_TENSORFLOW = TF_CPP_MIN_LOG_LEVEL=3 KERAS_BACKEND=tensorflow $(BIN)/python -c 'import keras, keras_hub'
WARM_PAGES = $(BIN)/python -c 'import streamlit, duckdb, pandas, pyarrow.parquet, plotly.graph_objects, scipy.stats, pyiceberg.catalog.sql, pyiceberg.io.pyarrow'
WARM_BACKENDS = KERAS_BACKEND=torch $(BIN)/python -c 'import keras, torch._dynamo' && \
	KERAS_BACKEND=jax $(BIN)/python -c 'import keras' &&
define install
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	[ -x $(BIN)/uv ] || $(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install $(UV_ARGS) pip $(PACKAGES)
	$(BIN)/python -m compileall -q stepwatch collector trainers dashboard
	$(WARM_TENSORFLOW) & tensorflow=$$!; $(WARM_MORE) $(WARM_PAGES) && wait $$tensorflow
endef

$(STAMP): PACKAGES = -e '.[test,tensorflow]' '$(TENSORFLOW)'
$(STAMP): pyproject.toml
	$(install)
	touch $(STAMP)

# The test setup installs everything in one run (one dependency resolution).
$(BACKENDS_STAMP): PACKAGES = -e '.[test,tensorflow,jax,llama]' '$(TENSORFLOW)' '$(TORCH)'
$(BACKENDS_STAMP): WARM_MORE = $(WARM_BACKENDS)
$(BACKENDS_STAMP): pyproject.toml
	$(install)
	touch $(STAMP) $(BACKENDS_STAMP)

setup: $(STAMP)

# The dashboard first: it serves before the first trial, each trial's row lands in the store as it finishes and the
# Overview fills in (the Run page shows the suite's progress); it keeps serving after the last trial, until Ctrl-C.
# Failed trials are shown there too.
run: $(STAMP)
	$(BIN)/stepwatch run --suite smoke --trials 1 --dashboard --dashboard-address $(DASHBOARD_ADDRESS) \
		--dashboard-port $(DASHBOARD_PORT) || echo "some smoke trials failed: see the dashboard's Overview and Run pages"

# The dashboard on the reference history committed under data/reference/ (real trials on a 2-core CPU under
# four TensorFlow releases), in a store of its own: nothing to collect.
REFERENCE := data/reference/cpu-tf-history
REFERENCE_DB := data/stepwatch-reference.duckdb
demo: $(STAMP)
	$(BIN)/stepwatch ingest $(REFERENCE) --db $(REFERENCE_DB)
	STEPWATCH_DB=$(REFERENCE_DB) $(MAKE) --no-print-directory dashboard

# The same on the GPU rows (two H100s and an H200, JAX and torch; the README.md of each folder).
GPU_REFERENCE := data/reference/h100-2026-11-24 data/reference/h200-2026-11-26 data/reference/h100-2026-11-26
GPU_REFERENCE_DB := data/stepwatch-gpu.duckdb
demo-gpu: $(STAMP)
	$(BIN)/stepwatch ingest $(GPU_REFERENCE) --recursive --db $(GPU_REFERENCE_DB)
	STEPWATCH_DB=$(GPU_REFERENCE_DB) $(MAKE) --no-print-directory dashboard

dashboard: $(STAMP)
	@echo "dashboard: http://$(DASHBOARD_ADDRESS):$(DASHBOARD_PORT) (Ctrl-C to stop)"
	$(BIN)/python -m stepwatch.dashboard --server.address $(DASHBOARD_ADDRESS) --server.port $(DASHBOARD_PORT)

# The browser test drives Debian's chromium, actionlint checks the workflows' shell with shellcheck, and the shared
# store's tests start a PostgreSQL server of their own (initdb, pg_ctl); installed here when missing and we are root.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	command -v google-chrome >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	echo "warning: no chromium (apt-get install chromium); the browser test will be skipped"
	@command -v shellcheck >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && { apt-get install -y -qq shellcheck || { apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck; }; }; } || \
	echo "warning: no shellcheck (apt-get install shellcheck); the actionlint test will fail"
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && { apt-get install -y -qq postgresql || { apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }; }; } || \
	echo "warning: no PostgreSQL server (apt-get install postgresql); the shared store's tests will be skipped"

# The image tests (tests/test_images.py, large) run trials in containers: podman and runc start them, mmdebstrap makes
# the images' root filesystems from Debian's packages (no registry). Installed here when missing and we are root.
engines:
	@command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap || \
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap; }; }; } || \
	echo "warning: no podman, runc or mmdebstrap (apt-get install podman runc mmdebstrap); the image tests will be skipped"

# Two tiers. `make test`, the fast one: the unit tests of every module and the integration tests that share a few real
# runs (tests/conftest.py: shared_runs, smoke_store). `make test-large`: the long end-to-end runs, marked `large`.
# `.ci/run` runs both on every change. Each run prints its tier's wall time and its ten slowest tests, and names a fast
# test over STEPWATCH_TEST_SLOW_S (10 s) as one that belongs in the large tier or a shared fixture.
# The two set-ups at once: pip's downloads and unpacking beside apt's.
test:
	$(MAKE) --no-print-directory -j2 $(BACKENDS_STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q --durations=10 -n 2 --dist loadfile --no-loadscope-reorder

# The tests marked `large` (the long end-to-end runs; .ci/run after `make test`, and CI's `large` job).
test-large:
	$(MAKE) --no-print-directory -j2 $(BACKENDS_STAMP) browser engines
	$(BIN)/python -m pytest -q --durations=10 -n 2 --dist loadfile --no-loadscope-reorder --run-large -m large

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) data/results data/synthetic data/upgrade-check data/*.duckdb data/*.duckdb.lock data/*.duckdb.d
