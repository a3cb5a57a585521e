# The two commands of the README, plus their common setup step.
.PHONY: setup demo test test-unit bench

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/lakemv demo

test: setup
	.venv/bin/pytest --durations=10

# The fast tier: no JVM, no Prefect server.
test-unit: setup
	.venv/bin/pytest tests/unit

# The benchmark suite (issue 6): JSON, Markdown report and plots in bench/results/suite-<time>/.
bench: setup
	.venv/bin/python -m bench.suite --users 100000 1000000
