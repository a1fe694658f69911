"""The site and a run's report as a reader sees them: opened in a browser (Debian's chromium, driven
by Playwright), every page loads its figures, typesets its maths, raises no script error and asks
nothing of any other host. Skipped, saying why, without Playwright or chromium."""

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading

import pytest
from conftest import process_timeout

playwright = pytest.importorskip("playwright.sync_api", reason="the dev extra: pip install -e '.[dev]'")
CHROMIUM = os.environ.get("HIGHWAYNET_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install chromium (.ci/run does)")

PAGES = ["index.html", "getting-started.html", "guide/dense.html", "guide/rhn.html", "guide/residual.html",
         "api/nn.html", "api/config.html", "gallery/index.html", "gallery/highway_in_your_model.html",
         "gallery/gated_residual_block.html", "results/index.html", "results/depth.html", "results/gates.html",
         "results/sentences.html", "results/rhn.html", "results/char-lm.html", "results/transformer.html",
         "performance.html", "testing.html", "design.html", "changelog.html"]


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on localhost, as a reader's browser gets it."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def visit(browser, url: str, *, allowed: str):
    """Open ``url``; return the page and what went wrong: script errors, failed or outside requests."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.on("request", lambda r: None if r.url.startswith((allowed, "data:", "blob:")) else
            problems.append(f"outside request: {r.url}"))
    page.goto(url, wait_until="networkidle")
    return page, problems


def broken_images(page) -> list[str]:
    return page.evaluate("""() => Array.from(document.images)
        .filter(img => !img.complete || img.naturalWidth === 0).map(img => img.src)""")


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_whole_and_alone(browser, served, path):
    page, problems = visit(browser, served + path, allowed=served)
    assert "highwaynet" in page.title()
    assert not broken_images(page), broken_images(page)
    assert not problems, problems
    page.close()


_OVERFLOWING = """() => {
    // (8 pixels of slack: furo's wrappers reach a few pixels past the article's box, by design)
    const article = document.querySelector('article'), right = article.getBoundingClientRect().right + 8;
    // a box of its own, inside the column, that scrolls: the element or a wrapper below the article
    const scrolls = e => { for (let a = e; a && a !== article; a = a.parentElement) {
        if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX) && a.getBoundingClientRect().right <= right)
            return true; } return false; };
    // an element's content reaches left + scrollWidth: past the column, it must scroll in its own box
    return Array.from(document.querySelectorAll('article mjx-container, article table, article pre'))
        .filter(e => Math.max(e.getBoundingClientRect().right, e.getBoundingClientRect().left + e.scrollWidth) > right
                     && !scrolls(e))
        .map(e => e.tagName + ': ' + e.textContent.slice(0, 60));
}"""


def _at_1280(browser, url: str, style: str = ""):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(url, wait_until="networkidle")
    if style:
        page.add_style_tag(content=style)
    if page.locator("mjx-container").count():  # (MathJax typesets after the load)
        page.wait_for_selector("mjx-container", timeout=20_000)
    return page


@pytest.mark.parametrize("path", PAGES)
def test_no_page_scrolls_sideways_at_1280_pixels(browser, served, path):
    """At a 1280-pixel window the page is no wider than the window, and every display equation, table
    and code block fits its column or scrolls inside its own box (none runs past the page's edge)."""
    page = _at_1280(browser, served + path)
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{path} is {widths[0]} px wide in a {widths[1]} px window"
    overflowing = page.evaluate(_OVERFLOWING)
    assert not overflowing, f"{path}: {overflowing}"
    page.close()


def test_a_wide_equation_scrolls_in_its_own_box_whatever_the_theme_wraps_it_in(browser, served):
    """An equation wider than its column (the RHN guide's, in a column narrowed to 400 pixels) scrolls
    inside its box under the site's own stylesheet, even under a theme whose wrapper does not (furo's
    older releases)."""
    page = _at_1280(browser, served + "guide/rhn.html", style=".math-wrapper { overflow: visible !important; } "
                                                            "article { max-width: 400px !important; }")
    widest = page.evaluate("() => Math.max(...Array.from(document.querySelectorAll('mjx-container[display]'))"
                           ".map(e => e.scrollWidth - e.clientWidth))")
    assert widest > 0, "no equation of the page is wider than a 400-pixel column: pick another page"
    assert not page.evaluate(_OVERFLOWING)
    page.close()


# Each display equation, whole in its box; each code line with a comment, whole in its box (a command
# too long for it may scroll; a comment behind the scroll bar is not read).
_CUT = """() => {
    const cut = [];
    for (const e of document.querySelectorAll('article mjx-container[display]'))
        if (e.scrollWidth > e.clientWidth + 1) cut.push(`equation: ${e.scrollWidth} px in a ${e.clientWidth} px box`);
    for (const pre of document.querySelectorAll('article pre')) {
        const style = getComputedStyle(pre), text = document.createElement('canvas').getContext('2d');
        text.font = style.font;
        const room = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        for (const line of pre.textContent.split('\\n'))
            if (/(^|\\s)# /.test(line) && text.measureText(line).width > room + 1)
                cut.push(`code: ${line.trim().slice(0, 70)}`);
    }
    return cut;
}"""


@pytest.mark.parametrize("path", PAGES)
def test_equations_and_commented_code_fit_their_box_at_1280_pixels(browser, served, path):
    """At a 1280-pixel window a reader sees each display equation whole (the RHN guide's was cut at its
    right end) and each code comment whole (the getting-started page's ran behind the scroll bar)."""
    page = _at_1280(browser, served + path)
    cut = page.evaluate(_CUT)
    assert not cut, f"{path}: {cut}"
    page.close()


def test_a_results_figure_opens_whole_on_a_click(browser, served):
    """A figure drawn for the results is shown at the column's width and links to its full image."""
    page = _at_1280(browser, served + "results/depth.html")
    figures = page.evaluate("""() => Array.from(document.querySelectorAll('article img')).map(img =>
        [img.getAttribute('src'), img.closest('a') && img.closest('a').getAttribute('href'), img.naturalWidth,
         img.getBoundingClientRect().width])""")
    assert figures
    for src, href, natural, shown in figures:
        assert href == src, (src, href)
        assert shown <= natural
    first = page.locator("article img").first
    with page.expect_navigation():
        first.click()
    assert page.url.endswith(".png")
    page.close()


def test_maths_is_typeset_without_a_cdn(browser, served):
    page, problems = visit(browser, served + "index.html", allowed=served)
    page.wait_for_selector("mjx-container", timeout=20_000)  # MathJax, served with the site
    assert not problems, problems
    page.close()


def test_reference_anchor_and_search(browser, served):
    page, _ = visit(browser, served + "api/nn.html#highwaynet.nn.Highway", allowed=served)
    assert page.locator("[id='highwaynet.nn.Highway']").is_visible()
    page.close()
    page, problems = visit(browser, served + "search.html?q=recurrent+highway", allowed=served)
    page.wait_for_selector("#search-results li", timeout=20_000)
    assert page.locator("#search-results li").count() > 0
    assert not problems, problems
    page.close()


def test_results_page_tables_come_from_the_stored_json(browser, served):
    page, _ = visit(browser, served + "results/index.html", allowed=served)
    rows = page.locator("table tbody tr")
    assert rows.count() >= 1
    page.locator("article table a[href='depth.html']").first.click()  # a row's link to its page
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("results/depth.html")
    page.close()


def test_a_run_report_opens_on_its_own(browser, tmp_path):
    """``highwaynet report`` writes one self-contained page: figures inlined, nothing fetched."""
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the data extra)")
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "highwaynet"]
    for argv in (["train", "mlp", "--data", "digits", "--depth", "3", "--epochs", "1", "--out", str(run)],
                 ["report", str(run)]):
        done = subprocess.run(cli + argv, capture_output=True, text=True, timeout=process_timeout(120))
        assert done.returncode == 0, done.stderr[-2000:]
    page, problems = visit(browser, (run / "report.html").as_uri(), allowed="file://")
    assert not [p for p in problems if "outside" in p or "error" in p], problems
    assert page.evaluate("document.images.length") >= 1 and not broken_images(page)
    assert page.locator("table").count() >= 1
    page.close()
