# The two commands of the README. Both set up a fresh machine first (scripts/setup.sh).
.PHONY: setup demo test test-fast bench

setup:
	./scripts/setup.sh

demo: setup
	.venv/bin/ttsfarm -v demo

test: setup
	.venv/bin/python -m pytest -q -n 3 --dist loadfile --durations=30

test-fast: setup
	.venv/bin/python -m pytest -q -n 3 --dist loadfile -m "not slow"
