#!/usr/bin/env bash
# Execute every notebook the way its documentation page shows it, on a copy of the repository.
#
# Copies the working tree (without .git, .venv and build outputs) to DEST and runs
# `nbdev-test --save` there, so the executed notebooks (with outputs) land in DEST/nbs while the
# committed notebooks stay output-free. Charts use the offline altair renderer of the IPython
# profile in scripts/docs_ipython (nbdev-test loads the profile; see its startup file), so the
# pages need no CDN. Fails loudly (non-zero exit) if any notebook fails.
# Usage (from anywhere): bash scripts/execute_nbs.sh DEST [--balanced N] [extra nbdev-test options]
# --balanced N runs N nbdev-test processes of one worker each, side by side, over groups of pages of about equal
# seconds (scripts/split_pages.py): one nbdev-test of N workers hands out the pages in name order, and the slow ones
# that come last then run alone while the other workers idle.
# Uses the virtual environment $SGATLIN_VENV (default: .venv of this repository), like scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST=${1:?usage: execute_nbs.sh DEST [--balanced N] [nbdev-test options]}; shift
GROUPS_N=0
if [ "${1:-}" = "--balanced" ]; then GROUPS_N=${2:?--balanced needs a number of processes}; shift 2; fi
if [ "$GROUPS_N" -ne 0 ]; then
  for a in "$@"; do case "$a" in --file-re|--file_re|--file-glob|--file_glob|--path|--n-workers|--n_workers)
    echo "execute_nbs.sh: --balanced chooses the pages and the workers itself; leave out $a"; exit 2 ;; esac; done
fi
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
if [ "$GROUPS_N" -eq 0 ]; then
  exec "$VENV/bin/nbdev-test" --save "$@"
fi
mapfile -t PAGE_GROUPS < <("$VENV/bin/python" "$DEST/scripts/split_pages.py" "$GROUPS_N")
[ "${#PAGE_GROUPS[@]}" -gt 0 ] || { echo "FAIL: scripts/split_pages.py gave no group of pages"; exit 1; }
pids=()
for re in "${PAGE_GROUPS[@]}"; do
  echo "== pages: $re"
  "$VENV/bin/nbdev-test" --save --file-re "$re" --n-workers 1 "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done  # every group runs to its end; any failure fails the whole
[ "$status" -eq 0 ] || echo "FAIL: nbdev-test failed in at least one group of pages (its notebooks are named above)"
exit "$status"
