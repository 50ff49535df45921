"""bench/configure.py smoke: one round on mesh4 gives a well-formed table, JSON and Markdown
(never a timing threshold)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.runner import ROOT

pytestmark = [pytest.mark.sim, pytest.mark.slow]

COLUMNS = [
    "topology",
    "Macs",
    "cables",
    "ours first (s)",
    "ours re-run (s)",
    "distributed_config (s)",
    "ours/dc",
    "re-run/first",
    "target first (s)",
    "target re-run (s)",
    "floor: ansible ping (s)",
    "floor: discovery alone (s)",
    "SSH conn/cmds per Mac",
]


def test_quick_run_gives_the_table_json_and_markdown(tmp_path):
    md, js = tmp_path / "benchmarks.md", tmp_path / "bench.json"
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "configure.py"),
            "--quick",
            "--topologies",
            "mesh4",
            "--runs",
            "1",
            "--markdown",
            str(md),
            "--json",
            str(js),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr[-3000:]

    lines = res.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("topology"))
    for col in COLUMNS:
        assert col in lines[header], lines[header]
    rows = [line for line in lines[header + 2 :] if line.strip()]
    assert len(rows) == 1 and rows[0].split()[:3] == ["mesh4", "4", "6"], rows
    # nine timing cells "median (min–max)" (five measured, two targets, two floors), three SSH
    # cells "connections / commands"
    assert rows[0].count("–") == 9 and rows[0].count(" / ") == 3, rows[0]

    out = json.loads(js.read_text())
    assert out["runs"] == 1 and out["machine"]["cpus"] >= 1
    [row] = out["results"]
    assert (row["topology"], row["hosts"], row["cables"]) == ("mesh4", 4, 6)
    for key in (
        "first",
        "rerun",
        "mlx",
        "ratio",
        "rerun_ratio",
        "target_first",
        "target_rerun",
        "floor_ping",
        "floor_discovery",
    ):
        assert len(row["samples"][key]) == 1 and row["samples"][key][0] > 0
        assert set(row["summary"][key]) == {"min", "median", "max"}
    assert row["summary"]["changed_rerun"] == 0  # the re-run found nothing to do
    samples = {k: v[0] for k, v in row["samples"].items() if isinstance(v[0], float)}
    # the ratios are of what was measured, and each floor (a part of the run) is below the run
    assert samples["ratio"] == pytest.approx(samples["first"] / samples["mlx"], rel=0.01)
    assert samples["rerun_ratio"] == pytest.approx(samples["rerun"] / samples["first"], rel=0.01)
    assert samples["floor_ping"] < samples["first"] and samples["floor_discovery"] < samples["first"], samples
    assert row["summary"]["ssh_first"]["connections"] >= 1 and row["summary"]["ssh_mlx"]["connections"] >= 1

    text = md.read_text()
    assert "| mesh4 | 4 | 6 |" in text
    for fact in ("CPUs:", "ansible-core", "mlx", "date:"):
        assert fact in text
