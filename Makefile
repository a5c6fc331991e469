# The two entry points of the README. Both set up .venv first (scripts/setup.sh is idempotent).
.PHONY: setup demo test test-e2e test-all

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/ddtree-generate --mode=ddtree --budget=32 --max_new_tokens=64 --prompt="$${PROMPT:-def fibonacci(n):}"

# --max-worker-restart=0: a test that hangs is failed by pytest-timeout (pyproject.toml) by ending its xdist
# worker; a replacement worker would be handed the same test again (up to 8 times, 10 minutes each).
# Three tiers (tests/conftest.py): `test` skips the tests marked e2e (end-to-end through processes, notebooks and
# training runs) and slow; `test-e2e` runs only the e2e ones (CI runs it after `test`); `test-all` runs everything.
PYTEST = .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --max-worker-restart=0

test: setup
	$(PYTEST) --durations=25 tests

test-e2e: setup
	$(PYTEST) --durations=10 --run-e2e -m e2e tests

test-all: setup
	$(PYTEST) --run-slow --run-e2e tests
