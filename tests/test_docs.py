"""Every documentation page, checked in a browser as the site shows it.

Quarto is not installable here, so the pages are built by the same first step as `nbdev-docs`, and an
approximation of the last one: each notebook, executed as the docs build executes it (outputs kept, charts
drawn by the offline renderer of scripts/docs_ipython), goes through nbdev's own notebook processing
(`nbdev.serve.proc_nbs`, what `nbdev-proc-nbs` runs before Quarto: nbdev directives removed, `#| hide` and
exported cells left out, `show_doc` rendered), then Quarto's share is done here (title block from the front
matter, the cell options `echo`/`output`/`include` applied) and nbconvert renders the page, its math typeset by
a local copy of MathJax (the `jupyter-server-mathjax` package). Selenium drives headless Chromium through
Debian's chromedriver with the network cut off. A page passes when it loaded (its title is the notebook's
`# Title`), no output is an error or a traceback, no raw `$$` or `#|` text is left in its prose or code, every
formula was typeset, every chart of the notebook drew marks (and no vega error text), and neither the page nor
any chart is blank in the screenshot. Pages and screenshots are kept in build/docs_screenshots/.

Nor may a page show what a reader should never see (`shown_problems`). Only outputs are read, as the browser shows
them (text of each code cell's output area, scripts aside, and of its table cells); sources and prose are what the
author wrote, so `NaN` in code, `/tmp` in a code example or "inf" in a sentence are left alone. Seven kinds:
  - repr: a Python object's default repr, `<function f at 0x7f...>` or any `<... at 0x...>`, also with the address
    stripped (`<function f>`, `<bound method ...>`, `<x.Y object>`), a page's own class named `__main__.X`,
    show_doc signatures included, or a dataclass or Flax state printed whole (`FFWConfig(kind=...`, `State({`);
  - path: a folder of the machine that built the page: the executed copy (.../sgatlin_executed...), the repository,
    the data folder ($SGATLIN_DATA_DIR), the home folder (caches), and the temporary folder (a page's own scratch
    folder, /tmp/tmpXXXXXXXX, means nothing to a reader: show the path relative to it);
  - float: a number written with more than 6 significant digits (0.123456789, 100000000000.0) in what a cell prints or
    writes as text (streams, Markdown, plain text; an HTML table's cells are pandas' formatting): round it;
  - warning: a `RuntimeWarning` in any output (stderr included);
  - nan: a table cell (HTML or Markdown table of an output) reading NaN, inf, -inf, Infinity, <NA> or NaT, alone or
    within a formatted value ("nan %"); show_doc's parameter tables are exempt (a default of inf is a signature);
  - ansi: a terminal colour code (ESC[...m) in an output's raw text, which the page draws as faint coloured text;
  - signature: in a show_doc entry, a class written as a function (`def SparselyGatedLinear(`: the package's classes
    are CamelCase, its functions snake_case), a bare `(*args, **kwargs)`, or a private module path (`jax._src.x`):
    what nbs/93_docs.ipynb's renderer mends.
A cell whose output is meant to show one of these says so with a cell tag (cell metadata "tags", which nbdev-clean
keeps): `expect-repr`, `expect-path`, `expect-float`, `expect-warning`, `expect-nan`, `expect-ansi` or `expect-signature`; that kind is then not checked in that cell's
outputs. Use it only where the page really means it (a page that shows how NaN is reported, say).

Executed notebooks come from $SGATLIN_EXECUTED_NBS (scripts/test.sh sets it to the copy its
nbdev-test step ran in); otherwise this session executes them itself with scripts/execute_nbs.sh.
"""
import base64
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupyter_server_mathjax
import nbformat
import numpy as np
import pytest
import yaml
from jinja2 import DictLoader
from nbconvert import HTMLExporter
from nbconvert.preprocessors import TagRemovePreprocessor
from nbdev.config import get_config
from nbdev.test import nb_test_cells
from PIL import Image

from conftest import start_chromium

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb"))
SHOTS = ROOT / "build" / "docs_screenshots"
WIDTH = 1280
# MathJax 2 as nbconvert's template configures it, loaded from the package instead of a CDN.
MATHJAX_URL = (Path(jupyter_server_mathjax.__file__).parent / "static" / "MathJax.js").as_uri() + "?config=TeX-AMS-MML_HTMLorMML-full,Safe"


