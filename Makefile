# The two commands of the README, plus their common setup step.
.PHONY: setup demo test test-unit bench

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/lakemv demo

# Every tier, on TEST_WORKERS processes (pytest-xdist; each has its own JVM and Prefect test API).
# Tests of an xdist_group share one worker (and its module fixtures, e.g. one CDC stack); the rest are
# handed out one by one in the order tests/conftest.py gives (the slowest first).
TEST_WORKERS ?= 2
test: setup
	.venv/bin/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=30

# The fast tier: no JVM, no Prefect server.
test-unit: setup
	.venv/bin/pytest tests/unit

# The benchmark suite (issue 6): JSON, Markdown report and plots in bench/results/suite-<time>/.
bench: setup
	.venv/bin/python -m bench.suite --users 100000 1000000
