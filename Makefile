# Two commands do all set-up on a fresh machine (Python 3.11+, Java 17 and Maven present):
#   make demo   - start a local Kafka broker and run the demo ingestion
#   make test   - run the whole test suite against a real broker, real Spark and a real Airflow
#                 (its UI in Debian's chromium: `make browser` installs it when missing), and
#                 the `tables` tier (tests/tables: Iceberg, Delta, PostgreSQL) in .venv-tables
#   make airflow - a real local Airflow 3 (UI, scheduler, triggerer) with the example DAGs
#                 and a broker; stop it with scripts/airflow-local stop
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# The `tables` tier's venv: pyspark of the Spark line Iceberg and Delta publish runtimes for
# (tools/tables_venv.py), this source tree (and the native module $(STAMP) built) on its path.
TABLES_VENV := .venv-tables
TABLES_STAMP := $(TABLES_VENV)/.installed

.PHONY: test demo airflow browser lint setup tables-setup clean

setup: $(STAMP)

# The native module (native/, Rust) is built by pip through maturin; a change to it reinstalls.
$(STAMP): pyproject.toml native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	@command -v cargo >/dev/null 2>&1 && command -v cmake >/dev/null 2>&1 || { echo "Rust's cargo \
	and cmake are needed to build the native Kafka module (native/): rustup.rs, apt-get install cmake"; \
	exit 1; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

tables-setup: $(STAMP) $(TABLES_STAMP)

# Installs no part of the package (tools/tables_venv.py): it can run while $(STAMP) builds.
$(TABLES_STAMP): pyproject.toml tools/tables_venv.py
	test -x $(TABLES_VENV)/bin/python || $(PYTHON) -m venv $(TABLES_VENV)
	$(TABLES_VENV)/bin/python tools/tables_venv.py
	touch $@

# Debian's chromium, which Playwright drives in tests/deployed/test_ui_trigger_form.py (never a
# Playwright browser download). apt-get runs only when `chromium` is missing; as root, or via sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests (apt-get)"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# The set-up at once (the Rust build is CPU, the rest mostly downloads): .venv with the native
# module, .venv-tables and the browser. Then two lanes at once (tools/test_lanes.py): .venv's
# pytest of everything but tests/deployed; and tests/deployed, then .venv-tables' pytest of
# tests/tables. Every step runs; the target fails when any did. (.venv's runs leave
# tests/tables out: tests/conftest.py says so in its header.)
test:
	$(MAKE) --no-print-directory -j3 $(STAMP) $(TABLES_STAMP) browser
	$(VENV)/bin/python tools/test_lanes.py

lint: setup
	$(VENV)/bin/ruff check airflow_provider_kafka_spark tests dags benchmarks tools
	$(VENV)/bin/mypy airflow_provider_kafka_spark/offsets airflow_provider_kafka_spark/spark

demo: setup
	$(VENV)/bin/python tools/demo.py

airflow: setup
	$(VENV)/bin/python scripts/airflow-local start

clean:
	rm -rf $(VENV) $(TABLES_VENV) .cache