@pytest.fixture(scope="session")
def executed_nbs(tmp_path_factory) -> Path:
    "The folder of executed notebooks: $SGATLIN_EXECUTED_NBS, else executed now (slow: every notebook)."
    if os.environ.get("SGATLIN_EXECUTED_NBS"):
        d = Path(os.environ["SGATLIN_EXECUTED_NBS"])
        if not d.is_dir():
            pytest.fail(f"SGATLIN_EXECUTED_NBS={d} is not a folder")
        return d
    dest = tmp_path_factory.mktemp("executed_repo")
    with open(dest / "execute_nbs.log", "w") as log:  # a notebook that fails is reported by its page's test
        subprocess.run(["bash", str(ROOT / "scripts" / "execute_nbs.sh"), str(dest), "--n-workers", "2"],
                       stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    return dest / "nbs"


@pytest.fixture(scope="session")
def processed_nbs(executed_nbs, request) -> Path:
    """The executed notebooks after nbdev's docs processing, in `_proc/` of their repository copy.

    Only the notebooks whose pages this pytest session checks are processed (all of them for the full suite)."""
    repo = executed_nbs.parent
    assert (repo / "pyproject.toml").exists(), f"{executed_nbs} is not the nbs/ of a repository copy (scripts/execute_nbs.sh makes one)"
    items = request.session.items
    names = {it.callspec.params["name"] for it in items if "name" in getattr(getattr(it, "callspec", None), "params", {})}
    if any(it.originalname == "test_processing_documents_every_export" for it in items):
        names = set(NOTEBOOKS)
    env = {**os.environ, "IPYTHONDIR": str(repo / "scripts" / "docs_ipython"), "JAX_PLATFORMS": "cpu"}
    file_re = "^(" + "|".join(re.escape(n) for n in sorted(names)) + ")$"
    code = "import sys; from nbdev.serve import proc_nbs; proc_nbs(n_workers=2, file_re=sys.argv[1])"
    res = subprocess.run([sys.executable, "-c", code, file_re], cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    # A notebook that fails here fails its own page's test (its _proc copy is missing), not every page.
    (repo / "proc_nbs.log").write_text(f"exit code {res.returncode}\n{res.stdout}\n{res.stderr}")
    return repo / "_proc"


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp('chromium_profile'), width=WIDTH)
    yield driver
    driver.quit()


# Waits (up to 60 s) until every chart container holds a drawing or an error and MathJax is done, then reports.
PAGE_REPORT_JS = """return (async () => {
  const charts = () => [...document.querySelectorAll('.altair-offline')];
  const settled = el => el.querySelector('svg, canvas, .error');
  const t0 = Date.now();
  while (charts().some(el => !settled(el)) && Date.now() - t0 < 60000) await new Promise(r => setTimeout(r, 100));
  if (window.MathJax?.Hub) await new Promise(r => MathJax.Hub.Queue(r));
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const textOf = (el, skip) => {  // visible text of el without its `skip` descendants
    const c = el.cloneNode(true);
    c.querySelectorAll(skip).forEach(n => n.remove());
    return c.textContent;
  };
  const prose = [...document.querySelectorAll('.jp-RenderedMarkdown')].map(el => textOf(el, 'code, pre, script, style'));
  const code = [...document.querySelectorAll('.jp-InputArea pre, .jp-RenderedMarkdown pre')].map(el => el.textContent);
  return {
    title: document.title,
    h1: [...document.querySelectorAll('h1')].map(h => h.textContent.replace('¶', '').trim()),
    traceback: document.body.innerText.includes('Traceback (most recent call last)'),
    raw_math: prose.filter(t => t.includes('$$')).map(t => t.slice(Math.max(0, t.indexOf('$$') - 60), t.indexOf('$$') + 60)),
    raw_directives: [...prose, ...code].flatMap(t => t.split('\\n')).filter(l => /(^|\\s)#\\|/.test(l)),
    math: document.querySelectorAll('script[type^="math/tex"]').length,
    math_errors: document.querySelectorAll('.MathJax_Error, .merror, [class*="merror"]').length,
    errors: window.__pageErrors,
    height: Math.ceil(document.documentElement.scrollHeight),
    charts: charts().map(el => {
      const r = el.getBoundingClientRect();
      return {id: el.id, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
              error: el.querySelector('.error')?.textContent ?? null,
              marks: el.querySelectorAll('svg [role="graphics-symbol"]').length + el.querySelectorAll('canvas').length};
    }),
  };
})()"""


def _title(nb) -> str:
    src = nb.cells[0].source if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    return src.splitlines()[0].lstrip("# ").strip() if src.startswith("# ") else ""


def _text(out) -> str:
    if out.output_type == "stream":
        return out.text
    return "".join(str(v) for v in out.get("data", {}).values())


def _inked(img: Image.Image) -> float:
    "Fraction of pixels that are not (near-)white."
    return float((np.asarray(img.convert("L")) < 245).mean())


_CELL_OPTION = re.compile(r"^#\|\s*([\w-]+)\s*:\s*(.*?)\s*$")
_PANDOC_ATTRS = re.compile(r"(\]\([^)]*\))\{[^}]*\}")  # [text](url){target="_blank" ...}: Quarto reads the braces


def site_layout(nb):
    "What Quarto does with a processed notebook, as far as the page check needs: title block, cell options."
    cells = []
    for c in nb.cells:
        src = c.get("source")
        if not src:  # nbdev removed it (hidden, exported) or it is empty
            continue
        if c.cell_type == "raw" and src.startswith("---"):  # front matter: Quarto's title block
            fm = yaml.safe_load(src.strip().strip("-"))
            c = nbformat.v4.new_markdown_cell(f"# {fm['title']}" + (f"\n\n{fm['description']}" if fm.get("description") else ""))
        elif c.cell_type == "code":
            lines, opts = src.splitlines(), {}
            while lines and (m := _CELL_OPTION.match(lines[0])):
                opts[m[1]] = m[2].strip("\"'")
                lines.pop(0)
            if opts.get("include") == "false":
                continue
            c.source = "\n".join(lines)
            if opts.get("echo") == "false" or not c.source.strip():
                c.metadata["tags"] = [*c.metadata.get("tags", []), "remove_input"]
            if opts.get("output") == "false":
                c.outputs = []
            for o in c.outputs:
                if "text/markdown" in o.get("data", {}):
                    o.data["text/markdown"] = _PANDOC_ATTRS.sub(r"\1", o.data["text/markdown"])
        cells.append(c)
    nb.cells = cells
    return nb


# nbconvert's lab page, with no script from a CDN: MathJax comes from the package (which ships the STIX-Web fonts
# only, so MathJax is told to use them), and require.js, mermaid and the widget manager (which no page uses) are left out.
PAGE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{% block html_head_js_mathjax %}{{ super() }}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null}});
</script>
{% endblock %}
{% block html_head_js_requirejs %}{% endblock %}
{% block html_head_js_mermaidjs %}{% endblock %}
{% block jupyter_widgets %}{% endblock %}
"""


def render_page(nb, title: str) -> str:
    "The page's HTML: nbconvert's lab template, offline, with local MathJax."
    exporter = HTMLExporter(template_name="lab", template_file="site_page.html.j2", mathjax_url=MATHJAX_URL,
                            extra_loaders=[DictLoader({"site_page.html.j2": PAGE_TEMPLATE})])
    exporter.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}), enabled=True)
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return html


def test_site_layout_and_render_page():
    "The Quarto share of the build, on a small processed notebook: the title block, hidden input, options gone, math local."
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_raw_cell('---\ntitle: A page\ndescription: "What it is"\noutput-file: a.html\n---\n'),
        nbformat.v4.new_markdown_cell("Math: $$y = x^2$$"),
        nbformat.v4.new_code_cell("#| echo: false\n#| output: asis\nshow_doc(f)", outputs=[nbformat.v4.new_output(
            "execute_result", {"text/markdown": '[source](https://x.org/f.py){target="_blank"}\n\n### f', "text/plain": "f"})]),
        nbformat.v4.new_code_cell("#| include: false\nsecret = 1"),
        nbformat.v4.new_code_cell("#| output: false\nx = 2\nx", outputs=[nbformat.v4.new_output("execute_result", {"text/plain": "2"})]),
        nbformat.v4.new_code_cell("#| code-fold: show\ny = 3"),
    ])
    nb.cells.insert(1, nbformat.v4.new_code_cell())  # a cell nbdev emptied
    laid = site_layout(nb)
    assert [c.cell_type for c in laid.cells] == ["markdown", "markdown", "code", "code", "code"]
    assert laid.cells[0].source == "# A page\n\nWhat it is"
    assert laid.cells[2].metadata["tags"] == ["remove_input"] and "{target" not in laid.cells[2].outputs[0].data["text/markdown"]
    assert laid.cells[3].source == "x = 2\nx" and laid.cells[3].outputs == []
    assert laid.cells[4].source == "y = 3"
    html = render_page(laid, "A page")
    assert "show_doc(f)" not in html and "secret" not in html and "#|" not in html and "{target" not in html
    assert MATHJAX_URL in html and not re.findall(r'<script[^>]*src="https?:', html), "the page loads a script from the network"
    assert Path(MATHJAX_URL.split("?")[0].removeprefix("file://")).is_file()


def executed_page(executed_nbs, name: str):
    "The executed notebook `name` (as nbformat reads it), failing if the notebook stage did not write it."
    path = executed_nbs / name
    assert path.exists(), f"{path} is missing: the executed notebooks are incomplete"
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_page_renders_in_a_browser(name, executed_nbs, processed_nbs, browser):
    src_nb = nbformat.read(ROOT / "nbs" / name, as_version=4)
    path = executed_nbs / name
    assert path.exists(), f"{path} is missing: the executed notebooks are incomplete"
    nb = nbformat.read(path, as_version=4)
    code = lambda n: [c.source for c in n.cells if c.cell_type == "code"]
    assert code(nb) == code(src_nb), f"{path} is stale: its code differs from nbs/{name}; execute the notebooks again"
    ran = {c.id for c in nb_test_cells(path, get_config().tst_flags.split()) if c.metadata.get("execution")}
    should_run = {c.id for c in nb_test_cells(ROOT / "nbs" / name, get_config().tst_flags.split())}
    assert ran == should_run, (f"{path} was not executed (or not to the end): {len(ran)} of {len(should_run)} cells ran; "
                               f"see the log of nbdev-test --save ({executed_nbs.parent / 'execute_nbs.log'} when pytest ran it)")

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, f"{name}: error outputs: {[e.ename + ': ' + e.evalue for e in errors]}"
    assert not [o for o in outputs if "Traceback (most recent call last)" in _text(o)], f"{name}: an output is a traceback"
    cdn_charts = [o for o in outputs if any(k.startswith("application/vnd.vegalite") for k in o.get("data", {}))
                  or "cdn.jsdelivr.net/npm/vega" in _text(o)]
    assert not cdn_charts, f"{name}: charts were rendered without the offline renderer (IPYTHONDIR=scripts/docs_ipython)"

    title = _title(src_nb)
    assert title, f"{name} does not start with a '# Title' markdown cell"
    proc_path = processed_nbs / name
    assert proc_path.exists(), f"{proc_path} is missing: nbdev's processing failed:\n{_proc_log(processed_nbs)}"
    proc = nbformat.read(proc_path, as_version=4)
    for c in proc.cells:  # execnb's timing metadata is not valid nbformat (floats): not part of the page anyway
        c.metadata.pop("execution", None)
    page_nb = site_layout(proc)
    n_charts = sum(_text(o).count('class="altair-offline"') for c in page_nb.cells if c.cell_type == "code" for o in c.outputs)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = SHOTS / f"{Path(name).stem}.html"
    html = render_page(page_nb, title)
    page.write_text(html, encoding="utf-8")
    check_source_links(name, html, executed_nbs)
    if n_charts:  # the chart library, one file for the whole site (scripts/docs_ipython writes it where the pages ran)
        shutil.copy(executed_nbs / "vega-bundle.js", SHOTS / "vega-bundle.js")
    weight = sum(len(_text(o)) for c in page_nb.cells if c.cell_type == "code" for o in c.outputs)
    assert weight < PAGE_WEIGHT, f"{name}: its outputs weigh {weight / 1e6:.1f} MB; a page must stay under 1 MB (thin its charts)"

    browser.get(page.as_uri())
    rep = browser.execute_script(PAGE_REPORT_JS)
    heading = title.replace("`", "")  # the h1 shows inline code without its backticks
    assert rep["title"] == title and heading in rep["h1"], f"{name}: page did not load as expected: {rep['title']!r}, {rep['h1']}"
    assert not rep["traceback"], f"{name}: the page shows a traceback"
    assert rep["errors"] == [], f"{name}: uncaught JavaScript errors (None: the error hook did not run): {rep['errors']}"
    assert not rep["raw_directives"], f"{name}: directive lines left on the page: {rep['raw_directives'][:5]}"
    assert not rep["raw_math"], f"{name}: untypeset math on the page: {rep['raw_math'][:3]}"
    has_math = any(re.search(r"\$\$|\$[^$\s][^$\n]*\$", c.source) for c in page_nb.cells if c.cell_type == "markdown")
    assert rep["math"] > 0 or not has_math, f"{name}: its prose has math but MathJax typeset none"
    assert rep["math_errors"] == 0, f"{name}: MathJax could not typeset {rep['math_errors']} formulas"
    assert len(rep["charts"]) == n_charts, f"{name}: {n_charts} chart outputs but {len(rep['charts'])} charts on the page"
    for ch in rep["charts"]:
        assert ch["error"] is None, f"{name}: chart {ch['id']} failed: {ch['error']}"
        assert ch["marks"] > 0 and ch["w"] > 50 and ch["h"] > 50, f"{name}: chart {ch['id']} drew nothing: {ch}"

    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                   "clip": {"x": 0, "y": 0, "width": WIDTH, "height": rep["height"], "scale": 1}})
    png = base64.b64decode(shot["data"])
    (SHOTS / f"{Path(name).stem}.png").write_bytes(png)
    img = Image.open(io.BytesIO(png))
    assert _inked(img) > 0.01, f"{name}: the screenshot is blank"
    for ch in rep["charts"]:
        box = tuple(round(v) for v in (ch["x"], ch["y"], ch["x"] + ch["w"], ch["y"] + ch["h"]))
        assert _inked(img.crop(box)) > 0.005, f"{name}: chart {ch['id']} is blank in the screenshot"
    problems = shown_problems(page_nb, browser.execute_script(SHOWN_JS), build_folders(executed_nbs))
    assert not problems, (f"{name}: the page shows what no page should (tag the cell expect-repr/-path/-warning/-nan "
                          f"only where it is meant):\n" + "\n".join(p[2] for p in problems))


def check_source_links(name: str, html: str, executed_nbs: Path):
    """Every API entry's `[source]` link opens the site's page of its module (written where the pages ran, and copied
    beside the screenshots' pages) at the line that defines the entry: the line holds the entry's name."""
    for href, heading in re.findall(r'<a\b[^>]*href="([^"]*)"[^>]*>\s*source\s*</a>.*?<h\d\b[^>]*>(.*?)<', html, re.S):
        own = re.fullmatch(r"source/(\w+)\.html(?:#L-(\d+))?", href)
        assert own, f"{name}: a [source] link that does not open the site's own source page: {href}"
        target = executed_nbs / "source" / f"{own[1]}.html"
        assert target.is_file(), f"{name}: {href} names no page of the site ({target} is missing)"
        (SHOTS / "source").mkdir(parents=True, exist_ok=True)  # also when this test runs alone
        shutil.copy(target, SHOTS / "source" / target.name)
        if own[2]:
            assert f'id="L-{own[2]}"' in target.read_text(), f"{name}: {href}: no such line on the page"
            line = (ROOT / "sgatlin_nb" / f"{own[1]}.py").read_text().splitlines()[int(own[2]) - 1]
            entry = re.sub(r"<[^>]+>", "", heading).strip().split(".")[-1]
            assert entry in line, f"{name}: {href} opens line {own[2]}, {line.strip()!r}, not the entry {entry!r}"


# What each code cell's outputs show in the browser (document order, one entry per code cell): the output area's
# text without scripts and styles (a chart's spec is not shown; its drawn labels are), and the text of its table cells.
SHOWN_JS = """return [...document.querySelectorAll('.jp-CodeCell')].map(cell => {
  const out = cell.querySelector('.jp-OutputArea');
  if (!out) return {text: '', table_cells: []};
  const c = out.cloneNode(true);
  c.querySelectorAll('script, style').forEach(n => n.remove());
  return {text: c.textContent, table_cells: [...out.querySelectorAll('td, th')].map(td => td.textContent.trim())};
})"""

EXPECT_TAG = {"repr": "expect-repr", "path": "expect-path", "float": "expect-float", "warning": "expect-warning",
              "nan": "expect-nan", "ansi": "expect-ansi", "signature": "expect-signature"}
_REPR = re.compile(r"<[^<>\n]*(?:<[^<>\n]*>[^<>\n]*)* at 0x[0-9a-fA-F]+>"  # <function <lambda> at 0x7f...> too
                   r"|<(?:function|bound method|built-in function|built-in method) [^<>\n]*(?:<[^<>\n]*>[^<>\n]*)*>"
                   r"|<[\w.]+ object>"
                   r"|\b__main__\.\w+"  # a page's own class by the name nbdev's kernel gives it (`__main__.TopK`)
                   r"|\b[A-Z]\w*\((?:[a-z_]\w*=|\{)")  # a dataclass or a Flax state printed whole: FFWConfig(kind=..., State({


class _LongFloats:
    "Numbers written with more than 6 significant digits (leading zeros, the point, thousands commas and exponent aside)."
    _number = re.compile(r"(?<![\w.])[-+]?(?:\d[\d,]*\.\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")

    def finditer(self, text):
        for m in self._number.finditer(text):
            digits = re.sub(r"[eE][-+]?\d+$", "", m[0].lstrip("+-")).replace(",", "").replace(".", "")
            if len(digits.lstrip("0")) > 6: yield m
_FLOAT = _LongFloats()
_WARNING = re.compile(r"\bRuntimeWarning\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colour codes: the page draws them as faint coloured text
_SIGNATURE = re.compile(r"\bdef [A-Z]\w*\(|\(\s*\*args, \*\*kwargs\s*\)|\b[A-Za-z]\w*(?:\.\w+)*\._[A-Za-z]\w*\.")


def _raw_text(outputs) -> str:
    "The text a cell's outputs carry before rendering (streams, text/* data, tracebacks): where ANSI codes are still visible."
    parts = []
    for o in outputs:
        parts += [o.get("text", "")] + [str(v) for k, v in o.get("data", {}).items() if k.startswith("text/")] + list(o.get("traceback", []))
    return "".join(parts)
def _written_text(outputs) -> str:
    "What a cell printed or wrote as text: streams, Markdown, and plain text where no HTML stands for it (a table's is HTML)."
    parts = []
    for o in outputs:
        data = o.get("data", {})
        parts += [o.get("text", ""), data.get("text/markdown", "")]
        if "text/html" not in data and not any(k.startswith("image/") or "vega" in k for k in data): parts.append(data.get("text/plain", ""))
    return "".join("".join(p) if isinstance(p, list) else p for p in parts)
_MISSING = re.compile(r"(?<![\w.])[-+]?(?:nan|inf|infinity)(?![\w.-])|<NA>|(?<!\w)(?-i:NaT)(?!\w)", re.IGNORECASE)


def build_folders(executed_nbs: Path | None = None) -> list[str]:
    "The folders of the machine that builds the pages: none belongs on a page."
    dirs = {str(ROOT), str(Path.home()), os.environ.get("SGATLIN_DATA_DIR", ""), tempfile.gettempdir()}
    if executed_nbs is not None:
        dirs.add(str(executed_nbs.resolve().parent))
    return sorted(d.rstrip("/") for d in dirs if d.strip("/"))


def _path_re(folders) -> re.Pattern:
    alts = [re.escape(d) + r"(?![\w.-])" for d in sorted(folders, key=len, reverse=True)]
    return re.compile(r"(?<![\w.~/-])(?:" + "|".join(alts) + r")|sgatlin_executed")


def _snippet(text: str, m: re.Match, width: int = 60) -> str:
    return " ".join(text[max(0, m.start() - width):m.end() + width].split())


def shown_problems(page_nb, shown: list[dict], folders: list[str]) -> list[tuple[int, str, str]]:
    """What the page's outputs show that a page must not (see the module's docstring): (code cell, kind, line).

    `shown` is SHOWN_JS's report on the rendered `page_nb`: one entry per code cell, in order."""
    code = [c for c in page_nb.cells if c.cell_type == "code"]
    assert len(code) == len(shown), f"{len(code)} code cells but {len(shown)} on the page"
    path_re, found = _path_re(folders), []
    for i, (cell, out) in enumerate(zip(code, shown)):
        tags = set(cell.metadata.get("tags", []))
        where = f"code cell {i} ({(cell.source.splitlines() or [''])[0][:50]!r})"
        text = out["text"]
        checks = [("repr", _REPR, [text]), ("path", path_re, [text]), ("float", _FLOAT, [_written_text(cell.get("outputs", []))]),
                  ("warning", _WARNING, [text]),
                  ("ansi", _ANSI, [_raw_text(cell.get("outputs", []))])]
        if not re.search(r"\bshow_doc\(", cell.source):
            checks.append(("nan", _MISSING, out["table_cells"]))
        else:
            checks.append(("signature", _SIGNATURE, [text]))
        for kind, pat, texts in checks:
            if EXPECT_TAG[kind] in tags:
                continue
            hits = [(t, m) for t in texts for m in pat.finditer(t)]
            if hits:
                more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
                found.append((i, kind, f"{where}: {kind}: {_snippet(*hits[0])!r}{more}"))
    return found


