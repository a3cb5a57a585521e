# The two commands of the README, plus their common setup step.
.PHONY: setup demo test

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/lakemv demo

test: setup
	.venv/bin/pytest
