"""The neuron and circuit pages in a browser: a small site built from a fresh recording, opened offline in headless Chromium.

Selenium drives Debian's chromedriver with the network cut off, as tests/test_docs.py does. The index's search box must
filter its rows and a heading must sort them, a neuron page's firing rate must equal a count made by a plain loop over
the recorded gates, and the links between neuron and circuit pages must lead where they say. Screenshots of the four
kinds of page are kept in build/pages_screenshots/.
"""
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from selenium.webdriver.common.by import By

from conftest import start_chromium

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "pages_screenshots"
LILY = "Once upon a time, there was a little girl named Lily. She"  # a prompt whose graph uses neurons the small site has pages for


@pytest.fixture(scope="module")
def site(tmp_path_factory, data_dir):
    "A site of 4 neuron pages per layer and the circuits of their 3 strongest contexts, from 12 held-out stories."
    from sgatlin_nb.pages import build_pages
    from sgatlin_nb.record import record_run
    from sgatlin_nb.reference import reference_run
    with pytest.MonkeyPatch.context() as mp:  # for this module's tests only: the environment is restored after them
        mp.setenv("SGATLIN_DATA_DIR", str(data_dir))
        tmp = tmp_path_factory.mktemp("pages")
        db = record_run(reference_run(), tmp / "db", n_docs=12, progress=False)
        summary = build_pages(tmp / "site", db=db.path, per_layer=4, contexts=3, graphs=[LILY], progress=False)
        yield tmp / "site", db, summary


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp('chromium_profile'))
    yield driver
    driver.quit()


def _shot(driver, name: str) -> Path:
    "A full-page screenshot into build/pages_screenshots/."
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.ceil(document.documentElement.scrollHeight)")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": min(height, 4000), "deviceScaleFactor": 1, "mobile": False})
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    pixels = np.asarray(Image.open(path).convert("L"))
    assert pixels.std() > 10, f"{path} is blank"  # a page that rendered nothing is one colour
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    print(f"screenshot: {path}")
    return path


def _visible_rows(driver) -> list:
    return [r for r in driver.find_elements(By.CSS_SELECTOR, "#neurons tbody tr") if r.is_displayed()]


def test_site_in_chromium(site, browser):
    out, db, summary = site
    assert summary["neuron_pages"] == 4 * db.n_layers and summary["circuit_pages"] > 0
    html = sorted(out.rglob("*.html"))
    files = [f for f in out.rglob("*") if f.is_file() and f.name != "site.json"]
    assert json.loads((out / "site.json").read_text())["bytes"] == sum(f.stat().st_size for f in files)  # the files, summed
    for page in out.rglob("*.html"):  # self-contained: nothing is fetched from the network
        assert not re.search(r'(src|href)="(https?:)?//', page.read_text()), page

    browser.get((out / "index.html").as_uri())
    assert "Neurons and circuits" in browser.title
    _shot(browser, "index")

    # the layer index: the search box filters rows, a heading sorts them
    browser.find_element(By.LINK_TEXT, "layer 1").click()
    rows = _visible_rows(browser)
    assert len(rows) == 4
    texts = [r.text for r in rows]
    name = texts[1].split()[1:4]  # "2 L1 C0 N123 ..." -> the neuron's name
    query = " ".join(name)
    box = browser.find_element(By.ID, "search")
    box.send_keys(query)
    assert browser.execute_script("return window.__pageErrors") == []
    shown = _visible_rows(browser)
    assert [r.text for r in shown] == [t for t in texts if query.lower() in t.lower()] and 1 <= len(shown) < 4, query
    assert browser.find_element(By.ID, "shown").text == f"{len(shown)} of 4 neurons"
    _shot(browser, "layer1_search")
    box.clear()
    box.send_keys(" ")  # an input event with an empty query shows every row again
    assert len(_visible_rows(browser)) == 4
    fires = lambda: [int(r.find_elements(By.TAG_NAME, "td")[5].text.replace(",", "")) for r in _visible_rows(browser)]
    shown_first = fires()
    assert shown_first == sorted(shown_first, reverse=True)  # most-firing first, as the page says
    ranks = lambda: [int(r.find_elements(By.TAG_NAME, "td")[0].text) for r in _visible_rows(browser)]
    browser.find_element(By.XPATH, "//th[text()='rank']").click()  # another order first, so the next click must change it
    assert ranks() == [4, 3, 2, 1] and fires() == shown_first[::-1] != shown_first
    heading = browser.find_element(By.XPATH, "//th[text()='fires']")
    heading.click()
    assert fires() == shown_first
    heading.click()
    assert fires() == sorted(shown_first)
    assert browser.execute_script("return window.__pageErrors") == []  # searching and sorting raised nothing

    # a neuron page: its firing rate against a plain loop over the recorded gates
    browser.find_element(By.LINK_TEXT, " ".join(name)).click()
    layer, channel, neuron = (int(p[1:]) for p in name)
    layer -= 1  # the pages number layers from 1
    idx, _ = db.gates(layer)
    count = 0
    for token in range(db.n_rows):
        if neuron in idx[token, channel]: count += 1
    cards = {c.find_element(By.CLASS_NAME, "k").text: c.find_element(By.CLASS_NAME, "v").text
             for c in browser.find_elements(By.CLASS_NAME, "card")}
    rate_key = next(k for k in cards if k.startswith("firing rate"))
    assert cards[rate_key] == f"{100 * count / db.n_rows:.2f}%", (cards, count)
    assert rate_key == f"firing rate: {count:,} of {db.n_rows:,} recorded tokens select it"
    neuron_url = browser.current_url
    _shot(browser, "neuron")

    # to the circuit of its strongest context, and back through that circuit's table
    links = browser.find_elements(By.PARTIAL_LINK_TEXT, "row ")
    assert links, "the neuron page links to no circuit page"
    row = int(links[0].text.split()[1])
    links[0].click()
    assert browser.title.startswith("Circuit of") and browser.current_url.endswith(f"circuits/row{row}.html")
    assert neuron in idx[row, channel]  # its strongest context selected it...
    back = browser.find_element(By.LINK_TEXT, " ".join(name))  # ...so the circuit page lists and links it
    _shot(browser, "circuit")
    back.click()
    assert browser.current_url == neuron_url

    # every link of the pages visited leads to a file of the site
    for page in ("index.html", "layer1.html", neuron_url.rsplit("/", 2)[-2] + "/" + neuron_url.rsplit("/", 1)[-1], f"circuits/row{row}.html"):
        browser.get((out / page).as_uri())
        hrefs = browser.execute_script("return [...document.querySelectorAll('a[href]')].map(a => a.href)")
        assert hrefs and all(h.startswith("file://") and Path(h[len("file://"):].split("#")[0]).is_file() for h in hrefs), (page, hrefs)
        assert browser.execute_script("return window.__pageErrors") == [], page


