"""The report's test data: the artifacts of two demo runs on the simulated mesh4
(tests/fixtures/report/mesh4), shared by the renderer's and the browser's tests."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ansible_collections.mlx.cluster.plugins.plugin_utils import report

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "report" / "mesh4"
OLD_RUN, NEW_RUN = "281b27t0", "8wlhbyet"


def artifacts(tmp_path):
    """The fixture's artifacts in a fresh directory, the older benchmark run older on disk."""
    folder = tmp_path / "artifacts"
    shutil.copytree(FIXTURE, folder)
    for path in (folder / "bench").iterdir():
        stamp = 1_790_000_000 if path.name.startswith(OLD_RUN) else 1_790_003_600
        os.utime(path, (stamp, stamp))
    return folder


def fixture_data(tmp_path):
    data = report.collect(str(artifacts(tmp_path)))
    data["macs"] = json.loads((FIXTURE / "facts.json").read_text())
    return data
