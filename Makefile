# tokensde: `make demo` (install + quick reproduction), `make test` (install + the quick test set),
# `make test-slow` (the long statistical checks, which CI runs too), `make docs` (the documentation
# site into site/, built with --strict).
PY ?= python3
OUT ?= results/quick

.PHONY: setup demo test test-slow test-all lint bench docs

setup:
	./scripts/setup.sh

demo: setup
	tokensde reproduce --quick --out $(OUT)

# the quick set: every test not marked slow (browser and Ray tests included); about 3 minutes
test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow:
	$(PY) -m pytest -q -m slow

test-all: setup
	$(PY) -m pytest -q

lint:
	ruff check src tests benchmarks diagnostics
	$(PY) -m mypy src

bench:
	$(PY) benchmarks/bench_samplers.py

docs:
	$(PY) -m mkdocs build --strict
