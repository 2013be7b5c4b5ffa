#!/usr/bin/env bash
# Build the documentation site into _docs/ where Quarto is installed (https://quarto.org/docs/get-started/;
# these machines have no Quarto: tests/test_docs.py checks the pages with nbconvert and Chromium instead).
#
# The committed notebooks have no outputs, so a site built from them would show no results and no
# charts. This script therefore
#   1. executes every notebook on a copy of the repository (scripts/execute_nbs.sh: nbdev-test --save)
#      with the IPython profile in scripts/docs_ipython, whose altair renderer inlines vega-embed, so
#      every chart draws with no CDN, offline or behind a firewall;
#   2. runs nbdev-docs in that copy with the same profile (its show_doc fix lets nbdev document
#      nnx.Modules and forward references), which processes the notebooks (nbdev-proc-nbs) and renders
#      them with Quarto;
#   3. copies the site to _docs/ here. Nothing tracked changes.
# Usage (from anywhere): [N_WORKERS=2] bash scripts/docs.sh [DEST]
#   DEST: where the executed copy goes (default: a temp dir); N_WORKERS: notebooks executed at once
# Look at it with: python3 -m http.server -d _docs
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV=${SGATLIN_VENV:-.venv}
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
if ! command -v quarto >/dev/null; then
  echo "FAIL: Quarto is not installed (nbdev-docs would try to install it with sudo): see https://quarto.org/docs/get-started/"
  exit 1
fi
DEST=${1:-$(mktemp -d "${TMPDIR:-/tmp}/sgatlin_docs.XXXXXX")}
bash "$ROOT/scripts/execute_nbs.sh" "$DEST" --n-workers "${N_WORKERS:-2}"
cd "$DEST"
echo "== nbdev-docs in $DEST"
IPYTHONDIR="$DEST/scripts/docs_ipython" "$VENV/bin/nbdev-docs"
rm -rf "$ROOT/_docs"
cp -r "$DEST/_docs" "$ROOT/_docs"
echo "== the site is in $ROOT/_docs (open _docs/index.html through a web server)"
