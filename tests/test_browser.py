"""The HTML report in a real browser: headless Chromium (Debian's package) through Playwright.

Builds the report at the tiny size (every figure, small saved results, well under a minute), opens
it, and checks that every embedded figure decoded (naturalWidth > 0), that every table shows the
rows the report builder produced, and that each section that claims evidence shows a figure.
Saves a screenshot (to $TOKENSDE_SCREENSHOT if set, else the test's temporary directory).

With TOKENSDE_REPORT=path/to/report.html the test opens that report instead (the rows are then
checked against each table's data-rows attribute), e.g. to refresh docs/report-screenshot.png:

    TOKENSDE_REPORT=results/quick/report.html TOKENSDE_SCREENSHOT=docs/report-screenshot.png \\
        python -m pytest tests/test_browser.py -m browser
"""

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    given = os.environ.get("TOKENSDE_REPORT")
    if given:
        return Path(given), None
    import torch

    from tokensde.study import reproduce

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("report")
    path, sections, _ = reproduce(out, "tiny", workers=1)
    return path, sections


@pytest.fixture(scope="module")
def page(report):
    sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    with sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        pg = browser.new_page(viewport={"width": 1280, "height": 1500})
        pg.goto(report[0].resolve().as_uri())
        pg.wait_for_load_state("load")
        yield pg
        browser.close()


def test_every_figure_loaded(page, report):
    imgs = page.eval_on_selector_all(
        "img", "els => els.map(e => [e.dataset.name, e.complete, e.naturalWidth])")
    assert imgs, "the report embeds no figure"
    broken = [name for name, complete, width in imgs if not complete or width == 0]
    assert not broken, f"figures that did not load: {broken}"
    sections = report[1]
    if sections is not None:
        assert len(imgs) == sum(len(s.images) for s in sections)


def test_tables_hold_the_expected_rows(page, report):
    shown = page.eval_on_selector_all(
        "table", "ts => ts.map(t => [t.id, Number(t.dataset.rows), t.tBodies[0].rows.length, "
                 "t.tHead.rows[0].cells.length])")
    assert shown
    for key, declared, rows, _ in shown:
        assert rows == declared, f"{key}: {rows} rows shown, {declared} declared"
    sections = report[1]
    if sections is not None:
        expected = {f"table-{t.key}": (len(t.rows), len(t.columns))
                    for s in sections for t in s.tables}
        assert {k: (r, c) for k, _, r, c in shown} == expected
        # the two-token tables must show the horizon and the fraction still undecided
        heads = page.eval_on_selector_all("#table-phase-grid th", "hs => hs.map(h => h.textContent)")
        if any(s.key == "phase-diagram" and s.status in ("ok", "disagrees") for s in sections):
            assert "max T" in heads and "undecided at T" in heads and "theory at tol" in heads
            # rows whose interval excludes the theory are marked, and only those
            marks = page.eval_on_selector_all(
                "#table-phase-grid tbody tr",
                "rs => rs.map(r => [r.classList.contains('outside'), r.textContent.includes('outside')])")
            assert marks and all(a == b for a, b in marks)


def test_sections_and_screenshot(page, report, tmp_path):
    statuses = page.eval_on_selector_all(
        "section", "ss => ss.map(s => [s.id, s.dataset.status, s.querySelectorAll('img').length])")
    sections = report[1]
    if sections is not None:
        assert [s[0] for s in statuses] == [s.key for s in sections]
    for key, status, n_img in statuses:
        if status == "ok":
            assert n_img > 0, f"section {key} is 'ok' but shows no figure"
    shot = Path(os.environ.get("TOKENSDE_SCREENSHOT", tmp_path / "report.png"))
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 10_000
