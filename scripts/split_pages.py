"""The pages nbdev-test runs, split into groups of about equal seconds, for `scripts/execute_nbs.sh --balanced`.

nbdev-test hands its workers the pages in name order, so the slowest pages can start last: in CI's run of 2026-12-07
92_gpu (117 s) started near the end and ran alone for about two minutes with one core idle. Here each page, slowest
first, goes to the group with the fewest seconds so far (longest processing time first), from the seconds of a measured
run kept in scripts/notebook_seconds.json; a page not listed there counts as `UNKNOWN_S`. The pages are those
nbdev-test itself would run (nbdev's `nbglob` with the project's settings), so a new page is never left out.

Usage: python scripts/split_pages.py [N]            one `--file-re` regex per line, N groups (default 2)
       python scripts/split_pages.py --update LOG   keep the seconds that LOG's `NAME.ipynb: N secs` lines give
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECONDS = ROOT / "scripts" / "notebook_seconds.json"
UNKNOWN_S = 60.0


def pages() -> list[str]:
    "The notebooks nbdev-test runs from the repository root: nbdev's own glob, with the project's settings."
    from nbdev.config import get_config
    from nbdev.doclinks import nbglob
    return sorted(Path(f).name for f in nbglob(get_config(ROOT).nbs_path))


def split(names: list[str], seconds: dict, n: int) -> list[list[str]]:
    "`names` in `n` groups: slowest first, each to the group with the fewest seconds so far."
    groups = [[] for _ in range(n)]
    load = [0.0] * n
    for name in sorted(names, key=lambda p: (-seconds.get(p, UNKNOWN_S), p)):
        i = load.index(min(load))
        groups[i].append(name)
        load[i] += seconds.get(name, UNKNOWN_S)
    return groups


def main(argv: list[str]) -> int:
    if argv[:1] == ["--update"]:
        if len(argv) != 2: sys.exit("usage: split_pages.py --update LOG")
        found = {m[1]: float(m[2]) for m in re.finditer(r"^(\S+\.ipynb): ([0-9.]+) secs$", Path(argv[1]).read_text(), re.M)}
        if not found: sys.exit(f"no 'NAME.ipynb: N secs' line in {argv[1]} (nbdev-test --timing prints them)")
        SECONDS.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
        print(f"kept the seconds of {len(found)} pages in {SECONDS}")
        return 0
    n = int(argv[0]) if argv else 2
    if n < 1: sys.exit(f"the number of groups must be at least 1, got {n}")
    seconds = json.loads(SECONDS.read_text()) if SECONDS.exists() else {}
    for group in split(pages(), seconds, n):
        if group: print("^(" + "|".join(re.escape(p[:-len(".ipynb")]) for p in sorted(group)) + r")\.ipynb$")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
