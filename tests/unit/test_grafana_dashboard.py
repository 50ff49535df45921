"""docs/grafana/mlx-cluster.json: every query of the dashboard names only metrics the runs
write (plugins/plugin_utils/metrics.py NAMES), so no panel stays empty for a misspelt name."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ansible_collections.mlx.cluster.plugins.plugin_utils.metrics import NAMES

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "mlx-cluster.json"


def test_every_query_names_a_metric_the_runs_write():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= len(dash["panels"]) > 0
    used = {name for e in exprs for name in re.findall(r"\bmlx_cluster_[a-z0-9_]+", e)}
    assert used and used <= set(NAMES), sorted(used - set(NAMES))
    assert set(NAMES) <= used, sorted(set(NAMES) - used)  # every metric has a panel
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