def test_source_links_are_checked(tmp_path):
    "check_source_links passes a link to the right line of a module's page and fails a dead link, a missing page or a wrong line."
    import inspect
    from sgatlin_nb.data import into_place
    from sgatlin_nb.docs import write_source_pages
    write_source_pages(tmp_path / "source")
    line = inspect.getsourcelines(into_place)[1] + 1  # below the decorator
    page = lambda href: f'<p><a href="{href}" target="_blank">source</a></p>\n<h3 id="into_place">into_place</h3>'
    check_source_links("ok", page(f"source/data.html#L-{line}"), tmp_path)
    for bad in (f"/blob/main/sgatlin_nb/data.py#L{line}", f"source/nowhere.html#L-{line}", f"source/data.html#L-{line + 3}"):
        with pytest.raises(AssertionError):
            check_source_links("bad", page(bad), tmp_path)


def test_shown_problems_are_caught(browser, tmp_path):
    "Each thing a page must not show is caught in a rendered page, and the cell tag that expects it lets it be."
    import pandas as pd
    table = pd.DataFrame({"loss": [0.5, float("nan")], "ratio": [float("-inf"), 1.0]}).to_html()
    ok_table = pd.DataFrame({"loss": [0.5, 0.25], "note": ["inference", "Inf. budget"]}).to_html()
    out = lambda text, name="stdout": [nbformat.v4.new_output("stream", name=name, text=text)]
    html = lambda h: [nbformat.v4.new_output("execute_result", {"text/html": h, "text/plain": "table"})]
    md = lambda m: [nbformat.v4.new_output("display_data", {"text/markdown": m, "text/plain": "md"})]
    bad = {  # kind: outputs
        "repr": html("<pre>f=&lt;function relu at 0x7f3a2b1c&gt;, k: __main__.TopK</pre>"),
        "path": out("checkpoint written to /tmp/sgatlin_executed.x1y2/runs/a, scratch in /tmp/tmpk2j4x9qz/r\n"),
        "float": out("loss 0.123456789 after {100000000000.0: 3}\n"),
        "warning": out("/x/numpy/core/_methods.py:48: RuntimeWarning: invalid value encountered\n", "stderr"),
        "nan": html(table),
        "ansi": out("params\n  \x1b[38;2;79;201;177mkernel\x1b[0m: (2, 3)\n"),
        "signature": md("```python\ndef SparselyGatedLinear(\n    dtype:jax._src.numpy.scalar_types._ScalarMeta=float32\n):\n```"),
    }
    cells = [nbformat.v4.new_markdown_cell("# Checks\n\nNaN and inf in prose, a path `/tmp/run` in an example.")]
    source = lambda kind: "show_doc(SparselyGatedLinear)" if kind == "signature" else ""  # only show_doc entries are read for it
    for kind, outputs in bad.items():
        cells.append(nbformat.v4.new_code_cell(f"{source(kind)}  # shows a {kind}", outputs=outputs))
    for kind, outputs in bad.items():  # the same, meant
        cells.append(nbformat.v4.new_code_cell(f"{source(kind)}  # means a {kind}", outputs=outputs,
                                               metadata={"tags": [EXPECT_TAG[kind]]}))
    n = 2 * len(bad)
    cells += [  # what is fine (code, prose, relative paths, words), but for a computed Markdown table's nan (cell n + 1)
        # and the repr in a show_doc signature (cell n + 2; its parameter table's default of inf is fine), and a
        # class printed by code that is not a show_doc entry (cell n + 4)
        nbformat.v4.new_code_cell("x = float('nan')  # NaN in code\nout = '/tmp/run'", outputs=html(ok_table)),
        nbformat.v4.new_code_cell("", outputs=md("| step | loss |\n|---|---|\n| 1 | nan % |"),
                                  metadata={"tags": ["remove_input"]}),
        nbformat.v4.new_code_cell("show_doc(train)", outputs=md("### train\n\n| | Default |\n|--|--|\n| max_steps | inf |\n\n"
                                                                ">      train (f=<function relu at 0x7f00>)")),
        nbformat.v4.new_code_cell("print(rel)", outputs=out("runs/tmp/a, see https://x.org/tmp/b, /tmpfs not a path; jax 0.10.2, "
                                                               "loss 0.123457, 1,234,567 tokens, 6.4e+12 FLOPs\n")),
        nbformat.v4.new_code_cell("print(raw)", outputs=out("def SparselyGatedLinear(\n    dtype:jax._src.numpy.scalar_types._ScalarMeta=float32\n")),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    page = tmp_path / "checks.html"
    page.write_text(render_page(nb, "Checks"), encoding="utf-8")
    browser.get(page.as_uri())
    found = shown_problems(nb, browser.execute_script(SHOWN_JS), build_folders())
    assert [f[:2] for f in found] == [*enumerate(bad), (n + 1, "nan"), (n + 2, "repr")], found
    lines = [f[2] for f in found]
    assert "relu at 0x7f3a2b1c" in lines[0] and "(and 1 more)" in lines[0] and "/tmp/sgatlin_executed" in lines[1], lines
    assert "(and 2 more)" in lines[1] and "0.123456789" in lines[2] and "(and 1 more)" in lines[2], lines
    assert "-inf" in lines[4] and "(and 1 more)" in lines[4], lines


def _proc_log(processed_nbs: Path) -> str:
    "nbdev's processing log: its exit code, then the last 5,000 characters of its output (warnings can make it long)."
    log = (processed_nbs.parent / "proc_nbs.log").read_text()
    head, _, rest = log.partition("\n")
    return f"{head}\n{rest[-5000:]}"


def test_processing_documents_every_export(processed_nbs):
    "nbdev's processing (what nbdev-docs runs before Quarto) succeeds and gives every notebook that exports code its API entries."
    assert _proc_log(processed_nbs).startswith("exit code 0\n"), f"nbdev's notebook processing failed:\n{_proc_log(processed_nbs)}"
    for name in NOTEBOOKS:
        proc = nbformat.read(processed_nbs / name, as_version=4)
        src = nbformat.read(ROOT / "nbs" / name, as_version=4)
        if any(re.match(r"#\|\s*export", c.source) for c in src.cells if c.cell_type == "code"):
            docs = [c for c in proc.cells if c.cell_type == "code" and "show_doc(" in (c.get("source") or "") and c.get("outputs")]
            assert docs, f"_proc/{name}: no show_doc output for its exported symbols"


# An entry's `[source]` link and the heading after it, as SiteRenderer writes them on a processed page.
_ENTRY_LINK = re.compile(r"\[source\]\(source/(\w+)\.html(?:#L-(\d+))?\)(?:\{[^}\n]*\})?\s*#+ ([\w.]+)")


def misdirected_source_links(nb, own_module: str | None) -> list[str]:
    """The API entries of a processed page whose `[source]` link opens a module that does not define the entry's name,
    or another module where the page's own module (its `default_exp`) defines it: the link nbdev gives a name two modules
    define (`MoE.apply_gates` on 02 and 08c, `submit` on 90 and 91), looked up by the bare name."""
    from sgatlin_nb._modidx import d
    defined = {}
    for mod, syms in d["syms"].items():
        for sym in syms: defined.setdefault(sym.removeprefix(f"{mod}."), set()).add(mod.removeprefix("sgatlin_nb."))
    bad = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            for m in _ENTRY_LINK.finditer("".join(o.get("data", {}).get("text/markdown", ""))):
                module, name = m[1], m[3]
                where = defined.get(name, set())
                if (where and module not in where) or (own_module in where and module != own_module):
                    bad.append(f"{name}: links source/{module}.html, defined in {', '.join(sorted(where))}")
    return bad


def test_misdirected_source_links_are_caught():
    "An entry linked to the other module of a shared name is caught; its own module's link, or an unknown name's, is not."
    out = lambda md: nbformat.v4.new_output("display_data", {"text/markdown": md})
    cell = nbformat.v4.new_code_cell("show_doc(x)", outputs=[
        out('---\n\n[source](source/baselines.html#L-214){target="_blank"}\n\n### MoE.apply_gates\n\n```python\n'),
        out('---\n\n[source](source/hf_modeling.html#L-240){target="_blank"}\n\n### MoE.apply_gates\n'),
        out('[source](source/cli.html#L-5)\n\n### submit\n'), out('[source](source/data.html)\n\n### not_ours\n')])
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert misdirected_source_links(nb, "hf_modeling") == ["MoE.apply_gates: links source/baselines.html, defined in baselines, hf_modeling"]
    assert misdirected_source_links(nb, "slurm") == ["submit: links source/cli.html, defined in cli, slurm"]


def _as_page_code(f):
    "A copy of function `f` as nbdev's run of its page defines it: the same code, in `__main__`."
    import types
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__qualname__, g.__module__, g.__doc__, g.__kwdefaults__ = f.__qualname__, "__main__", f.__doc__, f.__kwdefaults__
    return g


def test_shared_name_links_its_own_module():
    "A page's own symbol whose bare name two modules define (91's `submit`, 06's `train`; 90's command shares both) links its own module (imports the training module: under 10 s on 2 cores)."
    from nbdev.doclinks import NbdevLookup
    import sgatlin_nb.slurm, sgatlin_nb.train
    from sgatlin_nb.docs import SiteRenderer, definition_line, source_url
    for module, f in [("slurm", sgatlin_nb.slurm.submit), ("train", sgatlin_nb.train.train)]:
        page = _as_page_code(f)
        assert "sgatlin_nb/cli.py" in NbdevLookup().code(page.__qualname__)  # nbdev's link, by the bare name: the other module
        md = SiteRenderer(page)._repr_markdown_()
        assert f"[source]({source_url(module, definition_line(module, f.__qualname__))})" in md, md
        assert not misdirected_source_links(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            "show_doc(f)", outputs=[nbformat.v4.new_output("display_data", {"text/markdown": md})])]), module)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_entry_outputs_link_their_own_module(name, processed_nbs):
    "Each API entry on a processed page links the source of the module that defines it (the page's own, for a name two modules define)."
    path = processed_nbs / name
    assert path.exists(), f"{path} is missing: nbdev's processing failed:\n{_proc_log(processed_nbs)}"
    own = next((m[1] for c in nbformat.read(ROOT / "nbs" / name, as_version=4).cells
                if c.cell_type == "code" and (m := re.match(r"#\|\s*default_exp\s+(\w+)", c.source))), None)
    bad = misdirected_source_links(nbformat.read(path, as_version=4), own)
    assert not bad, f"{name}: API entries linked to another module's source:\n" + "\n".join(bad)


