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


NOTEBOOKS = sorted((ROOT / "nbs").glob("*.ipynb"))


def test_every_notebook_opens_with_a_title_and_a_one_line_summary():
    "nbdev turns the first cell into the page's title and description: `# Title`, a blank line, `> summary`."
    for nb in NOTEBOOKS:
        first = json.loads(nb.read_text())["cells"][0]
        src = "".join(first["source"])
        assert first["cell_type"] == "markdown" and re.fullmatch(r"# [^\n]+\n\n> [^\n]+\n?", src), \
            f"{nb.name} must open with a markdown cell '# Title\\n\\n> one-line summary', not {src[:120]!r}"


# Sidebar sections of _quarto.yml by notebook number: 00-03, 04-08, 09-89, 90-99.
SIDEBAR_SECTIONS = [("The layer", 0, 4), ("Training & scaling", 4, 9), ("Interpretability", 9, 90),
                    ("Running at scale", 90, 93), ("Appendix: how these pages are made", 93, 100)]


def test_sidebar_lists_every_notebook_once_in_order():
    import yaml
    contents = yaml.safe_load((ROOT / "_quarto.yml").read_text())["website"]["sidebar"]["contents"]
    assert contents[:3] == ["index.ipynb", "tour.ipynb", "results.ipynb"], \
        "the landing page, the tour and the results page open the sidebar"
    assert [s["section"] for s in contents[3:]] == [name for name, _, _ in SIDEBAR_SECTIONS]
    for sec, (name, lo, hi) in zip(contents[3:], SIDEBAR_SECTIONS):
        want = [p.name for p in NOTEBOOKS if p.name[:2].isdigit() and lo <= int(p.name[:2]) < hi]
        assert sec["contents"] == want, f"sidebar section {name!r} lists {sec['contents']}, nbs/ has {want}"
    listed = contents[:3] + [nb for sec in contents[3:] for nb in sec["contents"]]
    assert sorted(listed) == sorted(p.name for p in NOTEBOOKS), "every notebook in nbs/ appears once in the sidebar"


def test_no_private_name_crosses_a_module():
    "Helpers shared by modules are public: no `from .module import _name` in the package."
    offenders = []
    for f in sorted((ROOT / "sgatlin_nb").glob("*.py")):
        text = f.read_text()
        for m in re.finditer(r"^from \.\w+ import (\([^)]*\)|[^\n]*)", text, re.M):
            names = re.findall(r"\b\w+\b", m.group(1))
            offenders += [f"{f.name}: {n}" for n in names if n.startswith("_")]
    assert not offenders, offenders


def test_the_package_imports_without_the_notebook_tools():
    "A plain `pip install .` has no IPython or fastcore.test helpers of the pages: no exported module may need them."
    import subprocess, sys
    modules = sorted(p.stem for p in (ROOT / "sgatlin_nb").glob("*.py") if p.stem not in ("__init__", "_modidx"))
    code = ("import sys\nfor name in ('IPython', 'ipykernel', 'nbdev', 'execnb'): sys.modules[name] = None\n"
            + "".join(f"import sgatlin_nb.{m}\n" for m in modules))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert res.returncode == 0, res.stderr[-2000:]


LAB_PHRASES = re.compile(r"\b(on |of )?this machine\b|\bour machine\b|\bopen item\b|\bour last run\b|\bload average\b"
                         r"|\bthe issue (asked|says|wants)\b|\bthis session\b|\bas requested\b", re.I)


def _prose_cells(nb: dict):
    "The cells a reader sees as prose: Markdown, and code cells that render Markdown without showing their code."
    for i, c in enumerate(nb["cells"]):
        text = "".join(c["source"])
        if c["cell_type"] == "markdown" or (c["cell_type"] == "code" and re.match(r"#\| echo: false", text)):
            yield i, text


def test_no_lab_notebook_phrases_in_prose():
    "The site is a tutorial: its prose speaks to a reader, not about the machine or the work that made it."
    found = [f"{p.name} cell {i}: {m.group(0)!r}" for p in NOTEBOOKS for i, text in _prose_cells(json.loads(p.read_text()))
             for m in LAB_PHRASES.finditer(text)]
    assert not found, found


