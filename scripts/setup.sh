#!/usr/bin/env bash
# Creates .venv with a Python >= 3.12 and installs ddtree-jax with its test extras.
# Idempotent: re-running only reinstalls when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  local candidates=(python3.13 python3.12 python3)
  for c in "${candidates[@]}"; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  for p in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
    if [ -x "$p" ] && "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  return 1
}

if [ ! -x .venv/bin/python ]; then
  if ! PY=$(find_python); then
    echo "error: ddtree-jax needs Python >= 3.12 (JAX 0.11 does not support older versions)." >&2
    echo "       None was found on PATH (python3.13, python3.12, python3) or under ~/.pyenv/versions." >&2
    echo "       Install one, e.g. 'apt-get install python3.12 python3.12-venv' or 'pyenv install 3.12'." >&2
    exit 1
  fi
  echo "setup: creating .venv with $PY ($("$PY" --version))"
  "$PY" -m venv .venv
fi

stamp=.venv/.ddtree-installed
want=$(sha1sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing ddtree-jax and its dependencies into .venv (about a minute)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]"
  echo "$want" > "$stamp"
fi
