# SiftStream: the two front-door commands are `make run` and `make test`.
# Both set everything up themselves (virtual environment, Python packages, JVM jars, broker)
# and are idempotent: a second call reuses what the first one installed or fetched.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# the stamp changes when pyproject.toml does, so dependency changes reinstall
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: setup jars run serve package test test-unit bench fuzz lint clean down

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "==> installing Python packages into $(VENV) (pip's cache makes repeats fast)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

jars: setup
	@$(BIN)/siftstream infra jars > /dev/null

## the whole pipeline on the built-in default: broker, topics, workload, jobs, summary
run: jars
	$(BIN)/siftstream run

## every job continuously with live demo feeds; the dashboard and /metrics at http://127.0.0.1:8080/ (Ctrl-C stops)
serve: jars
	$(BIN)/siftstream serve --demo

## dist/siftstream.zip, the project for a Spark cluster's executors (siftstream submit: docs/guide/cluster.md)
package: setup
	$(BIN)/siftstream package

## every test: unit, Spark, Kafka integration, standalone-cluster and fault tiers (services start and stop inside)
test: jars
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## only the pure tests (no JVM, no broker): seconds
test-unit: setup
	$(BIN)/python -m pytest tests/unit routing schemas producers -q

## benchmarks: each prints its workload and numbers (several minutes, best on a quiet machine)
bench: jars
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/producers.py
	$(BIN)/python bench/matching.py
	$(BIN)/python bench/matching_e2e.py
	$(BIN)/python bench/qos_accuracy.py
	$(BIN)/python bench/qos_predict_scale.py
	$(BIN)/python bench/qos_job.py
	$(BIN)/python bench/distribution.py
	$(BIN)/python bench/placement.py

## the fuzz targets, a million inputs in all (docs/guide/fuzzing.md; coverage-guided with .[fuzz] installed)
fuzz: setup
	$(BIN)/python bench/fuzz.py --all --runs 125000

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy routing schemas

down:
	-@$(BIN)/siftstream infra spark-down
	-@$(BIN)/siftstream infra down

clean: down
	rm -rf .siftstream dist
