#!/usr/bin/env bash
# Install sgatlin_nb with its dev extra into a fresh virtual environment and run every test:
# README/index agreement, nbdev hygiene, the notebooks (nbdev-test, CPU) and pytest, which includes the
# browser check of every documentation page (tests/test_docs.py; needs /usr/bin/chromium, see .ci/run).
# Usage (from the repository root): bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SGATLIN_VENV:-.venv}
PY=${PYTHON:-python3}

echo "== creating $VENV and installing sgatlin_nb[dev]"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[dev]"
"$VENV/bin/python" -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"

export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [ -z "${SGATLIN_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export SGATLIN_DATA_DIR="$(cd ../shared/data && pwd)"; fi
echo "== SGATLIN_DATA_DIR=${SGATLIN_DATA_DIR:-<unset: tests needing data will fail>}"

echo "== README.md agrees with nbs/index.ipynb"
"$VENV/bin/python" scripts/make_readme.py --check

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -z "$(git status --porcelain)" ]; then
  echo "== nbdev-clean and nbdev-export leave the tree unchanged"
  "$VENV/bin/nbdev-clean"
  "$VENV/bin/nbdev-export"
  if [ -n "$(git status --porcelain)" ]; then
    git status --short; git diff --stat
    echo "FAIL: notebooks were not clean or sgatlin_nb/ is out of sync with nbs/ (run nbdev-clean && nbdev-export and commit)"
    exit 1
  fi
else
  echo "== (working tree has changes: skipping the nbdev hygiene check, which needs a clean tree)"
fi

echo "== nbdev-test (notebooks, CPU), on a copy of the repository that keeps the outputs for the docs check"
EXECUTED=$(mktemp -d "${TMPDIR:-/tmp}/sgatlin_executed.XXXXXX")
trap 'rm -rf "$EXECUTED"' EXIT
bash scripts/execute_nbs.sh "$EXECUTED" --n-workers 2 --timing
export SGATLIN_EXECUTED_NBS="$EXECUTED/nbs"

echo "== pytest tests (pages and screenshots of the docs check: build/docs_screenshots/)"
"$VENV/bin/python" -m pytest tests -q -p no:cacheprovider
