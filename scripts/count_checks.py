"""Count the checks of a checkout: pytest items (collected, slow tier included) and the checks in the notebooks' code
cells (`assert` statements and fastcore's `test_*` calls, read from the syntax tree, so comments and strings do not
count). Issue 67 compares the two counts before and after a change to the test suite.

    python scripts/count_checks.py [REPO]      # default: this checkout
"""
import ast
import json
import subprocess
import sys
from pathlib import Path

TEST_CALLS = {'test_eq', 'test_ne', 'test_close', 'test_fail', 'test_is', 'test_warns', 'test_eq_type', 'test_shuffled',
              'test_stdout', 'test_fig_exists'}


def notebook_checks(nbs: Path) -> dict:
    "Per notebook: the asserts and test_* calls of its code cells (cells that do not parse, e.g. magics, count 0)."
    out = {}
    for f in sorted(nbs.glob('*.ipynb')):
        n = 0
        for cell in json.loads(f.read_text())['cells']:
            if cell['cell_type'] != 'code': continue
            src = ''.join(cell['source'])
            try: tree = ast.parse('\n'.join(l for l in src.splitlines() if not l.lstrip().startswith(('%', '!'))))
            except SyntaxError: continue
            n += sum(isinstance(x, ast.Assert) or (isinstance(x, ast.Call) and isinstance(x.func, ast.Name)
                                                   and x.func.id in TEST_CALLS) for x in ast.walk(tree))
        out[f.stem] = n
    return out


def pytest_items(repo: Path) -> int:
    res = subprocess.run([sys.executable, '-m', 'pytest', 'tests', '--collect-only', '-q', '-p', 'no:cacheprovider'],
                         cwd=repo, capture_output=True, text=True, env={**__import__('os').environ, 'PYTHONPATH': str(repo)})
    line = [l for l in res.stdout.splitlines() if ' collected' in l or l.endswith('tests collected')]
    if res.returncode != 0 or not line: raise SystemExit(f"pytest could not collect in {repo}:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return int(line[-1].split()[0])


if __name__ == '__main__':
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
    nb = notebook_checks(repo / 'nbs')
    print(json.dumps({'repo': str(repo), 'pytest_items': pytest_items(repo), 'notebook_checks': sum(nb.values()),
                      'per_notebook': nb}, indent=1))
