#!/usr/bin/env bash
# Execute every notebook the way its documentation page shows it, on a copy of the repository.
#
# Copies the working tree (without .git, .venv and build outputs) to DEST and runs
# `nbdev-test --save` there, so the executed notebooks (with outputs) land in DEST/nbs while the
# committed notebooks stay output-free. Charts use the offline altair renderer of the IPython
# profile in scripts/docs_ipython (nbdev-test loads the profile; see its startup file), so the
# pages need no CDN. Fails loudly (non-zero exit) if any notebook fails.
# Usage (from anywhere): bash scripts/execute_nbs.sh DEST [extra nbdev-test options]
# Uses the virtual environment $SGATLIN_VENV (default: .venv of this repository), like scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST=${1:?usage: execute_nbs.sh DEST [nbdev-test options]}; shift
VENV=${SGATLIN_VENV:-.venv}
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
echo "== copying $ROOT to $DEST"
tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude="./${VENV#"$ROOT"/}" --exclude=./build --exclude=./_proc \
    --exclude=./_docs --exclude=./runs --exclude='*.egg-info' --exclude=./.pytest_cache --exclude='__pycache__' --exclude='.ipynb_checkpoints' \
    -cf - . | tar -C "$DEST" -xf -
cd "$DEST"
export IPYTHONDIR="$DEST/scripts/docs_ipython"
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# no progress bars on the pages: in JupyterLab a bar is a widget that runs to 100%, but executed here it would stay on
# the static page as a line of text (tqdm reads TQDM_DISABLE; the CLI and the library keep their bars)
export TQDM_DISABLE=1
echo "== nbdev-test --save in $DEST (executed notebooks: $DEST/nbs)"
"$VENV/bin/nbdev-test" --save "$@"
