"""The notebooks as a JupyterLab user opens them: `jupyter lab nbs/` from the test virtual environment, as the README
starts it, driven in headless Chromium (the same Debian packages and Selenium as the docs check) with the network cut
off but for the server on loopback.

The server runs with a token, in a copy of the repository (pages write files beside themselves), with its own settings,
workspace and IPython folders, so nothing of the user's JupyterLab or of the docs build's profile is read. Each page is
opened by its URL, run from the menu (Run > Run All Cells) and waited for until no cell is queued and the kernel is
idle. Then the DOM must show (`problems`): every code cell run, no error output, the page's Altair charts, as many as
expected, each drawn (an `svg` with marks, or a `canvas` with pixels painted, inside each chart's element), its
progress bars drawn as widgets (01 trains under tqdm.auto's bar) and run to their end, no progress bar or widget shown
as text, no JavaScript error on the page (`start_chromium` collects them), and a screenshot that is not blank (kept in
build/jupyterlab_screenshots/). 14_usage has its `parameters` cell edited in the browser, as the README tells a GPU
user to, and must take its miniature path (the cheapest paper page's: about a minute). A page made broken on purpose
(an exception, a chart drawn by Altair's default renderer, which needs a CDN, a blank canvas, a JavaScript error, a
chart and a progress bar missing) shows each check failing, and its own parameters edit taking effect.
"""
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import ROOT, start_chromium

