"""The cluster report in a real browser: headless Chromium (Debian's package, installed by
scripts/bootstrap.sh) loads the page made from the demo's artifacts without a console message,
the topology picture and the tables are in the rendered DOM, and a screenshot is kept as a test
artifact (tests/artifacts/report.png, git-ignored)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import report
from tests.unit.plugin_utils.report_data import FIXTURE, artifacts

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[3]
SHOT = ROOT / "tests" / "artifacts" / "report.png"
TIMEOUT = 120   # a cold start on a busy 2-core machine takes a few seconds; a hang is cut here


def chromium():
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("chromium is not installed: the report is tested in a real headless browser. Install it with "
                "`bash scripts/bootstrap.sh` (as root; it installs the Debian package chromium) or "
                "`apt-get install chromium`.")


def run_chromium(tmp_path, *args):
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
            # nothing may be fetched: every host name resolves to nowhere
            "--host-resolver-rules=MAP * ~NOTFOUND", *args]
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
    for table in ("cables", "sweep", "per-cable", "bench", "versions"):
        assert re.search(rf'<table class="{table}">.*?<td>', dom, re.S), table
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
