# The two entry points of the README. Both set up .venv first (scripts/setup.sh is idempotent).
.PHONY: setup demo test test-all

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/ddtree-generate --mode=ddtree --budget=32 --max_new_tokens=64 --prompt="$${PROMPT:-def fibonacci(n):}"

test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=25 tests

test-all: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --run-slow tests
