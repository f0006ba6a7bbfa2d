# The two set-up commands are `make run` and `make test`; CI (.ci/run) calls `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
RUN_STAMP := $(VENV)/.installed-run
# One pytest worker per core (pytest-xdist); each starts its own embedded PostgreSQL.
# A test that waits (a server starting, a timeout running out) leaves its core to the
# other worker. `make test PYTEST_PARALLEL=` runs the suites in one process.
PYTEST_PARALLEL ?= -n auto --dist worksteal

VENDOR := app/web/vendor

.PHONY: browser install install-run run fmt lint test migrate schema bench bench-quick relay-chaos fuzz clean

# Two installs: `make run` takes only what `causeway` needs to serve (the package and its
# dependencies); everything else (`make lint`, `make test`, ...) takes the dev extras too:
# linters, test tools, numba, the benchmarks' baselines. `make run` installs them with uv
# (from PyPI, a few seconds where pip takes half a minute on a fresh clone: it downloads
# and unpacks in parallel), and with pip if uv cannot be had. Bytecode is compiled at install,
# as pip does: a start that compiles every module it imports takes seconds more.
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
UV_VERSION := uv>=0.13,<0.14

$(RUN_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing causeway into $(VENV) (once, and again when pyproject.toml changes)"
	@($(PIP) '$(UV_VERSION)' && $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e .) \
		|| $(PIP) -e .
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	touch $(RUN_STAMP) $(STAMP)

# Swagger UI, ReDoc and GraphiQL's files, from the npm packages pinned in the lock file
# (app/web/assets.py serves them: no page loads anything from a CDN).
$(VENDOR)/node_modules/.installed-stamp: $(VENDOR)/package-lock.json
	command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm)
	cd $(VENDOR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

install: $(STAMP) $(VENDOR)/node_modules/.installed-stamp

browser:  ## Debian's Chromium, which the explorer's browser tests drive (as root: apt-get)
	test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

install-run: $(RUN_STAMP) $(VENDOR)/node_modules/.installed-stamp

run: install-run  ## start the service on 127.0.0.1:8000 (embedded PostgreSQL unless CAUSEWAY_DATABASE_URL)
	@$(BIN)/causeway serve

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: install  ## exactly what CI checks, in the same order
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy .
	$(BIN)/lint-imports

test: lint browser  ## .ci/run calls this and nothing else
	$(BIN)/pytest $(PYTEST_PARALLEL) tests/unit
	$(BIN)/pytest $(PYTEST_PARALLEL) tests/integration
	$(MAKE) bench-quick

migrate: install
	$(BIN)/causeway migrate

schema: install  ## regenerate docs/schema.graphql and docs/openapi.json (checked by make test)
	$(BIN)/python -m app.export

bench: install  ## full benchmark runs, minutes each (CI runs them with --quick)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(BIN)/python -m bench.ingest
	$(BIN)/python -m bench.indexes
	$(BIN)/python -m bench.replay
	$(BIN)/python -m bench.lineage
	$(BIN)/python -m bench.scheduler
	$(BIN)/python -m bench.evs_filter
	$(BIN)/python -m bench.relay

bench-quick: install  ## the benchmarks on small data: a smoke test, not a measurement
	$(BIN)/python -m bench.ingest --quick
	$(BIN)/python -m bench.indexes --quick
	$(BIN)/python -m bench.replay --quick
	$(BIN)/python -m bench.lineage --quick
	$(BIN)/python -m bench.scheduler --quick
	$(BIN)/python -m bench.evs_filter --quick
	$(BIN)/python -m bench.relay --quick

relay-chaos: install  ## the relay's cluster test at the issue's size: 20,000 events (the suite runs 3,000)
	CAUSEWAY_TEST_RELAY_EVENTS=20000 $(BIN)/pytest tests/integration/app/projections/relay/test_relay_chaos.py

fuzz: install  ## the CloudEvents parser's fuzz test, 20,000 examples a property (CI runs 100)
	CAUSEWAY_FUZZ=long $(BIN)/pytest $(PYTEST_PARALLEL) tests/unit/ingest/test_binding_fuzz.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