def test_lab_phrase_check_can_fail():
    "The phrase check finds what it is meant to find (a check that never fires proves nothing)."
    nb = {"cells": [{"cell_type": "markdown", "source": ["Measured on this machine."]},
                    {"cell_type": "code", "source": ["#| echo: false\n", "Markdown(f'the load average was {x}')"]},
                    {"cell_type": "code", "source": ["print('this machine')  # code shown as code is not prose"]}]}
    hits = [m.group(0) for _, text in _prose_cells(nb) for m in LAB_PHRASES.finditer(text)]
    assert hits == ["on this machine", "load average"], hits


def _undocumented_methods(module, notebook_text: str) -> list[str]:
    "Public methods and properties of the classes `module` defines that its notebook never passes to `show_doc`."
    import inspect
    missing = []
    for name, cls in vars(module).items():
        if not inspect.isclass(cls) or cls.__module__ != module.__name__ or name.startswith("_"):
            continue
        for meth, v in vars(cls).items():
            if not meth.startswith("_") and (inspect.isfunction(v) or isinstance(v, (classmethod, staticmethod, property))) \
                    and f"show_doc({name}.{meth})" not in notebook_text:
                missing.append(f"{name}.{meth}")
    return missing


def test_every_public_method_has_an_api_entry():
    "nbdev documents exported classes and functions by itself, methods only through an explicit `show_doc(Class.method)`."
    import importlib
    missing = []
    for nb in NOTEBOOKS:
        text = nb.read_text()
        m = re.search(r"#\|\s*default_exp\s+(\w+)", text)
        if m:
            missing += [f"{nb.name}: {x}" for x in _undocumented_methods(importlib.import_module(f"sgatlin_nb.{m.group(1)}"), text)]
    assert not missing, f"add a `show_doc(Class.method)` cell after the class for: {missing}"


def test_method_check_can_fail():
    import types
    mod = types.ModuleType("fake")
    exec("class A:\n    def f(self): pass\n    def _g(self): pass\n    @property\n    def p(self): return 1", mod.__dict__)
    assert _undocumented_methods(mod, "show_doc(A.f)") == ["A.p"]


def _readme_reports(text: str) -> list[tuple[str, str]]:
    "Each `<!-- report: FILE -->` block of benchmarks/README.md: (the results file, the text of its code block)."
    return re.findall(r"<!-- report: (\S+) -->\n```\n(.*?)\n```\n<!-- /report -->", text, re.S)