def _anchor(heading: str) -> str:
    "The id Pandoc (so Quarto) gives a heading: formatting dropped, then only letters, digits, `_-.`, spaces as hyphens."
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\s.-]", "", text.replace("`", "").replace("*", "")).strip().lower()
    text = re.sub(r"\s+", "-", text)
    return re.sub(r"^[^a-z]+", "", text) or "section"


def test_links_between_pages_resolve():
    "Every link from one page to another (`NAME.ipynb`, `NAME.ipynb#anchor`, `#anchor`) names a page and a heading that exist."
    pages = {name: nbformat.read(ROOT / "nbs" / name, as_version=4) for name in NOTEBOOKS}
    anchors = {name: {_anchor(line.lstrip("#")) for c in nb.cells if c.cell_type == "markdown"
                      for line in c.source.splitlines() if re.match(r"#{1,6} ", line)} for name, nb in pages.items()}
    links, broken = 0, []
    for name, nb in pages.items():
        for c in nb.cells:
            if c.cell_type != "markdown": continue
            for target in re.findall(r"\]\(([^)\s]+)\)", c.source):
                if re.match(r"[a-z]+:", target): continue  # another site
                links += 1
                page, _, anchor = target.partition("#")
                page = page or name
                if page not in pages: broken.append(f"{name}: {target} (no page {page})")
                elif anchor and anchor not in anchors[page]: broken.append(f"{name}: {target} (no heading #{anchor} in {page})")
    print(f"{links} links between pages checked")
    assert links > 100 and not broken, broken


