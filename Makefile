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

# the quick set: every test not marked slow (browser and Ray tests included), on every core
# (pytest-xdist); prints its wall and CPU time. CI sets TOKENSDE_QUICK_CPU_BUDGET_S (.ci/run).
test: setup
	$(PY) scripts/timed.py --label "quick test set" $(if $(TOKENSDE_QUICK_CPU_BUDGET_S),--cpu-budget $(TOKENSDE_QUICK_CPU_BUDGET_S)) -- \
		$(PY) -m pytest -q -m "not slow" -n auto --dist loadgroup

test-slow:
	$(PY) -m pytest -q -m slow -n auto --dist loadgroup

test-all: setup
	$(PY) -m pytest -q -n auto --dist loadgroup

lint:
	ruff check src tests benchmarks diagnostics scripts
	$(PY) -m mypy src

bench:
	$(PY) benchmarks/bench_samplers.py

docs:
	$(PY) -m mkdocs build --strict
