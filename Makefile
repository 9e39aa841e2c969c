# tokensde: `make demo` (install + quick reproduction), `make test` (install + whole test suite),
# `make docs` (the documentation site into site/, built with --strict).
PY ?= python3
OUT ?= results/quick

.PHONY: setup demo test test-quick lint bench docs

setup:
	./scripts/setup.sh

demo: setup
	tokensde reproduce --quick --out $(OUT)

test: setup
	$(PY) -m pytest -q

test-quick: setup
	$(PY) -m pytest -q -m "not slow and not browser and not ray"

lint:
	ruff check src tests benchmarks diagnostics
	$(PY) -m mypy src

bench:
	$(PY) benchmarks/bench_samplers.py

docs:
	$(PY) -m mkdocs build --strict