# ---- Defect kinds a reader found on the pages (issue 71), each checked so that it cannot return unseen ----

# The checks a page shows (`test_eq`, `test_close`, `test_fail` ...) are code a reader copies too: a page imports them in
# a shown cell like any other name. Pages that still import them in a hidden cell only (page: names), each a finding for
# the page's owner; delete an entry once its page is done (the check fails on an entry whose page no longer needs it).
# None left: 07 and results were the last two (commit 61d8720).
TEST_ONLY_PENDING: dict[str, set[str]] = {}
# Pages whose visible cells still read other names bound only in a cell whose source the page does not show (page: names):
# findings for the page's owner to fix (bind them in a shown cell), then delete.
KNOWN_HIDDEN_NAMES: dict[str, set[str]] = {}
_SHOW_DOC_LINE = re.compile(r"^show_doc", re.M)  # nbdev's `clean_show_doc`: such a cell's source is not on the page
_FLAG_LINE = re.compile(r"^#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$")


def _cell_flags(src: str) -> dict:
    "A code cell's nbdev directives and Quarto options (`#| hide`, `#| echo: false`), read from its first lines."
    flags = {}
    for line in src.splitlines():
        if m := _FLAG_LINE.match(line.strip()): flags[m[1]] = m[2]
        elif line.strip() and not line.lstrip().startswith("#"): break
    return flags


