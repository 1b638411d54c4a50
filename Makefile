# Onceflow: `make demo` runs the reference job, `make test` runs everything.
# Both set up a virtual environment in .venv on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: all install bytecode demo test check unit integration fuzz reference-suite spark-platforms bounce chaos bench check-java check-chromium reference state-diagrams clean

all: test

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# Our sources byte-compiled, as pip does for a non-editable install: Spark starts about twenty
# Python processes per run and each that imports the connector would otherwise compile it again
# (about 55 ms each; PYTHONDONTWRITEBYTECODE, set by some environments, keeps them from caching it).
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null

check-java:
	@scripts/check-java.sh

# Debian's chromium at /usr/bin/chromium, which the console's browser tests drive through Playwright
# (tests/integration/test_console.py; never "playwright install"): installed with apt-get when root.
check-chromium:
	@scripts/check-chromium.sh

# Apache Kafka (broker, tools, Java client) and Spark's JVM Kafka connector from Maven Central
# into ~/.m2, our Java programs compiled, the classpaths written to reference/target/.
reference: $(STAMP) check-java
	@scripts/check-maven.sh
	$(BIN)/python -c 'from onceflow.reference import kafka_classpath, spark_kafka_classpath; kafka_classpath(); spark_kafka_classpath()'

demo: $(STAMP) bytecode check-java
	$(BIN)/onceflow demo

# Everything but the tests marked "long" (pyproject.toml), which make reference-suite runs, and
# "platforms", which make spark-platforms runs.
test: $(STAMP) bytecode check-java check-chromium reference
	$(BIN)/python -m pytest -q -m "not long and not platforms" $(PYTEST_ARGS)

# Lint and type-check the sources (configured in pyproject.toml).
check: $(STAMP)
	$(BIN)/ruff check src
	$(BIN)/mypy

# docs/state-diagrams.md, drawn from the coordinators' transition tables (tests/unit/test_state_diagrams.py
# fails while it is stale).
state-diagrams: $(STAMP)
	$(BIN)/python scripts/state_diagrams.py

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration $(PYTEST_ARGS)

fuzz: $(STAMP)
	$(BIN)/python -m pytest -q tests/fuzz $(PYTEST_ARGS)

# The long fuzz campaign (docs/reliability.md, "Bad input at scale"): 1,000,000 inputs through the
# atheris harnesses, one after another, then 10 minutes of mutated client traffic against a broker process.
.PHONY: fuzz-long
FUZZ_LONG_ARGS ?= --runs frames=300000 --runs dispatcher=300000 --runs batches=250000 --runs recovery=150000 --seed 1
NETWORK_FUZZ_ARGS ?= --seconds 600 --seed 1
fuzz-long: $(STAMP)
	$(BIN)/python -m tests.fuzz.atheris.run $(FUZZ_LONG_ARGS)
	$(BIN)/python -m tests.fuzz.network $(NETWORK_FUZZ_ARGS)

# The long chaos campaign (docs/reliability.md): 100 kills, 20 pauses, 20 connection resets,
# 5 crashes in segment rolls and 5 in the cleaner's swap, 5 full disks (a tmpfs: root), checked.
CHAOS_ARGS ?= --seconds 900 --kills 100 --pauses 20 --resets 20 --crash-rolls 5 --crash-compactions 5 \
              --disk-fulls 5 --disk-mib 512 --seed 2026
chaos: $(STAMP)
	$(BIN)/onceflow --log-level WARNING chaos $(CHAOS_ARGS)

# The same scenarios against Onceflow and Apache Kafka, Kafka's own tools, the Java client, and the
# exactly-once sink's longer Spark scenarios against Apache Kafka too (marked "long").
reference-suite: $(STAMP) check-java reference
	$(BIN)/python -m pytest -q tests/reference $(PYTEST_ARGS)

# Kafka's exactly-once system test (TransactionalMessageCopier through SIGKILLed brokers), long:
# 30000 records, 4 copiers, 12 bounces of Onceflow; then the same records through Apache Kafka.
bounce: $(STAMP) check-java reference
	ONCEFLOW_BOUNCE_LONG=1 $(BIN)/python -m pytest -q tests/reference/test_transactions_bounce.py $(PYTEST_ARGS)

# The connector where PySpark runs besides local mode (tests marked "platforms"): a Spark standalone
# cluster (a master and two workers from the installed PySpark, on loopback) with a worker SIGKILLed
# under the running query, a Spark Connect server SIGKILLed mid-batch, and the payments pipeline as a
# Spark Declarative Pipelines project with spark-pipelines SIGKILLed mid-run; every output checked.
spark-platforms: $(STAMP) bytecode check-java
	$(BIN)/python -m pytest -q -m platforms tests/integration/spark $(PYTEST_ARGS)

bench: $(STAMP) bytecode
	$(BIN)/onceflow bench produce
	$(BIN)/onceflow bench consume

clean:
	rm -rf reference/target
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info src/*.egg-info
