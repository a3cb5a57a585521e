# The two commands of the README, plus their common setup step.
.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/lakemv demo

test: setup
	.venv/bin/pytest

# The benchmark suite (issue 6): JSON, Markdown report and plots in bench/results/suite-<time>/.
bench: setup
	.venv/bin/python -m bench.suite --users 100000 1000000