def _cell_ast(src: str):
    "A code cell parsed as Python, its IPython magics and shell lines blanked (None if it does not parse)."
    import ast
    try:
        return ast.parse("\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in src.splitlines()))
    except SyntaxError:
        return None


def hidden_names_shown(cells) -> list[tuple[int, str]]:
    """(code cell, name) for each name a shown code cell reads that only cells whose source is not on the page bound before it.

    Shown: a cell whose source is on the page. Not shown: `#| hide` or `#| include: false` (neither source nor output on
    the page), `#| echo: false` (its output only), a cell with a line that starts with `show_doc` (nbdev's processing
    turns it to `echo: false`), and an `exporti` cell (left out of the page, no API entry). An `export` cell's source is
    not on the page either, but its names are: nbdev shows each as an API entry, and the package exports them. A name
    bound in a shown or `export` cell before is available; a name the shown cell binds itself (anywhere in it) is its own."""
    import ast
    in_hidden, elsewhere, found, i = set(), set(), [], -1
    for c in cells:
        if c.cell_type != "code": continue
        i += 1
        tree, flags = _cell_ast(c.source), _cell_flags(c.source)
        if tree is None: continue
        exported = "export" in flags
        shown = ("hide" not in flags and flags.get("include") != "false" and flags.get("echo") != "false"
                 and not {"export", "exporti"} & set(flags) and not _SHOW_DOC_LINE.search(c.source))
        hidden = not shown and not exported
        if shown:
            own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
            own |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
            own |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            own |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            for name in dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)):
                if name in in_hidden and name not in elsewhere and name not in own:
                    found.append((i, name))
        for st in tree.body:  # the cell's top-level bindings, in order
            names = set()
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                names = {(a.asname or a.name).split(".")[0] for a in st.names if a.name != "*"}
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = {st.name}
            else:
                names = {n.id for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            (in_hidden if hidden else elsewhere).update(names)
    return found


def test_hidden_names_are_caught():
    """A hidden import read by a shown cell is caught (a check's `test_eq` too), and so is a name bound only in an
    `echo: false` or `exporti` cell; one read only by hidden, echo: false or show_doc cells, bound in an `export` cell,
    or rebound in a shown cell, is not."""
    cell = nbformat.v4.new_code_cell
    cells = [cell("#| hide\nimport pandas as pd\nimport numpy as np\nfrom fastcore.test import test_eq\nfrom x import y\n"
                  "from nbdev.showdoc import show_doc"),
             cell("#| export\nimport json"),
             cell("df = pd.DataFrame({'a': [1]})\ntest_eq(len(df), 1)\njson.dumps(1)"),
             cell("#| echo: false\nnp.zeros(1)"),
             cell("#| hide\ny(np.ones(1))"),
             cell("import numpy as np\nnp.ones(2)"),
             cell("def f(y): return y + 1\n%time f(2)"),
             cell("show_doc(y)"),
             cell("test_eq(type(show_doc(json.dumps)), object)"),
             cell("#| echo: false\nprompt = 'Once upon a time'\nMarkdown(f'In *{prompt}*')"),
             cell("#| exporti\ndef _helper(): pass"),
             cell("#| export\ndef public(): pass"),
             cell("#| echo: false\ndf2 = df.copy()"),
             cell("ids = tok(prompt); _helper(); public(); df2.head(); df.head()")]
    assert hidden_names_shown(cells) == [(2, "test_eq"), (2, "pd"), (8, "test_eq"), (8, "show_doc"), (13, "prompt"),
                                         (13, "_helper"), (13, "df2")], hidden_names_shown(cells)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_shown_cells_read_no_hidden_name(name):
    "A page's shown code can be copied and run: every name it reads is bound in a cell the page shows (static; well under 1 s)."
    nb = nbformat.read(ROOT / "nbs" / name, as_version=4)
    found = {n for _, n in hidden_names_shown(nb.cells)}
    known = KNOWN_HIDDEN_NAMES.get(name, set()) | TEST_ONLY_PENDING.get(name, set())
    new = sorted(found - known)
    assert not new, (f"{name}: shown cells read names bound only in cells whose source the page does not show (hide, echo: false, exporti): "
                     + ", ".join(f"{n} (code cell {i})" for i, n in hidden_names_shown(nb.cells) if n in new)
                     + "; import (or define) them in a shown cell")
    assert not known - found, f"{name}: no longer reads {sorted(known - found)} from a hidden cell: drop them from KNOWN_HIDDEN_NAMES (or TEST_ONLY_PENDING)"


def _shown_output_text(out) -> str:
    "The text a reader sees of one output: the HTML's text (scripts, styles and tags aside) where there is HTML, else the plain text."
    if out.output_type == "stream": return out.text
    data = out.get("data", {})
    if "text/html" in data:
        html = "".join(data["text/html"])
        html = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", html, flags=re.S | re.I)
        return re.sub(r"&nbsp;|&#160;", " ", re.sub(r"<[^>]+>", " ", html))
    return "".join(data.get("text/markdown", "")) + "".join(data.get("text/plain", ""))


# Pages that still print floats past their precision, outside this check's author's pages (page: what it prints):
# findings for the page's owner; delete the entry once fixed.
KNOWN_LONG_FLOATS: dict[str, str] = {}  # none left: 03, 07 and 90 were fixed


def long_floats(nb) -> list[str]:
    "What a notebook's outputs print with more than 6 significant digits (streams, plain text, HTML tables), cells tagged expect-float aside."
    hits = []
    for i, c in enumerate(x for x in nb.cells if x.cell_type == "code"):
        if EXPECT_TAG["float"] in c.metadata.get("tags", []) or re.search(r"\bshow_doc\(", c.source): continue
        for o in c.get("outputs", []):
            text = _shown_output_text(o)
            hits += [f"code cell {i}: {_snippet(text, m, 40)!r}" for m in _FLOAT.finditer(text)]
    return hits


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_outputs_print_no_float_past_its_precision(name, executed_nbs):
    "No executed output prints a number past its precision: `1.000000e+17`, `0.1234567890123456`, `38.000000` (under 1 s a page)."
    hits = long_floats(executed_page(executed_nbs, name))
    if name in KNOWN_LONG_FLOATS:
        assert hits, f"{name} prints no long float any more: drop it from KNOWN_LONG_FLOATS"
        return
    assert not hits, f"{name}: numbers printed past their precision (round them, or format the table):\n" + "\n".join(hits[:10])


# A progress bar's text, as tqdm writes it where no widget shows it (`  48%|####8     | 29/60 [00:02<00:01, 19.10step/s]`):
# the percentage and bar, the elapsed<remaining clock, a rate, or a carriage return that redraws a line.
_PROGRESS = re.compile(r"\d+%\|[^|\n]*\||\[\d+:\d+<[\d:?]+|[\d?]\s?\w*/s\]|s/\w+\]|\r(?!\n)")


def output_hits(nb, pattern: re.Pattern, text_of, after: int = 20) -> list[str]:
    "The first match of `pattern` in each output of a notebook's code cells, read by `text_of(output)`, with its context."
    hits = []
    for i, c in enumerate(x for x in nb.cells if x.cell_type == "code"):
        for o in c.get("outputs", []):
            text = text_of(o)
            hits += [f"code cell {i}: {text[max(0, m.start() - 40):m.end() + after]!r}" for m in pattern.finditer(text)][:1]
    return hits


def progress_bars(nb) -> list[str]:
    "What a notebook's outputs print of a progress bar (streams, plain text, a widget's text)."
    return output_hits(nb, _PROGRESS, lambda o: o.text if o.output_type == "stream" else "".join(o.get("data", {}).get("text/plain", "")))


def test_progress_bars_are_caught():
    "tqdm's text in a stream or a widget's plain text is caught; a percentage, a clock time or a rate in prose is not."
    stream = lambda t, name="stderr": nbformat.v4.new_output("stream", name=name, text=t)
    bar = "\rtraining:   0%|          | 0/60 [00:00<?, ?step/s]\rtraining: 100%|##########| 60/60 [00:02<00:00, 27.17step/s]\n"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("f()", outputs=[stream(bar)]),
        nbformat.v4.new_code_cell("g()", outputs=[nbformat.v4.new_output("display_data", {"text/plain": "umap: 50%|#####     | 2/4 [00:03<00:03, 1.52s/layer]"})]),
        nbformat.v4.new_code_cell("h()", outputs=[stream("tokenizing: 1520 docs [00:01, 1010.2 docs/s]\n", "stdout")]),
        nbformat.v4.new_code_cell("k()", outputs=[stream("98% of the tokens at 12:30 (3.1 steps/s on the CPU), a|b\r\n", "stdout")])])
    assert [h.split(":")[0] for h in progress_bars(nb)] == ["code cell 0", "code cell 1", "code cell 2"], progress_bars(nb)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_outputs_show_no_progress_bar(name, executed_nbs):
    "No executed output shows a progress bar's text: a page's call passes `progress=False` (under 1 s a page)."
    hits = progress_bars(executed_page(executed_nbs, name))
    assert not hits, f"{name}: outputs show a progress bar (pass progress=False on the page):\n" + "\n".join(hits[:10])


