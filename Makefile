# The two entry points of the README. Both set up .venv first (scripts/setup.sh is idempotent).
.PHONY: setup demo test test-all

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/ddtree-generate --mode=ddtree --budget=32 --max_new_tokens=64 --prompt="$${PROMPT:-def fibonacci(n):}"

# --max-worker-restart=0: a test that hangs is failed by pytest-timeout (pyproject.toml) by ending its xdist
# worker; a replacement worker would be handed the same test again (up to 8 times, 10 minutes each).
test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --max-worker-restart=0 --durations=25 tests

test-all: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --max-worker-restart=0 --run-slow tests
