# Two commands do all set-up on a fresh machine (Python 3.11+, Java 17 and Maven present):
#   make demo   - start a local Kafka broker and run the demo ingestion
#   make test   - run the whole test suite against a real broker, real Spark and a real Airflow
#                 (its UI in Debian's chromium: `make browser` installs it when missing), and
#                 the `tables` tier (tests/tables: Iceberg, Delta, PostgreSQL) in .venv-tables
#   make airflow - a real local Airflow 3 (UI, scheduler, triggerer) with the example DAGs
#                 and a broker; stop it with scripts/airflow-local stop
#   make dist   - the sdist and the manylinux wheel in dist/ (needs cargo and cmake)
#   make matrix - the wheel in clean venvs of every Python x PySpark x Airflow it claims
#   make docs   - the documentation site (mkdocs, docs/ and mkdocs.yml) in site/, warnings as errors
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
DEPS_STAMP := $(VENV)/.deps
# The `tables` tier's venv: pyspark of the Spark line Iceberg and Delta publish runtimes for
# (tools/source_venv.py), this source tree (and the native module $(STAMP) copied) on its path.
TABLES_VENV := .venv-tables
TABLES_STAMP := $(TABLES_VENV)/.installed
# maturin and zig (the ziglang wheel: a C compiler and linker for glibc 2.17) for `make dist`.
BUILD_VENV := .venv-build
BUILD_STAMP := $(BUILD_VENV)/.installed
WHEEL_STAMP := dist/.built
WHEEL = $(firstword $(wildcard dist/*-manylinux*.whl))
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)
PACKAGE_SOURCES := $(shell find airflow_provider_kafka_spark -name '*.py' -o -name '*.pyi')

.PHONY: test demo airflow browser s3-server fault-proxy jvm-archives lint setup dist matrix tables-setup docs clean

# .venv: the package's dependencies (uv), this source tree on its path (as an editable install),
# and the native module copied out of the wheel `make dist` built (tools/source_venv.py). The
# dependencies download while the wheel builds.
setup: $(STAMP)

$(STAMP): $(DEPS_STAMP) $(WHEEL_STAMP)
	$(VENV)/bin/python tools/source_venv.py --native $(WHEEL)
	touch $@

$(DEPS_STAMP): pyproject.toml tools/source_venv.py
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python tools/source_venv.py dev
	touch $@

# An sdist and an abi3 manylinux2014 wheel (glibc 2.17+, x86_64) in dist/: the native module
# (native/, Rust: librdkafka, OpenSSL and libcurl built from source and linked in) compiled
# with zig against glibc 2.17, so the wheel needs only the C library. tests/wheel checks it
# with auditwheel and installs it into clean venvs (tools/version_matrix.py). `maturin sdist`
# gets the crate's manifest on its command line: without it, maturin 1.16 first runs `cargo
# metadata --manifest-path Cargo.toml` in this folder (there is none: the crate is native/),
# whose "error: manifest path `Cargo.toml` does not exist" it prints and then ignores, before
# it reads pyproject.toml's manifest-path. The C compiler wrappers maturin writes run the
# ziglang wheel's zig binary itself (CARGO_ZIGBUILD_ZIG_COMMAND), not `python -m ziglang`, which
# would start an interpreter for each of the build's ~2,400 compiler calls (measured: 24 ms each,
# about 1 of the build's 13 CPU minutes).
dist: $(WHEEL_STAMP)

$(WHEEL_STAMP): $(BUILD_STAMP) pyproject.toml README.md $(NATIVE_SOURCES) $(PACKAGE_SOURCES)
	@command -v cargo >/dev/null 2>&1 && command -v cmake >/dev/null 2>&1 || { echo "Rust's cargo \
	and cmake are needed to build the native Kafka module (native/): rustup.rs, apt-get install cmake"; \
	exit 1; }
	rm -f dist/*.whl dist/*.tar.gz
	PATH="$(CURDIR)/$(BUILD_VENV)/bin:$$PATH" CARGO_ZIGBUILD_ZIG_COMMAND="$$($(BUILD_VENV)/bin/python \
	  -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("ziglang").origin))')/zig" \
	  CARGO_ZIGBUILD_ZIG_COMMAND_ARGS= $(BUILD_VENV)/bin/maturin build --quiet --release \
	  --zig --compatibility manylinux2014 --interpreter $(BUILD_VENV)/bin/python --out dist
	$(BUILD_VENV)/bin/maturin sdist --manifest-path native/Cargo.toml --out dist
	touch $@

$(BUILD_STAMP):
	test -x $(BUILD_VENV)/bin/python || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/pip install -q -U pip 'maturin==1.16.0' 'ziglang==0.17.1'
	touch $@

# Every cell of the version matrix (Python x PySpark x Airflow; tools/version_matrix.py): the
# wheel in a clean venv per cell, with no build tool on PATH, against a local broker.
matrix: $(STAMP)
	$(VENV)/bin/python tools/version_matrix.py --cells all

tables-setup: $(STAMP) $(TABLES_STAMP)

# Installs no part of the package (tools/source_venv.py): it can run while $(STAMP) builds.
$(TABLES_STAMP): pyproject.toml tools/source_venv.py
	test -x $(TABLES_VENV)/bin/python || $(PYTHON) -m venv $(TABLES_VENV)
	$(TABLES_VENV)/bin/python tools/source_venv.py tables
	touch $@

# Debian's chromium, which Playwright drives in tests/deployed/test_ui_trigger_form.py (never a
# Playwright browser download). apt-get runs only when `chromium` is missing; as root, or via sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests (apt-get)"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# The S3 server the tests start (tools/s3_server.py, scripts/s3): versitygw, built once with
# the machine's Go (`go install`, 2-3 CPU minutes) into .cache/versitygw/bin, at the lowest CPU
# priority: `make test` builds it beside the wheel, whose build is the set-up's longest step. The
# s3a jars are fetched by the tests themselves (tools/s3_jars.py, Maven, once per Hadoop line).
VERSITYGW_STAMP := .cache/versitygw/.built

s3-server: $(VERSITYGW_STAMP)

$(VERSITYGW_STAMP): tools/s3_server.py
	nice -n 19 $(PYTHON) scripts/s3 build
	touch $@

# The fault proxy of tests/faults/network (tools/fault_proxy.py: Toxiproxy between the package
# and the broker, the S3 server, the registry), built once with the machine's Go (`go install`,
# about 10 CPU seconds) into .cache/toxiproxy/bin, at the lowest CPU priority.
FAULT_PROXY_STAMP := .cache/toxiproxy/.built

fault-proxy: $(FAULT_PROXY_STAMP)

$(FAULT_PROXY_STAMP): tools/fault_proxy.py
	nice -n 19 $(PYTHON) tools/fault_proxy.py build
	touch $@

# The set-up at once (the wheel's Rust build is CPU, the rest mostly downloads): .venv's
# dependencies, the wheel (then its native module into the source tree), .venv-tables, the
# browser, the S3 server, the fault proxy and the JVM archives. Then the suite in two lanes at once
# (tools/test_lanes.py): its jobs (.venv's pytest of the deployed Airflow, of the cluster
# tiers and the wheel, of the kill and timeout tests, of the rest;
# .venv-tables' pytest of tests/tables, its Airflow part apart) from one queue, in the order
# that ends both lanes soonest by the jobs' measured minutes. Every job runs; the target fails
# when any did.
# (.venv's runs leave tests/tables out: tests/conftest.py says so in its header.)
test:
	$(MAKE) --no-print-directory -j4 $(STAMP) $(TABLES_STAMP) browser s3-server fault-proxy \
	  jvm-archives
	$(VENV)/bin/python tools/test_lanes.py

# Class-data-sharing archives of .venv's and .venv-tables' PySpark (tools/jvm_archives.py: one
# small Spark job each, once per PySpark install, while the wheel builds, at the lowest CPU
# priority: the build's critical path keeps its cores): the suite's Spark drivers map them and
# start with a third less CPU.
jvm-archives: $(DEPS_STAMP) $(TABLES_STAMP)
	nice -n 19 $(VENV)/bin/python tools/jvm_archives.py $(VENV)/bin/python $(TABLES_VENV)/bin/python

lint: setup
	$(VENV)/bin/ruff check airflow_provider_kafka_spark tests dags benchmarks tools
	$(VENV)/bin/mypy airflow_provider_kafka_spark/offsets airflow_provider_kafka_spark/spark

# The documentation site into the git-ignored site/: `mkdocs build --strict` (a warning, such as
# a link to a missing page or anchor, fails it). The API pages come from the docstrings, read
# by griffe without importing the package: the site needs .venv's dev tools, not the wheel.
docs: $(DEPS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

demo: setup
	$(VENV)/bin/python tools/demo.py

airflow: setup
	$(VENV)/bin/python scripts/airflow-local start

clean:
	rm -rf $(VENV) $(TABLES_VENV) $(BUILD_VENV) dist .cache