# A date and time of the run that executed a page: a run folder's stamp (`07_scaling-20261206-174403`) or an ISO time
# (`2026-12-06T17:44`, `2026-12-06 17:44`). It changes at every run, so a reader compares nothing with it.
_CLOCK = re.compile(r"\b20\d\d[01]\d[0-3]\d-[0-2]\d[0-5]\d[0-5]\d\b|\b20\d\d-[01]\d-[0-3]\d[T ][0-2]\d:[0-5]\d")


def run_clock_times(nb) -> list[str]:
    "The dates and times of the executing run that a notebook's outputs print (streams, plain text, Markdown, HTML)."
    return output_hits(nb, _CLOCK, _shown_output_text, after=10)


def test_run_clock_times_are_caught():
    "A run folder's stamp or an ISO time is caught; a Slurm time limit, a large number or a date alone is not."
    out = lambda t: nbformat.v4.new_output("stream", name="stdout", text=t)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("a()", outputs=[out("RUN_DIR=<tmp>/slurm/07_scaling-20261206-174403\n")]),
        nbformat.v4.new_code_cell("b()", outputs=[out("submitted at 2026-12-06T17:44:03\n")]),
        nbformat.v4.new_code_cell("c()", outputs=[out("#SBATCH --time=24:00:00, budget 200000000000.0, 07_scaling-<date-time>, "
                                                      "the paper (2025-01-31)\n")])])
    assert [h.split(":")[0] for h in run_clock_times(nb)] == ["code cell 0", "code cell 1"], run_clock_times(nb)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_outputs_show_no_run_clock_time(name, executed_nbs):
    "No executed output prints the date and time of the run that executed it (a duration or a state instead; under 1 s a page)."
    hits = run_clock_times(executed_page(executed_nbs, name))
    assert not hits, f"{name}: outputs print the run's date and time (it changes at every run):\n" + "\n".join(hits[:10])