VENV_BIN = Path(sys.executable).parent
SHOTS = ROOT / "build" / "jupyterlab_screenshots"
# what a tqdm bar or an ipywidget shows when the front end cannot draw it
# JavaScript errors JupyterLab itself raises on a healthy page, each with why it is harmless
BENIGN_JS = re.compile(r"(?!)")  # none seen yet
RAW_WIDGET = re.compile(r"\b(?:HBox|VBox|FloatProgress|IntProgress|HTML)\(children=|\bFloatProgress\(value=|IProgress not found|"
                        r"Widget Javascript not detected|Error displaying widget")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, data_dir, shared_cache):
    "A JupyterLab server on loopback, in a copy of the repository: (base URL, token, copy)."
    tmp = tmp_path_factory.mktemp("lab")
    copy = tmp / "repo"
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "_proc", "_docs", "runs", "*.egg-info", "__pycache__",
                                    ".ipynb_checkpoints", ".pytest_cache")
    shutil.copytree(ROOT, copy, ignore=ignore, symlinks=True)
    settings = tmp / "settings"
    for plugin, values in {
        # every cell in the DOM, as a reader scrolls through them (JupyterLab 4 otherwise draws only the visible ones)
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        # no news or update checks: the machine is offline
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        f = settings / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    # the server's environment lacks XLA_PYTHON_CLIENT_PREALLOCATE, as a user's Lab does: the notebooks' kernel sets it
    env = {**{k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"},
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
           "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "JUPYTER_DATA_DIR": str(tmp / "data"),  # a user's own kernels play no part ...
           "JUPYTER_PATH": str(tmp / "kernels" / "share" / "jupyter"),  # ... the notebooks' kernel is installed here, below
           "IPYTHONDIR": str(tmp / "ipython"),  # a user's own IPython profile, not the docs build's
           # where a paper page's run_full path trains its model, not the user's cache: the session's, which the paper
           # pipeline's 06 and 14 jobs fill too (whichever comes first trains 06's miniature, under cached_run's lock)
           "SGATLIN_CACHE": str(shared_cache),
           "JAX_PLATFORMS": "cpu"}  # the data: as the test session has them
    # the notebooks' kernel, installed as the README says, into a folder of this test (--prefix) on the server's JUPYTER_PATH
    res = subprocess.run([str(VENV_BIN / "sgatlin"), "kernel", "install", "--prefix", str(tmp / "kernels")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0 and "installed kernel 'sgatlin_nb'" in res.stdout, res.stdout + res.stderr
    log = open(tmp / "lab.log", "w")
    server = subprocess.Popen(
        [str(VENV_BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
         "nbs/"],  # as the README starts it, from the repository's folder
        cwd=copy, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(120):
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited with {server.returncode}:\n{(tmp / 'lab.log').read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    else:
        pytest.fail(f"jupyter lab did not listen on port {port} within 60 s:\n{(tmp / 'lab.log').read_text()[-3000:]}")
    yield base, token, copy, tmp / "lab.log"
    server.terminate()
    try: server.wait(30)
    except subprocess.TimeoutExpired: server.kill()
    log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp("chromium-lab"), width=1400, loopback=True)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _wait(what: str, fn, timeout: float, poll: float = 0.5):
    "The first truthy value of `fn()` within `timeout` seconds, else a failure naming `what`."
    end = time.time() + timeout
    while time.time() < end:
        value = fn()
        if value: return value
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def shut_down_kernels(lab):
    "End every session of the server and its kernel (the REST API), as closing a page and its kernel does: pages do not add up in memory."
    import urllib.request
    base, token, _, _ = lab
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=30) as r:
        sessions = json.load(r)
    for sess in sessions:
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/sessions/{sess['id']}?token={token}", method="DELETE"), timeout=60)


def open_notebook(driver, lab, rel: str):
    "Open `rel` (a notebook of nbs/, the server's root) in JupyterLab, the only kernel, and wait for it to be idle."
    shut_down_kernels(lab)
    base, token, _, _ = lab
    driver.get(f"{base}/lab/tree/{rel}?token={token}&reset")
    _wait(f"{rel} to open", lambda: _js(driver, "return document.querySelectorAll('.jp-NotebookPanel .jp-Cell').length"), 120)
    _wait(f"the kernel of {rel} to start", lambda: _kernel_status(driver) == "idle", 120)


def _kernel_status(driver) -> str | None:
    return _js(driver, """const el = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
                          return el ? el.getAttribute('data-status') : null;""")


def select_kernel(driver):
    """Accept JupyterLab's "Select Kernel" dialog (the notebook's own kernel, preselected) if it shows: it can open while
    the kernel that open_notebook waited for starts, and it blocks the menus until a person clicks Select."""
    for dialog in driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"):
        if "Select Kernel" in dialog.text:
            dialog.find_element(By.CSS_SELECTOR, ".jp-Dialog-button.jp-mod-accept").click()
            _wait("the kernel dialog to close", lambda: not driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"), 30)


def run_all_from_menu(driver):
    """Run > Run All Cells, clicked as a person clicks it once the item is enabled (greyed out until JupyterLab makes the
    notebook its current widget, and a click on it then does nothing: a person looks again)."""
    def enabled_item():
        select_kernel(driver)
        menu = _wait("the Run menu", lambda: next((e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
                                                    if e.text.strip() == "Run"), None), 30)
        menu.click()
        item = _wait("Run All Cells", lambda: next((e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-item")
                                                     if e.text.strip().startswith("Run All Cells")), None), 30)
        if "lm-mod-disabled" not in (item.get_attribute("class") or ""): return item
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)  # closed, to be opened again
        time.sleep(1)
    _wait("Run All Cells to be enabled", enabled_item, 60, poll=0).click()


def wait_until_run(driver, rel: str, timeout: float):
    "Run All has queued the cells (prompts `[*]`), and now none is queued or running and the kernel is idle."
    def prompts():
        return _js(driver, """return [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
                              .map(p => p.textContent.trim());""")
    # started: a cell queued, or run already (a quick page can finish between two looks; the page opened with none run)
    started = lambda: any(p == "[*]:" or re.fullmatch(r"\[\d+\]:", p) for p in prompts())
    try:
        try: _wait(f"the cells of {rel} to be queued", started, 60, poll=0.2)
        except pytest.fail.Exception:  # on a loaded machine a click can be lost (one CI run: the kernel idle, no cell queued
            run_all_from_menu(driver)  # after 60 s); a person clicks Run All once more, and so does the test, once
            _wait(f"the cells of {rel} to be queued after a second Run All", started, 60, poll=0.2)
    finally:  # what the page showed, for a run that never started
        if not any(p == "[*]:" or re.fullmatch(r"\[\d+\]:", p) for p in prompts()):
            SHOTS.mkdir(parents=True, exist_ok=True)
            (SHOTS / f"{Path(rel).stem}_not_started.png").write_bytes(driver.get_screenshot_as_png())
    _wait(f"every cell of {rel} to run", lambda: "[*]:" not in prompts() and _kernel_status(driver) == "idle", timeout, poll=2)
    return prompts()


def page_state(driver) -> dict:
    "What the open notebook shows: error outputs, each chart (drawn or not), raw widget text, the outputs' text."
    return _js(driver, """
      const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
      const outs = [...nb.querySelectorAll('.jp-OutputArea-output')];
      // a Python exception: JupyterLab renders its traceback as an error output
      const errors = outs.filter(o => o.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr'
                                      && /Traceback|Error:/.test(o.textContent) || o.querySelector('.jp-mod-error'))
                         .map(o => o.textContent.slice(0, 600));
      // every place a chart should be: ours (.altair-offline), Altair's own HTML (#altair-viz-...), any vega-embed
      const slots = [...nb.querySelectorAll('.altair-offline, [id^="altair-viz-"]')];
      // a canvas counts by its pixels: those neither transparent nor (near-)white, as Vega's canvas renderer paints marks
      const inked = canvas => {
          const ctx = canvas.width && canvas.height ? canvas.getContext('2d') : null;
          if (!ctx) return 0;
          const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
          let n = 0;
          for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && Math.min(px[i], px[i + 1], px[i + 2]) < 245) n++;
          return n;
      };
      const charts = slots.map(el => {
          const svg = el.querySelector('svg');
          const canvas = el.querySelector('canvas');
          const marks = svg ? svg.querySelectorAll('.mark-symbol path, .mark-line path, .mark-rect path, .mark-area path, .mark-rule line, .mark-text text, .mark-point path, path.mark, g.mark-group').length
                            : (canvas ? inked(canvas) : 0);
          return {id: el.id, drawn: !!(svg || canvas) && marks > 0, marks, error: (el.querySelector('.error') || {}).textContent || null,
                  text: el.textContent.slice(0, 300)};
      });
      // each progress bar drawn as a widget (tqdm.auto's: a FloatProgress in an HBox), with the text beside it
      const bars = [...nb.querySelectorAll('.jupyter-widgets.widget-hprogress')].map(el => ({
          width: (el.querySelector('.progress-bar') || {style: {}}).style.width || null,
          text: (el.closest('.widget-hbox') || el).textContent.trim().slice(0, 200)}));
      const prompts = [...nb.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
      return {errors, charts, prompts, bars, text: outs.map(o => o.textContent).join('\\n'),
              widgetViews: nb.querySelectorAll('.jupyter-widgets').length, pageErrors: window.__pageErrors ?? null};
    """)


def _inked(png: bytes) -> float:
    "Fraction of the screenshot's pixels that are not the background colour."
    import io
    import numpy as np
    from PIL import Image
    a = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    values, counts = np.unique(a, return_counts=True)
    return 1 - counts.max() / a.size


def problems(driver, rel: str, charts: int = 0, bars: int = 0) -> list[str]:
    """What is wrong with the open notebook after its run: cells not run, errors, charts not drawn or not `charts` of
    them, not `bars` progress bars drawn as widgets and run to the end, widgets as text, page JavaScript errors, blank."""
    st = page_state(driver)
    found = []
    not_run = [p for p in st["prompts"] if not re.fullmatch(r"\[\d+\]:", p)]
    if not_run: found.append(f"{len(not_run)} of {len(st['prompts'])} code cells did not run")
    found += [f"error output: {e}" for e in st["errors"]]
    found += [f"a chart did not draw: {c}" for c in st["charts"] if not c["drawn"]]
    if len(st["charts"]) != charts: found.append(f"{len(st['charts'])} charts, expected {charts}")
    if len(st["bars"]) != bars: found.append(f"{len(st['bars'])} progress bars drawn as widgets, expected {bars}: {st['bars']}")
    found += [f"a progress bar did not reach its end: {b}" for b in st["bars"] if b["width"] != "100%"]
    if st["pageErrors"] is None: found.append("the page's JavaScript errors were not collected (window.__pageErrors)")
    found += [f"a JavaScript error on the page: {e[:600]}" for e in st["pageErrors"] or [] if not BENIGN_JS.search(e)]
    if raw := RAW_WIDGET.search(st["text"]):
        found.append(f"a widget shown as text: {st['text'][max(0, raw.start() - 100):raw.end() + 100]!r}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    png = driver.get_screenshot_as_png()
    (SHOTS / f"{Path(rel).stem}.png").write_bytes(png)
    if _inked(png) < 0.02: found.append("the screenshot is blank")
    return found


def check_page(driver, rel: str, charts: int = 0, bars: int = 0) -> dict:
    "The open notebook after its run shows no problem; what it shows."
    found = problems(driver, rel, charts, bars)
    assert not found, f"{rel}:\n" + "\n".join(found)
    return page_state(driver)


def edit_parameters(driver, line: str):
    "Type `line` at the end of the open notebook's `parameters` cell, as a person does (click, Ctrl+End, Enter, type)."
    cell = _wait("the parameters cell", lambda: next(
        (c for c in driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell")
         if "run_full = False" in c.text), None), 60)
    editor = cell.find_element(By.CSS_SELECTOR, ".cm-content")
    editor.click()
    editor.send_keys(Keys.CONTROL, Keys.END)
    editor.send_keys(Keys.ENTER, line)
    _wait("the edit to show", lambda: line in cell.text, 10)
    editor.send_keys(Keys.ESCAPE)  # command mode, as a click outside the cell leaves it


# the pages a newcomer opens first, one that draws charts, and one with a progress bar (01 trains a block under
# tqdm.auto's bar): how many Altair charts and progress-bar widgets each shows when run whole
PAGES = {"tour.ipynb": (0, 0), "01_sgatlin.ipynb": (0, 1), "03_complexity.ipynb": (1, 0), "16_demo.ipynb": (0, 0)}


@pytest.mark.parametrize("rel", list(PAGES))
def test_page_runs_from_the_menu(rel, lab, browser):
    open_notebook(browser, lab, rel)
    run_all_from_menu(browser)
    wait_until_run(browser, rel, 900)
    check_page(browser, rel, *PAGES[rel])
    # in the kernel the page names (the notebooks' own, `sgatlin kernel install`), not one picked in its place
    wanted = json.loads((ROOT / "nbs" / rel).read_text())["metadata"]["kernelspec"]["name"]
    assert wanted == KERNEL_NAME and [s["kernel"]["name"] for s in _sessions(lab)] == [wanted], _sessions(lab)


def test_parameters_edited_in_the_browser_take_the_miniature_path(lab, browser):
    "The README's way to run a paper page for real: switch its parameters on in the `parameters` cell, run all."
    rel = "14_usage.ipynb"
    _, _, copy, _ = lab
    out = copy / "nbs" / "results" / "usage_tinystories-miniature"
    assert not out.exists()
    open_notebook(browser, lab, rel)
    edit_parameters(browser, "run_full = True; miniature = True")
    run_all_from_menu(browser)
    wait_until_run(browser, rel, 900)
    st = check_page(browser, rel, charts=1)  # the usage chart of the reference model
    # what the guarded cell wrote where its parameters say, and printed: the miniature of the paper's model was analysed
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "usage.png").stat().st_size > 10_000, sorted(p.name for p in out.iterdir())
    assert Path(summary["run"]).name.startswith("tinystories-miniature--"), summary["run"]  # 06's miniature of the preset
    assert 0 < summary["gini"] < 1 and Path(summary["run"]).name in st["text"], st["text"][-2000:]  # the page names the run it analysed


def test_the_checks_fail_on_a_broken_page(lab, browser):
    """A page that raises, a chart drawn by Altair's default renderer (it needs a CDN), a blank canvas where a chart
    should be, a JavaScript error, a chart and a progress bar that never reach the page: each is caught; a canvas with
    pixels on it counts as drawn, and the parameters edited in the browser take the guarded path."""
    rel = "zz_broken.ipynb"
    _, _, copy, _ = lab
    html = lambda h: nbformat.v4.new_code_cell(f"from IPython.display import HTML\nHTML({h!r})")
    cells = [nbformat.v4.new_code_cell("run_full = False"),
             nbformat.v4.new_code_cell("import altair as alt\nalt.renderers.enable('default')\n"
                                       "alt.Chart(alt.Data(values=[{'a': 1}])).mark_point().encode(x='a:Q')"),
             html('<div class="altair-offline" id="blank-canvas"><canvas width="300" height="200"></canvas></div>'
                  '<div class="altair-offline" id="painted-canvas"><canvas width="120" height="60"></canvas></div>'
                  "<script>{const c = document.querySelector('#painted-canvas canvas').getContext('2d');"
                  "c.fillStyle = '#4c78a8'; c.fillRect(10, 10, 50, 30);}</script>"),
             html("<script>setTimeout(() => { throw new Error('javascript broken on purpose'); }, 0)</script>"),
             nbformat.v4.new_code_cell("if run_full: print('the guarded path ran')"),
             nbformat.v4.new_code_cell("raise ValueError('broken on purpose')"),
             nbformat.v4.new_code_cell("print('after the error')")]
    cells[0].metadata["tags"] = ["parameters"]
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=kernel), copy / "nbs" / rel)
    open_notebook(browser, lab, rel)
    edit_parameters(browser, "run_full = True")
    run_all_from_menu(browser)
    wait_until_run(browser, rel, 120)
    found = problems(browser, rel, charts=4, bars=1)  # three chart slots reach the page, no progress bar
    assert any("broken on purpose" in f and f.startswith("error output") for f in found), found
    undrawn = [f for f in found if f.startswith("a chart did not draw")]
    assert len(undrawn) == 2 and any("'id': 'blank-canvas'" in f for f in undrawn), found  # Altair's CDN chart, the blank canvas
    assert "3 charts, expected 4" in found, found
    assert any(f.startswith("0 progress bars drawn as widgets, expected 1") for f in found), found
    js = [f for f in found if f.startswith("a JavaScript error on the page: ")]
    assert len(js) == 2 and any("javascript broken on purpose" in f for f in js) and any("Error loading script" in f for f in js), js  # ours; the CDN's
    assert "1 of 7 code cells did not run" in found, found
    assert len(found) == 8, "\n".join(found)  # nothing else: the painted canvas is drawn, the screenshot is not blank
    assert "the guarded path ran" in page_state(browser)["text"]  # the edit took: run_full = True below run_full = False


# ---- the notebooks' kernel (`sgatlin kernel install`) and the server proxy (the `lab` extra) ----

from sgatlin_nb.cli import KERNEL_DISPLAY, KERNEL_NAME  # noqa: E402

ENV_CELL = ("import os, sys\n"
            "print('preallocate=' + os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE', 'unset'), 'python=' + sys.executable,\n"
            "      'pid=' + str(os.getpid()))")


def _kernel_page(copy: Path, rel: str) -> None:
    "A page that names the notebooks' kernel, as every notebook of nbs/ does, and prints what its kernel's process sees."
    kernel = {"kernelspec": {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY, "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(ENV_CELL)], metadata=kernel), copy / "nbs" / rel)


def _sessions(lab) -> list[dict]:
    import urllib.request
    base, token, _, _ = lab
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=30) as r:
        return json.load(r)


def _printed(driver) -> dict:
    "What the open page's cell printed, as {key: value}."
    text = page_state(driver)["text"]
    return dict(re.findall(r"(preallocate|python|pid)=(\S+)", text))


def _settle(driver):
    "Accept JupyterLab's kernel dialog if it opens within a few seconds of a page opening (see `select_kernel`), then wait for the kernel."
    end = time.time() + 5
    while time.time() < end and not driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"):
        time.sleep(0.2)
    select_kernel(driver)
    _wait("the kernel to be idle", lambda: _kernel_status(driver) == "idle", 120)


def test_two_pages_at_once_with_the_notebooks_kernel(lab, browser):
    """Two pages open in one Lab, each with its own `sgatlin_nb` kernel running at the same time, and each kernel's
    process has preallocation off (the server's environment does not: the kernel's own spec sets it) and runs the
    Python `sgatlin kernel install` ran in."""
    _, _, copy, _ = lab
    _kernel_page(copy, "zz_kernel_a.ipynb")
    _kernel_page(copy, "zz_kernel_b.ipynb")
    open_notebook(browser, lab, "zz_kernel_a.ipynb")
    _settle(browser)
    run_all_from_menu(browser)
    wait_until_run(browser, "zz_kernel_a.ipynb", 120)
    a = _printed(browser)
    # the second page, opened from the file browser as a person does, while the first stays open with its kernel
    item = _wait("zz_kernel_b.ipynb in the file browser", lambda: next(
        (e for e in browser.find_elements(By.CSS_SELECTOR, ".jp-DirListing-item") if "zz_kernel_b.ipynb" in e.text), None), 30)
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(browser).double_click(item).perform()
    _wait("two notebooks open", lambda: len(browser.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel")) == 2, 60)
    _settle(browser)
    run_all_from_menu(browser)
    wait_until_run(browser, "zz_kernel_b.ipynb", 120)
    b = _printed(browser)
    sessions = _sessions(lab)
    running = sorted((Path(s["path"]).name, s["kernel"]["name"]) for s in sessions)
    assert running == [("zz_kernel_a.ipynb", KERNEL_NAME), ("zz_kernel_b.ipynb", KERNEL_NAME)], running
    assert a["pid"] != b["pid"], (a, b)  # two kernels, two processes
    for seen in (a, b):
        assert seen["preallocate"] == "false", seen
        assert Path(seen["python"]).parent == VENV_BIN, seen  # the Python `sgatlin kernel install` ran in
    shut_down_kernels(lab)


def test_a_page_whose_kernel_is_missing_names_it(lab, browser):
    """Without the notebooks' kernel installed, JupyterLab starts no kernel in its place: it opens its "Select Kernel"
    dialog, which offers the kernels it has and not the page's (JupyterLab 4 does not name a missing kernel there).
    So what the user sees is that dialog without "Python (sgatlin_nb)" in it, and the README and the index say what it
    means and name the command that installs the kernel: checked here against the dialog's own title."""
    _, _, copy, _ = lab
    kernels = copy.parent / "kernels" / "share" / "jupyter" / "kernels"  # where the fixture installed it
    installed, away = kernels / KERNEL_NAME, kernels.parent / f"{KERNEL_NAME}.away"
    _kernel_page(copy, "zz_kernel_missing.ipynb")
    shut_down_kernels(lab)
    installed.rename(away)  # as on a machine where `sgatlin kernel install` has not run
    try:
        base, token, _, _ = lab
        browser.get(f"{base}/lab/tree/zz_kernel_missing.ipynb?token={token}&reset")
        dialog = _wait("JupyterLab's kernel dialog", lambda: next(
            (d for d in browser.find_elements(By.CSS_SELECTOR, ".jp-Dialog") if d.text.strip()), None), 120)
        title = dialog.find_element(By.CSS_SELECTOR, ".jp-Dialog-header").text.strip()
        offered = [o.text.strip() for o in dialog.find_elements(By.CSS_SELECTOR, "select option")]
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / "zz_kernel_missing.png").write_bytes(browser.get_screenshot_as_png())
        assert title == "Select Kernel" and offered and KERNEL_DISPLAY not in offered, (title, offered)
        assert not [s for s in _sessions(lab) if s["path"].endswith("zz_kernel_missing.ipynb")], "a kernel started in its place"
        dialog.find_element(By.CSS_SELECTOR, ".jp-Dialog-button.jp-mod-reject").click()  # No Kernel
    finally:
        away.rename(installed)
    for doc in ("README.md", "nbs/index.ipynb"):
        raw = (ROOT / doc).read_text()
        if doc.endswith(".ipynb"): raw = "\n".join("".join(c["source"]) for c in json.loads(raw)["cells"])
        text = " ".join(raw.split())
        assert f'"{title}"' in text and KERNEL_DISPLAY in text and "sgatlin kernel install" in text, \
            f"{doc} does not say what JupyterLab's {title!r} dialog without {KERNEL_DISPLAY!r} means and how to install it"


def test_pages_served_through_the_labs_server_proxy(lab, browser, tmp_path):
    """`sgatlin pages --serve 0` writes a small site, serves it on loopback and prints the address JupyterLab's server
    proxy (jupyter-server-proxy) gives it; that address, fetched through the Lab in Chromium, shows the site's front
    page, and a relative link on it leads to the next page through the proxy too."""
    base, token, _, _ = lab
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JUPYTERHUB_SERVICE_PREFIX", None)
    server = subprocess.Popen([str(VENV_BIN / "sgatlin"), "pages", "--out", str(tmp_path / "site"), "--per-layer", "1",
                               "--contexts", "1", "--max-circuits", "0", "--quiet", "--serve", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = []
        def served():
            line = server.stdout.readline()
            if not line and server.poll() is not None: pytest.fail(f"sgatlin pages exited with {server.returncode}:\n{''.join(lines)}")
            lines.append(line)
            return re.search(r"through JupyterLab's server proxy .*: http://LAB-HOST:LAB-PORT(/proxy/(\d+)/)$", line.strip())
        m = _wait("sgatlin pages to serve", served, 300, poll=0)
        path, port = m[1], int(m[2])
        assert f"at http://127.0.0.1:{port}/ (Ctrl-C stops)" in "".join(lines), lines
        title = re.search(r"<title>([^<]+)</title>", (tmp_path / "site" / "index.html").read_text())[1]
        browser.get(f"{base}{path}?token={token}")
        _wait(f"the site's front page through {path}", lambda: browser.title == title, 30)
        link = browser.find_element(By.CSS_SELECTOR, "a[href='layer1.html']")
        link.click()
        _wait("layer1.html through the proxy", lambda: browser.current_url.startswith(f"{base}{path}layer1.html")
              and browser.find_elements(By.TAG_NAME, "h1"), 30)
    finally:
        server.terminate()
        server.wait(30)
