"Repository invariants: the README is generated from index.ipynb, and every module has a notebook."
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_matches_index_notebook():
    res = subprocess.run([sys.executable, "scripts/make_readme.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def _default_exports() -> set[str]:
    mods = set()
    for nb in (ROOT / "nbs").glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            m = re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(cell["source"]), re.M)
            if m:
                mods.add(m.group(1))
    return mods


def test_every_module_comes_from_a_notebook():
    "nbdev-export never deletes the module of a renamed notebook: catch stale modules."
    modules = {p.stem for p in (ROOT / "sgatlin_nb").glob("*.py")} - {"__init__", "_modidx"}
    assert modules == _default_exports()


def test_quarto_symlink_is_relative():
    link = ROOT / "nbs" / "_quarto.yml"
    assert link.is_symlink() and not Path(link.readlink()).is_absolute()
    assert link.resolve() == (ROOT / "_quarto.yml").resolve()