PAGE_WEIGHT = 1_000_000  # bytes an executed notebook may weigh: what a reader downloads, and JupyterLab opens


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_executed_page_weighs_at_most_1_mb(name, executed_nbs):
    "Each executed notebook, outputs included, weighs at most 1 MB (thin a chart's rows, round its floats, show an image once)."
    path = executed_nbs / name
    assert path.exists(), f"{path} is missing: the executed notebooks are incomplete"
    nb = nbformat.read(path, as_version=4)
    size = path.stat().st_size
    heavy = sorted(((sum(len(_text(o)) for o in c.get("outputs", [])), i) for i, c in enumerate(nb.cells)), reverse=True)[:3]
    assert size <= PAGE_WEIGHT, (f"{name}: the executed notebook weighs {size / 1e6:.2f} MB, over {PAGE_WEIGHT / 1e6:.0f} MB; "
                                 f"heaviest outputs: " + ", ".join(f"cell {i} {w / 1e3:.0f} kB" for w, i in heavy))


# What an f-string's field looks like when the `f` was left off: a conditional (`{'a' if x else 'b'}`), a private name
# (`{_seeds}`, `{_e(b)}`) or a name with a format spec (`{gap:+.1%}`). Prose and tables print none of these.
_TEMPLATE = re.compile(r"\{(?:[^{}\n]*\bif\b[^{}\n]*\belse\b[^{}\n]*|_\w+(?:[.\[(][^{}\n]*)?"
                       r"|[A-Za-z_][\w.]*(?:\[[^{}\n\]]*\]|\([^{}\n)]*\))*:[<>^=+ ,._\d]*[%bdefgnosxX])\}")


def template_leftovers(nb) -> list[str]:
    "The unformatted f-string fields a notebook's outputs show (Markdown, plain text, HTML's text, streams)."
    return output_hits(nb, _TEMPLATE, _shown_output_text)


def test_template_leftovers_are_caught():
    "A field printed as written (no `f` before the string) is caught; a dict, a set, JSON or LaTeX braces are not."
    md = lambda t: nbformat.v4.new_output("display_data", {"text/markdown": t})
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("a()", outputs=[md("with {'three seeds' if len(_seeds) > 2 else 'one pair'} as noise")]),
        nbformat.v4.new_code_cell("b()", outputs=[md("the gap is {gap:+.1%} at `{_e(b)}`")]),
        nbformat.v4.new_code_cell("c()", outputs=[md("seeds {_seeds}")]),
        nbformat.v4.new_code_cell("d()", outputs=[md("{'mlp': 3, 'moe': 2} {1, 2} {\"step\": 5} $\\frac{a}{b}$ {x: 3}")])])
    assert [h.split(":")[0] for h in template_leftovers(nb)] == ["code cell 0", "code cell 1", "code cell 2"], template_leftovers(nb)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_outputs_show_no_unformatted_field(name, executed_nbs):
    "No executed output shows an f-string's field as written: a string that lost its `f` (under 1 s a page)."
    hits = template_leftovers(executed_page(executed_nbs, name))
    assert not hits, f"{name}: outputs show f-string fields as written (is an `f` missing?):\n" + "\n".join(hits[:10])
