#!/usr/bin/env bash
# Install sgatlin_nb with its dev extra into a fresh virtual environment and run every test:
# README/index agreement, nbdev hygiene, the notebooks (nbdev-test, CPU) and pytest, which includes the
# browser check of every documentation page (tests/test_docs.py: headless Chromium driven by Selenium
# through chromedriver). Chromium and chromium-driver come from Debian's packages, installed here when
# missing (apt-get, through sudo unless run as root); SGATLIN_CHROMIUM / SGATLIN_CHROMEDRIVER point
# elsewhere. This is the whole test command: CI (.ci/run) runs exactly this.
# Usage (from the repository root): bash scripts/test.sh
#
# The fast tier, for developers while they work: `bash scripts/test.sh --fast` updates an installed .venv, runs the
# README and hygiene checks, the quick pages (FAST_PAGES below) and `pytest -m "not slow"` (the tests that
# tests/conftest.py's SLOW does not name), in about 6 minutes on 2 cores (363 s measured). CI runs the full tier, without --fast.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
case "${1:-}" in
  --fast) FAST=1 ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [--fast]   (got: $*)"; exit 2 ;;
esac
# the pages the fast tier runs: each takes under about 30 s alone; the full tier runs every page
FAST_PAGES='^(index|tour|results|03_complexity|06a_runs|06b_configs|06c_distributed|09_reference|10_record|90_cli|91_slurm|93_docs)\.ipynb$'

export SGATLIN_CHROMIUM=${SGATLIN_CHROMIUM:-/usr/bin/chromium}
export SGATLIN_CHROMEDRIVER=${SGATLIN_CHROMEDRIVER:-/usr/bin/chromedriver}
# Chromium installs (apt-get, in the background) while pip installs the Python packages; both are waited for below.
fail_chromium() { echo "FAIL: cannot install Chromium for the docs check: $1"; exit 1; }
APT_PID=""
if [ ! -x "$SGATLIN_CHROMIUM" ] || [ ! -x "$SGATLIN_CHROMEDRIVER" ]; then
  echo "== installing chromium and chromium-driver (Debian packages) for the docs check, beside the Python packages"
  command -v apt-get >/dev/null || fail_chromium "apt-get not found; install chromium and chromium-driver yourself, or set SGATLIN_CHROMIUM and SGATLIN_CHROMEDRIVER"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || fail_chromium "not root and sudo not found; run as root or install chromium and chromium-driver"
    SUDO=(sudo); [ -t 0 ] || SUDO=(sudo -n)  # no terminal (CI): fail instead of waiting for a password
  fi
  APT_LOG=$(mktemp "${TMPDIR:-/tmp}/sgatlin_apt.XXXXXX")
  { "${SUDO[@]}" apt-get update && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends chromium chromium-driver; } >"$APT_LOG" 2>&1 </dev/null &
  APT_PID=$!
fi
VENV=${SGATLIN_VENV:-.venv}
PY=${PYTHON:-python3}

if [ "$FAST" -eq 1 ] && "$VENV/bin/python" -c "import sgatlin_nb, nbdev, pytest" 2>/dev/null; then
  echo "== fast tier: bringing sgatlin_nb[dev] in $VENV up to date (the full tier makes $VENV afresh)"
  "$VENV/bin/python" -m pip install --quiet -e ".[dev]"
else
  echo "== creating $VENV and installing sgatlin_nb[dev]"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  # pip byte-compiles every file it installs (about 26,000, one core for about 50 s). Left to the processes instead
  # (--no-compile), each would compile what it imports from source every time where PYTHONDONTWRITEBYTECODE is set
  # (a venv installed so on such a machine held no .pyc of jax after a whole run), so pip compiles
  "$VENV/bin/python" -m pip install --quiet -e ".[dev]"
fi
# circuit-tracer's wheel alone (the library needs torch): tests/test_graph.py reads our graph files with its pydantic models
"$VENV/bin/python" -m pip download --quiet --no-deps "circuit-tracer==0.5.0" -d build/wheels
"$VENV/bin/python" -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
if [ -n "$APT_PID" ]; then
  if ! wait "$APT_PID"; then
    tail -n 5 "$APT_LOG"
    fail_chromium "apt-get install chromium chromium-driver failed (log: $APT_LOG)"
  fi
  rm -f "$APT_LOG"
  [ -x "$SGATLIN_CHROMIUM" ] && [ -x "$SGATLIN_CHROMEDRIVER" ] || fail_chromium "installed, but $SGATLIN_CHROMIUM or $SGATLIN_CHROMEDRIVER is still missing"
  echo "== chromium and chromium-driver installed"
fi
T_INSTALL=$SECONDS  # seconds since the script started (bash)

export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# the data are the samples in data/ that the repository carries; SGATLIN_DATA_DIR, if set, names another folder
echo "== data folder: ${SGATLIN_DATA_DIR:-data/, the samples of the repository}"
(cd data && sha256sum --quiet -c SHA256SUMS) || { echo "FAIL: data/ does not match data/SHA256SUMS"; exit 1; }

echo "== README.md agrees with nbs/index.ipynb"
"$VENV/bin/python" scripts/make_readme.py --check

