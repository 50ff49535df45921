"""The README's main command, `bash scripts/demo.sh`, run as a user runs it (on the two-Mac
spec to keep the suite short; the default is mesh4): its dry run (`--check --diff`) on Macs never
configured, then the whole main job in one site.yml run, the benchmark table (tensor and
pipeline) and the collective check printed, and the cluster report written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.runner import ROOT

pytestmark = [pytest.mark.sim, pytest.mark.slow]


def demo(state, *args):
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh"), "pair", *args],
        cwd=ROOT,
        env=dict(os.environ, MLXSIM_STATE=str(state)),
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )


def test_demo_dry_runs_then_runs_the_whole_main_job(tmp_path):
    state = tmp_path / "demo-pair"
    try:
        # the dry run first, on Macs never configured, with the demo's model and benchmark; the
        # state directory holds an earlier cluster's plan, which the dry run must not print as its own
        (state / "artifacts").mkdir(parents=True)
        earlier = '{"hosts": ["old1", "old2"], "topology": {}, "ip_plan": {"cables": {}}}'
        (state / "artifacts" / "plan.json").write_text(earlier)
        dry = demo(state, "--check", "--diff")
        assert dry.returncode == 0, dry.stdout[-4000:] + dry.stderr[-2000:]
        assert "failed=0" in dry.stdout and "unreachable=0" in dry.stdout
        assert "none written (a dry run changes nothing" in dry.stdout
        assert f"the results of an earlier run, not this one, are in {state / 'artifacts'}" in dry.stdout
        summary = dry.stdout.split("== plan ==", 1)[1]  # (the diff above shows plan.json's old text)
        assert "old1" not in summary and "== benchmark ==" not in summary
        assert (state / "artifacts" / "plan.json").read_text() == earlier
        res = demo(state)  # brings the simulated cluster up again: fresh Macs
        out = res.stdout
        assert res.returncode == 0, out[-4000:] + res.stderr[-2000:]
        assert "failed=0" in out and "unreachable=0" in out
        table = out.split("== benchmark ==", 1)[1].split("== collective check ==", 1)[0]
        rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "| ring | 2 |" in ln]
        assert {r.split("|")[4].strip() for r in rows} == {"tensor", "pipeline"}, table
        assert "all_sum sweep over 2 ranks: every sum right" in out
        assert (state / "models" / "tiny" / "model.safetensors.index.json").is_file()
        assert f"results: {state / 'artifacts'}" in out
        # the cluster report: its path printed, every Mac, the benchmark and the collective check in it
        report = state / "artifacts" / "report.html"
        assert f"report:  {report}" in out
        page = report.read_text()
        for host in ("m1", "m2"):
            assert f'data-host="{host}"' in page, host
        assert '<table class="bench">' in page and '<table class="per-cable">' in page
        assert '<table class="versions">' in page and "Preflight has not run yet" not in page
    finally:
        subprocess.run(
            [sys.executable, "-m", "tests.simcluster", "down", "pair", "--state", str(state)],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )
