"""The default inventory is a directory that also holds the runs' artifacts/ (plan.json,
hostfile.json, report.html, ...): with the project's ansible.cfg, ansible-inventory reads the
hosts and nothing of artifacts/ (before, report.html became a host and each JSON file a warning)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_artifacts_beside_the_inventory_are_not_read_as_inventory(tmp_path):
    inv = tmp_path / "mac_cluster"
    shutil.copytree(ROOT / "inventory" / "mac_cluster", inv)
    artifacts = inv / "artifacts"
    (artifacts / "bench").mkdir(parents=True)
    (artifacts / "plan.json").write_text(json.dumps({"hosts": ["studio-1"], "ip_plan": {"cables": {}}}))
    (artifacts / "hostfile.json").write_text(json.dumps({"backend": "ring", "hosts": [{"ssh": "studio-1"}]}))
    (artifacts / "report.html").write_text("<html><body>report</body></html>\n")
    (artifacts / "metrics.prom").write_text("mlx_cluster_up 1\n")
    (artifacts / "bench" / "run.json").write_text("{}")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_HOME=str(tmp_path / "home"))
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inv), "--list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    hosts = set(listed["_meta"]["hostvars"]) | {
        h for g in listed.values() if isinstance(g, dict) for h in g.get("hosts", [])
    }
    assert hosts == set(listed["mac_cluster"]["hosts"]), hosts
    assert set(listed) - {"_meta", "all", "ungrouped", "mac_cluster"} == set(), sorted(listed)
    assert "WARNING" not in out.stderr, out.stderr