def test_benchmark_readme_shows_its_results_file():
    "The numbers in benchmarks/README.md are the report of a results file the benchmark wrote, not typed by hand."
    blocks = _readme_reports((ROOT / "benchmarks" / "README.md").read_text())
    assert blocks, "benchmarks/README.md has no report block"
    for path, shown in blocks:
        assert (ROOT / path).exists(), f"{path}, named in benchmarks/README.md, is missing"
        res = subprocess.run([sys.executable, "benchmarks/layer_bench.py", "--report", path], cwd=ROOT,
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert shown == res.stdout.rstrip("\n"), (f"benchmarks/README.md's block for {path} is not what "
                                                  f"`python benchmarks/layer_bench.py --report {path}` prints")


def test_benchmark_report_check_can_fail():
    text = "<!-- report: r.json -->\n```\nfwd+bwd 2.9x\n```\n<!-- /report -->\n"
    assert _readme_reports(text) == [("r.json", "fwd+bwd 2.9x")]
    assert _readme_reports(text.replace("```\n<!-- /report", "<!-- /report")) == []


def _parameter_problems(nb: dict) -> list[str]:
    """What stops a notebook's papermill parameters from doing what they say.

    A parameter that a later cell redefines (a `def`, `class` or import of the same name) is silently replaced, so
    `if run_x:` would test a function; and a page with `#| gpu` cells must offer `run_full = False`, the one switch
    the README tells a GPU user to turn on."""
    import ast
    tagged = [i for i, c in enumerate(nb["cells"]) if "parameters" in c["metadata"].get("tags", [])]
    params = {n.targets[0].id: getattr(n.value, "value", None) for i in tagged
              for n in ast.parse("".join(nb["cells"][i]["source"])).body
              if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    problems = []
    for c in nb["cells"][tagged[0] + 1:] if tagged else []:
        if c["cell_type"] != "code":
            continue
        src = "\n".join(l for l in "".join(c["source"]).splitlines() if not l.lstrip().startswith(("%", "!")))
        for node in ast.parse(src).body:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
                [(a.asname or a.name).split(".")[0] for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            problems += [f"parameter {n} is redefined by a later cell" for n in names if n in params]
    has_gpu = any(c["cell_type"] == "code" and re.match(r"#\|\s*gpu\b", "".join(c["source"])) for c in nb["cells"])
    if has_gpu and params.get("run_full", True) is not False:
        problems.append("has #| gpu cells but no `run_full = False` parameter")
    return problems


def test_notebook_parameters_do_what_they_say():
    found = [f"{p.name}: {msg}" for p in NOTEBOOKS for msg in _parameter_problems(json.loads(p.read_text()))]
    assert not found, found


def test_parameter_check_can_fail():
    def nb(*cells):
        return {"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]} if i == 0 else {}, "source": [s]}
                          for i, s in enumerate(cells)]}
    assert _parameter_problems(nb("run_sweep = False", "def run_sweep(x): pass", "if run_sweep: run_sweep(1)")) == \
        ["parameter run_sweep is redefined by a later cell"]
    assert _parameter_problems(nb("retrain = False", "from m import run_full as retrain")) == \
        ["parameter retrain is redefined by a later cell"]
    assert _parameter_problems(nb("run_paper = False", "#| gpu\nif run_paper: pass")) == \
        ["has #| gpu cells but no `run_full = False` parameter"]
    assert _parameter_problems(nb("run_full = False", "#| gpu\nif run_full: pass")) == []


def _lint_workflows(*paths) -> subprocess.CompletedProcess:
    "check-jsonschema against the GitHub workflow schema it ships (no network)."
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           *map(str, paths)], cwd=ROOT, capture_output=True, text=True)


def test_workflows_are_valid(tmp_path):
    "Both GitHub Actions workflows validate; a broken one (a misspelt `steps`, a job without `runs-on`) does not."
    workflows = [ROOT / ".github" / "workflows" / name for name in ("test.yml", "deploy.yml")]
    assert all(p.exists() for p in workflows), workflows
    res = _lint_workflows(*workflows)
    assert res.returncode == 0, res.stdout + res.stderr
    text = (ROOT / ".github" / "workflows" / "test.yml").read_text()
    for broken, why in [(text.replace("    steps:", "    stepz:"), "'stepz' was unexpected"),
                        (text.replace("    runs-on: ubuntu-latest\n", ""), "'runs-on' is a required property")]:
        assert broken != text
        bad = tmp_path / "broken.yml"
        bad.write_text(broken)
        res = _lint_workflows(bad)
        assert res.returncode != 0 and why in res.stdout + res.stderr, res.stdout + res.stderr


def test_the_data_samples_travel_with_the_repository():
    "Every file of data/ is listed in data/SHA256SUMS with its hash and in data/README.md; the package finds the folder unaided."
    import hashlib
    import os
    data = ROOT / "data"
    listed = dict(reversed(line.split(None, 1)) for line in (data / "SHA256SUMS").read_text().splitlines())
    present = {str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()} - {"SHA256SUMS", "README.md"}
    assert set(listed) == present, set(listed) ^ present
    for name, digest in listed.items():
        assert hashlib.sha256((data / name).read_bytes()).hexdigest() == digest, f"data/{name} changed"
    readme = (data / "README.md").read_text()
    assert all(Path(name).name.split(".")[0] in readme for name in listed), "a file without a source and licence"
    env = {k: v for k, v in os.environ.items() if k != "SGATLIN_DATA_DIR"}
    found = subprocess.run([sys.executable, "-c", "from sgatlin_nb.data import data_root; print(data_root())"],
                           capture_output=True, text=True, env=env, cwd="/", check=True).stdout.strip()
    assert Path(found) == data, found


