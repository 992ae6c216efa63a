# All set-up happens here: a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv test test-long run bench lint clean conformance chaos

$(STAMP): pyproject.toml setup.py spark_jobs/_record_walk.c tests/js/package-lock.json
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (Debian package) for the client tests"; \
	  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing Java 17 (Debian package) for Spark"; \
	  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,spark,bench]'
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Node.js and npm (Debian packages) for the kafkajs tests"; \
	  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# The long property runs (thousands of examples); not part of `make test`.
test-long: $(STAMP)
	$(PY) -m pytest -q -m slow

# librdkafka's own integration tests (quick mode) against a local 3+3 cluster: builds
# librdkafka from $(LIBRDKAFKA_VENDOR)/librdkafka-2.15.0.tar.gz (a relative path is taken
# from the repo root) into .cache/ once, runs tests/conformance/allowlist.py's tests.
# CONFORMANCE_ARGS: e.g. --all (every test, prints which pass), --tests 0001,0012.
LIBRDKAFKA_VENDOR ?= ../shared/vendor
CONFORMANCE_ARGS ?=
conformance: $(STAMP)
	LIBRDKAFKA_VENDOR=$(LIBRDKAFKA_VENDOR) $(PY) -m tests.conformance.run_librdkafka $(CONFORMANCE_ARGS)

# The fault campaign (README "Fault campaign"; needs root: network namespaces, loop mounts):
# SCHEDULES fresh seeds (printed), or SEED=n to replay one schedule; PROFILE=short is CI's;
# JOBS=n runs n schedules at once (each its own process and namespaces).
# Results: .cache/chaos/<seed>.json and summary.json.
SCHEDULES ?= 20
SEED ?=
PROFILE ?= full
JOBS ?= 1
chaos: $(STAMP)
	$(PY) -m tests.chaos.campaign --profile $(PROFILE) --jobs $(JOBS) \
	  $(if $(SEED),--seed $(SEED),--schedules $(SCHEDULES))

run: $(STAMP)
	$(VENV)/bin/kraft dev --data-dir ./data

# Storage: page-cache writes (CPU overhead) and writes that reach the disk (fsync); then the
# controller, broker, latency, side-by-side with Tansu (peer), Spark and transaction benches.
bench: $(STAMP)
	$(PY) -m bench.storage_bench
	$(PY) -m bench.storage_bench --fsync --out bench/results/storage_fsync.json
	$(PY) -m bench.controller_bench
	$(PY) -m bench.controller_fsync_bench
	$(PY) -m bench.broker_bench
	$(PY) -m bench.latency_bench
	$(PY) -m bench.failover_bench
	$(PY) -m bench.idle_bench
	$(PY) -m bench.peer_bench
	$(PY) -m bench.arrow_decode_bench
	$(PY) -m bench.spark_bench
	$(PY) -m bench.txn_bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