# on a copy, so that the check runs on any tree, a developer's with changes too, and changes nothing here
echo "== nbdev-clean and nbdev-export leave the notebooks and sgatlin_nb/ unchanged (checked on a copy)"
HYGIENE=$(mktemp -d "${TMPDIR:-/tmp}/sgatlin_hygiene.XXXXXX")
tar -cf - --exclude='__pycache__' --exclude='.ipynb_checkpoints' pyproject.toml _quarto.yml nbs sgatlin_nb | tar -C "$HYGIENE" -xf -
VENV_BIN=$(cd "$VENV/bin" && pwd)
(cd "$HYGIENE" && "$VENV_BIN/nbdev-clean" && "$VENV_BIN/nbdev-export") >/dev/null
if ! diff -r -q -x '__pycache__' -x '.ipynb_checkpoints' nbs "$HYGIENE/nbs" || ! diff -r -q -x '__pycache__' sgatlin_nb "$HYGIENE/sgatlin_nb"; then
  echo "FAIL: notebooks were not clean or sgatlin_nb/ is out of sync with nbs/ (run nbdev-clean && nbdev-export and commit)"
  rm -rf "$HYGIENE"; exit 1
fi
rm -rf "$HYGIENE"

# One persistent JAX compilation cache for the whole command (the notebooks, the tests and the processes and Slurm jobs
# they start), in this clone's build folder: a program compiled once is read back everywhere else, and in later runs.
# Every program is kept, however quick its compile: the tests start hundreds of processes that compile the same small
# programs (test_bad_input alone, from an empty cache: 169 CPU-s, user and system, keeping those over 0.5 s; 155 keeping all).
# SGATLIN_JAX_CACHE names another folder.
export JAX_COMPILATION_CACHE_DIR="${SGATLIN_JAX_CACHE:-$PWD/build/jax_cache}" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
mkdir -p "$JAX_COMPILATION_CACHE_DIR"
echo "== JAX compilation cache: $JAX_COMPILATION_CACHE_DIR ($(du -sh "$JAX_COMPILATION_CACHE_DIR" | cut -f1) before this run)"

if [ "$FAST" -eq 1 ]; then
  echo "== fast tier: nbdev-test of the quick pages, then pytest -m 'not slow'"
  "$VENV/bin/nbdev-test" --file-re "$FAST_PAGES" --n-workers 2 --timing
  T_NOTEBOOKS=$SECONDS
  status=0
  "$VENV/bin/python" -m pytest tests -q -p no:cacheprovider -n 2 --no-loadscope-reorder -m "not slow" --durations=15 || status=$?
  echo "== fast tier stage times (s): install $T_INSTALL, checks and pages $((T_NOTEBOOKS - T_INSTALL)), pytest $((SECONDS - T_NOTEBOOKS)), total $SECONDS"
  [ "$status" -eq 0 ] || echo "FAIL: pytest exited with status $status"
  exit "$status"
fi

echo "== nbdev-test (notebooks, CPU), on a copy of the repository that keeps the outputs for the docs check"
EXECUTED=$(mktemp -d "${TMPDIR:-/tmp}/sgatlin_executed.XXXXXX")
NB_LOG="$EXECUTED.log"
trap 'rm -rf "$EXECUTED" "$NB_LOG"' EXIT
# --timing prints "NAME.ipynb: N secs" per notebook as each finishes, and --cell-timing-min every cell slower than 30 s;
# the log (pipefail keeps nbdev-test's exit status through tee) is sorted, slowest first, below.
# Two nbdev-test processes side by side, over halves of the pages of about equal seconds (scripts/split_pages.py, from
# the seconds in scripts/notebook_seconds.json; `python scripts/split_pages.py --update LOG` keeps a new run's).
bash scripts/execute_nbs.sh "$EXECUTED" --balanced 2 --timing --cell-timing-min 30 2>&1 | tee "$NB_LOG"
echo "== notebooks, slowest first (seconds)"
grep -E '^[^ ]+\.ipynb: [0-9.]+ secs$' "$NB_LOG" | sed -E 's/^(.+): ([0-9.]+) secs$/\2 \1/' | sort -k1,1nr | awk '{printf "%8.0f  %s\n", $1, $2}' || true
echo "== cells slower than 30 s, slowest first (seconds)"
grep -E '^[^ ]+\.ipynb:[^ ]+: [0-9.]+s$' "$NB_LOG" | sed -E 's/^(.+): ([0-9.]+)s$/\2 \1/' | sort -k1,1nr | awk '{printf "%8.1f  %s\n", $1, $2}' || true
export SGATLIN_EXECUTED_NBS="$EXECUTED/nbs"
T_NOTEBOOKS=$SECONDS

echo "== pytest tests (pages, processed by nbdev as for the site, and their screenshots: build/docs_screenshots/)"
# two workers, each module's tests together and the Slurm modules in one group, slowest groups first (tests/conftest.py)
status=0
"$VENV/bin/python" -m pytest tests -q -p no:cacheprovider -n 2 --no-loadscope-reorder \
  --durations=30 || status=$?  # and the 30 slowest tests
echo "== stage times (s): install and checks $T_INSTALL, notebooks $((T_NOTEBOOKS - T_INSTALL)), pytest $((SECONDS - T_NOTEBOOKS)), total $SECONDS"
[ "$status" -eq 0 ] || echo "FAIL: pytest exited with status $status"
exit "$status"