def test_graph_view_links_to_the_site(site, browser, tmp_path):
    """`sgatlin graph --pages SITE`: the view draws offline in Chromium with no script error, every drawn neuron that has
    a page in the site links to it (and no other), and following a link opens that neuron's page."""
    from conftest import run_sgatlin
    site_dir, _, _ = site
    out = tmp_path / "graph"
    res = run_sgatlin(["graph", LILY, "--pages", str(site_dir),
                       "--prune", "0.95,0.99", "--out", str(out)], None)
    assert res.returncode == 0, res.stderr[-2000:]
    browser.get((out / "graph.html").as_uri())
    drawn = browser.execute_script("""return [...document.querySelectorAll('circle.node')].map(c => ({
        title: c.querySelector('title').textContent, href: c.parentElement.tagName === 'a' ? c.parentElement.getAttribute('href') : null}))""")
    assert len(drawn) > 10 and browser.execute_script("return document.querySelectorAll('line.edge').length") > len(drawn)
    pages = {p.name for p in (site_dir / "neurons").glob("*.html")}
    linked = 0
    for d in drawn:
        l, c, n = map(int, re.match(r"layer (\d+) channel (\d+) neuron (\d+)", d["title"]).groups())
        name = f"L{l}_C{c}_N{n}.html"  # the view, the page files and their titles number layers from 1
        assert (d["href"] is not None) == (name in pages), d
        if d["href"]:  # relative, and never read as a scheme (a site folder named `javascript:...` stays a folder)
            assert d["href"].startswith(("./", "../")) and ":" not in d["href"], d
            assert (out / d["href"]).resolve() == (site_dir / "neurons" / name).resolve(), d
            linked += 1
    assert linked >= 1, "no drawn neuron has a page in the site: the links were not exercised"
    first = next(d for d in drawn if d["href"])
    browser.execute_script("document.querySelector('circle.node').closest('svg').querySelector('a').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    l, c, n = map(int, re.match(r"layer (\d+) channel (\d+) neuron (\d+)", first["title"]).groups())
    assert f"Neuron L{l} C{c} N{n}" in browser.title, browser.title
    assert browser.execute_script("return window.__pageErrors") == []
    _shot(browser, "graph_linked_neuron")
    # the site's own graph page: listed on the index, drawn, its neuron links inside the site
    browser.get((site_dir / "index.html").as_uri())
    browser.find_element(By.LINK_TEXT, LILY).click()
    assert browser.current_url.endswith("graphs/0/graph.html") and LILY in browser.title
    hrefs = browser.execute_script("return [...document.querySelectorAll('a')].map(a => a.getAttribute('href'))")
    assert browser.execute_script("return document.querySelectorAll('circle.node').length") > 10
    assert hrefs and all((site_dir / "graphs" / "0" / h).resolve().is_file() for h in hrefs), hrefs
    assert browser.execute_script("return window.__pageErrors") == []
    _shot(browser, "graph_in_site")


def test_a_second_build_into_the_same_folder_is_refused_in_one_line(tmp_path):
    "Two `pages` writers on one folder: the second stops at once, naming the first, before it loads anything."
    from sgatlin_nb.pages import _site_lock, build_pages
    from sgatlin_nb.runs import RunError
    out = tmp_path / 'site'
    with _site_lock(out):
        with pytest.raises(RunError, match=r'site is being written by sgatlin pages \(pid \d+\): wait for it'):
            build_pages(out, progress=False)
    assert not (tmp_path / '.site.lock').exists() and not out.exists()