def test_every_shell_script_parses():
    "`bash -n` on every shell script of the repository (a stray quote once stopped scripts/test.sh halfway)."
    scripts = sorted({*ROOT.glob("scripts/*.sh"), *ROOT.glob("benchmarks/*.sh"), ROOT / ".ci" / "run"})
    assert len(scripts) >= 3
    for s in scripts:
        res = subprocess.run(["bash", "-n", str(s)], capture_output=True, text=True)
        assert res.returncode == 0, f"{s.relative_to(ROOT)}: {res.stderr}"


def test_every_slow_entry_names_a_test():
    "Each entry of conftest's SLOW names a test module, or a module and one of its test functions: a renamed test leaves none stale."
    import ast
    from conftest import SLOW
    stale = []
    for key in SLOW:
        module, _, name = key.partition("::")
        path = Path(__file__).parent / f"{module}.py"
        if not path.exists(): stale.append(key); continue
        if name and name not in {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}:
            stale.append(key)
    assert not stale, f"conftest.SLOW names tests that do not exist: {stale}"


def test_the_fast_tier_leaves_out_exactly_the_slow_tests():
    "`pytest -m 'not slow'` collects every test but those SLOW names, and those are all marked."
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "slow",
                          str(Path(__file__).parent / "test_train_resume.py"), str(Path(__file__).parent / "test_sbatch_quoting.py")],
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent)
    chosen = [l for l in res.stdout.splitlines() if "::" in l]
    assert chosen and all(l.startswith("tests/test_train_resume.py::") for l in chosen), res.stdout[-2000:]
    assert {l.split("::")[1].split("[")[0] for l in chosen} == {
        "test_mirrored_run_killed_then_resumed_on_an_empty_node", "test_sigterm_saves_the_step_reached_then_resume_matches",
        "test_sigkill_then_resume_matches_uninterrupted_run"}, chosen


def reading_path_breaks(pages: dict[str, str], order: list[str]) -> list[str]:
    """Where the reading path breaks: each page but the last must close with a `Next:` link to the page after it in
    `order` (the sidebar's), and the last must have none. `pages` maps a page to the text of its markdown cells."""
    breaks = []
    for i, page in enumerate(order):
        nexts = re.findall(r"^Next:.*?\]\(([^)#]+\.ipynb)", pages[page], re.M)
        want = order[i + 1:i + 2]
        if nexts[-1:] != want: breaks.append(f"{page}: Next -> {nexts[-1:] or 'nothing'}, the sidebar's next page is {want or 'none'}")
    return breaks


def _sidebar_order() -> list[str]:
    import yaml
    contents = yaml.safe_load((ROOT / "_quarto.yml").read_text())["website"]["sidebar"]["contents"]
    return contents[:3] + [nb for sec in contents[3:] for nb in sec["contents"]]


def _markdown(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_every_page_links_next_to_the_page_after_it():
    "The reading path is whole: each page's closing `Next:` link names the sidebar's next page, and the last page has none."
    order = _sidebar_order()
    pages = {p: _markdown(ROOT / "nbs" / p) for p in order}
    assert not reading_path_breaks(pages, order), "\n".join(reading_path_breaks(pages, order))
    # the check can fail: a skipped page, a link that points back, and a last page that points on are each found
    skipped = dict(pages, **{order[3]: f"Next: [x]({order[5]})"})
    assert reading_path_breaks(skipped, order) == [f"{order[3]}: Next -> ['{order[5]}'], the sidebar's next page is ['{order[4]}']"]
    assert reading_path_breaks(dict(pages, **{order[-1]: f"Next: [x]({order[0]})"}), order)


def test_every_page_after_the_index_ends_with_a_recap():
    "The index says every page after it ends with a recap: each notebook but the index has a `## Recap` section."
    missing = [p.name for p in NOTEBOOKS if p.name != "index.ipynb" and "## Recap" not in _markdown(p)]
    assert not missing, f"pages without a '## Recap' section: {missing}"
