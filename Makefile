# The two commands of the README, plus their common setup step.
.PHONY: setup demo test test-unit bench

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/lakemv demo

# Every tier, on TEST_WORKERS processes (pytest-xdist; each has its own JVM and Prefect test API).
TEST_WORKERS ?= 2
test: setup
	.venv/bin/pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1 --durations=10

# The fast tier: no JVM, no Prefect server.
test-unit: setup
	.venv/bin/pytest tests/unit

# The benchmark suite (issue 6): JSON, Markdown report and plots in bench/results/suite-<time>/.
bench: setup
	.venv/bin/python -m bench.suite --users 100000 1000000
