"""Every documentation page, checked in a browser.

Quarto is not installable here, so each notebook, executed as the docs build executes it (outputs kept,
charts drawn by the offline renderer of scripts/docs_ipython), is rendered to HTML with nbconvert and
loaded in headless Chromium with the network cut off. A page passes when it loaded (its title is the
notebook's `# Title`), no output is an error or a traceback, every chart of the notebook drew marks
(and no vega error text), and neither the page nor any chart is blank in the screenshot. Screenshots
and pages are kept in build/docs_screenshots/ for people to look at.

Executed notebooks come from $SGATLIN_EXECUTED_NBS (scripts/test.sh sets it to the copy its
nbdev-test step ran in); otherwise this session executes them itself with scripts/execute_nbs.sh.
"""
import base64
import fcntl
import io
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbconvert import HTMLExporter
from nbdev.config import get_config
from nbdev.test import nb_test_cells
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb"))
SHOTS = ROOT / "build" / "docs_screenshots"
CHROMIUM = os.environ.get("SGATLIN_CHROMIUM", "/usr/bin/chromium")
WIDTH = 1280


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


class Chromium:
    "Headless Chromium driven through the DevTools protocol over --remote-debugging-pipe (no extra packages)."

    def __init__(self, profile_dir: Path):
        to_chrome, self._w = os.pipe()
        self._r, from_chrome = os.pipe()

        def _fds():  # Chromium reads commands on fd 3 and writes replies on fd 4
            a, b = fcntl.fcntl(to_chrome, fcntl.F_DUPFD, 10), fcntl.fcntl(from_chrome, fcntl.F_DUPFD, 10)
            os.dup2(a, 3), os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--host-resolver-rules=MAP * ~NOTFOUND",  # offline, like CI: a page that needs a CDN fails here
             "--hide-scrollbars", f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome), os.close(from_chrome)
        self._id, self._buf, self.events, self.session = 0, b"", [], None
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False)

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if not select.select([self._r], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, timeout: float = 120, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def wait_for(self, event: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for m in self.events:
                if m.get("method") == event:
                    return m
            self.events.append(self._message(deadline))

    def close(self):
        os.close(self._w)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does) or set SGATLIN_CHROMIUM")
    b = Chromium(tmp_path_factory.mktemp("chromium_profile"))
    yield b
    b.close()


# Waits (up to 60 s) until every chart container holds a drawing or an error, then reports on the page.
PAGE_REPORT_JS = """(async () => {
  const charts = () => [...document.querySelectorAll('.altair-offline')];
  const settled = el => el.querySelector('svg, canvas, .error');
  const t0 = Date.now();
  while (charts().some(el => !settled(el)) && Date.now() - t0 < 60000) await new Promise(r => setTimeout(r, 100));
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return {
    title: document.title,
    h1: [...document.querySelectorAll('h1')].map(h => h.textContent.replace('¶', '').trim()),
    traceback: document.body.innerText.includes('Traceback (most recent call last)'),
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


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_page_renders_in_a_browser(name, executed_nbs, browser):
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
    for c in nb.cells:  # execnb's timing metadata is not valid nbformat (floats): not part of the page anyway
        c.metadata.pop("execution", None)

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, f"{name}: error outputs: {[e.ename + ': ' + e.evalue for e in errors]}"
    assert not [o for o in outputs if "Traceback (most recent call last)" in _text(o)], f"{name}: an output is a traceback"
    cdn_charts = [o for o in outputs if any(k.startswith("application/vnd.vegalite") for k in o.get("data", {}))
                  or "cdn.jsdelivr.net/npm/vega" in _text(o)]
    assert not cdn_charts, f"{name}: charts were rendered without the offline renderer (IPYTHONDIR=scripts/docs_ipython)"
    n_charts = sum(_text(o).count('class="altair-offline"') for o in outputs)

    title = _title(src_nb)
    assert title, f"{name} does not start with a '# Title' markdown cell"
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(nb, resources={"metadata": {"name": title}})
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = SHOTS / f"{Path(name).stem}.html"
    page.write_text(html, encoding="utf-8")

    browser.events.clear()
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    rep = browser.call("Runtime.evaluate", expression=PAGE_REPORT_JS, awaitPromise=True, returnByValue=True)
    assert "exceptionDetails" not in rep, f"{name}: the page check failed: {rep['exceptionDetails']}"
    rep = rep["result"]["value"]
    heading = title.replace("`", "")  # the h1 shows inline code without its backticks
    assert rep["title"] == title and heading in rep["h1"], f"{name}: page did not load as expected: {rep['title']!r}, {rep['h1']}"
    assert not rep["traceback"], f"{name}: the page shows a traceback"
    thrown = [e["params"]["exceptionDetails"] for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]
    assert not thrown, f"{name}: uncaught JavaScript errors: {[d.get('exception', {}).get('description', d['text']) for d in thrown]}"
    assert len(rep["charts"]) == n_charts, f"{name}: {n_charts} chart outputs but {len(rep['charts'])} charts on the page"
    for ch in rep["charts"]:
        assert ch["error"] is None, f"{name}: chart {ch['id']} failed: {ch['error']}"
        assert ch["marks"] > 0 and ch["w"] > 50 and ch["h"] > 50, f"{name}: chart {ch['id']} drew nothing: {ch}"

    shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                        clip={"x": 0, "y": 0, "width": WIDTH, "height": rep["height"], "scale": 1})
    png = base64.b64decode(shot["data"])
    (SHOTS / f"{Path(name).stem}.png").write_bytes(png)
    img = Image.open(io.BytesIO(png))
    assert _inked(img) > 0.01, f"{name}: the screenshot is blank"
    for ch in rep["charts"]:
        box = tuple(round(v) for v in (ch["x"], ch["y"], ch["x"] + ch["w"], ch["y"] + ch["h"]))
        assert _inked(img.crop(box)) > 0.005, f"{name}: chart {ch['id']} is blank in the screenshot"


def test_nbdev_proc_nbs_documents_every_notebook(executed_nbs, tmp_path):
    "The first half of nbdev-docs (what runs before Quarto) succeeds on the executed notebooks, as scripts/docs.sh runs it."
    repo = executed_nbs.parent
    assert (repo / "pyproject.toml").exists(), f"{executed_nbs} is not the nbs/ of a repository copy (scripts/execute_nbs.sh makes one)"
    env = {**os.environ, "IPYTHONDIR": str(repo / "scripts" / "docs_ipython"), "JAX_PLATFORMS": "cpu"}
    if not shutil.which("quarto"):  # nbdev would try to install Quarto with sudo; processing never calls it
        (tmp_path / "quarto").write_text('#!/bin/sh\necho "quarto is not installed here" >&2\nexit 1\n')
        (tmp_path / "quarto").chmod(0o755)
        env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
    nbdev_proc_nbs = Path(sys.executable).parent / "nbdev-proc-nbs"
    res = subprocess.run([str(nbdev_proc_nbs), "--n-workers", "2"], cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, f"nbdev-proc-nbs failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    for name in NOTEBOOKS:
        proc = nbformat.read(repo / "_proc" / name, as_version=4)
        src = nbformat.read(ROOT / "nbs" / name, as_version=4)
        if any(re.match(r"#\|\s*export", c.source) for c in src.cells if c.cell_type == "code"):
            docs = [c for c in proc.cells if c.cell_type == "code" and "show_doc(" in c.source and c.get("outputs")]
            assert docs, f"_proc/{name}: no show_doc output for its exported symbols"
