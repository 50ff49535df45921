"""The cluster report in a real browser: headless Chromium (Debian's package, installed by
scripts/bootstrap.sh) loads the page made from the demo's artifacts without a console message,
the topology picture and the tables are in the rendered DOM, and a screenshot is kept as a test
artifact (tests/artifacts/report.png, git-ignored)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import report
from tests.unit.plugin_utils.report_data import FIXTURE, artifacts

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[3]
SHOT = ROOT / "tests" / "artifacts" / "report.png"
TIMEOUT = 120  # a cold start on a busy 2-core machine takes a few seconds; a hang is cut here


def chromium():
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "chromium is not installed: the report is tested in a real headless browser. Install it with "
        "`bash scripts/bootstrap.sh` (as root; it installs the Debian package chromium) or "
        "`apt-get install chromium`."
    )


def run_chromium(tmp_path, *args):
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        # nothing may be fetched: every host name resolves to nowhere
        "--host-resolver-rules=MAP * ~NOTFOUND",
        *args,
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish in {TIMEOUT} s: {' '.join(argv)}")
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def console_lines(stderr):
    """The page's console messages as Chromium logs them ([...:INFO:CONSOLE(line)] "text", source: ...)."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    data = report.collect(str(artifacts(tmp)))
    data["macs"] = json.loads((FIXTURE / "facts.json").read_text())
    path = tmp / "report.html"
    path.write_text(report.render(data), encoding="utf-8")
    return path


class _Rows(HTMLParser):
    """Data rows (a <tr> holding a <td>) per table class, tables not nested in the report."""

    def __init__(self):
        super().__init__()
        self.rows, self.table, self.has_td = {}, None, False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.table = dict(attrs).get("class") or ""
            self.rows.setdefault(self.table, 0)
        elif tag == "tr":
            self.has_td = False
        elif tag == "td" and self.table is not None and not self.has_td:
            self.has_td = True
            self.rows[self.table] += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None


def table_rows(html):
    parser = _Rows()
    parser.feed(html)
    return parser.rows


def test_table_rows_counts_each_table_alone():
    html = (
        '<table class="a"><tr><th>h</th></tr><tr><td>1</td><td>2</td></tr></table>'
        '<table class="b"><tr><th>h</th></tr></table><table class="c"><tr><td>x</td></tr><tr><td>y</td></tr></table>'
    )
    assert table_rows(html) == {"a": 1, "b": 0, "c": 2}


def test_console_catches_an_error(tmp_path):
    """The check below can fail: a page with a script error shows up in Chromium's console log."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>nosuch();</script></body></html>")
    res = run_chromium(tmp_path, "--dump-dom", bad.as_uri())
    assert any("nosuch is not defined" in ln for ln in console_lines(res.stderr)), res.stderr[-2000:]


def test_the_report_loads_with_its_picture_and_tables(page, tmp_path):
    res = run_chromium(tmp_path, "--dump-dom", page.as_uri())
    assert console_lines(res.stderr) == []
    dom = res.stdout
    assert "<title>mlx-cluster report: m1, m2, m3, m4</title>" in dom
    topology = re.search(r'<svg[^>]*class="topology".*?</svg>', dom, re.S)
    assert topology, dom[:2000]
    assert len(re.findall(r'<line class="cable', topology.group(0))) == 6
    assert sorted(re.findall(r'data-host="(m\d)"', topology.group(0))) == ["m1", "m2", "m3", "m4"]
    rows = table_rows(dom)
    for table in ("cables", "sweep", "per-cable", "bench", "versions"):
        assert rows.get(table), (table, rows)  # each table has rows of its own, as the browser built them
    assert rows["cables"] == 6 and rows["per-cable"] == 6 and rows["versions"] == 4, rows
    assert dom.count('class="chart"') == 3


def test_a_screenshot_is_kept(page, tmp_path):
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    SHOT.unlink(missing_ok=True)
    res = run_chromium(tmp_path, f"--screenshot={SHOT}", "--window-size=1280,2000", page.as_uri())
    assert console_lines(res.stderr) == []
    assert SHOT.is_file() and SHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    pixels = matplotlib.image.imread(str(SHOT))
    assert pixels.shape[:2] == (2000, 1280)
    # not a blank page: the picture's lines and the tables' text darken a good share of it
    dark = (pixels[:, :, :3].mean(axis=2) < 0.6).mean()
    assert dark > 0.01, dark
