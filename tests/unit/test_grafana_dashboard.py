"""docs/grafana/mlx-cluster.json: every query of the dashboard names only metrics that exist,
the runs' (plugins/plugin_utils/metrics.py NAMES) and the server's (the names its program
registers, roles/mlx_server/files/mlx_cluster_server.py), as Prometheus exposes them, so no panel
stays empty for a misspelt name; and every metric has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ansible_collections.mlx.cluster.plugins.plugin_utils.metrics import NAMES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "mlx-cluster.json"


def server_names():
    """The names the server's registry exposes (a counter gains _total, a histogram _bucket,
    _sum and _count, an info _info)."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.programs import load_program

    srv = load_program("mlx_server", "mlx_cluster_server.py")

    class Args:
        model, model_id, host, stall_timeout = "/m", "m", "127.0.0.1", 0.0

    server = srv.Server.__new__(srv.Server)
    rank = {"rank": 0, "host": "m1", "pid": 1, "restarts": 0, "stall_restarts": 0}
    server.args, server.world, server.clock = Args(), {"size": 1, "ranks": [rank]}, lambda: 0.0
    server.depth = lambda: 0
    server.ranks_memory = [1]
    server.progress = type("P", (), {"snapshot": staticmethod(lambda: {"progress_mono": 0.0})})()
    text = srv.Metrics(server).text().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_query_names_a_metric_the_runs_write():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= len(dash["panels"]) > 0
    used = {name for e in exprs for name in re.findall(r"\bmlx_cluster_[a-z0-9_]+", e)}
    server = server_names()
    known = set(NAMES) | server
    assert used and used <= known, sorted(used - known)
    assert set(NAMES) <= used, sorted(set(NAMES) - used)  # every metric has a panel
    bases = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in server}
    assert all(any(u.startswith(b) for u in used) for b in bases), sorted(bases)
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
