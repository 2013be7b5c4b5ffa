"""Write README.md from nbs/index.ipynb with nbconvert (Quarto, which `nbdev-readme` uses, is not installable here).

    python scripts/make_readme.py          # regenerate README.md
    python scripts/make_readme.py --check  # fail if README.md differs from what index.ipynb gives

Cells marked `#| hide` are left out and `#|` directive lines are stripped, as nbdev does; links to
notebooks point into nbs/, so they work from the repository root.
"""
import re
import sys
from pathlib import Path

import nbformat
from nbconvert import MarkdownExporter

ROOT = Path(__file__).resolve().parents[1]
HEADER = "<!-- Generated from nbs/index.ipynb by scripts/make_readme.py: edit the notebook, not this file. -->\n\n"


def readme_text() -> str:
    "The README that `nbs/index.ipynb` gives."
    nb = nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4)
    cells = []
    for cell in nb.cells:
        lines = cell.source.splitlines()
        if any(re.match(r"^#\|\s*(hide\b|echo:\s*false)", l) for l in lines):  # hidden, or output only (none here)
            continue
        if cell.cell_type == "code":
            cell.source = "\n".join(l for l in lines if not l.startswith("#|")).strip("\n")
            if not cell.source:
                continue
        cells.append(cell)
    nb.cells = cells
    body, _ = MarkdownExporter().from_notebook_node(nb)
    body = re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"
    body = re.sub(r"\]\(([\w.-]+\.ipynb)\)", r"](nbs/\1)", body)  # the pages' links, from the repository root
    return HEADER + body


def main(argv: list[str]) -> int:
    text, path = readme_text(), ROOT / "README.md"
    if "--check" in argv:
        if not path.exists() or path.read_text() != text:
            print("README.md does not match nbs/index.ipynb: run `python scripts/make_readme.py` and commit.")
            return 1
        print("README.md matches nbs/index.ipynb")
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
