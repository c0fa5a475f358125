# mirrorflow: the two commands of the README are `make demo` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
CONFIG ?= include/config/mm2.properties
# The Spark provider depends on pyspark-client (Spark Connect only), which installs into
# the same `pyspark` namespace as the full distribution; the full one is reinstalled last.
PYSPARK_VERSION := 4.2.0
export PATH := $(BIN):$(PATH)
export PYSPARK_PYTHON := $(BIN)/python
export GX_ANALYTICS_ENABLED := false

# JVM classpaths of jvm/pom.xml (Kafka broker, MirrorMaker 2), one folder per Maven profile
# so that their Kafka clients never meet; mirrorflow's own Kafka range source for Spark
# (jvm/connector) goes inside the package, which a wheel carries (PACKAGE_JARS).
JVM_DIR := $(CURDIR)/.jvm
JVM_PROFILES := broker mm2
PACKAGE_JARS := include/mirrorflow/jars
MVN ?= mvn -q -B -Dstyle.color=never

.PHONY: install jvm test lint demo down clean bench soak airflow airflow-db screenshots
# Local Airflow (standalone, SQLite) for `make demo` and `make airflow`; tests use their own.
AIRFLOW_LOCAL_HOME := $(CURDIR)/.airflow
DEMO_DAG := mirror__primary__backup
demo airflow airflow-db: export AIRFLOW_HOME = $(AIRFLOW_LOCAL_HOME)
demo airflow airflow-db: export AIRFLOW__CORE__DAGS_FOLDER = $(CURDIR)/dags
demo airflow airflow-db: export AIRFLOW__CORE__PLUGINS_FOLDER = $(CURDIR)/plugins
demo airflow airflow-db: export AIRFLOW__CORE__LOAD_EXAMPLES = False
demo airflow airflow-db: export AIRFLOW_CONN_SPARK_DEFAULT = {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}
demo airflow airflow-db: export MIRRORFLOW_CONFIG = $(CURDIR)/$(CONFIG)
# The scheduler's task processes inherit mirrorflow's imports (docs/deployment.md).
airflow: export AIRFLOW__SCHEDULER__MP_START_METHOD = forkserver
airflow: export AIRFLOW__CORE__MP_FORKSERVER_PRELOAD = mirrorflow.airflow.preload

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[dev,lineage]' -c constraints.txt
	$(BIN)/python -m pip install --no-deps --force-reinstall pyspark==$(PYSPARK_VERSION)
	touch $@

$(JVM_DIR)/.fetched: jvm/pom.xml
	@for profile in $(JVM_PROFILES); do \
	  rm -rf $(JVM_DIR)/$$profile; \
	  $(MVN) -f jvm/pom.xml -P $$profile dependency:copy-dependencies \
	    -DoutputDirectory=$(JVM_DIR)/$$profile || exit 1; \
	done
	touch $@

# mirrorflow's Kafka range source for Spark (jvm/connector, format "mirrorflow-kafka"), built
# with its JUnit tests: the jar and its runtime classpath (kafka-clients, without what PySpark's
# jars/ already has) in the package's jars/, rebuilt when a file of the module changes.
CONNECTOR_FILES := jvm/connector/pom.xml $(shell find jvm/connector/src -type f 2>/dev/null)
$(PACKAGE_JARS)/.built: $(CONNECTOR_FILES)
	$(MVN) -f jvm/connector/pom.xml clean verify
	rm -rf $(PACKAGE_JARS)
	mkdir -p $(PACKAGE_JARS)
	cp jvm/connector/target/mirrorflow-connector-0.jar jvm/connector/target/classpath/*.jar $(PACKAGE_JARS)/
	touch $@

jvm: $(JVM_DIR)/.fetched $(PACKAGE_JARS)/.built

install: $(VENV)/.installed jvm

lint: install
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest

airflow-db: install
	$(BIN)/airflow db migrate > /dev/null
	$(BIN)/airflow pools set mirrorflow_spark 2 "Spark jobs of mirrorflow" > /dev/null

# Local clusters, a filled demo topic, one run of the flow's DAG, and its report.
demo: airflow-db
	$(BIN)/mirrorflow demo $(CONFIG)
	@echo "running DAG $(DEMO_DAG) with 'airflow dags test' (log: .airflow/demo-run.log)"
	$(BIN)/airflow dags test $(DEMO_DAG) > $(AIRFLOW_LOCAL_HOME)/demo-run.log 2>&1
	$(BIN)/mirrorflow report $(CONFIG) --flow 'primary->backup'

# Airflow standalone on http://localhost:8080 with this project's DAGs and local clusters.
airflow: airflow-db
	$(BIN)/mirrorflow local up $(CONFIG)
	AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True $(BIN)/airflow standalone

down:
	$(BIN)/mirrorflow local down $(CONFIG)

clean: down
	rm -rf .mirrorflow .airflow reports .pytest_cache .ruff_cache .jvm $(PACKAGE_JARS)

bench: install
	$(BIN)/python bench/run_bench.py

# mirrorflow as a service: Airflow standalone, 4 flows on 3 local clusters, load, a broker
# outage (SOAK_MINUTES, SOAK_CONTINUOUS_MINUTES, SOAK_REPEAT_SECONDS, SOAK_RATE; writes
# bench/soak.json).
soak: install
	$(BIN)/python bench/soak.py

# README pictures (docs/img/): Airflow standalone + headless Chromium (apt-get install chromium).
screenshots: install
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	$(BIN)/python docs/screenshots.py
